"""Exact Markov-chain quantities by enumeration (float64 numpy, N small).

Transition matrices of k-Gibbs (PaDIR eq. 3) and of the independent parallel sampler (eq. 4)
on all 2^N states, their stationary distributions, spectral gaps (Poincare constants) and
the exact law of hitting times. States are indexed as in `ising.model.all_states`.
"""

from __future__ import annotations

import numpy as np

from ising.model import (
  Ising,
  all_states,
  blocks,
  check_enumerable,
  exact_distribution,
  numpy_params,
)

MAX_DENSE_N = 12  # 2^12 x 2^12 float64 = 128 MiB


def _check_dense(model: Ising) -> None:
  check_enumerable(model.n, MAX_DENSE_N)


def _add_block(P: np.ndarray, p_S: np.ndarray, block: tuple[int, ...], weight: float) -> None:
  """P += weight * P_K, P_K(x, y) = 1[y_-K = x_-K] p(y_K | x_-K)."""
  S = p_S.shape[0]
  mask = sum(1 << i for i in block)
  subs_C = np.array(
    [sum(1 << block[a] for a in range(len(block)) if (c >> a) & 1) for c in range(2 ** len(block))],
    dtype=np.int64,
  )
  s_S = np.arange(S, dtype=np.int64)
  partners_SC = (s_S & ~mask)[:, None] | subs_C[None, :]
  w_SC = p_S[partners_SC]
  P[s_S[:, None], partners_SC] += weight * w_SC / w_SC.sum(axis=1, keepdims=True)


def block_transition_matrix(model: Ising, block: tuple[int, ...]) -> np.ndarray:
  """P_K(x, y) = 1[y_-K = x_-K] p(y_K | x_-K): resample block K from its exact conditional."""
  _check_dense(model)
  P = np.zeros((2**model.n, 2**model.n))
  _add_block(P, exact_distribution(model), tuple(block), 1.0)
  return P


def kgibbs_transition_matrix(model: Ising, k: int) -> np.ndarray:
  """k-Gibbs: a uniformly random k-subset K, then x_K ~ p(. | x_-K). k = 1 is Glauber."""
  _check_dense(model)
  bs = blocks(model.n, k)
  p_S = exact_distribution(model)
  P = np.zeros((p_S.shape[0], p_S.shape[0]))
  for b in bs:
    _add_block(P, p_S, b, 1.0 / len(bs))
  return P


def parallel_transition_matrix(model: Ising) -> np.ndarray:
  """Independent parallel sampler: P(x, y) = prod_i p(y_i | x_-i)."""
  _check_dense(model)
  h, J = numpy_params(model)
  x_SN = all_states(model.n).astype(np.float64)
  f_SN = h + 2.0 * x_SN @ J
  logq_plus = -np.logaddexp(0.0, -2.0 * f_SN)  # log sigmoid(2f)
  logq_minus = -np.logaddexp(0.0, 2.0 * f_SN)
  up_SN = (x_SN > 0).astype(np.float64)
  logP = logq_plus @ up_SN.T + logq_minus @ (1.0 - up_SN).T
  return np.exp(logP)


def transition_matrix(model: Ising, method: str, k: int = 1) -> np.ndarray:
  if method == "gibbs":
    return kgibbs_transition_matrix(model, k)
  if method == "parallel":
    return parallel_transition_matrix(model)
  raise ValueError(f"unknown sampler method {method!r}; choose 'gibbs' or 'parallel'")


def stationary_distribution(P: np.ndarray) -> np.ndarray:
  """The pi with pi P = pi, sum pi = 1 (P irreducible)."""
  S = P.shape[0]
  A = P.T - np.eye(S)
  A[-1, :] = 1.0
  b = np.zeros(S)
  b[-1] = 1.0
  pi = np.linalg.solve(A, b)
  return np.clip(pi, 0.0, None) / np.clip(pi, 0.0, None).sum()


def detailed_balance_residual(P: np.ndarray, pi: np.ndarray) -> float:
  """max_{x,y} |pi(x) P(x,y) - pi(y) P(y,x)|: zero iff P is reversible w.r.t. pi."""
  F = pi[:, None] * P
  return float(np.max(np.abs(F - F.T)))


def spectral_gap(P: np.ndarray, pi: np.ndarray) -> float:
  """1 - lambda_2 of a reversible P; the Poincare constant is C = 1 / gap (Definition 5)."""
  d = np.sqrt(pi)
  A = d[:, None] * P / d[None, :]
  eig = np.linalg.eigvalsh((A + A.T) / 2)
  return float(1.0 - eig[-2])


def poincare_constant(model: Ising, k: int) -> float:
  """C of the k-block dynamics: E(f, f) >= Var(f) / C for all f; C = 1 / spectral gap."""
  P = kgibbs_transition_matrix(model, k)
  return 1.0 / spectral_gap(P, exact_distribution(model))


def hitting_time_survival(
  P: np.ndarray, start: np.ndarray, target: np.ndarray, num_steps: int
) -> np.ndarray:
  """Exact P(tau > t) for t = 0..num_steps, tau = first t >= 1 with X_t in target,
  X_0 ~ start (a distribution over states). Q is P with the target's columns removed."""
  Q = P * (~target)[None, :]
  v = np.asarray(start, np.float64).copy()
  out = np.empty(num_steps + 1)
  out[0] = 1.0
  for t in range(1, num_steps + 1):
    v = v @ Q
    out[t] = v.sum()
  return out


__all__ = [
  "MAX_DENSE_N",
  "block_transition_matrix",
  "kgibbs_transition_matrix",
  "parallel_transition_matrix",
  "transition_matrix",
  "stationary_distribution",
  "detailed_balance_residual",
  "spectral_gap",
  "poincare_constant",
  "hitting_time_survival",
]
