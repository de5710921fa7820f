"""k-pseudolikelihood for Ising models: each test states a property and checks it against an
independent computation (brute-force loops, exact enumeration, scipy maximum likelihood)."""

import itertools
import json
import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
import scipy.optimize
from scipy.special import logsumexp

from ising import asymptotics as asy
from ising import pseudolikelihood as pl
from ising.exact import poincare_constant
from ising.model import (
  all_states,
  clique_model,
  exact_distribution,
  ising,
  log_potential,
  state_index,
)


def random_model(rng, n, field=0.5, coupling=0.4):
  J = rng.normal(0.0, coupling, (n, n))
  J = (J + J.T) / 2
  np.fill_diagonal(J, 0.0)
  return ising(rng.normal(0.0, field, n), J)


def brute_params(theta, n):
  """(h, J) from theta by explicit loops over i < j (independent of pl.unpack)."""
  theta = np.asarray(theta, np.float64)
  h, J, d = theta[:n].copy(), np.zeros((n, n)), n
  for i in range(n):
    for j in range(i + 1, n):
      J[i, j] = J[j, i] = theta[d]
      d += 1
  return h, J


def brute_log_conditional(h, J, x, K):
  """log p(x_K | x_-K) by enumerating the 2^|K| completions and evaluating phi in full."""
  phi = lambda y: h @ y + y @ J @ y
  phis = []
  for c in itertools.product((-1.0, 1.0), repeat=len(K)):
    y = x.astype(np.float64).copy()
    y[list(K)] = c
    phis.append(phi(y))
  return phi(x.astype(np.float64)) - logsumexp(phis)


# ----------------------------------------------------------------------------- losses


def test_theta_roundtrip_and_potential_is_linear_in_theta():
  model = random_model(np.random.default_rng(0), 5)
  theta = pl.to_theta(model)
  back = pl.from_theta(theta, 5)
  np.testing.assert_allclose(back.h, model.h)
  np.testing.assert_allclose(back.J, model.J, atol=1e-7)
  x = all_states(5)
  np.testing.assert_allclose(
    pl.sufficient_statistics(x) @ np.asarray(theta, np.float64),
    log_potential(model, x),
    rtol=1e-5,
    atol=1e-5,
  )


def test_kpl_loss_equals_brute_force_over_blocks_and_configs():
  rng = np.random.default_rng(1)
  n = 4
  theta = jnp.asarray(rng.normal(0.0, 0.6, pl.num_params(n)), jnp.float32)
  h, J = brute_params(theta, n)
  x = (2 * rng.integers(0, 2, (7, n)) - 1).astype(np.int8)
  bks_w, p = [(0,), (1, 3), (0, 2, 3), (2,)], np.array([0.1, 0.4, 0.3, 0.2])
  K_B = pl.sample_masks(jax.random.key(0), x.shape[0], n, 2)
  got, got_w, got_s = jax.jit(
    lambda t, xs: (
      [pl.kpl_loss(t, xs, k) for k in range(1, n + 1)],
      pl.weighted_pl_loss(t, xs, bks_w, 2 * p),
      pl.sampled_kpl_loss(t, xs, K_B),
    )
  )(theta, x)
  for k in range(1, n + 1):
    bks = list(itertools.combinations(range(n), k))
    brute = np.mean([[-brute_log_conditional(h, J, xb, K) for K in bks] for xb in x])
    np.testing.assert_allclose(got[k - 1], brute, rtol=2e-5)
  # Definition 2: blocks of different sizes with non-uniform weights p_K.
  brute = np.mean(
    [sum(-pk * brute_log_conditional(h, J, xb, K) for pk, K in zip(p, bks_w)) for xb in x]
  )
  np.testing.assert_allclose(got_w, brute, rtol=2e-5)
  # One mask per sample.
  brute = np.mean([-brute_log_conditional(h, J, xb, tuple(np.asarray(K))) for xb, K in zip(x, K_B)])
  np.testing.assert_allclose(got_s, brute, rtol=2e-5)


@pytest.mark.parametrize("masks", pl.MASK_MODES)
def test_fit_objective_is_the_documented_estimator(masks):
  """fit_kmple minimizes table_loss on compressed (state, mask) counts; it must equal the loss
  on the raw samples (with the same masks for 'sampled')."""
  rng = np.random.default_rng(2)
  n, k, key = 4, 2, jax.random.key(3)
  theta = jnp.asarray(rng.normal(0.0, 0.5, pl.num_params(n)), jnp.float32)
  x = pl.exact_samples(jax.random.key(4), clique_model(4, 4, 0.2, 0.1), 300)
  x_RN, w_RM = pl.mask_table(x, k, masks, key)
  K_B = pl.sample_masks(key, x.shape[0], n, k)
  got, want = jax.jit(
    lambda t: (
      pl.table_loss(t, jnp.asarray(x_RN), jnp.asarray(pl.block_array(n, k)), jnp.asarray(w_RM)),
      pl.kpl_loss(t, x, k) if masks == "all" else pl.sampled_kpl_loss(t, x, K_B),
    )
  )(theta)
  np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.slow  # the loss and its Hessian compiled over many parameters
def test_loss_is_convex():
  rng = np.random.default_rng(5)
  n = 4
  x = jnp.asarray((2 * rng.integers(0, 2, (40, n)) - 1).astype(np.int8))
  K_B = pl.sample_masks(jax.random.key(1), 40, n, 2)
  losses = [lambda t, k=k: pl.kpl_loss(t, x, k) for k in range(1, n + 1)]
  losses.append(lambda t: pl.sampled_kpl_loss(t, x, K_B))
  hessians = jax.jit(jax.vmap(lambda t: jnp.stack([jax.hessian(f)(t) for f in losses])))
  theta_TD = jnp.asarray(rng.normal(0.0, 1.0, (4, pl.num_params(n))), jnp.float32)
  for H in np.asarray(hessians(theta_TD), np.float64).reshape(
    -1, pl.num_params(n), pl.num_params(n)
  ):
    assert np.linalg.eigvalsh((H + H.T) / 2)[0] >= -1e-5 * max(1.0, np.abs(H).max())


def test_exact_samples_follow_the_enumerated_distribution():
  model = random_model(np.random.default_rng(6), 4)
  x = np.asarray(pl.exact_samples(jax.random.key(0), model, 40000))
  freq = np.bincount(state_index(x), minlength=16) / x.shape[0]
  assert 0.5 * np.abs(freq - exact_distribution(model)).sum() < 0.015


# ----------------------------------------------------------------------------- estimation


def test_k_equals_n_is_maximum_likelihood():
  """k = N has one block, the whole sequence: the k-MPLE is the MLE, here fit by scipy on the
  exactly enumerated log-likelihood in float64."""
  n = 4
  model = random_model(np.random.default_rng(7), n, coupling=0.3)
  x = np.asarray(pl.exact_samples(jax.random.key(1), model, 3000), np.float64)
  S = all_states(n).astype(np.float64)

  def negloglik(theta):
    h, J = brute_params(theta, n)
    phi_S = S @ h + np.einsum("sn,nm,sm->s", S, J, S)
    phi_B = x @ h + np.einsum("bn,nm,bm->b", x, J, x)
    return logsumexp(phi_S) - phi_B.mean()

  mle = scipy.optimize.minimize(
    negloglik, np.zeros(pl.num_params(n)), method="BFGS", options={"gtol": 1e-10}
  ).x
  fit = pl.fit_kmple(x.astype(np.int8), n)
  assert bool(fit.converged)
  np.testing.assert_allclose(np.asarray(fit.theta), mle, atol=2e-4)


@pytest.mark.slow  # fits at growing sample sizes against the asymptotic rate
@pytest.mark.parametrize("k,masks", [(1, "sampled"), (2, "all")])
def test_estimate_converges_at_rate_trace_sigma_over_n(k, masks):
  """E||theta_hat - theta*||^2 ~ Tr(Sigma_k) / n (Lemma 1): the error shrinks like 1/n."""
  model = random_model(np.random.default_rng(8), 3, coupling=0.3)
  theta_star = np.asarray(pl.to_theta(model), np.float64)
  trace = np.trace(asy.kmple_asymptotics(model, k, masks)["sigma"])
  n_mse = {}
  for num in (1000, 10000):
    errs = []
    for r in range(24):
      key = jax.random.fold_in(jax.random.key(num), r)
      x = pl.exact_samples(key, model, num)
      fit = pl.fit_kmple(x, k, masks=masks, key=jax.random.fold_in(key, 99))
      errs.append(np.sum((np.asarray(fit.theta, np.float64) - theta_star) ** 2))
    n_mse[num] = num * np.mean(errs)
  for num, v in n_mse.items():
    assert 0.65 * trace < v < 1.5 * trace, (num, v, trace)


def test_weighted_fit_with_uniform_k_blocks_equals_kmple():
  x = pl.exact_samples(jax.random.key(2), clique_model(3, 3, 0.3, 0.2), 500)
  blocks = list(itertools.combinations(range(3), 2))
  a = pl.fit_weighted_mple(x, blocks, np.ones(len(blocks)))
  b = pl.fit_kmple(x, 2, masks="all")
  np.testing.assert_allclose(a.theta, b.theta, atol=1e-4)


# ----------------------------------------------------------------------------- asymptotics


def test_lemma2_hessian_equals_gradient_covariance():
  """H_k (jax.hessian of the float32 population loss) = Cov_{x,K}(grad) (numpy enumeration);
  for masks='all' the per-sample gradient covariance also matches jax per-state gradients."""
  n = 4
  model = random_model(np.random.default_rng(9), n, coupling=0.3)
  theta = pl.to_theta(model)
  x_S, p_S = jnp.asarray(all_states(n)), jnp.asarray(exact_distribution(model), jnp.float32)
  ks = range(1, n + 1)
  # 'all' masks: the per-sample gradient is the gradient of the block-averaged loss at x.
  per_state_grad = lambda t, k: jax.vmap(
    jax.grad(lambda t, xs: pl.kpl_loss(t, xs[None], k)), in_axes=(None, 0)
  )(t, x_S)
  H_k, g_kSD = jax.jit(
    lambda t: (
      [jax.hessian(lambda t: pl.kpl_loss(t, x_S, k, p_S))(t) for k in ks],
      [per_state_grad(t, k) for k in ks],
    )
  )(theta)
  for k in ks:
    exact = asy.kmple_asymptotics(model, k, "sampled")
    H = np.asarray(H_k[k - 1], np.float64)
    np.testing.assert_allclose(H, exact["grad_cov"], atol=2e-5 * np.abs(H).max())
    np.testing.assert_allclose(exact["hessian"], exact["grad_cov"], atol=1e-12)
    g_SD = np.asarray(g_kSD[k - 1], np.float64)
    p = np.asarray(p_S, np.float64)
    dev = g_SD - p @ g_SD
    V = np.einsum("s,sd,se->de", p, dev, dev)
    np.testing.assert_allclose(
      V, asy.kmple_asymptotics(model, k, "all")["grad_cov"], atol=2e-5 * np.abs(V).max()
    )


def test_fisher_information_is_hessian_of_loglik_and_sigma_n_is_its_inverse():
  model = random_model(np.random.default_rng(10), 4)
  I = asy.fisher_information(model)
  for masks in pl.MASK_MODES:
    np.testing.assert_allclose(
      asy.kmple_asymptotics(model, 4, masks)["sigma"], np.linalg.inv(I), rtol=1e-9, atol=1e-12
    )


def _models(seed, count=4):
  rng = np.random.default_rng(seed)
  return [random_model(rng, int(rng.integers(3, 6)), field=0.7, coupling=0.5) for _ in range(count)]


def test_theorem1_masking_more_is_better():
  """Sigma_{k+1} <= Sigma_k (PSD difference) for one random mask per sample (Definition 2)."""
  for model in _models(11):
    sig = [asy.kmple_asymptotics(model, k, "sampled")["sigma"] for k in range(1, model.n + 1)]
    for a, b in zip(sig, sig[1:]):
      assert asy.psd_min_eig(a - b) >= -1e-9 * np.abs(a).max()
      assert np.trace(b) <= np.trace(a) * (1 + 1e-12)


def test_theorem2_sigma_below_poincare_constant_times_inverse_fisher():
  for model in _models(12) + [clique_model(4, 4, 0.3, 0.0)]:
    for k in range(1, model.n + 1):
      t2 = asy.theorem2_check(model, k)
      assert t2["margin_min_eig"] >= -1e-9 * t2["trace_bound"], (k, t2)
      assert t2["rel_max_eig"] <= t2["poincare_constant"] * (1 + 1e-9)
    assert math.isclose(poincare_constant(model, model.n), 1.0, rel_tol=1e-9)


# ----------------------------------------------------------------------------- bad inputs


def test_bad_inputs_raise_value_error_naming_the_value():
  x = np.ones((5, 3), np.int8)
  with pytest.raises(ValueError, match="k=4"):
    pl.fit_kmple(x, 4)
  with pytest.raises(ValueError, match="k=0"):
    pl.fit_kmple(x, 0)
  with pytest.raises(ValueError, match=r"non-empty.*\(0, 3\)"):
    pl.fit_kmple(np.ones((0, 3)), 1)
  with pytest.raises(ValueError, match=r"\{-1, \+1\}.*found 0"):
    pl.fit_kmple(np.array([[1, 0, -1]]), 1)
  with pytest.raises(ValueError, match=r"\{-1, \+1\}.*found 2"):
    pl.fit_kmple(np.array([[1, 2, -1]]), 1)
  with pytest.raises(ValueError, match=r"shape \(3,\)"):
    pl.fit_kmple(np.ones(3), 1)
  with pytest.raises(ValueError, match="'some'"):
    pl.fit_kmple(x, 1, masks="some")
  with pytest.raises(ValueError, match="PRNG key"):
    pl.fit_kmple(x, 1, masks="sampled")
  with pytest.raises(ValueError, match=r"\[6\].*\(5,\)"):
    pl.from_theta(np.zeros(5), 3)
  with pytest.raises(ValueError, match="-1"):
    pl.exact_samples(jax.random.key(0), clique_model(3, 3, 0.1, 0.0), -1)
  with pytest.raises(ValueError, match=r"\(0, 7\)"):
    pl.fit_weighted_mple(x, [(0, 7)], [1.0])


# ----------------------------------------------------------------------------- jobs


def _tiny(job):
  c = ml_collections.ConfigDict()
  c.job = f"ising.jobs.{job}"
  c.n_sites, c.field, c.couplings, c.ks = 3, 0.0, (0.2,), (1, 3)
  c.masks, c.seed, c.quick, c.repetitions = "sampled,all", 0, False, 2
  return c


@pytest.mark.slow  # the error-vs-samples job end to end
def test_error_vs_samples_job_writes_run_directory(tmp_path):
  from ising.jobs import mple_error

  c = _tiny("mple_error")
  c.sample_sizes = (100, 400)
  mple_error.run(c, str(tmp_path))
  for f in ("config.json", "results.json", "report.md", "error_vs_samples_J0.2.png"):
    assert (tmp_path / f).exists(), f
  res = json.loads((tmp_path / "results.json").read_text())
  assert {
    "sample_sizes",
    "ks",
    "masks",
    "errors",
    "exact_trace_sigma",
    "larger_k_lower_error",
    "ordering_in_k",
    "nonconverged_fits",
    "figures",
  } <= set(res)
  assert len(res["errors"]["J=0.2"]["sampled"]["1"]["mean"]) == 2


def test_asymptotics_job_writes_run_directory(tmp_path):
  from ising.jobs import mple_asymptotics

  c = _tiny("mple_asymptotics")
  c.n_large, c.random_models = 400, 2
  mple_asymptotics.run(c, str(tmp_path))
  for f in (
    "config.json",
    "results.json",
    "report.md",
    "asymptotic_traces.png",
    "theorem2_eigenvalues.png",
  ):
    assert (tmp_path / f).exists(), f
  res = json.loads((tmp_path / "results.json").read_text())
  assert {
    "n_large",
    "ks",
    "masks",
    "models",
    "nonconverged_fits",
    "figures",
    "random_models",
  } <= set(res)
  entry = res["models"]["J=0.2"]["k"]["1"]
  assert {
    "trace_sigma",
    "empirical_n_mse",
    "poincare_constant",
    "theorem2",
    "theorem2_margin",
    "theorem1_min_eig",
  } <= set(entry)
  assert entry["theorem2_margin"]["sampled"] >= -1e-9
