"""Block dynamics over a conditional oracle: the one kernel design behind every sampler here.

A step of block dynamics (PaDIR paper, Definition 6) on a batch of chains x[B, N]:
  1. choose a block of sites per chain           (`random_blocks`, `sweep_blocks`, `all_sites`)
  2. ask a conditional oracle for its logits      (Ising: exact block conditionals; MLM: the
                                                   masked-LM head at the masked sites; PaDIR:
                                                   the decoder at every target position)
  3. draw the block's new values and write them  (`draw_joint`: one draw from the joint
                                                   conditional of the block = Gibbs;
                                                   `draw_product`: each site independently =
                                                   the parallel / independent sampler, which
                                                   is NOT a Gibbs kernel for k > 1)

Glauber is k = 1 (joint and product coincide). The oracle and the scan loop live with each
model; these functions are pure and jittable, and all randomness comes from explicit keys.
Random numbers are drawn with global shapes [B, ...], so with JAX's partitionable threefry
the same key gives the same chains however the batch axis is sharded.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def random_blocks(key: jax.Array, num_chains: int, num_sites: int, k: int) -> jax.Array:
  """Uniformly random k-subsets of range(num_sites), one per chain: int32[B, k]."""
  if not 1 <= k <= num_sites:
    raise ValueError(f"block size k must be in [1, {num_sites}], got k={k}")
  if k == 1:
    return jax.random.randint(key, (num_chains, 1), 0, num_sites, dtype=jnp.int32)
  if k == num_sites:
    return all_sites(num_chains, num_sites)
  # The k largest of n i.i.d. uniforms sit at a uniformly random k-subset of positions.
  noise_BN = jax.random.uniform(key, (num_chains, num_sites))
  return jax.lax.top_k(noise_BN, k)[1].astype(jnp.int32)


def sweep_blocks(step: jax.Array, num_chains: int, num_sites: int, k: int) -> jax.Array:
  """Systematic sweep: step t updates sites (t*k .. t*k+k-1) mod n in every chain."""
  sites_K = (step * k + jnp.arange(k)) % num_sites
  return jnp.broadcast_to(sites_K.astype(jnp.int32), (num_chains, k))


def all_sites(num_chains: int, num_sites: int) -> jax.Array:
  return jnp.broadcast_to(jnp.arange(num_sites, dtype=jnp.int32), (num_chains, num_sites))


def _invert_cdf(p_RV: jax.Array, u_R: jax.Array) -> jax.Array:
  """Smallest index whose cumulative mass exceeds u * total, clipped to the last index of
  positive mass (float rounding can push u * total past it)."""
  V = p_RV.shape[-1]
  cdf_RV = jnp.cumsum(p_RV, axis=-1)
  idx_R = jnp.sum(cdf_RV <= (u_R * cdf_RV[:, -1])[:, None], axis=-1)
  last_positive_R = V - 1 - jnp.argmax(jnp.flip(p_RV > 0, axis=-1), axis=-1)
  return jnp.minimum(idx_R, last_positive_R)


def _two_level_draw(p_RV: jax.Array, u_R: jax.Array) -> jax.Array:
  """Inverse-CDF draw in two levels: pick a block of ~sqrt(V) entries by its mass, then an
  entry inside it. O(V) work with cumsums of length ~sqrt(V) (XLA's CPU cumsum is
  superlinear: 2.4 s for 1000 x 30522 in one level)."""
  R, V = p_RV.shape
  b = int(np.ceil(np.sqrt(V)))
  nb = -(-V // b)
  p_RNb = jnp.pad(p_RV, ((0, 0), (0, nb * b - V))).reshape(R, nb, b)
  mass_RN = p_RNb.sum(-1)
  total_R = mass_RN.sum(-1)
  cdf_RN = jnp.cumsum(mass_RN, axis=-1)
  target_R = u_R * total_R
  blk_R = jnp.sum(cdf_RN <= target_R[:, None], axis=-1)
  last_blk_R = nb - 1 - jnp.argmax(jnp.flip(mass_RN > 0, axis=-1), axis=-1)
  blk_R = jnp.minimum(blk_R, last_blk_R)
  below_R = jnp.take_along_axis(cdf_RN, blk_R[:, None], axis=-1)[:, 0] - \
      jnp.take_along_axis(mass_RN, blk_R[:, None], axis=-1)[:, 0]
  inner_Rb = jnp.take_along_axis(p_RNb, blk_R[:, None, None], axis=1)[:, 0]
  mass_R = inner_Rb.sum(-1)
  u_in_R = jnp.clip((target_R - below_R) / jnp.where(mass_R > 0, mass_R, 1.0), 0.0, 1.0)
  return blk_R * b + _invert_cdf(inner_Rb, u_in_R)


def categorical(key: jax.Array, logits_BXV: jax.Array) -> jax.Array:
  """Index draws from softmax(logits) along the last axis, by inversion of the CDF.

  One uniform per draw (Gumbel-max needs V of them, 4x slower here at V = 64); the law is
  the same up to float32 rounding of the CDF.
  """
  logits_BXV = logits_BXV.astype(jnp.float32)
  V = logits_BXV.shape[-1]
  if V == 2:
    diff = logits_BXV[..., 1] - logits_BXV[..., 0]
    u = jax.random.uniform(key, diff.shape, dtype=diff.dtype)
    return (u < jax.nn.sigmoid(diff)).astype(jnp.int32)
  batch_shape = logits_BXV.shape[:-1]
  p_RV = jax.nn.softmax(logits_BXV.reshape(-1, V), axis=-1)
  u_R = jax.random.uniform(key, p_RV.shape[:1], dtype=p_RV.dtype)
  draw = _invert_cdf if V <= 64 else _two_level_draw
  return draw(p_RV, u_R).astype(jnp.int32).reshape(batch_shape)


def write_block(x_BN: jax.Array, sites_BK: jax.Array, new_BK: jax.Array) -> jax.Array:
  rows_B1 = jnp.arange(x_BN.shape[0])[:, None]
  return x_BN.at[rows_B1, sites_BK].set(new_BK.astype(x_BN.dtype))


def draw_joint(key: jax.Array, x_BN: jax.Array, sites_BK: jax.Array, logits_BC: jax.Array,
               configs_CK: jax.Array) -> jax.Array:
  """Gibbs block update: one draw from the joint conditional over the C configurations of
  the block (configs_CK[c] are the k values written at sites_BK)."""
  c_B = categorical(key, logits_BC)
  return write_block(x_BN, sites_BK, configs_CK[c_B])


def draw_product(key: jax.Array, x_BN: jax.Array, sites_BK: jax.Array, logits_BKV: jax.Array,
                 values_V: jax.Array | None = None) -> jax.Array:
  """Product update: each block site drawn independently from its own conditional given
  the current state (values_V maps the drawn index to the value written; None = identity)."""
  idx_BK = categorical(key, logits_BKV)
  new_BK = idx_BK if values_V is None else values_V[idx_BK]
  return write_block(x_BN, sites_BK, new_BK)


def step_key(key: jax.Array, step: jax.Array) -> jax.Array:
  """The key of global step t: resuming at step t continues the same random stream."""
  return jax.random.fold_in(key, step)
