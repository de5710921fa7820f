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

import math

import jax
import jax.numpy as jnp
import numpy as np

# Index draws below use 32-bit integer arithmetic (multiply-shift on 16-bit halves).
MAX_WORD_INDEX_RANGE = 2 ** 16


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
  p_RV = jax.nn.softmax(logits_BXV.reshape(-1, V), axis=-1)
  draw = _invert_cdf if V <= 64 else _two_level_draw
  return draw(p_RV, u_BX.reshape(-1)).astype(jnp.int32).reshape(batch_shape)


# ----------------------------------------------------------------------------- raw random words
# One Threefry-2x32 hash yields two independent uniform 32-bit words; jax.random.bits keeps
# their XOR (one word per hash), jax.random.randint spends two hashes on one index and
# jax.random.uniform one hash on 23 bits. The functions below draw every random number of a
# sampler step from one array of words (one hash per two words), which is what makes a
# Glauber step cost one hash per chain instead of three.

def _threefry_key_data(key: jax.Array) -> jax.Array | None:
  if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
    return jax.random.key_data(key) if str(jax.random.key_impl(key)) == "threefry2x32" else None
  if key.dtype == jnp.uint32 and key.shape == (2,) and jax.config.jax_default_prng_impl == "threefry2x32":
    return key  # legacy raw threefry key
  return None


_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry2x32(k0: jax.Array, k1: jax.Array, x0: jax.Array, x1: jax.Array):
  """Threefry-2x32 with 20 rounds (Salmon et al., SC 2011): key (k0, k1), counters (x0, x1).

  Written out round by round so that XLA fuses the whole hash into one elementwise loop.
  JAX's own CPU lowering rolls the rounds into a while loop, which was ~8x slower per hash
  here. The bits equal jax.extend.random.threefry_2x32's (tested).
  """
  def rotl(x, r):
    return (x << jnp.uint32(r)) | (x >> jnp.uint32(32 - r))

  ks = (k0, k1, k0 ^ k1 ^ jnp.uint32(0x1BD11BDA))
  x0, x1 = x0 + ks[0], x1 + ks[1]
  for i in range(5):
    for r in _THREEFRY_ROTATIONS[i % 2]:
      x0 = x0 + x1
      x1 = rotl(x1, r) ^ x0
    x0 = x0 + ks[(i + 1) % 3]
    x1 = x1 + ks[(i + 2) % 3] + jnp.uint32(i + 1)
  return x0, x1


def random_words(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """Independent uniform uint32 words of a global shape (any device sharding gives the same
  words: element i is a function of (key, i) only)."""
  key_data = _threefry_key_data(key)
  if key_data is None:
    return jax.random.bits(key, shape, jnp.uint32)
  size = math.prod(shape)
  half = (size + 1) // 2
  i_H = jnp.arange(half, dtype=jnp.uint32)  # hash i -> words (i, half + i)
  w0_H, w1_H = threefry2x32(key_data[0], key_data[1], i_H, i_H + jnp.uint32(half))
  return jnp.concatenate([w0_H, w1_H])[:size].reshape(shape)


def uniform_from_words(w: jax.Array) -> jax.Array:
  """Uniform float32 in [0, 1) from the top 23 bits, as jax.random.uniform builds it."""
  one_bits = jnp.uint32(0x3F800000)
  return jax.lax.bitcast_convert_type((w >> 9) | one_bits, jnp.float32) - 1.0


def index_from_words(w: jax.Array, n) -> jax.Array:
  """floor(w * n / 2^32) (Lemire's multiply-shift), in [0, n) for n < 2^16: each index has
  probability within 2^-32 of 1/n (jax.random.randint: within 2^-64, for two hashes)."""
  n = jnp.asarray(n, jnp.uint32)
  hi, lo = w >> 16, w & jnp.uint32(0xFFFF)
  return ((hi * n + ((lo * n) >> 16)) >> 16).astype(jnp.int32)


def distinct_indices_from_words(w_BK: jax.Array, n: int) -> jax.Array:
  """A uniformly random ordered k-tuple of distinct sites of range(n) per row, int32[B, k]:
  draw j is the r-th site not drawn before, r uniform in [0, n - j). Its set is a uniform
  k-subset (the law of `random_blocks`). O(k^2) elementwise work: meant for small k."""
  k = w_BK.shape[-1]
  taken = []  # the sites drawn so far, kept sorted increasingly (per row)
  sites = []
  for j in range(k):
    r_B = index_from_words(w_BK[..., j], n - j)
    for s_B in taken:          # skip the taken sites, smallest first
      r_B = r_B + (r_B >= s_B).astype(jnp.int32)
    sites.append(r_B)
    carry_B, merged = r_B, []
    for s_B in taken:          # insert r_B into the sorted list
      merged.append(jnp.minimum(s_B, carry_B))
      carry_B = jnp.maximum(s_B, carry_B)
    taken = merged + [carry_B]
  return jnp.stack(sites, axis=-1)


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
