"""The coupling phase diagram shows what the coupled pairs recorded: its heatmap's colours are
the fractions of recorded coalescence times within the budget, its numbers their medians."""

from __future__ import annotations

import jax
import numpy as np
from glauber_util import CANDIDATES, CLS, MASK, PREFIX, SEP, C, tiny_mlm

from glauber import chains
from glauber.layout import Layout
from glauber.measures import phase_diagram
from gmlm.runs import RunDir

# A 2 x 1 grid (each cell compiles its own kernel); 4 steps: some pairs meet, some do not.
TEMPERATURES, SIZES, PAIRS, BUDGET = (1.0,), (2, 3), 32, 4


def layout(n: int) -> Layout:
  return Layout(tuple(PREFIX), n, CLS, SEP, MASK)


def starts(n: int):
  rng = np.random.default_rng(n)
  x, y = (layout(n).sequences(CANDIDATES[rng.integers(0, C, (PAIRS, n))]) for _ in range(2))
  return x, y


def test_heatmap_fraction_and_medians_equal_the_recorded_coalescence_times(tmp_path):
  results = phase_diagram.measure_grid(
    jax.random.key(0),
    tiny_mlm(),
    lambda T, n: chains.make_spec(CANDIDATES, 11, layout(n), T),
    starts,
    TEMPERATURES,
    SIZES,
    BUDGET,
    record_every=2,
  )
  assert results["budget"] == BUDGET and len(results["cells"]) == 2
  want = np.zeros((len(SIZES), len(TEMPERATURES)))
  medians = {}
  for c in results["cells"]:
    meet = np.array(c["meet"])
    assert meet.shape == (PAIRS,) and ((meet == -1) | ((meet >= 0) & (meet <= BUDGET))).all()
    x, y = SIZES.index(c["num_sites"]), TEMPERATURES.index(c["temperature"])
    want[x, y] = np.mean(meet >= 0)
    met = np.sort(meet[meet >= 0])
    # the median with misses as +inf: defined when more than half met
    medians[(x, y)] = np.median(np.concatenate([met, np.full(PAIRS - met.size, np.inf)]))
  assert 0 < want.sum() < want.size  # some pairs met, not all
  assert any(np.isfinite(m) for m in medians.values())
  fig = phase_diagram.figure(results)
  ax = fig.axes[0]
  np.testing.assert_allclose(np.asarray(ax.images[0].get_array()), want)
  shown = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in ax.texts}
  for xy, m in medians.items():
    assert shown[xy] == ("—" if not np.isfinite(m) else f"{m:.0f}")
  import matplotlib.pyplot as plt

  plt.close(fig)  # drawn for inspection only
  md = phase_diagram.section(results, RunDir(tmp_path))
  assert (tmp_path / "phase_diagram.png").is_file()
  for x, n in enumerate(SIZES):
    assert f"| {n} | {want[x, 0]:.2f} (" in md
