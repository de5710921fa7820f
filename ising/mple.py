"""The k-MPLE experiments' measurements (PaDIR Section 3.1, Appendix L.6), shared by the jobs
`ising.jobs.mple_error` (error vs sample size) and `ising.jobs.mple_asymptotics` (exact
sandwich covariances, Theorems 1 and 2).

Both run on the clique model of eq. (5) with N = |C| sites (`model_for`) and exact samples:
`squared_errors` fits the k-MPLE on R independent data sets and returns
||theta_hat - theta*||^2 per data set; `ordering` says whether mean errors decrease in k;
`random_model_checks` checks Theorems 1 and 2 by enumeration on random models; `check_config`
validates the config keys both jobs read.
"""

from __future__ import annotations

import jax
import numpy as np

from gmlm import checks
from ising.asymptotics import MAX_ASYMPTOTICS_N, fisher_information, kmple_asymptotics, psd_min_eig
from ising.exact import poincare_constant
from ising.model import Ising, clique_model, ising
from ising.pseudolikelihood import MASK_MODES, exact_samples, fit_kmple, to_theta

MASK_NOTE = (
  "Masks: `sampled` pairs each sample with one uniformly random k-block, as in "
  "Definition 2's n i.i.d. (sequence, mask) pairs (the estimator Theorems 1-2 are "
  "about); `all` averages each sample's loss over all C(N, k) blocks."
)
TIE_RTOL = 0.005


def parse_masks(masks: str) -> list[str]:
  """The mask modes of a comma-separated string ("sampled,all"); [] if any is unknown."""
  modes = [m.strip() for m in str(masks).split(",") if m.strip()]
  return [] if any(m not in MASK_MODES for m in modes) else modes


def model_for(n_sites: int, coupling: float, field: float) -> Ising:
  """The clique model of eq. (5) with C = all N sites, J = coupling, h_i = field."""
  return clique_model(n_sites, n_sites, float(coupling), float(field))


def jkey(coupling: float) -> str:
  """The results key of a coupling: "J=0.05"."""
  return f"J={coupling:g}"


def squared_errors(
  model: Ising, ks: list[int], modes: list[str], num: int, reps: int, key: jax.Array
) -> tuple[dict[tuple[str, int], np.ndarray], int]:
  """||theta_hat - theta*||^2 [reps] of the k-MPLE for every (mask mode, k), on `reps`
  independent exact data sets of size num shared by all (mode, k) (paired comparisons), and
  the number of fits that did not reach the gradient tolerance."""
  theta_star = np.asarray(to_theta(model), np.float64)
  err = {(m, k): np.empty(reps) for m in modes for k in ks}
  failed = 0
  for r in range(reps):
    data_key, mask_key = jax.random.split(jax.random.fold_in(key, r))
    x_BN = np.asarray(exact_samples(data_key, model, num))
    for m in modes:
      for k in ks:
        fit = fit_kmple(x_BN, k, masks=m, key=jax.random.fold_in(mask_key, k))
        err[m, k][r] = np.sum((np.asarray(fit.theta, np.float64) - theta_star) ** 2)
        failed += int(not bool(fit.converged))
  return err, failed


def stored_squared_errors(
  run_dir,
  name: str,
  model: Ising,
  ks: list[int],
  modes: list[str],
  num: int,
  reps: int,
  key: jax.Array,
) -> tuple[dict[tuple[str, int], np.ndarray], int]:
  """`squared_errors`, stored as the cell `name` of run_dir (gmlm.runs.RunDir.cell; None: not
  stored): a killed run, rerun, reads the cells it finished instead of refitting them."""

  def compute() -> dict:
    err, failed = squared_errors(model, ks, modes, num, reps, key)
    return {"errors": {m: {str(k): err[m, k] for k in ks} for m in modes}, "failed": failed}

  cell = compute() if run_dir is None else run_dir.cell(name, compute)
  err = {(m, k): np.asarray(cell["errors"][m][str(k)], np.float64) for m in modes for k in ks}
  return err, int(cell["failed"])


def ordering(mean_k: list[float]) -> str:
  """'yes' if strictly decreasing in k, 'ties' if non-increasing up to TIE_RTOL, else 'NO'."""
  pairs = list(zip(mean_k, mean_k[1:]))
  if all(b < a * (1 - TIE_RTOL) for a, b in pairs):
    return "yes"
  if all(b <= a * (1 + TIE_RTOL) for a, b in pairs):
    return "ties" if any(b >= a * (1 - TIE_RTOL) for a, b in pairs) else "yes"
  return "NO"


def random_model_checks(count: int, seed: int, modes: list[str]) -> dict:
  """Theorems 1 and 2 by enumeration on `count` random models (N in 3..5), per mask mode:
  the smallest lambda_min(Sigma_k - Sigma_{k+1}) / max|Sigma_k| and the smallest
  lambda_min(C_k I^{-1} - Sigma_k) / (C_k Tr I^{-1}) over models and k."""
  rng = np.random.default_rng(seed)
  t1 = {m: np.inf for m in modes}
  t2 = {m: np.inf for m in modes}
  for _ in range(count):
    n = int(rng.integers(3, 6))
    J_NN = rng.normal(0.0, 0.5, (n, n))
    J_NN = (J_NN + J_NN.T) / 2
    np.fill_diagonal(J_NN, 0.0)
    model = ising(rng.normal(0.0, 0.7, n), J_NN)
    I_inv = np.linalg.inv(fisher_information(model))
    C = {k: poincare_constant(model, k) for k in range(1, n + 1)}
    for m in modes:
      sig = [kmple_asymptotics(model, k, m)["sigma"] for k in range(1, n + 1)]
      for a, b in zip(sig, sig[1:]):
        t1[m] = min(t1[m], psd_min_eig(a - b) / np.abs(a).max())
      for k, a in enumerate(sig, start=1):
        t2[m] = min(t2[m], psd_min_eig(C[k] * I_inv - a) / (C[k] * np.trace(I_inv)))
  return {"count": count, "theorem1_min_rel_eig": t1, "theorem2_min_rel_margin": t2}


def with_quick(config, quick: dict):
  """The config a run measures: with config.quick, the values of `quick` (a smaller run)."""
  config = config.copy_and_resolve_references()
  if config.quick:
    config.update(quick)
  return config


def check_config(config) -> None:
  """Checks the keys both k-MPLE jobs read (gmlm.checks; computes nothing): n_sites, field,
  couplings, ks, masks, repetitions, seed, quick."""
  n = checks.check_int(config, "n_sites", lo=2)
  checks.check(
    n <= MAX_ASYMPTOTICS_N,
    "n_sites",
    n,
    f"must be <= {MAX_ASYMPTOTICS_N}: the exact Sigma_k enumerates all 2^N states "
    "(Tr Sigma_k is computed for every run)",
  )
  checks.check_float(config, "field")
  checks.check_floats(config, "couplings")
  checks.check_ints(config, "ks", lo=1, hi=n)
  masks = checks.get(config, "masks")
  checks.check(
    bool(parse_masks(masks)),
    "masks",
    masks,
    f"give a comma-separated subset of {', '.join(MASK_MODES)}",
  )
  checks.check_int(config, "repetitions", lo=2)
  checks.check_int(config, "seed", lo=0)
  quick = checks.get(config, "quick")
  checks.check(isinstance(quick, bool), "quick", quick, "must be True or False")
