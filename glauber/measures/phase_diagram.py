"""The coupling phase diagram: where maximally coupled chains coalesce (paper A, 6.1, Fig. 2).

For each cell (T, n) of a grid, B pairs of chains start from two independent passages (pair b:
texts_x[b % |texts_x|] against texts_y[b % |texts_y|], each cut to n free tokens) and run
`glauber.coupling` (same site, maximal coupling of the two conditionals) for a budget of
num_steps steps. The coalescence step of a pair is the first step at which the two states agree
(-1: not within the budget). Per cell:
  fraction = #{b : meet_b >= 0} / B,
  median   = the median of meet_b with -1 read as +inf (None when at least half never met).
The heatmap shows the fraction (colour) with the median in each cell; the paper sees the
no-coupling -> fast-coupling boundary move to higher T as n grows.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import numpy as np

from glauber import chains, coupling
from glauber.chains import Spec
from glauber.measures.common import pyplot
from gmlm.runs import RunDir

Starts = Callable[[int], tuple[np.ndarray, np.ndarray]]


def summarize(meet_B) -> tuple[float, float | None]:
  """(fraction coalesced, median coalescence step or None) of one cell's meet times."""
  meet_B = np.asarray(meet_B)
  median = float(np.median(np.where(meet_B >= 0, meet_B, np.inf)))
  return float(np.mean(meet_B >= 0)), (median if np.isfinite(median) else None)


def measure_grid(
  key: jax.Array,
  model,
  make_spec: Callable[[float, int], Spec],
  starts: Starts,
  temperatures: Sequence[float],
  num_sites: Sequence[int],
  num_steps: int,
  record_every: int = 50,
  on_cell: Callable[[dict], None] | None = None,
) -> dict:
  """The grid's cells (module docstring) with each pair's meet step. make_spec(T, n): the Spec of
  a cell; starts(n): (x0_BL, y0_BL), the two populations' full sequences. The budget is
  num_steps rounded down to a multiple of record_every. on_cell: called with each finished
  cell (progress, streaming)."""
  if num_steps < record_every:
    raise ValueError(f"num_steps={num_steps} must be at least record_every={record_every}")
  num_records = num_steps // record_every
  cells = []
  for n in num_sites:
    x0_BL, y0_BL = starts(n)
    for T in temperatures:
      _, _, meet_B, distance_RB = coupling.run(
        key, model, make_spec(T, n), x0_BL, y0_BL, num_records, record_every
      )
      fraction, median = summarize(meet_B)
      cell = {
        "temperature": float(T),
        "num_sites": int(n),
        "meet": np.asarray(meet_B).tolist(),
        "fraction": fraction,
        "median": median,
        "final_mean_distance": float(np.asarray(distance_RB)[-1].mean()),
      }
      cells.append(cell)
      if on_cell is not None:
        on_cell(cell)
  return {
    "temperatures": [float(T) for T in temperatures],
    "num_sites": [int(n) for n in num_sites],
    "budget": num_records * record_every,
    "num_pairs": len(cells[0]["meet"]) if cells else 0,
    "cells": cells,
  }


def measure(
  model,
  tokenizer,
  *,
  temperatures: Sequence[float],
  num_sites: Sequence[int],
  texts_x: Sequence[str],
  texts_y: Sequence[str],
  num_pairs: int,
  num_steps: int,
  record_every: int = 50,
  seed: int = 0,
  prefix: str = "",
  exclude_pattern: str | None = chains.UNUSED_PATTERN,
) -> dict:
  """The phase diagram of an MLM from passages (`measure_grid`), with a progress bar."""
  from tqdm import tqdm

  from glauber import init_states
  from glauber.layout import Layout, max_sequence_length

  vocab_size = model.config.vocab_size
  candidates = chains.candidate_ids(tokenizer, vocab_size, exclude_pattern=exclude_pattern)
  max_length = max_sequence_length(model)

  def layout(n: int) -> Layout:
    return Layout.from_tokenizer(tokenizer, n, prefix, max_length)

  def starts(n: int):
    lay = layout(n)
    return tuple(
      init_states.from_text(tokenizer, lay, list(texts), num_pairs) for texts in (texts_x, texts_y)
    )

  bar = tqdm(total=len(temperatures) * len(num_sites), desc="coupling cells", unit="cell")
  results = measure_grid(
    jax.random.key(seed),
    model,
    lambda T, n: chains.make_spec(candidates, vocab_size, layout(n), T),
    starts,
    temperatures,
    num_sites,
    num_steps,
    record_every,
    on_cell=lambda cell: bar.update(1),
  )
  bar.close()
  return results


def grid(results: dict) -> tuple[np.ndarray, np.ndarray]:
  """(fraction, median): arrays [len(num_sites), len(temperatures)] (NaN: no median)."""
  ns, Ts = results["num_sites"], results["temperatures"]
  fraction, median = np.full((len(ns), len(Ts)), np.nan), np.full((len(ns), len(Ts)), np.nan)
  for c in results["cells"]:
    x, y = ns.index(c["num_sites"]), Ts.index(c["temperature"])
    fraction[x, y] = c["fraction"]
    median[x, y] = np.nan if c["median"] is None else c["median"]
  return fraction, median


def figure(results: dict):
  """Fig. 2-style heatmap: fraction coalesced within the budget over (T, n), the median
  coalescence step written in each cell ("—": fewer than half coalesced)."""
  plt = pyplot()
  fraction, median = grid(results)
  ns, Ts = results["num_sites"], results["temperatures"]
  fig, ax = plt.subplots(figsize=(1.1 * len(Ts) + 2.2, 0.6 * len(ns) + 1.8))
  im = ax.imshow(fraction, origin="lower", cmap="viridis", vmin=0, vmax=1, aspect="auto")
  for x in range(len(ns)):
    for y in range(len(Ts)):
      text = "—" if np.isnan(median[x, y]) else f"{median[x, y]:.0f}"
      ax.text(y, x, text, ha="center", va="center", color="w" if fraction[x, y] < 0.6 else "k")
  ax.set_xticks(range(len(Ts)), [f"{T:g}" for T in Ts])
  ax.set_yticks(range(len(ns)), [str(n) for n in ns])
  ax.set(xlabel="temperature T", ylabel="free sites n")
  ax.set_title(
    f"Coupled pairs coalesced within {results['budget']} steps ({results['num_pairs']} pairs);"
    "\nnumbers: median coalescence step",
    fontsize=9,
  )
  fig.colorbar(im, ax=ax, label=f"fraction of the {results['num_pairs']} pairs coalesced")
  return fig


def section(results: dict, run: RunDir) -> str:
  """Markdown: the fraction and median per cell as an n x T table, and phase_diagram.png."""
  fraction, median = grid(results)
  Ts = results["temperatures"]
  lines = [
    "## Coupling phase diagram\n",
    f"{results['num_pairs']} maximally coupled pairs per cell from independent passages, "
    f"budget {results['budget']} steps. Cell: fraction coalesced (median coalescence step).\n",
    "| n \\ T | " + " | ".join(f"{T:g}" for T in Ts) + " |",
    "|---|" + "---|" * len(Ts),
  ]
  for x, n in enumerate(results["num_sites"]):
    row = [
      f"{fraction[x, y]:.2f} ({'—' if np.isnan(median[x, y]) else f'{median[x, y]:.0f}'})"
      for y in range(len(Ts))
    ]
    lines.append(f"| {n} | " + " | ".join(row) + " |")
  run.savefig(figure(results), "phase_diagram.png")
  lines.append("\n![coupling phase diagram](phase_diagram.png)\n")
  return "\n".join(lines)
