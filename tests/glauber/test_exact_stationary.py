"""π_T of the exact restricted chain (glauber.measures.exact.stationary) when some states carry
almost no mass (down to 1e-300), and every figure that takes π, against references computed
independently in mpmath at a precision that resolves every exit probability (the float64 code
never sees 1 - P(x, x) there: it rounds to 0). Scores as in issue 27's reproduction: random
normal logits, candidate 0 shifted down by 6, so the all-0 state is exponentially rare at low T.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from glauber.measures import exact
from gmlm.checks import UserError

TEMPERATURES = (0.05, 0.1, 0.25, 0.5, 1.0, 4.0, 16.0, 64.0)
SHAPES = ((4, 2), (2, 5))  # (c, n): the issue's 16 states, and 32 states 5 sites deep
EPS64 = float(np.finfo(np.float64).eps)


def shifted_scores(c: int, n: int, seed: int, shift: float = 6.0) -> np.ndarray:
  s = np.random.default_rng(seed).normal(size=(c**n, n, c))
  s[..., 0] -= shift
  return s


def mp_dps(scores: np.ndarray, T: float) -> int:
  """Digits that hold the ratio of the largest to the smallest conditional, n times over
  (a state's mass is a product of at most S - 1 rates; LU then loses at most that range)."""
  spread = float(scores.max() - scores.min()) / T / math.log(10)
  return 40 + int(2 * scores.shape[1] * spread)


def mp_rates(scores: np.ndarray, T: float):
  """R[x][y] = P(x, y) for y ≠ x (mpf, exact conditionals at the current precision)."""
  S, n, c = scores.shape
  nbr = exact.neighbours(c, n)
  states = exact.all_states(c, n)
  R = [dict() for _ in range(S)]
  for x in range(S):
    for i in range(n):
      w = [mpmath.exp(mpmath.mpf(float(v)) / T) for v in scores[x, i]]
      total = mpmath.fsum(w)
      for a in range(c):
        if a != states[x, i]:
          R[x][int(nbr[x, i, a])] = w[a] / total / n
  return R


def mp_stationary(scores: np.ndarray, T: float, dps: int) -> list:
  """π by mpmath's LU of Q^T (the generator, exact diagonal) with one row replaced by Σπ = 1."""
  with mpmath.workdps(dps):
    R = mp_rates(scores, T)
    S = len(R)
    A = mpmath.zeros(S, S)
    for x in range(S):
      for y, r in R[x].items():
        A[y, x] += r
        A[x, x] -= r
    for y in range(S):
      A[S - 1, y] = 1
    b = mpmath.zeros(S, 1)
    b[S - 1] = 1
    pi = mpmath.lu_solve(A, b)
    return [pi[x] for x in range(S)]


def reference(scores: np.ndarray, T: float):
  """π (mpf list) at mp_dps, checked converged against 30 more digits."""
  dps = mp_dps(scores, T)
  pi, pi2 = mp_stationary(scores, T, dps), mp_stationary(scores, T, dps + 30)
  with mpmath.workdps(dps):
    assert max(abs(a / b - 1) for a, b in zip(pi, pi2)) < mpmath.mpf(10) ** (-20)
  return pi


CASES = [(c, n, seed, T) for c, n in SHAPES for seed in (0, 1, 2) for T in TEMPERATURES]
TINY = 1e3 * float(np.finfo(np.float64).tiny)  # below, float64 has no relative precision left


@pytest.fixture(scope="module")
def refs():
  return {}


def ref_pi(refs, c, n, seed, T, shift=6.0):
  key = (c, n, seed, T, shift)
  if key not in refs:
    scores = shifted_scores(c, n, seed, shift)
    refs[key] = (scores, reference(scores, T))
  return refs[key]


def assert_componentwise(scores: np.ndarray, T: float, ref) -> np.ndarray:
  """GTH's relative error per state against mpmath. The conditionals enter with a relative
  error ~ eps (1 + |s| / T) (exp of a rounded s / T); π_x, a ratio of sums of products of at
  most S - 1 of them (the Markov chain tree theorem), moves by at most 2 (S - 1) times that."""
  S = scores.shape[0]
  pi = exact.stationary(exact.glauber_matrix(scores, T))
  ref64 = np.array([float(v) for v in ref])
  rtol = 2 * (S - 1) * EPS64 * (4 + 2 * float(np.abs(scores).max()) / T) + 16 * S * EPS64
  normal = ref64 > TINY
  np.testing.assert_allclose(pi[normal], ref64[normal], rtol=rtol, atol=0)
  assert np.abs(pi[~normal]).max(initial=0.0) <= 2 * TINY
  return ref64


def test_the_issues_reproduction_gives_the_true_law_and_t_mix():
  s = np.random.default_rng(1).normal(size=(16, 2, 4))
  s[..., 0] -= 6.0
  P = exact.glauber_matrix(s, 0.25)
  pi = exact.stationary(P)
  assert np.abs(pi @ P.toarray() - pi).sum() < 1e-15  # was 2.0
  assert pi[0] == pytest.approx(1.5355e-19, rel=1e-4)
  mix = exact.mixing_time(P, pi, refine_bits=10)
  assert mix["lo"] == mix["hi"] == 189


@pytest.mark.parametrize("c,n,seed,T", CASES)
def test_pi_is_componentwise_accurate(refs, c, n, seed, T):
  scores, ref = ref_pi(refs, c, n, seed, T)
  ref64 = assert_componentwise(scores, T, ref)
  if T == 0.05:  # the case the test exists for: states with (almost) no mass
    assert ref64.min() < 1e-40


@pytest.mark.parametrize("seed", [0, 1])
def test_pi_is_componentwise_accurate_down_to_1e_300(refs, seed):
  """Candidate 0 shifted by 8 at T = 0.05: the all-0 state holds 3e-298 and 2e-305."""
  scores, ref = ref_pi(refs, 2, 5, seed, 0.05, shift=8.0)
  assert assert_componentwise(scores, 0.05, ref).min() < 1e-297


@pytest.mark.parametrize("c,n,seed,T", [k for k in CASES if k[2] == 1])
def test_every_figure_that_takes_pi_matches_the_reference(refs, c, n, seed, T):
  """TVs against PL and the Gibbs laws, non-reversibility and Theorem 8's state from the
  reference π (mpmath sums); the residual below its tolerance."""
  scores, ref = ref_pi(refs, c, n, seed, T)
  S = c**n
  row = exact.measure_temperature(scores, T)
  assert row["stationary_residual"] <= exact.residual_tolerance(S)
  ref64 = np.array([float(v) for v in ref])
  cond = exact.conditionals(scores, T)
  assert row["tv_pi_pl"] == pytest.approx(exact.tv(ref64, exact.pseudo_likelihood(cond)), abs=1e-13)
  for kind in ("pll", "raw"):
    gibbs = exact.gibbs_law(exact.energy(scores, kind), T)
    assert row[f"tv_pi_gibbs_{kind}"] == pytest.approx(exact.tv(ref64, gibbs), abs=1e-13)
  dps = mp_dps(scores, T)
  with mpmath.workdps(dps):
    R = mp_rates(scores, T)
    flow = mpmath.fsum(
      abs(ref[x] * r - ref[y] * R[y].get(x, 0)) for x in range(S) for y, r in R[x].items() if x < y
    )
  assert row["nonreversibility"] == pytest.approx(float(flow), abs=1e-13)
  delta = exact.margins(scores).min(1)
  want = max((x for x in range(S) if ref[x] <= 0.5), key=lambda x: delta[x])
  assert row["trap_state"] == want
  assert row["trap_pi"] == pytest.approx(ref64[want], rel=1e-10, abs=1e-300)


def mp_power_tv(scores: np.ndarray, T: float, ref, times) -> dict:
  """d(t) = max_x TV(P^t(x, .), π) at each t, by exact-enough powers in mpmath (50 digits:
  every exit probability that can move mass within 2^62 steps is resolved)."""
  S, n, c = scores.shape
  with mpmath.workdps(50):
    R = mp_rates(scores, T)
    P = mpmath.zeros(S, S)
    for x in range(S):
      for y, r in R[x].items():
        P[x, y] = r
      P[x, x] = 1 - mpmath.fsum(R[x].values())
    out = {}
    for t in times:
      M = P**t
      out[t] = float(
        max(mpmath.fsum(abs(M[x, y] - ref[y]) for y in range(S)) for x in range(S)) / 2
      )
    return out


@pytest.mark.parametrize("T", [0.05, 0.25, 1.0, 64.0])
def test_t_mix_brackets_the_reference_crossing(refs, T):
  """The float64 doubling/bisection of mixing_time against d(t) in mpmath on each side of its
  bracket (d is non-increasing in t); beyond 2^62 steps it says so."""
  scores, ref = ref_pi(refs, 4, 2, 1, T)
  P = exact.glauber_matrix(scores, T)
  mix = exact.mixing_time(P, exact.stationary(P))
  if mix["hi"] is None:
    d = mp_power_tv(scores, T, ref, [mix["lo"] - 1])
    assert d[mix["lo"] - 1] > 0.25
  else:
    d = mp_power_tv(scores, T, ref, sorted({max(mix["lo"] - 1, 1), mix["hi"]}))
    assert mix["lo"] == 1 or d[mix["lo"] - 1] > 0.25
    assert d[mix["hi"]] <= 0.25
  for t, dt in mix["curve"][:: max(1, len(mix["curve"]) // 4)]:  # the curve itself
    assert dt == pytest.approx(mp_power_tv(scores, T, ref, [t])[t], abs=1e-9)


@pytest.mark.parametrize("T", [0.25, 1.0])
def test_sparse_lu_and_gth_agree_with_float64_power_iteration(T):
  """Above GTH_LIMIT the anchored sparse LU takes over: both against power iteration of P^T on
  729 states (c = 3, n = 6), where both finish."""
  scores = shifted_scores(3, 6, 0)
  P = exact.glauber_matrix(scores, T)
  gth, lu = exact.stationary(P, method="gth"), exact.stationary(P, method="lu")
  v = np.full(P.shape[0], 1.0 / P.shape[0])
  PT = P.T.tocsr()
  for _ in range(20_000):
    v = PT @ v
  assert exact.stationary_residual(P, v) < 1e-12  # converged
  assert exact.tv(gth, v) < 1e-11 and exact.tv(lu, v) < 1e-11


def test_lu_anchored_on_state_0_would_fail_and_the_anchored_one_does_not():
  s = np.random.default_rng(1).normal(size=(16, 2, 4))
  s[..., 0] -= 6.0
  P = exact.glauber_matrix(s, 0.25)
  assert exact.stationary(P, method="lu")[0] == pytest.approx(1.5355e-19, rel=1e-6)


def test_a_failed_solve_is_refused_in_one_line(monkeypatch):
  P = exact.glauber_matrix(shifted_scores(4, 2, 1), 0.25)
  monkeypatch.setattr(exact, "_gth", lambda R, out: np.full(R.shape[0], 1 / R.shape[0]))
  with pytest.raises(UserError, match=r"failed its check: ‖πP − π‖₁ = .* > 2.84e-14") as e:
    exact.stationary(P)
  assert "\n" not in str(e.value)
  assert exact.stationary(P, check=False).sum() == pytest.approx(1.0)


def test_a_temperature_whose_exits_underflow_is_refused_in_one_line():
  with pytest.raises(UserError, match="never moves .* raise T") as e:
    exact.measure_temperature(shifted_scores(4, 2, 1), 1e-3)
  assert "\n" not in str(e.value)
