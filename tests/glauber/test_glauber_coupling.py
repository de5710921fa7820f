"""Maximal coupling: each marginal is its own conditional, disagreement has probability TV,
coupled chains are each plain Glauber chains, and pairs that meet stay together."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from glauber_util import (
  CANDIDATES,
  C,
  N,
  exact_conditionals,
  sequences,
  spec,
  state_index,
  tiny_mlm,
)

from glauber import coupling

M = 200_000


@pytest.mark.parametrize("shift", [0.0, 0.7, 3.0])
def test_marginals_are_the_conditionals_and_disagreement_is_tv(shift):
  rng = np.random.default_rng(0)
  logp = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(1, 7))))
  logq = jax.nn.log_softmax(logp + shift * jnp.asarray(rng.normal(size=(1, 7))))
  a, b = jax.jit(coupling.maximal_coupling)(
    jax.random.key(0), jnp.repeat(logp, M, 0), jnp.repeat(logq, M, 0)
  )
  a, b = np.asarray(a), np.asarray(b)
  p, q = np.exp(np.asarray(logp[0], np.float64)), np.exp(np.asarray(logq[0], np.float64))
  for draws, law in ((a, p), (b, q)):
    np.testing.assert_allclose(np.bincount(draws, minlength=7) / M, law, atol=4e-3)
  tv = 0.5 * np.abs(p - q).sum()
  assert np.mean(a != b) == pytest.approx(tv, abs=4e-3)
  if shift == 0.0:
    assert (a == b).all()


@pytest.mark.slow  # long coupled chains against the exact conditionals
def test_each_coupled_chain_is_a_glauber_chain_and_pairs_stay_met():
  model = tiny_mlm()
  cond = exact_conditionals(model)
  B = 4096
  rng = np.random.default_rng(1)
  x0, y0 = (sequences(rng.integers(0, C, (1, N)).repeat(B, 0)) for _ in range(2))
  x, y, meet, dist = coupling.run(jax.random.key(3), model, spec(), x0, y0, 1, 1)
  # One step: each population's updated site i was drawn from p_i(. | x0_-i).
  for start, out in ((x0, x), (y0, y)):
    free0, free1 = start[:, 2:-1], np.asarray(out)[:, 2:-1]
    s = state_index(free0[:1])[0]
    changed_site = free0 != free1
    assert changed_site.sum(1).max() <= 1
    law = np.zeros(C**N)
    w = C ** np.arange(N)[::-1]
    base = free0[0] - CANDIDATES[0]
    for i in range(N):
      for a_ in range(C):
        yv = base.copy()
        yv[i] = a_
        law[yv @ w] += cond[s, i, a_] / N
    emp = np.bincount(state_index(free1), minlength=C**N) / B
    assert 0.5 * np.abs(emp - law).sum() <= 0.04
  # Longer runs: pairs meet, and never separate afterwards.
  x, y, meet, dist_RB = coupling.run(jax.random.key(4), model, spec(), x0[:256], y0[:256], 20, 5)
  meet, dist_RB = np.asarray(meet), np.asarray(dist_RB)
  assert (meet > 0).mean() > 0.9
  steps_R = 5 * (1 + np.arange(20))
  for b in np.flatnonzero(meet > 0):
    assert (dist_RB[steps_R >= meet[b], b] == 0).all()
    assert (dist_RB[steps_R < meet[b], b] > 0).all()


@pytest.mark.slow  # three coupled runs, each compiled
def test_a_coupled_run_in_pieces_equals_one_run():
  """The coupling job runs each cell one record per call (for its progress bar): the pieces,
  chained through x, y, meet_B and start_step, give the very same pairs and meeting times."""
  model = tiny_mlm()
  rng = np.random.default_rng(5)
  x0, y0 = (sequences(rng.integers(0, C, (64, N))) for _ in range(2))
  key = jax.random.key(6)
  x, y, meet, dist_RB = coupling.run(key, model, spec(), x0, y0, 6, 4)
  px, py, pmeet = x0, y0, None
  for r in range(6):
    px, py, pmeet, pdist_RB = coupling.run(
      key, model, spec(), px, py, 1, 4, start_step=4 * r, meet_B=pmeet
    )
    np.testing.assert_array_equal(np.asarray(pdist_RB[0]), np.asarray(dist_RB[r]))
  for a, b in ((x, px), (y, py), (meet, pmeet)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert (np.asarray(meet) > 0).any()
