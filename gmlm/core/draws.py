"""Draws from logits: categorical draws by inverting the CDF, tempering and top-k / top-p.

`categorical` spends one uniform per draw (Gumbel-max needs V of them). `draw_joint` is the
Gibbs block update (one draw from the joint conditional over the block's configurations);
`draw_product` draws each block site independently from its own conditional (the parallel /
independent sampler, NOT a Gibbs kernel for k > 1). `temper` turns raw scores into the
log-probabilities of p^T ∝ exp(s / T), truncated to the top-k / top-p set; T = 0 is argmax
(ties uniform) and T = inf uniform, with no NaN at either end.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from gmlm.core.blocks import write_block


def _invert_cdf(p_RV: jax.Array, u_R: jax.Array) -> jax.Array:
  """Smallest index whose cumulative mass exceeds u * total, clipped to the last index of
  positive mass (float rounding can push u * total past it)."""
  V = p_RV.shape[-1]
  cdf_RV = jnp.cumsum(p_RV, axis=-1)
  idx_R = jnp.sum(cdf_RV <= (u_R * cdf_RV[:, -1])[:, None], axis=-1)
  last_positive_R = V - 1 - jnp.argmax(jnp.flip(p_RV > 0, axis=-1), axis=-1)
  return jnp.minimum(idx_R, last_positive_R)


def _two_level_draw(z_RV: jax.Array, u_R: jax.Array) -> jax.Array:
  """Inverse-CDF draw from softmax(z) in two levels, read straight from the logits: pick a
  block of ~sqrt(V) entries by its mass, then an entry inside it. Two passes over z (its max,
  then the blocks' masses of exp(z - max), the last block the V mod b left over) and work of
  ~sqrt(V) per row after them; no normalised [R, V] array is written (at V = 30,522 each such
  pass is a large share of a masked LM's sampler: README, unmasking speed). XLA's CPU cumsum
  is superlinear (2.4 s for 1000 x 30522 in one level), hence the two levels."""
  R, V = z_RV.shape
  b = int(np.ceil(np.sqrt(V)))
  full = V // b
  m_R = jax.lax.stop_gradient(jnp.max(z_RV, axis=-1))
  mass_RN = jnp.exp(z_RV[:, : full * b].reshape(R, full, b) - m_R[:, None, None]).sum(-1)
  if V > full * b:
    rest_R1 = jnp.exp(z_RV[:, full * b :] - m_R[:, None]).sum(-1, keepdims=True)
    mass_RN = jnp.concatenate([mass_RN, rest_R1], axis=-1)
  nb = mass_RN.shape[-1]
  cdf_RN = jnp.cumsum(mass_RN, axis=-1)
  target_R = u_R * cdf_RN[:, -1]
  blk_R = jnp.sum(cdf_RN <= target_R[:, None], axis=-1)
  last_blk_R = nb - 1 - jnp.argmax(jnp.flip(mass_RN > 0, axis=-1), axis=-1)
  blk_R = jnp.minimum(blk_R, last_blk_R)
  below_R = (
    jnp.take_along_axis(cdf_RN, blk_R[:, None], axis=-1)[:, 0]
    - jnp.take_along_axis(mass_RN, blk_R[:, None], axis=-1)[:, 0]
  )
  idx_Rb = blk_R[:, None] * b + jnp.arange(b)[None]
  inner_Rb = jnp.take_along_axis(z_RV, jnp.minimum(idx_Rb, V - 1), axis=-1)
  inner_Rb = jnp.where(idx_Rb < V, jnp.exp(inner_Rb - m_R[:, None]), 0.0)
  mass_R = inner_Rb.sum(-1)
  u_in_R = jnp.clip((target_R - below_R) / jnp.where(mass_R > 0, mass_R, 1.0), 0.0, 1.0)
  return blk_R * b + _invert_cdf(inner_Rb, u_in_R)


def argmax(x_XV: jax.Array) -> jax.Array:
  """jnp.argmax(x, -1) as int32: the first index of the maximum (the first NaN if a row has
  one), in two plain reductions. XLA's CPU backend lowers jnp.argmax to a variadic (value,
  index) reduction that is 3x slower at a decoder's [64, 176] logits (64 vs 21 us, 2026-11-27):
  a greedy or CTC decode at batch 1 pays it on every pass or step."""
  V = x_XV.shape[-1]
  nan_XV = jnp.isnan(x_XV)
  top_XV = x_XV == jnp.max(x_XV, axis=-1, keepdims=True)  # the CPU's max may skip a NaN
  hit_XV = jnp.where(jnp.any(nan_XV, axis=-1, keepdims=True), nan_XV, top_XV)
  return jnp.min(jnp.where(hit_XV, jnp.arange(V, dtype=jnp.int32), V), axis=-1)


def categorical(key: jax.Array, logits_BXV: jax.Array) -> jax.Array:
  """Index draws from softmax(logits) along the last axis, by inversion of the CDF.

  One uniform per draw (Gumbel-max needs V of them, 4x slower here at V = 64); the law is
  the same up to float32 rounding of the CDF.
  """
  batch_shape = logits_BXV.shape[:-1]
  u_BX = jax.random.uniform(key, (math.prod(batch_shape),), dtype=jnp.float32).reshape(batch_shape)
  return categorical_from_uniform(u_BX, logits_BXV)


def categorical_from_uniform(u_BX: jax.Array, logits_BXV: jax.Array) -> jax.Array:
  """The draw of `categorical` given its uniforms u[B, X] in [0, 1)."""
  logits_BXV = logits_BXV.astype(jnp.float32)
  V = logits_BXV.shape[-1]
  if V == 2:
    diff = logits_BXV[..., 1] - logits_BXV[..., 0]
    return (u_BX < jax.nn.sigmoid(diff)).astype(jnp.int32)
  batch_shape = logits_BXV.shape[:-1]
  z_RV = logits_BXV.reshape(-1, V)
  if V <= 64:
    idx_R = _invert_cdf(jax.nn.softmax(z_RV, axis=-1), u_BX.reshape(-1))
  else:
    idx_R = _two_level_draw(z_RV, u_BX.reshape(-1))
  return idx_R.astype(jnp.int32).reshape(batch_shape)


def draw_joint(
  key: jax.Array, x_BN: jax.Array, sites_BK: jax.Array, logits_BC: jax.Array, configs_CK: jax.Array
) -> jax.Array:
  """Gibbs block update: one draw from the joint conditional over the C configurations of
  the block (configs_CK[c] are the k values written at sites_BK)."""
  c_B = categorical(key, logits_BC)
  return write_block(x_BN, sites_BK, configs_CK[c_B])


def draw_product(
  key: jax.Array,
  x_BN: jax.Array,
  sites_BK: jax.Array,
  logits_BKV: jax.Array,
  values_V: jax.Array | None = None,
) -> jax.Array:
  """Product update: each block site drawn independently from its own conditional given
  the current state (values_V maps the drawn index to the value written; None = identity)."""
  idx_BK = categorical(key, logits_BKV)
  new_BK = idx_BK if values_V is None else values_V[idx_BK]
  return write_block(x_BN, sites_BK, new_BK)


def temper(s_XC: jax.Array, temperature: float, top_k: int = 0, top_p: float = 1.0) -> jax.Array:
  """log p^T over the last axis, p^T ∝ exp(s / T), -inf outside the top-k / top-p set.

  T = 0 is argmax (ties uniform), T = inf uniform; top_k = 0 and top_p = 1 switch truncation
  off. Computed in float32 whatever the dtype of the scores.
  """
  s_XC = s_XC.astype(jnp.float32)
  T = temperature
  if T == 0.0:
    z_XC = jnp.where(s_XC == s_XC.max(-1, keepdims=True), 0.0, -jnp.inf)
  elif math.isinf(T):
    z_XC = jnp.zeros_like(s_XC)
  else:
    z_XC = s_XC / jnp.float32(T)
  C = z_XC.shape[-1]
  if 0 < top_k < C:
    kth_X1 = jax.lax.top_k(z_XC, top_k)[0][..., -1:]
    z_XC = jnp.where(z_XC >= kth_X1, z_XC, -jnp.inf)
  if top_p < 1.0:
    sorted_XC = -jnp.sort(-z_XC, axis=-1)
    p_sorted_XC = jax.nn.softmax(sorted_XC, axis=-1)
    before_XC = jnp.cumsum(p_sorted_XC, axis=-1) - p_sorted_XC  # mass strictly above
    kept_XC = before_XC < top_p
    floor_X1 = jnp.min(jnp.where(kept_XC, sorted_XC, jnp.inf), axis=-1, keepdims=True)
    z_XC = jnp.where(z_XC >= floor_X1, z_XC, -jnp.inf)
  return jax.nn.log_softmax(z_XC, axis=-1)
