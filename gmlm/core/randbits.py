"""Raw random words: every random number of a sampler step from one array of uint32 words.

One Threefry-2x32 hash yields two independent uniform 32-bit words; jax.random.bits keeps
their XOR (one word per hash), jax.random.randint spends two hashes on one index and
jax.random.uniform one hash on 23 bits. The functions below draw every random number of a
sampler step from one array of words (one hash per two words), which is what makes a
Glauber step cost one hash per chain instead of three.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

# Index draws below use 32-bit integer arithmetic (multiply-shift on 16-bit halves).
MAX_WORD_INDEX_RANGE = 2**16


def _threefry_key_data(key: jax.Array) -> jax.Array | None:
  if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
    return jax.random.key_data(key) if str(jax.random.key_impl(key)) == "threefry2x32" else None
  if (
    key.dtype == jnp.uint32
    and key.shape == (2,)
    and jax.config.jax_default_prng_impl == "threefry2x32"
  ):
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
    for s_B in taken:  # skip the taken sites, smallest first
      r_B = r_B + (r_B >= s_B).astype(jnp.int32)
    sites.append(r_B)
    carry_B, merged = r_B, []
    for s_B in taken:  # insert r_B into the sorted list
      merged.append(jnp.minimum(s_B, carry_B))
      carry_B = jnp.maximum(s_B, carry_B)
    taken = merged + [carry_B]
  return jnp.stack(sites, axis=-1)
