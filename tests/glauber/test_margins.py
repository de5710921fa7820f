"""Score margins (paper A, Section 5.3) of a tiny random BERT against a plain loop that masks one
site at a time, and Theorem 8's one-step exit bound against the exact exit probability."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from glauber_util import CANDIDATES, LAYOUT, MASK, OFFSET, C, N, sequences, spec, tiny_mlm

from glauber.measures import margins
from gmlm import nn as gm
from gmlm.checks import UserError

TEMPS = (0.3, 1.0, 2.0)


def loop_scores(model, tokens_L: np.ndarray, i: int) -> np.ndarray:
  """The raw logits over the candidates at free site i with only that site masked."""
  masked = tokens_L.copy()
  masked[OFFSET + i] = MASK
  logits = gm.masked_logits(model, jnp.asarray(masked[None]), jnp.asarray([[OFFSET + i]]))
  return np.asarray(logits, np.float64)[0, 0, CANDIDATES]


@pytest.fixture(scope="module")
def model():
  return tiny_mlm(std=1.0)  # sharper conditionals: some states are perfect traps


def argmax_states(model, num: int) -> np.ndarray:
  """num states made perfect by sweeping every site to its argmax until nothing changes."""
  rng = np.random.default_rng(1)
  out = []
  for _ in range(num):
    x = rng.integers(0, C, N)
    for _ in range(20):
      before = x.copy()
      for i in range(N):
        x[i] = int(np.argmax(loop_scores(model, sequences(x[None])[0], i)))
      if (x == before).all():
        break
    out.append(x)
  return np.array(out)


def test_margins_equal_a_plain_loop(model):
  states = np.concatenate(
    [np.random.default_rng(0).integers(0, C, (5, N)), argmax_states(model, 2)]
  )
  tokens = sequences(states)
  m = margins.margins(model, spec(), tokens, temperatures=TEMPS, batch_size=12)
  for b, x in enumerate(tokens):
    gaps, exits = [], np.zeros(len(TEMPS))
    for i in range(N):
      s = loop_scores(model, x, i)
      own = states[b, i]
      gaps.append(s[own] - np.delete(s, own).max())
      for t, T in enumerate(TEMPS):
        p = np.exp((s - s.max()) / T)
        exits[t] += (1 - p[own] / p.sum()) / N
    np.testing.assert_allclose(m.gaps_BN[b], gaps, atol=1e-4)
    assert np.isclose(m.delta_min_B[b], min(gaps), atol=1e-4)
    assert np.isclose(m.delta_mean_B[b], np.mean(gaps), atol=1e-4)
    assert bool(m.perfect_B[b]) == (min(gaps) > 0)
    np.testing.assert_allclose(m.exit_prob_BT[b], exits, atol=1e-5)
  assert m.perfect_B[-2:].all() and not m.perfect_B[:5].all()
  # the layout form (candidates given) is the same computation
  again = margins.margins(model, LAYOUT, tokens, candidates=CANDIDATES)
  np.testing.assert_allclose(again.gaps_BN, m.gaps_BN, atol=1e-6)


def test_theorem8_bound_holds_for_perfect_states(model):
  states = argmax_states(model, 3)
  m = margins.margins(model, spec(), sequences(states), temperatures=TEMPS)
  assert m.perfect_B.all()
  for t, T in enumerate(TEMPS):
    bound = margins.exit_bound(m.delta_min_B, T, N, m.num_candidates)
    assert (m.exit_prob_BT[:, t] <= bound).all()
    np.testing.assert_allclose(margins.escape_time(bound), 1 / bound)
  # fewer exit-capable sites scale the bound by m / n
  b1 = margins.exit_bound(2.0, 0.5, N, C, num_exit_sites=1)
  assert np.isclose(b1 * N, margins.exit_bound(2.0, 0.5, N, C))


def test_bad_input_is_one_line_user_error(model):
  tokens = sequences(np.zeros((1, N), int))
  cases = [
    (lambda: margins.margins(model, spec(), tokens, temperatures=(0.0,)), "T=0.0"),
    (lambda: margins.margins(model, spec(), tokens[:, :-1]), r"\(1, 6\)"),
    (lambda: margins.exit_bound(1.0, -2.0, N, C), "T=-2.0"),
    (lambda: margins.exit_bound(1.0, 1.0, N, 1), "1 candidates"),
    (lambda: margins.exit_bound(1.0, 1.0, N, C, num_exit_sites=N + 1), f"m = {N + 1}"),
  ]
  for call, needle in cases:
    with pytest.raises(UserError, match=needle) as e:
      call()
    assert "\n" not in str(e.value)
