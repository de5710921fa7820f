"""k-pseudolikelihood estimation of Ising models (PaDIR paper, Definitions 1-3).

Parameters. theta = (h[N], J_upper[N(N-1)/2]) with J_upper the strict upper triangle of J in
row-major order (np.triu_indices(N, 1)). With the eq. (5) convention phi(x) = h.x + x^T J x,
the log-potential is linear in theta, phi(x) = theta . T(x), with sufficient statistics

    T(x) = (x_i for i in [N],  2 x_i x_j for i < j).

Block conditionals. For a block K and y_K in {-1,+1}^k with y_-K = x_-K,

    phi(y) = const(x_-K) + sum_{a in K} y_a g_a + sum_{a, b in K} y_a J_ab y_b,
    g_a = h_a + 2 sum_{j not in K} J_aj x_j = f_a(x) - 2 sum_{b in K} J_ab x_b,

so log p(x_K | x_-K) = e(x_K) - logsumexp_{c in {-1,+1}^k} e(c), computed exactly with 2^k terms.

Masks. Definition 2 draws n i.i.d. pairs (X_i, K_i) with K_i ~ p_K independent of X_i and
minimizes sum_i -log p(X_{i,K_i} | X_{i,-K_i}): one mask per sample ("sampled", the estimator
Theorems 1-2 are about). The common variant (Huang & Ogata, 2002) averages each sample's loss
over all blocks, i.e. replaces the random K_i by its expectation ("all"). Both have the same
population loss and minimizer; their asymptotic variances differ (see ising.asymptotics).
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import flax
import jax
import jax.numpy as jnp
import numpy as np

from ising.model import (
  Ising,
  all_states,
  block_configs,
  blocks,
  check_block_size,
  exact_log_potentials,
)

MASK_MODES = ("sampled", "all")


# ----------------------------------------------------------------------------- parameters


def num_params(n: int) -> int:
  return n + n * (n - 1) // 2


def to_theta(model: Ising) -> jnp.ndarray:
  """theta = (h, J_upper) as a float32 vector of length N + N(N-1)/2."""
  iu, ju = np.triu_indices(model.n, 1)
  return jnp.concatenate([model.h, model.J[iu, ju]])


def unpack(theta_D: jnp.ndarray, n: int) -> tuple[jnp.ndarray, jnp.ndarray]:
  """(h[N], J[N, N]) from theta; jittable. J is symmetric with a zero diagonal."""
  iu, ju = np.triu_indices(n, 1)
  h_N = theta_D[:n]
  J_NN = jnp.zeros((n, n), theta_D.dtype).at[iu, ju].set(theta_D[n:])
  return h_N, J_NN + J_NN.T


def from_theta(theta_D, n: int) -> Ising:
  """Inverse of to_theta; jittable (no validation beyond the length)."""
  _check_theta(theta_D, n)
  h_N, J_NN = unpack(jnp.asarray(theta_D), n)
  return Ising(h=h_N, J=J_NN)


def sufficient_statistics(x_BN) -> np.ndarray:
  """T(x) = (x_i, 2 x_i x_j for i < j) as float64 numpy [B, D]: phi(x) = theta . T(x)."""
  x = np.asarray(x_BN, np.float64)
  iu, ju = np.triu_indices(x.shape[-1], 1)
  return np.concatenate([x, 2.0 * x[..., iu] * x[..., ju]], axis=-1)


def _check_theta(theta_D, n: int) -> None:
  shape = np.shape(theta_D)
  if shape != (num_params(n),):
    raise ValueError(
      f"theta must have shape [N + N(N-1)/2] = [{num_params(n)}] for N={n}, got {shape}"
    )


# ----------------------------------------------------------------------------- validation


def check_samples(samples_BN) -> np.ndarray:
  """Validates samples as a non-empty [B, N] array with entries in {-1, +1}; returns numpy."""
  x = np.asarray(samples_BN)
  if x.ndim != 2:
    raise ValueError(f"samples must be a 2-d array [B, N], got shape {x.shape}")
  if x.shape[0] == 0:
    raise ValueError(f"samples must be non-empty, got shape {x.shape} (B = 0)")
  if x.shape[1] == 0:
    raise ValueError(f"samples must have N >= 1 sites, got shape {x.shape}")
  bad = ~np.isin(x, (-1, 1))
  if bad.any():
    raise ValueError(
      f"samples must take values in {{-1, +1}}; found {x[bad].flat[0].item()!r} "
      f"at index {tuple(int(i) for i in np.argwhere(bad)[0])}"
    )
  return x


def check_masks(masks: str) -> None:
  if masks not in MASK_MODES:
    raise ValueError(f"masks must be one of {MASK_MODES}, got {masks!r}")


def block_array(n: int, k: int) -> np.ndarray:
  """All C(N, k) blocks as int32[M, k], in the order of ising.model.blocks."""
  return np.asarray(blocks(n, k), np.int32).reshape(-1, k)


# ----------------------------------------------------------------------------- losses


def log_conditional(theta_D: jnp.ndarray, x_BN: jnp.ndarray, K_BK: jnp.ndarray) -> jnp.ndarray:
  """log p_theta(x_K | x_-K) [B] for row b's own block K_BK[b] (exact, 2^k terms)."""
  n, k = x_BN.shape[1], K_BK.shape[1]
  h_N, J_NN = unpack(theta_D, n)
  x_BN = x_BN.astype(theta_D.dtype)
  f_BN = h_N + 2.0 * jnp.einsum("bm,nm->bn", x_BN, J_NN)
  xK_BK = jnp.take_along_axis(x_BN, K_BK, axis=1)
  fK_BK = jnp.take_along_axis(f_BN, K_BK, axis=1)
  JKK_BKL = J_NN[K_BK[:, :, None], K_BK[:, None, :]]
  g_BK = fK_BK - 2.0 * jnp.einsum("bkl,bl->bk", JKK_BKL, xK_BK)
  # Columns reversed: the 2^k terms in lexicographic order (first site slowest), the order in
  # which the fits were first run; the logsumexp is order-free, its float32 round-off is not.
  c_CK = jnp.asarray(block_configs(k)[:, ::-1], theta_D.dtype)
  e_BC = jnp.einsum("bk,ck->bc", g_BK, c_CK) + jnp.einsum("ck,bkl,cl->bc", c_CK, JKK_BKL, c_CK)
  e_B = jnp.einsum("bk,bk->b", g_BK, xK_BK) + jnp.einsum("bk,bkl,bl->b", xK_BK, JKK_BKL, xK_BK)
  return e_B - jax.nn.logsumexp(e_BC, axis=1)


def all_block_log_conditionals(
  theta_D: jnp.ndarray, x_BN: jnp.ndarray, blocks_MK: jnp.ndarray
) -> jnp.ndarray:
  """log p_theta(x_K | x_-K) [B, M] for every sample b and every block K = blocks_MK[m]."""
  B = x_BN.shape[0]
  per_block = lambda block_K: log_conditional(
    theta_D, x_BN, jnp.broadcast_to(block_K, (B, block_K.shape[0]))
  )
  return jax.vmap(per_block, out_axes=1)(blocks_MK)


def _mean(v_B: jnp.ndarray, w_B: jnp.ndarray | None) -> jnp.ndarray:
  return jnp.mean(v_B) if w_B is None else jnp.einsum("b,b->", v_B, w_B) / jnp.sum(w_B)


def weighted_pl_loss(
  theta_D: jnp.ndarray,
  x_BN: jnp.ndarray,
  block_list: Sequence[Sequence[int]],
  p_K: Sequence[float],
  w_B: jnp.ndarray | None = None,
) -> jnp.ndarray:
  """Definition 2 with the expectation over K taken exactly for each sample:

      L(theta) = mean_b sum_K p_K(K) [-log p_theta(x_{b,K} | x_{b,-K})],

  for any blocks (sizes may differ) and mask weights p_K (normalized here). Optional sample
  weights w_B turn the mean into a weighted mean (e.g. w_B = p(x) over all states: the
  population loss).
  """
  p = np.asarray(p_K, np.float64)
  if len(block_list) == 0 or p.shape != (len(block_list),):
    raise ValueError(f"need one weight per block: {len(block_list)} blocks, p_K shape {p.shape}")
  if np.any(p < 0) or not p.sum() > 0:
    raise ValueError(f"block weights p_K must be >= 0 with a positive sum, got {p_K}")
  p = p / p.sum()
  by_size: dict[int, list[int]] = {}
  for m, K in enumerate(block_list):
    by_size.setdefault(len(K), []).append(m)
  loss_B = 0.0
  for ms in by_size.values():
    blocks_MK = jnp.asarray([list(block_list[m]) for m in ms], jnp.int32)
    logp_BM = all_block_log_conditionals(theta_D, x_BN, blocks_MK)
    loss_B = loss_B - jnp.einsum("bm,m->b", logp_BM, jnp.asarray(p[ms], theta_D.dtype))
  return _mean(loss_B, w_B)


def kpl_loss(
  theta_D: jnp.ndarray, x_BN: jnp.ndarray, k: int, w_B: jnp.ndarray | None = None
) -> jnp.ndarray:
  """Definition 3, all-masks form: mean_b mean_{|K| = k} -log p_theta(x_{b,K} | x_{b,-K})."""
  n = x_BN.shape[1]
  logp_BM = all_block_log_conditionals(theta_D, x_BN, jnp.asarray(block_array(n, k)))
  return _mean(-jnp.mean(logp_BM, axis=1), w_B)


def sampled_kpl_loss(
  theta_D: jnp.ndarray, x_BN: jnp.ndarray, K_BK: jnp.ndarray, w_B: jnp.ndarray | None = None
) -> jnp.ndarray:
  """Definition 2/3 with one mask per sample: mean_b -log p_theta(x_{b,K_b} | x_{b,-K_b})."""
  return _mean(-log_conditional(theta_D, x_BN, K_BK), w_B)


def sample_masks(key: jax.Array, num: int, n: int, k: int) -> jnp.ndarray:
  """K_b ~ Unif{K : |K| = k}, i.i.d. for b < num, as int32[num, k] (Definition 3's p_K)."""
  blocks_MK = jnp.asarray(block_array(n, k))
  return blocks_MK[jax.random.randint(key, (num,), 0, blocks_MK.shape[0])]


# ----------------------------------------------------------------------------- Newton


@flax.struct.dataclass
class FitResult:
  theta: jnp.ndarray  # [D] the minimizer
  loss: jnp.ndarray  # [] loss at theta
  grad_norm: jnp.ndarray  # [] max |grad| at theta
  num_iter: jnp.ndarray  # [] Newton steps taken
  converged: jnp.ndarray  # [] grad_norm <= grad_tol


def newton_minimize(
  loss_fn: Callable[[jnp.ndarray], jnp.ndarray],
  theta0_D: jnp.ndarray,
  *,
  max_iter: int = 50,
  grad_tol: float = 1e-5,
  damping: float = 1e-6,
  max_halvings: int = 30,
) -> FitResult:
  """Damped Newton with Armijo backtracking for a smooth convex loss; jittable and vmappable.

  Step d = -(H + damping * (1 + mean diag H) * I)^{-1} g with the exact Hessian H; the step
  length is halved until loss <= f + 1e-4 * t * g.d + (round-off of f) (Armijo; the round-off
  slack lets quadratic convergence finish in float32); if max_halvings is hit, it stops.
  """
  grad_fn = jax.grad(loss_fn)
  hess_fn = jax.hessian(loss_fn)
  D = theta0_D.shape[0]

  def cond(state):
    theta, f, g, it, stuck = state
    return (it < max_iter) & (jnp.max(jnp.abs(g)) > grad_tol) & ~stuck

  def body(state):
    theta, f, g, it, _ = state
    H_DD = hess_fn(theta)
    lam = damping * (1.0 + jnp.trace(H_DD) / D)
    d_D = -jnp.linalg.solve(H_DD + lam * jnp.eye(D, dtype=H_DD.dtype), g)
    slope = jnp.dot(g, d_D)

    slack = 8.0 * jnp.finfo(f.dtype).eps * (1.0 + jnp.abs(f))

    def ls_cond(ls):
      t, f_new, i = ls
      return ~(f_new <= f + 1e-4 * t * slope + slack) & (i < max_halvings)

    def ls_body(ls):
      t, _, i = ls
      t = 0.5 * t
      return t, loss_fn(theta + t * d_D), i + 1

    one = jnp.ones((), theta.dtype)
    t, f_new, i = jax.lax.while_loop(ls_cond, ls_body, (one, loss_fn(theta + d_D), 0))
    ok = (i < max_halvings) & jnp.isfinite(f_new)
    theta_new = jnp.where(ok, theta + t * d_D, theta)
    f_new = jnp.where(ok, f_new, f)
    return theta_new, f_new, grad_fn(theta_new), it + 1, ~ok

  f0 = loss_fn(theta0_D)
  theta, f, g, it, _ = jax.lax.while_loop(
    cond, body, (theta0_D, f0, grad_fn(theta0_D), jnp.zeros((), jnp.int32), jnp.zeros((), bool))
  )
  gnorm = jnp.max(jnp.abs(g))
  return FitResult(theta=theta, loss=f, grad_norm=gnorm, num_iter=it, converged=gnorm <= grad_tol)


def table_loss(
  theta_D: jnp.ndarray, x_RN: jnp.ndarray, blocks_MK: jnp.ndarray, w_RM: jnp.ndarray
) -> jnp.ndarray:
  """sum_{r,m} w[r,m] (-log p_theta(x_{r,K_m} | x_{r,-K_m})) / sum w: any empirical law of
  (sample, mask) pairs, compressed to distinct rows x_RN and their block counts w_RM."""
  logp_RM = all_block_log_conditionals(theta_D, x_RN, blocks_MK)
  return -jnp.einsum("rm,rm->", logp_RM, w_RM) / jnp.sum(w_RM)


def mask_table(
  samples_BN, k: int, masks: str, key: jax.Array | None
) -> tuple[np.ndarray, np.ndarray]:
  """Compresses samples (and their masks) to distinct rows x_RN and weights w_RM over the
  C(N, k) blocks: w[r, m] = #{b : x_b = x_r, K_b = K_m} ("sampled") or #{b : x_b = x_r} / M
  ("all"). R is padded to a power of two (zero weights) so that few shapes get compiled."""
  x = check_samples(samples_BN)
  n = x.shape[1]
  check_block_size(n, k)
  check_masks(masks)
  x_RN, inv_B = np.unique(x.astype(np.int8), axis=0, return_inverse=True)
  inv_B = inv_B.reshape(-1)
  M = len(blocks(n, k))
  R = x_RN.shape[0]
  R_pad = 1 << (R - 1).bit_length()
  w_RM = np.zeros((R_pad, M), np.float32)
  if masks == "all":
    np.add.at(w_RM, inv_B, 1.0 / M)
  else:
    if key is None:
      raise ValueError("masks='sampled' needs a PRNG key to draw one block per sample")
    m_B = np.asarray(jax.random.randint(key, (x.shape[0],), 0, M))
    np.add.at(w_RM, (inv_B, m_B), 1.0)
  x_RN = np.concatenate([x_RN, np.repeat(x_RN[:1], R_pad - R, axis=0)])
  return x_RN, w_RM


@functools.partial(jax.jit, static_argnames=("k", "max_iter", "grad_tol"))
def _fit_table(
  x_RN: jnp.ndarray, w_RM: jnp.ndarray, *, k: int, max_iter: int, grad_tol: float
) -> FitResult:
  n = x_RN.shape[1]
  blocks_MK = jnp.asarray(block_array(n, k))
  loss_fn = lambda theta: table_loss(theta, x_RN, blocks_MK, w_RM)
  return newton_minimize(
    loss_fn, jnp.zeros((num_params(n),), jnp.float32), max_iter=max_iter, grad_tol=grad_tol
  )


def fit_kmple(
  samples_BN,
  k: int,
  *,
  masks: str = "all",
  key: jax.Array | None = None,
  max_iter: int = 50,
  grad_tol: float = 1e-5,
) -> FitResult:
  """The k-MPLE theta_hat = argmin of the k-pseudolikelihood loss on samples[B, N] in {-1,+1}.

  masks="all": each sample's loss is averaged over all C(N, k) blocks (deterministic).
  masks="sampled": sample b gets one block K_b ~ Unif (drawn with `key`), as in Definition 2.
  k = N is maximum likelihood (one block, the whole sequence). Newton from theta = 0, float32.
  """
  x_RN, w_RM = mask_table(samples_BN, k, masks, key)
  return _fit_table(
    jnp.asarray(x_RN), jnp.asarray(w_RM), k=int(k), max_iter=max_iter, grad_tol=grad_tol
  )


def fit_weighted_mple(
  samples_BN,
  block_list: Sequence[Sequence[int]],
  p_K: Sequence[float],
  *,
  max_iter: int = 50,
  grad_tol: float = 1e-5,
) -> FitResult:
  """Definition 2's estimator with the expectation over K ~ p_K taken exactly per sample."""
  x = check_samples(samples_BN)
  n = x.shape[1]
  for K in block_list:
    if len(K) == 0 or len(set(K)) != len(K) or not all(0 <= int(i) < n for i in K):
      raise ValueError(
        f"each block must be a non-empty set of distinct sites in [0, {n}), got {K!r}"
      )
  x_RN, c_R = np.unique(x.astype(np.int8), axis=0, return_counts=True)
  x_RN, w_R = jnp.asarray(x_RN), jnp.asarray(c_R, jnp.float32)
  loss_fn = jax.jit(lambda theta: weighted_pl_loss(theta, x_RN, block_list, p_K, w_R))
  return jax.jit(lambda t0: newton_minimize(loss_fn, t0, max_iter=max_iter, grad_tol=grad_tol))(
    jnp.zeros((num_params(n),), jnp.float32)
  )


# ----------------------------------------------------------------------------- data


def exact_samples(key: jax.Array, model: Ising, num: int) -> jnp.ndarray:
  """num i.i.d. exact samples int8[num, N] from p(x) proportional to exp(phi(x)), by enumeration."""
  if not isinstance(num, (int, np.integer)) or num < 1:
    raise ValueError(f"number of samples must be a positive integer, got {num!r}")
  phi_S = exact_log_potentials(model)
  logp_S = jnp.asarray(
    phi_S - phi_S.max() - np.log(np.sum(np.exp(phi_S - phi_S.max()))), jnp.float32
  )
  idx_B = jax.random.categorical(key, logp_S, shape=(int(num),))
  return jnp.asarray(all_states(model.n))[idx_B]


__all__ = [
  "MASK_MODES",
  "FitResult",
  "num_params",
  "to_theta",
  "from_theta",
  "unpack",
  "sufficient_statistics",
  "check_samples",
  "block_array",
  "log_conditional",
  "all_block_log_conditionals",
  "weighted_pl_loss",
  "kpl_loss",
  "sampled_kpl_loss",
  "sample_masks",
  "table_loss",
  "mask_table",
  "newton_minimize",
  "fit_kmple",
  "fit_weighted_mple",
  "exact_samples",
]
