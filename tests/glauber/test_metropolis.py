"""Metropolis-Hastings on an MLM (glauber.metropolis): its exact kernel is reversible for the
energy's Gibbs law, the jitted step's one-step law is that kernel, and its chains sample the
Gibbs law (TV <= 0.02) although the MLM's conditionals are incompatible."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest
from glauber_util import CANDIDATES, tv
from test_exact import C3, LAYOUT3, N3, tiny_scores

from glauber import chains, metropolis
from glauber.measures import exact

B = 4096  # chains of every test (one compilation of the energy pass)
W = C3 ** np.arange(N3 - 1, -1, -1)


@pytest.fixture(scope="module")
def tiny():
  return tiny_scores()  # 4 candidates at 3 free sites: 64 states


def spec(T: float, **kw) -> chains.Spec:
  return chains.make_spec(CANDIDATES[:C3], 11, LAYOUT3, T, **kw)


def start(states_BN: np.ndarray):
  return LAYOUT3.sequences(CANDIDATES[states_BN])


def index(free_XN) -> np.ndarray:
  return (np.asarray(free_XN) - CANDIDATES[0]) @ W


def loop_energy(scores: np.ndarray, kind: str) -> np.ndarray:
  """E(x) by a plain loop over states and sites."""
  out = []
  for x in itertools.product(range(C3), repeat=N3):
    e = 0.0
    for i in range(N3):
      s = scores[np.array(x) @ W, i]
      e -= s[x[i]] - (np.log(np.exp(s - s.max()).sum()) + s.max() if kind == "pll" else 0.0)
    out.append(e)
  return np.array(out)


@pytest.mark.parametrize("kind", metropolis.ENERGIES)
def test_the_exact_mh_kernel_is_reversible_for_the_gibbs_law_of_its_energy(tiny, kind):
  scores = tiny[1]
  T = 0.8
  gibbs = np.exp(-loop_energy(scores, kind) / T)
  gibbs /= gibbs.sum()
  K = exact.mh_matrix(scores, T, kind)
  np.testing.assert_allclose(np.asarray(K.sum(1))[:, 0], 1.0, atol=1e-12)
  assert (np.diff(K.indptr) == N3 * (C3 - 1) + 1).all()
  flow = gibbs[:, None] * K.toarray()
  np.testing.assert_allclose(flow, flow.T, atol=1e-15)  # detailed balance
  np.testing.assert_allclose(exact.stationary(K), gibbs, atol=1e-12)
  # ... while Glauber on the same incompatible conditionals has another stationary law.
  assert tv(exact.stationary(exact.glauber_matrix(scores, T)), gibbs) > 1e-3


def test_pll_energy_at_temperature_1_is_the_pseudo_likelihood_law(tiny):
  scores = tiny[1]
  pl = exact.pseudo_likelihood(exact.conditionals(scores, 1.0))
  np.testing.assert_allclose(exact.gibbs_law(exact.energy(scores, "pll"), 1.0), pl, atol=1e-14)


def run_steps(key, model, spec, kind, state, steps):
  """steps calls of one step each (one compiled step whatever the count)."""
  for t in range(steps):
    state, rec = metropolis.run(jax.random.fold_in(key, t), model, spec, kind, state, 1, 1)
  return state, rec


def test_one_jitted_step_has_the_exact_kernels_law(tiny):
  """(The pll energy differs only in its terms, checked against the exact energy at init.)"""
  model, scores = tiny
  T, kind = 0.6, "raw"
  x0 = np.array([1, 3, 0])
  state = metropolis.init_state(model, spec(T), start(np.tile(x0, (B, 1))), kind)
  np.testing.assert_allclose(
    -np.asarray(state.terms_BN[0]).sum(), exact.energy(scores, kind)[x0 @ W], rtol=1e-5
  )
  state, rec = run_steps(jax.random.key(1), model, spec(T), kind, state, 1)
  hist = np.bincount(index(rec.tokens_RBN[0]), minlength=C3**N3) / B
  row = exact.mh_matrix(scores, T, kind)[x0 @ W].toarray()[0]
  rng = np.random.default_rng(0)
  band = np.quantile([tv(rng.multinomial(B, row) / B, row) for _ in range(400)], 0.999)
  assert (hist[row == 0] == 0).all() and tv(hist, row) <= band
  assert int(state.t) == 1 and (np.asarray(state.steps_B) == 1).all()
  moved = np.asarray(state.moved_B)
  np.testing.assert_array_equal(moved, index(rec.tokens_RBN[0]) != x0 @ W)
  assert (np.asarray(state.accepted_B) >= moved).all()


def test_mh_chains_sample_the_energys_gibbs_law(tiny):
  """4096 chains, 24 steps of burn-in, then 8 records 4 steps apart: 32k draws over 64 states
  whose exact pooled law is within 0.005 of the Gibbs law; the draws are within 0.02."""
  model, scores = tiny
  T, kind = 0.6, "raw"
  K = exact.mh_matrix(scores, T, kind).toarray()
  gibbs = exact.gibbs_law(exact.energy(scores, kind), T)
  x0 = np.random.default_rng(0).integers(0, C3, (B, N3))
  state = metropolis.init_state(model, spec(T), start(x0), kind)
  state, _ = run_steps(jax.random.key(2), model, spec(T), kind, state, 24)
  records = []
  for r in range(8):
    state, rec = run_steps(jax.random.key(3 + r), model, spec(T), kind, state, 4)
    records.append(index(rec.tokens_RBN[0]))
  hist = np.bincount(np.concatenate(records), minlength=C3**N3)
  mu = np.bincount(x0 @ W, minlength=C3**N3) / B @ np.linalg.matrix_power(K, 24)
  pooled = np.mean([mu @ np.linalg.matrix_power(K, 4 * (r + 1)) for r in range(8)], axis=0)
  assert tv(pooled, gibbs) <= 0.005
  assert tv(hist / hist.sum(), gibbs) <= 0.02
  # The carried energy terms are the state's energy.
  E = exact.energy(scores, kind)[index(spec(T).free(state.tokens_BL))]
  np.testing.assert_allclose(-np.asarray(state.terms_BN).sum(1), E, rtol=1e-5, atol=1e-5)
  assert 0 < metropolis.move_rate(state) < metropolis.acceptance_rate(state) < 1


def test_bad_input_is_refused(tiny):
  model = tiny[0]
  x = start(np.zeros((B, N3), int))
  for T in (0.0, float("inf")):
    with pytest.raises(ValueError, match="0 < T < inf"):
      metropolis.init_state(model, spec(T), x, "pll")
  with pytest.raises(ValueError, match="untruncated"):
    metropolis.check(spec(1.0, top_k=2), "pll")
  with pytest.raises(ValueError, match="unknown energy"):
    metropolis.check(spec(0.6), "joint")
  outside = x.copy()
  outside[:, LAYOUT3.offset] = CANDIDATES[C3]
  with pytest.raises(ValueError, match="must be a candidate"):
    metropolis.init_state(model, spec(0.6), outside, "pll")
  state = metropolis.init_state(model, spec(0.6), x, "pll")
  with pytest.raises(ValueError, match="record_every >= 1"):
    metropolis.run(jax.random.key(0), model, spec(0.6), "pll", state, 1, 0)
