"""The exact restricted chain (glauber.measures.exact) against independent computations: the engine's
empirical one-step law, closed forms (independent sites, a compatible joint), brute-force loops
and the two theorems' bounds."""

from __future__ import annotations

import functools
import itertools
import math

import jax
import numpy as np
import pytest
from glauber_util import CANDIDATES, CLS, MASK, PREFIX, SEP, tiny_mlm, tv

from glauber import chains
from glauber.layout import Layout
from glauber.measures import exact
from gmlm.checks import UserError
from gmlm.runs import RunDir

C3, N3 = 4, 3  # the tiny model restricted to 4 candidates at 3 free sites: 64 states
LAYOUT3 = Layout(tuple(PREFIX), N3, CLS, SEP, MASK)


@functools.cache
def tiny_scores():
  """The tiny model and its enumerated scores (built once per session; test_metropolis too)."""
  model = tiny_mlm(seed=3)
  return model, exact.enumerate_scores(model, LAYOUT3, CANDIDATES[:C3])


@pytest.fixture(scope="module")
def tiny():
  return tiny_scores()


def tv_band(mu: np.ndarray, num: int, q: float = 0.999, draws: int = 400) -> float:
  """The q-quantile of TV(empirical, mu) for num i.i.d. draws from mu."""
  rng = np.random.default_rng(0)
  return float(np.quantile([tv(rng.multinomial(num, mu) / num, mu) for _ in range(draws)], q))


def index(free_XN: np.ndarray, c: int) -> np.ndarray:
  return (np.searchsorted(CANDIDATES, free_XN)) @ (c ** np.arange(free_XN.shape[1] - 1, -1, -1))


def test_the_exact_kernel_is_the_engines_one_step_law(tiny):
  model, scores = tiny
  T, B = 0.7, 8192
  spec = chains.make_spec(CANDIDATES[:C3], 11, LAYOUT3, T)
  x0 = np.array([[2, 0, 3]])
  tokens_BL = LAYOUT3.sequences(np.repeat(CANDIDATES[x0], B, axis=0))
  row = int(index(CANDIDATES[x0], C3)[0])
  _, rec = chains.run(jax.random.key(0), model, spec, chains.init_state(tokens_BL), 1, 1)
  hist = np.bincount(index(np.asarray(rec.tokens_RBN[0]), C3), minlength=C3**N3) / B
  P_row = exact.glauber_matrix(scores, T)[row].toarray()[0]
  assert (hist[P_row == 0] == 0).all()
  assert tv(hist, P_row) <= tv_band(P_row, B)


@pytest.mark.parametrize("T", [0.5, 2.0])
def test_rows_are_stochastic_with_n_c_minus_1_plus_1_nonzeros_and_pi_is_stationary(tiny, T):
  scores = tiny[1]
  P = exact.glauber_matrix(scores, T)
  np.testing.assert_allclose(np.asarray(P.sum(1))[:, 0], 1.0, atol=1e-12)
  assert (np.diff(P.indptr) == N3 * (C3 - 1) + 1).all()
  pi = exact.stationary(P)
  np.testing.assert_allclose(pi @ P, pi, atol=1e-13)
  dense = P.toarray()  # an independent solve: the left eigenvector of eigenvalue 1
  w, v = np.linalg.eig(dense.T)
  ref = np.real(v[:, np.argmin(np.abs(w - 1))])
  np.testing.assert_allclose(pi, ref / ref.sum(), atol=1e-10)
  assert exact.nonreversibility(P, pi) > 1e-4  # a random MLM is not reversible
  # The sparse (ARPACK, deflated) gap equals the dense eigendecomposition's.
  dense_gap = exact.spectral_gap(P, pi)
  assert abs(exact.spectral_gap(P, pi, dense_limit=0)["gap"] - dense_gap["gap"]) < 1e-8


def independent_scores(c: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """s_i(a; x_-i) = h_i(a) whatever the context: a product law, compatible."""
  h_NC = np.random.default_rng(seed).normal(size=(n, c))
  return np.broadcast_to(h_NC, (c**n, n, c)).copy(), h_NC


def product_tv(h_NC: np.ndarray, T: float, t: int) -> float:
  """max_x TV(P^t(x, .), π) of random-scan Glauber on independent sites, by the coupon
  formula: after t steps the set U of updated sites has P(U ⊆ W) = (|W| / n)^t; sites in U are
  distributed as p_i, the others still at x_i."""
  n, c = h_NC.shape
  p_NC = np.exp(h_NC / T) / np.exp(h_NC / T).sum(1, keepdims=True)
  subsets = [frozenset(u) for k in range(n + 1) for u in itertools.combinations(range(n), k)]
  law_U = {
    U: sum((-1) ** (len(U) - len(W)) * (len(W) / n) ** t for W in subsets if W <= U)
    for U in subsets
  }
  states = list(itertools.product(range(c), repeat=n))
  pi = np.array([np.prod([p_NC[i, y[i]] for i in range(n)]) for y in states])
  worst = 0.0
  for x in states:
    mu = np.zeros(len(states))
    for k, y in enumerate(states):
      for U, w in law_U.items():
        if all(y[i] == x[i] for i in range(n) if i not in U):
          mu[k] += w * np.prod([p_NC[i, y[i]] for i in U])
    worst = max(worst, tv(mu, pi))
  return worst


def test_independent_sites_gap_is_one_over_n_and_t_mix_is_the_coupon_formulas():
  c, n, T = 3, 3, 0.8
  scores, h_NC = independent_scores(c, n)
  P = exact.glauber_matrix(scores, T)
  pi = exact.stationary(P)
  for limit in (exact.DENSE_EIG, 0):  # dense and ARPACK: eigenvalues k / n
    assert exact.spectral_gap(P, pi, dense_limit=limit)["gap"] == pytest.approx(1 / n, abs=1e-9)
  mix = exact.mixing_time(P, pi, refine_bits=10)
  t = next(t for t in range(1, 200) if product_tv(h_NC, T, t) <= 0.25)
  assert mix["lo"] == mix["hi"] == t
  for s, d in mix["curve"]:
    assert d == pytest.approx(product_tv(h_NC, T, s), abs=1e-12)
  row = exact.measure_temperature(scores, T)
  assert row["alpha_hat"] < 1e-12 and row["thm5_upper"] == math.ceil(n * math.log(4 * n))
  assert row["thm5_upper"] >= t and row["tv_pi_pl"] < 1e-12  # PL of a product law is it


def compatible_scores(log_pi_Z: np.ndarray, c: int, n: int, seed: int = 1) -> np.ndarray:
  """s_i(a; x_-i) = log π(x^{i<-a}) + r_i(x_-i), r an arbitrary shift per context."""
  nbr = exact.neighbours(c, n)
  r_ZN1 = np.random.default_rng(seed).normal(size=(c**n, n, 1))
  r_ZN1 = np.take_along_axis(r_ZN1, nbr[..., :1], axis=0)  # the same for every x_i
  return log_pi_Z[nbr] + r_ZN1


def test_a_compatible_joint_gives_zero_rectangles_a_reversible_chain_and_pi_to_the_1_over_T():
  c, n, T = 3, 3, 0.6
  log_pi = np.random.default_rng(0).normal(size=c**n) * 2
  scores = compatible_scores(log_pi, c, n)
  assert exact.rectangles(scores)["max"] < 1e-12
  P = exact.glauber_matrix(scores, T)
  pi = exact.stationary(P)
  want = np.exp(log_pi / T) / np.exp(log_pi / T).sum()
  np.testing.assert_allclose(pi, want, atol=1e-12)
  assert exact.nonreversibility(P, pi) < 1e-12
  # Reversible: the gap from the symmetrised matrix's real spectrum (eigvalsh).
  d = np.sqrt(pi)
  lam = np.sort(np.abs(np.linalg.eigvalsh((d[:, None] * P.toarray()) / d[None])))
  assert exact.spectral_gap(P, pi)["gap"] == pytest.approx(1 - lam[-2], abs=1e-10)


def test_rectangles_equal_a_loop_over_the_eight_conditionals(tiny):
  scores = tiny[1]
  logp = np.log(exact.conditionals(scores, 1.0))
  w = C3 ** np.arange(N3 - 1, -1, -1)
  values = []
  for x, i, j, bi, bj in itertools.product(
    itertools.product(range(C3), repeat=N3), range(N3), range(N3), range(C3), range(C3)
  ):
    if i >= j or bi == x[i] or bj == x[j]:
      continue
    x00 = np.array(x)
    x10, x01 = x00.copy(), x00.copy()
    x10[i], x01[j] = bi, bj

    def ell(y, site, b):
      return logp[y @ w, site, b] - logp[y @ w, site, y[site]]

    values.append(abs(ell(x00, i, bi) + ell(x10, j, bj) - ell(x00, j, bj) - ell(x01, i, bi)))
  got = exact.rectangles(scores)
  assert got["count"] == len(values)
  assert got["mean"] == pytest.approx(np.mean(values), rel=1e-10)
  assert got["max"] == pytest.approx(np.max(values), rel=1e-10) and got["mean"] > 0.01


def test_influence_and_margins_equal_brute_force(tiny):
  scores = tiny[1]
  cond = exact.conditionals(scores, 1.3)
  states = exact.all_states(C3, N3)
  alpha = np.zeros((N3, N3))
  for x, y in itertools.product(range(len(states)), repeat=2):
    diff = np.flatnonzero(states[x] != states[y])
    if len(diff) == 1:
      j = diff[0]
      for i in set(range(N3)) - {j}:
        alpha[i, j] = max(alpha[i, j], tv(cond[x, i], cond[y, i]))
  np.testing.assert_allclose(exact.influence(cond), alpha, atol=1e-14)
  g = exact.margins(scores)
  for x, i in itertools.product(range(len(states)), range(N3)):
    own = states[x, i]
    assert g[x, i] == scores[x, i, own] - np.delete(scores[x, i], own).max()


def test_theorem_5_and_theorem_8_bound_the_exact_t_mix():
  """Two-well compatible model (c = 2, n = 4): log π(x) = J · #{i < j: x_i = x_j}; each
  ground state holds < 1/2 of π, its margin is (n - 1) J."""
  c, n, J = 2, 4, 1.0
  states = exact.all_states(c, n)
  agree = (states[:, :, None] == states[:, None, :]).sum((1, 2)) - n
  scores = compatible_scores(J * agree / 2.0, c, n)
  low = exact.measure_temperature(scores, 0.5)
  assert low["trap_margin"] == pytest.approx((n - 1) * J)
  assert 1 < low["thm8_lower"] <= low["trap_conductance_lower"] <= low["tmix_lo"]
  high = exact.measure_temperature(scores, 8.0)
  assert high["alpha_hat"] < 1 and high["tmix_hi"] <= high["thm5_upper"]


def test_mixing_time_brackets_the_first_crossing():
  scores = compatible_scores(np.random.default_rng(2).normal(size=16) * 3, 2, 4)
  P = exact.glauber_matrix(scores, 0.6)
  pi = exact.stationary(P)
  mix = exact.mixing_time(P, pi, refine_bits=2)
  assert mix["hi"] > mix["lo"]  # long enough to be bracketed with 2 bisection steps
  dense = P.toarray()
  d = lambda t: exact.worst_tv(np.linalg.matrix_power(dense, t), pi)  # noqa: E731
  assert d(mix["lo"] - 1) > 0.25 >= d(mix["hi"])
  assert mix["hi"] / (mix["lo"] - 1) <= 1 + 2**-2 + 1e-12


def test_bad_input_is_refused_with_the_size_and_the_limit():
  with pytest.raises(UserError, match=r"30\^4 = 810000 states, over the limit of 20000"):
    exact.measure(None, Layout((), 4, CLS, SEP, MASK), np.arange(30), [1.0])
  with pytest.raises(UserError, match="limit of 100"):
    exact.check_size(5, 3, max_states=100)
  with pytest.raises(UserError, match="1 token"):
    exact.check_size(1, 3)
  scores = independent_scores(2, 2)[0]
  for T in (0.0, -1.0, math.inf):
    with pytest.raises(UserError, match="0 < T < inf"):
      exact.measure_temperature(scores, T)
  with pytest.raises(UserError, match="0 < T < inf"):
    exact.measure(None, Layout((), 2, CLS, SEP, MASK), np.arange(3), [1.0, 0.0])


def test_section_renders_a_row_per_temperature_and_its_figures(tmp_path):
  scores = compatible_scores(np.random.default_rng(4).normal(size=8), 2, 3)
  results = {
    "summary": exact.summary(scores),
    "rows": [exact.measure_temperature(scores, T) for T in (0.5, 2.0)],
  }
  md = exact.section(results, RunDir(tmp_path))
  assert md.count("\n| 0.5 |") == 1 and md.count("\n| 2 |") == 1
  assert (tmp_path / "exact_tmix.png").is_file() and (tmp_path / "exact_tv.png").is_file()


@pytest.mark.slow
def test_the_default_mlm_restricted_chain_is_the_engines():
  """The default MLM restricted to 3 words at 2 sites: the exact P_T row of a state is the
  engine's one-step law."""
  from glauber.oracle import load_mlm

  model, tok = load_mlm("default")
  ids = np.array([tok.convert_tokens_to_ids(w) for w in ("the", "cat", "!")], np.int32)
  lay = Layout.from_tokenizer(tok, 2, "he said")
  T, B = 1.0, 4096
  scores = exact.enumerate_scores(model, lay, ids)
  spec = chains.make_spec(ids, model.config.vocab_size, lay, T)
  tokens_BL = lay.sequences(np.repeat(ids[[[1, 2]]], B, axis=0))
  _, rec = chains.run(jax.random.key(0), model, spec, chains.init_state(tokens_BL), 1, 1)
  position = {int(t): k for k, t in enumerate(ids)}
  idx = np.vectorize(position.get)(np.asarray(rec.tokens_RBN[0])) @ np.array([3, 1])
  P_row = exact.glauber_matrix(scores, T)[1 * 3 + 2].toarray()[0]
  assert tv(np.bincount(idx, minlength=9) / B, P_row) <= tv_band(P_row, B)
