"""Blocks of sites: which sites a step of block dynamics updates, and writing their new values.

A step of block dynamics (PaDIR paper, Definition 6) on a batch of chains x[B, N] chooses a
block of k sites per chain (uniformly at random, by a systematic sweep, or all sites), asks a
conditional oracle for the block's logits and writes the drawn values (`gmlm.core.draws`).
Glauber dynamics is k = 1. Every function here is pure and jittable; randomness comes from
explicit keys, drawn with global shapes [B, ...] so that the same key gives the same blocks
however the chain axis is sharded.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


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


def write_block(x_BN: jax.Array, sites_BK: jax.Array, new_BK: jax.Array) -> jax.Array:
  rows_B1 = jnp.arange(x_BN.shape[0])[:, None]
  return x_BN.at[rows_B1, sites_BK].set(new_BK.astype(x_BN.dtype))


def step_key(key: jax.Array, step: jax.Array) -> jax.Array:
  """The key of global step t: resuming at step t continues the same random stream."""
  return jax.random.fold_in(key, step)
