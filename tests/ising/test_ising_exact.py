"""Exact enumeration and exact transition matrices, checked against brute-force loops."""

import itertools

import ising_helpers
import numpy as np
import pytest

from ising import exact
from ising.model import all_states, clique_model, exact_distribution, ising, log_potential


def random_model(n, seed, scale=0.4):
  return ising_helpers.random_model(n, seed, scale)


def brute_force_distribution(model):
  h, J = np.asarray(model.h, np.float64), np.asarray(model.J, np.float64)
  n = model.n
  weights = {}
  for x in itertools.product([-1, 1], repeat=n):
    phi = sum(h[i] * x[i] for i in range(n)) + sum(
      J[i, j] * x[i] * x[j] for i in range(n) for j in range(n) if i != j
    )
    weights[x] = np.exp(phi)
  Z = sum(weights.values())
  return {x: w / Z for x, w in weights.items()}


def brute_force_kgibbs(model, k):
  """P(x, y) by definition: average over k-subsets K of 1[y_-K = x_-K] p(y_K | x_-K)."""
  n = model.n
  p = brute_force_distribution(model)
  states = [tuple(int(v) for v in row) for row in all_states(n)]
  index = {s: i for i, s in enumerate(states)}
  P = np.zeros((2**n, 2**n))
  subsets = list(itertools.combinations(range(n), k))
  for x in states:
    for K in subsets:
      fibre = []
      for yK in itertools.product([-1, 1], repeat=k):
        y = list(x)
        for a, i in enumerate(K):
          y[i] = yK[a]
        fibre.append(tuple(y))
      Z = sum(p[y] for y in fibre)
      for y in fibre:
        P[index[x], index[y]] += p[y] / Z / len(subsets)
  return P


def test_enumeration_matches_brute_force():
  model = random_model(5, 0)
  p = exact_distribution(model)
  bf = brute_force_distribution(model)
  for s, x in enumerate(all_states(5)):
    assert p[s] == pytest.approx(bf[tuple(int(v) for v in x)], rel=1e-10)


def test_log_potential_matches_eq5_for_clique_model():
  # eq. (5): sum_i h_i x_i + sum_{i != j in C} J x_i x_j, computed by hand for one state.
  model = clique_model(6, 3, coupling=0.7, field_in=1.5, field_out=-0.25)
  x = np.array([[1, -1, 1, 1, -1, -1]])
  h = np.array([1.5, 1.5, 1.5, -0.25, -0.25, -0.25])
  by_hand = h @ x[0] + 0.7 * sum(x[0, i] * x[0, j] for i in range(3) for j in range(3) if i != j)
  assert float(log_potential(model, x)[0]) == pytest.approx(by_hand, rel=1e-6)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_kgibbs_matrix_matches_definition(k):
  model = random_model(4, k)
  np.testing.assert_allclose(
    exact.kgibbs_transition_matrix(model, k), brute_force_kgibbs(model, k), atol=1e-12
  )


def test_parallel_matrix_matches_definition():
  # eq. (4): P(x, y) = prod_i p(y_i | x_-i), conditionals read off the brute-force joint.
  model = random_model(4, 7)
  p = brute_force_distribution(model)
  P = exact.parallel_transition_matrix(model)
  states = [tuple(int(v) for v in row) for row in all_states(4)]

  def cond(x, i, v):
    up, down = list(x), list(x)
    up[i], down[i] = 1, -1
    return p[tuple(up) if v == 1 else tuple(down)] / (p[tuple(up)] + p[tuple(down)])

  for s, x in enumerate(states):
    for t, y in enumerate(states):
      assert P[s, t] == pytest.approx(np.prod([cond(x, i, y[i]) for i in range(4)]), rel=1e-10)


@pytest.mark.parametrize("n", [3, 5, 7])
def test_kgibbs_is_reversible_with_the_target_as_stationary_law(n):
  model = random_model(n, 10 + n, scale=0.6)
  p = exact_distribution(model)
  for k in range(1, n + 1):
    P = exact.kgibbs_transition_matrix(model, k)
    np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-12)
    assert exact.detailed_balance_residual(P, p) < 1e-14
    np.testing.assert_allclose(exact.stationary_distribution(P), p, atol=1e-12)


def test_spectral_gap_grows_with_k_and_is_one_for_k_equal_n():
  # Lee (2023): larger blocks mix faster; k = N samples exactly in one step (gap 1).
  model = random_model(6, 3, scale=0.5)
  p = exact_distribution(model)
  gaps = [exact.spectral_gap(exact.kgibbs_transition_matrix(model, k), p) for k in range(1, 7)]
  assert all(b > a for a, b in zip(gaps, gaps[1:]))
  assert gaps[-1] == pytest.approx(1.0, abs=1e-10)
  # Lee (2023): the k-Gibbs gap is at least k times the Glauber gap.
  assert all(g >= (k + 1) * gaps[0] - 1e-12 for k, g in enumerate(gaps))


def test_parallel_sampler_stationary_law_differs_on_strong_coupling():
  model = clique_model(5, 5, coupling=1.0, field_in=0.2)
  p = exact_distribution(model)
  pi = exact.stationary_distribution(exact.parallel_transition_matrix(model))
  assert 0.5 * np.abs(pi - p).sum() > 0.05  # measured: 0.101
  # ... while at zero coupling sites are independent and it is exact.
  free = clique_model(5, 5, coupling=0.0, field_in=0.2)
  pi0 = exact.stationary_distribution(exact.parallel_transition_matrix(free))
  np.testing.assert_allclose(pi0, exact_distribution(free), atol=1e-12)


def test_hitting_time_survival_matches_closed_form():
  # Single spin, zero field: Glauber resamples it uniformly each step, so from -1 the
  # first time at +1 is Geometric(1/2): P(tau > t) = 2^-t.
  model = ising([0.0], [[0.0]])
  P = exact.kgibbs_transition_matrix(model, 1)
  surv = exact.hitting_time_survival(P, np.array([1.0, 0.0]), np.array([False, True]), 10)
  np.testing.assert_allclose(surv, 0.5 ** np.arange(11), rtol=1e-12)


def test_exact_routines_refuse_large_n():
  with pytest.raises(ValueError, match="N=13"):
    exact.kgibbs_transition_matrix(clique_model(13, 2, 1.0, 0.0), 1)
  with pytest.raises(ValueError, match="N=21"):
    exact_distribution(clique_model(21, 2, 1.0, 0.0))
