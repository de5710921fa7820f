"""Ising models over x in {-1,+1}^N and their exact enumeration.

Convention (PaDIR paper, eq. 5): the log-potential sums the couplings over *ordered* pairs,

    phi(x) = sum_i h_i x_i + sum_{i != j} J_ij x_i x_j = h.x + x^T J x,

with J symmetric and zero on the diagonal, so the clique model of eq. (5) is simply
J_ij = J for i != j inside the clique. The single-site conditional is then

    p(x_i = +1 | x_-i) = sigmoid(2 * f_i(x)),   f_i(x) = h_i + 2 sum_j J_ij x_j.

States are indexed by bits: index s <-> x with x_i = +1 iff bit i of s is set.
Exact routines run in float64 numpy; samplers run in float32 JAX.
"""

from __future__ import annotations

import itertools

import flax
import jax.numpy as jnp
import numpy as np

MAX_ENUMERATION_N = 20


@flax.struct.dataclass
class Ising:
  h: jnp.ndarray  # [N] fields
  J: jnp.ndarray  # [N, N] symmetric couplings, zero diagonal

  @property
  def n(self) -> int:
    return int(self.h.shape[0])


def ising(h, J) -> Ising:
  """Builds a validated Ising model (float32) from fields h[N] and couplings J[N, N]."""
  h_N = np.asarray(h, dtype=np.float64)
  J_NN = np.asarray(J, dtype=np.float64)
  if h_N.ndim != 1 or h_N.shape[0] < 1:
    raise ValueError(f"h must be a non-empty vector [N], got shape {h_N.shape}")
  n = h_N.shape[0]
  if J_NN.shape != (n, n):
    raise ValueError(f"J must have shape [N, N] = [{n}, {n}] to match h, got {J_NN.shape}")
  if not (np.all(np.isfinite(h_N)) and np.all(np.isfinite(J_NN))):
    raise ValueError("h and J must be finite (found NaN or inf)")
  asym = np.max(np.abs(J_NN - J_NN.T))
  if asym > 1e-6 * max(1.0, np.max(np.abs(J_NN))):
    raise ValueError(
      f"J must be symmetric; max |J - J^T| = {asym:.3g}. Pass (J + J.T) / 2 if you meant that."
    )
  diag = np.max(np.abs(np.diag(J_NN)))
  if diag != 0.0:
    raise ValueError(
      f"J must have a zero diagonal (x_i^2 = 1 is a constant); max |J_ii| = {diag:.3g}"
    )
  return Ising(h=jnp.asarray(h_N, jnp.float32), J=jnp.asarray((J_NN + J_NN.T) / 2, jnp.float32))


def clique_model(
  n: int, clique_size: int, coupling: float, field_in: float, field_out: float = 0.0
) -> Ising:
  """PaDIR eq. (5): a clique C = {0..|C|-1} with coupling J on each ordered pair i != j in C.

  Sites inside C get field `field_in`, the N - |C| independent sites get `field_out`
  (0 gives Assumption 5's 'fields only in C' variant; field_out = field_in gives h_i = h for all i).
  """
  if not 1 <= clique_size <= n:
    raise ValueError(f"clique_size must be in [1, N={n}], got {clique_size}")
  h_N = np.full(n, float(field_out))
  h_N[:clique_size] = field_in
  J_NN = np.zeros((n, n))
  J_NN[:clique_size, :clique_size] = coupling
  np.fill_diagonal(J_NN, 0.0)
  return ising(h_N, J_NN)


def in_clique_mode(x_BN, clique_size: int, sign: int = 1):
  """R_1 (sign=+1, eq. 6) / R_-1 (sign=-1, eq. 7): every clique spin equals `sign`."""
  return jnp.all(x_BN[..., :clique_size] == sign, axis=-1)


def log_potential(model: Ising, x_BN) -> jnp.ndarray:
  """phi(x) = h.x + x^T J x for a batch of states x[B, N] in {-1,+1}."""
  x = jnp.asarray(x_BN, jnp.float32)
  return jnp.einsum("bn,n->b", x, model.h) + jnp.einsum("bn,nm,bm->b", x, model.J, x)


def local_fields(model: Ising, x_BN) -> jnp.ndarray:
  """f_i(x) = h_i + 2 sum_j J_ij x_j, so that logit p(x_i=+1|x_-i) = 2 f_i."""
  return model.h + 2.0 * jnp.einsum("bm,nm->bn", jnp.asarray(x_BN, jnp.float32), model.J)


# ----------------------------------------------------------------------------- exact (numpy)


def check_enumerable(n: int, limit: int = MAX_ENUMERATION_N) -> None:
  if n > limit:
    raise ValueError(
      f"exact enumeration needs 2^N states; N={n} exceeds the limit N <= {limit}. "
      "Use the samplers for larger models."
    )


def block_configs(k: int) -> np.ndarray:
  """All 2^k spin configurations of k sites as int8[C = 2^k, k] in {-1,+1}, row c having
  spin a = +1 iff bit a of c is set (the state indexing above, for a block or a whole model)."""
  c_C = np.arange(2**k, dtype=np.int64)
  bits_CK = (c_C[:, None] >> np.arange(k)[None, :]) & 1
  return (2 * bits_CK - 1).astype(np.int8)


def all_states(n: int, limit: int = MAX_ENUMERATION_N) -> np.ndarray:
  """All 2^n states as int8[2^n, n] in {-1,+1}, row s having x_i = +1 iff bit i of s is set."""
  check_enumerable(n, limit)
  return block_configs(n)


def state_index(x_BN) -> np.ndarray:
  """Inverse of all_states: int64 index of each state x[B, N] in {-1,+1}."""
  x = np.asarray(x_BN)
  return ((x > 0).astype(np.int64) << np.arange(x.shape[-1])).sum(-1)


def numpy_params(model: Ising) -> tuple[np.ndarray, np.ndarray]:
  return np.asarray(model.h, np.float64), np.asarray(model.J, np.float64)


def exact_log_potentials(model: Ising, limit: int = MAX_ENUMERATION_N) -> np.ndarray:
  h, J = numpy_params(model)
  x = all_states(model.n, limit).astype(np.float64)
  return x @ h + np.einsum("sn,nm,sm->s", x, J, x)


def exact_distribution(model: Ising, limit: int = MAX_ENUMERATION_N) -> np.ndarray:
  """The normalized distribution p(x) over all 2^N states (float64, indexed as all_states)."""
  phi = exact_log_potentials(model, limit)
  p = np.exp(phi - phi.max())
  return p / p.sum()


def blocks(n: int, k: int) -> list[tuple[int, ...]]:
  """All k-subsets of [n] (the blocks of k-Gibbs / k-pseudolikelihood)."""
  check_block_size(n, k)
  return list(itertools.combinations(range(n), k))


def check_block_size(n: int, k: int) -> None:
  if not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
    raise ValueError(f"block size k must be an integer in [1, N={n}], got k={k!r}")
