"""The drift certificate (paper A, Section 5.4): the exact D(x) equals the Monte-Carlo mean of one
step of the engine's Glauber chain (glauber.chains.run), with and without top-k truncation."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from glauber_util import CANDIDATES, LAYOUT, N, spec, tiny_mlm

from glauber import chains
from glauber.measures import drift
from gmlm.checks import UserError

TOKEN = int(CANDIDATES[2])
CHAINS = 8_000  # per state


@pytest.fixture(scope="module")
def model():
  return tiny_mlm()


@pytest.mark.parametrize("T, top_k", [(1.0, 0), (0.5, 3)])
def test_exact_drift_equals_one_glauber_step(model, T, top_k):
  rng = np.random.default_rng(0)
  states = np.concatenate(
    [drift.basin_states(rng, LAYOUT, CANDIDATES, TOKEN, k, 1) for k in (1, 2, 3)]
  )
  assert ((states[:, LAYOUT.offset : -1] == TOKEN).sum(1) == [1, 2, 3]).all()
  sp = spec(T, top_k=top_k)
  D_B = drift.drift(model, sp, states, TOKEN, (T,))[:, 0]
  start = chains.init_state(np.repeat(states, CHAINS, axis=0))
  _, rec = chains.run(jax.random.key(3), model, sp, start, 1)
  count = lambda free_BN: (np.asarray(free_BN) == TOKEN).sum(-1)
  change_SB = (count(rec.tokens_RBN[0]) - count(sp.free(start.tokens_BL))).reshape(3, CHAINS)
  se_S = change_SB.std(1) / np.sqrt(CHAINS)
  assert (np.abs(change_SB.mean(1) - D_B) <= 5 * se_S + 1e-9).all()
  assert (se_S > 0).all()  # the count does move: the comparison is not vacuous


def test_basin_states_fill_from_a_base_state():
  rng = np.random.default_rng(1)
  base = np.array([TOKEN, CANDIDATES[0], TOKEN, CANDIDATES[1]])
  states = drift.basin_states(rng, LAYOUT, CANDIDATES, TOKEN, 1, 50, base)[:, LAYOUT.offset : -1]
  assert ((states == TOKEN).sum(1) == 1).all()
  keep = (states != TOKEN) & (base[None] != TOKEN)
  assert (states[keep] == np.broadcast_to(base, states.shape)[keep]).all()


def test_bad_input_is_one_line_user_error(model):
  rng = np.random.default_rng(0)
  states = drift.basin_states(rng, LAYOUT, CANDIDATES, TOKEN, 1, 1)
  cases = [
    (lambda: drift.drift(model, spec(), states, TOKEN, (0.0,)), "T=0.0"),
    (lambda: drift.drift(model, spec(), states, 3, (1.0,)), "token id 3"),
    (lambda: drift.basin_states(rng, LAYOUT, CANDIDATES, TOKEN, N + 1, 4), f"k={N + 1}"),
    (lambda: drift.basin_states(rng, LAYOUT, CANDIDATES, TOKEN, 1, 0), "states 0"),
  ]
  for call, needle in cases:
    with pytest.raises(UserError, match=needle) as e:
      call()
    assert "\n" not in str(e.value)
