"""Exact asymptotic covariances of pseudolikelihood estimators by enumeration (float64 numpy).

With phi(x) = theta . T(x) (ising.pseudolikelihood.sufficient_statistics), for a block K

    grad_theta -log p(x_K | x_-K) = E[T(Y) | Y_-K = x_-K] - T(x) =: -g(x, K),
    hess_theta -log p(x_K | x_-K) = Cov[T(Y) | Y_-K = x_-K],

both at theta* (Y ~ p_theta*). Lemma 1's sandwich is Sigma = H^{-1} V H^{-1} with

    H = E_{x ~ p} sum_K p_K(K) Cov[T | x_-K]                    (population Hessian)
    V = Cov_{(x, K) ~ p x p_K} g(x, K)      masks="sampled": one mask per sample (Definition 2)
    V = Cov_{x ~ p} sum_K p_K(K) g(x, K)    masks="all": each sample averaged over the blocks.

Lemma 2 says V = H for "sampled", so Sigma = H^{-1} there; for "all" V <= H (law of total
covariance), so Sigma_all <= Sigma_sampled. k = N gives the inverse Fisher information I^{-1}.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ising.exact import poincare_constant
from ising.model import (
  Ising,
  all_states,
  blocks,
  check_block_size,
  check_enumerable,
  exact_distribution,
)
from ising.pseudolikelihood import check_masks, sufficient_statistics

MAX_ASYMPTOTICS_N = 12


def _block_partners(n: int, K: Sequence[int]) -> np.ndarray:
  """partners[s, c]: the state equal to s off K and equal to configuration c on K [S, 2^k]."""
  k = len(K)
  mask = sum(1 << i for i in K)
  subs_C = np.array(
    [sum(1 << K[a] for a in range(k) if (c >> a) & 1) for c in range(2**k)], dtype=np.int64
  )
  s_S = np.arange(2**n, dtype=np.int64)
  return (s_S & ~mask)[:, None] | subs_C[None, :]


def conditional_moments(model: Ising, K: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
  """E[T | x_-K] [S, D] and Cov[T | x_-K] [S, D, D] for every state x (index as all_states)."""
  check_enumerable(model.n, MAX_ASYMPTOTICS_N)
  p_S = exact_distribution(model)
  T_SD = sufficient_statistics(all_states(model.n))
  partners_SC = _block_partners(model.n, K)
  w_SC = p_S[partners_SC]
  w_SC = w_SC / w_SC.sum(axis=1, keepdims=True)
  T_SCD = T_SD[partners_SC]
  mean_SD = np.einsum("sc,scd->sd", w_SC, T_SCD)
  dev_SCD = T_SCD - mean_SD[:, None, :]
  cov_SDE = np.einsum("sc,scd,sce->sde", w_SC, dev_SCD, dev_SCD)
  return mean_SD, cov_SDE


def _cov(p_S: np.ndarray, g_SD: np.ndarray) -> np.ndarray:
  mu_D = p_S @ g_SD
  dev_SD = g_SD - mu_D
  return np.einsum("s,sd,se->de", p_S, dev_SD, dev_SD)


def weighted_asymptotics(
  model: Ising, block_list: Sequence[Sequence[int]], p_K: Sequence[float], masks: str = "sampled"
) -> dict[str, np.ndarray]:
  """H, V = Cov(per-sample gradient) and Sigma = H^{-1} V H^{-1} at theta* (Lemma 1)."""
  check_masks(masks)
  p = np.asarray(p_K, np.float64)
  if len(block_list) == 0 or p.shape != (len(block_list),) or np.any(p < 0) or not p.sum() > 0:
    raise ValueError(
      f"need one non-negative weight per block, got {len(block_list)} blocks and p_K={p_K}"
    )
  p = p / p.sum()
  p_S = exact_distribution(model)
  T_SD = sufficient_statistics(all_states(model.n))
  D = T_SD.shape[1]
  H_DD = np.zeros((D, D))
  second_DD = np.zeros((D, D))  # E_{x,K} g g^T
  first_D = np.zeros(D)  # E_{x,K} g (zero at theta*)
  gbar_SD = np.zeros_like(T_SD)  # sum_K p_K g(x, K)
  for pK, K in zip(p, block_list):
    mean_SD, cov_SDE = conditional_moments(model, K)
    g_SD = T_SD - mean_SD
    H_DD += pK * np.einsum("s,sde->de", p_S, cov_SDE)
    second_DD += pK * np.einsum("s,sd,se->de", p_S, g_SD, g_SD)
    first_D += pK * (p_S @ g_SD)
    gbar_SD += pK * g_SD
  if masks == "sampled":
    V_DD = second_DD - np.outer(first_D, first_D)
  else:
    V_DD = _cov(p_S, gbar_SD)
  H_inv = np.linalg.inv(H_DD)
  sigma_DD = H_inv @ V_DD @ H_inv
  return {"hessian": H_DD, "grad_cov": V_DD, "sigma": (sigma_DD + sigma_DD.T) / 2}


def kmple_asymptotics(model: Ising, k: int, masks: str = "sampled") -> dict[str, np.ndarray]:
  """Definition 3 (all k-blocks, uniform p_K): H_k, V_k and Sigma_k = H_k^{-1} V_k H_k^{-1}."""
  check_block_size(model.n, k)
  bs = blocks(model.n, k)
  return weighted_asymptotics(model, bs, np.ones(len(bs)), masks)


def fisher_information(model: Ising) -> np.ndarray:
  """I = Cov_{x ~ p}(T(x)) (Definition 1): the Hessian of -log-likelihood, = H_N."""
  check_enumerable(model.n, MAX_ASYMPTOTICS_N)
  return _cov(exact_distribution(model), sufficient_statistics(all_states(model.n)))


def theorem2_check(model: Ising, k: int, masks: str = "sampled") -> dict[str, float]:
  """Theorem 2: Sigma_k <= C_k I^{-1}, C_k the Poincare constant of k-Gibbs (uniform k-blocks).

  margin_min_eig = lambda_min(C_k I^{-1} - Sigma_k) (>= 0 iff the bound holds);
  rel_max_eig = lambda_max(I^{1/2} Sigma_k I^{1/2}), the smallest C for which the bound holds.
  """
  sigma_DD = kmple_asymptotics(model, k, masks)["sigma"]
  I_DD = fisher_information(model)
  C = poincare_constant(model, k)
  I_inv = np.linalg.inv(I_DD)
  evals, evecs = np.linalg.eigh(I_DD)
  I_half = evecs @ np.diag(np.sqrt(evals)) @ evecs.T
  gap_DD = C * I_inv - sigma_DD
  return {
    "poincare_constant": float(C),
    "trace_sigma": float(np.trace(sigma_DD)),
    "trace_bound": float(C * np.trace(I_inv)),
    "trace_fisher_inv": float(np.trace(I_inv)),
    "margin_min_eig": float(np.linalg.eigvalsh((gap_DD + gap_DD.T) / 2)[0]),
    "rel_max_eig": float(np.linalg.eigvalsh(I_half @ sigma_DD @ I_half)[-1]),
  }


def psd_min_eig(A_DD: np.ndarray) -> float:
  """lambda_min of the symmetric part of A (A >= 0 iff this is >= 0)."""
  return float(np.linalg.eigvalsh((A_DD + A_DD.T) / 2)[0])


__all__ = [
  "conditional_moments",
  "weighted_asymptotics",
  "kmple_asymptotics",
  "fisher_information",
  "theorem2_check",
  "psd_min_eig",
]
