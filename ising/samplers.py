"""Samplers on Ising models: k-Gibbs (eq. 3), Glauber (k = 1) and the independent parallel
sampler (eq. 4), as block dynamics over the exact Ising conditional oracle.

All run thousands of chains at once (batched over the leading axis), step with a jitted
`lax.scan`, and can shard the chains over a device mesh axis. Step t uses the key
`fold_in(key, t)`, so the same key gives the same chains on 1 or 8 devices, and a run split
into pieces (start_step) equals one run in a single piece.
"""

from __future__ import annotations

import functools
from typing import Callable, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from glauber import kernel
from ising.model import Ising, check_block_size

Method = Literal["gibbs", "parallel"]
METHODS = ("gibbs", "parallel")
SPIN_VALUES = jnp.array([-1, 1], jnp.int8)


def block_configs(k: int) -> jax.Array:
  """All 2^k spin configurations of a block, int8[2^k, k] (bit a of c <-> spin a)."""
  c = np.arange(2 ** k)[:, None]
  return jnp.asarray(2 * ((c >> np.arange(k)[None, :]) & 1) - 1, jnp.int8)


def block_logits(model: Ising, x_BN: jax.Array, sites_BK: jax.Array, configs_CK: jax.Array):
  """Exact joint conditional of each chain's block: logits over its 2^k configurations.

  log p(x_K = y | x_-K) = sum_a y_a e_a + sum_{a != b} J_{K_a K_b} y_a y_b + const, with the
  external field e_a = h_{K_a} + 2 sum_{j not in K} J_{K_a j} x_j.
  """
  x_BN = x_BN.astype(jnp.float32)
  y_CK = configs_CK.astype(jnp.float32)
  J_BKN = model.J[sites_BK]                                         # rows of the block sites
  J_BKK = jnp.take_along_axis(J_BKN, sites_BK[:, None, :], axis=2)  # couplings inside the block
  x_BK = jnp.take_along_axis(x_BN, sites_BK, axis=1)
  e_BK = (model.h[sites_BK] + 2.0 * jnp.einsum("bkn,bn->bk", J_BKN, x_BN)
          - 2.0 * jnp.einsum("bkl,bl->bk", J_BKK, x_BK))
  k = configs_CK.shape[1]
  yy_CP = jnp.einsum("ck,cl->ckl", y_CK, y_CK).reshape(-1, k * k)   # P = k*k pairs
  return (jnp.einsum("ck,bk->bc", y_CK, e_BK)
          + jnp.einsum("cp,bp->bc", yy_CP, J_BKK.reshape(-1, k * k)))


def site_logits(model: Ising, x_BN: jax.Array) -> jax.Array:
  """Single-site conditionals of every site given the rest: logits[B, N, 2] over (-1, +1)."""
  f_BN = model.h + 2.0 * jnp.einsum("bm,nm->bn", x_BN.astype(jnp.float32), model.J)
  return jnp.stack([-f_BN, f_BN], axis=-1)


def make_step(method: Method, k: int, n: int) -> Callable:
  """One step x_t -> x_{t+1} as a pure function step(key, model, x_BN)."""
  if method == "gibbs":
    check_block_size(n, k)
    configs_CK = block_configs(k)

    def step(key, model, x_BN):
      k_sites, k_draw = jax.random.split(key)
      sites_BK = kernel.random_blocks(k_sites, x_BN.shape[0], n, k)
      logits_BC = block_logits(model, x_BN, sites_BK, configs_CK)
      return kernel.draw_joint(k_draw, x_BN, sites_BK, logits_BC, configs_CK)
  elif method == "parallel":
    def step(key, model, x_BN):
      sites_BN = kernel.all_sites(x_BN.shape[0], n)
      return kernel.draw_product(key, x_BN, sites_BN, site_logits(model, x_BN), SPIN_VALUES)
  else:
    raise ValueError(f"unknown sampler method {method!r}; choose one of {METHODS}")
  return step


def _check_chains(model: Ising, x0_BN) -> None:
  if x0_BN.ndim != 2 or x0_BN.shape[1] != model.n:
    raise ValueError(f"initial states must have shape [num_chains, N={model.n}], got {x0_BN.shape}")
  if x0_BN.shape[0] < 1:
    raise ValueError("num_chains must be >= 1, got 0 chains")


def chain_sharding(mesh: Mesh | None, axis: str = "data") -> NamedSharding | None:
  return None if mesh is None else NamedSharding(mesh, P(axis, None))


def _constrain(x, sharding):
  return x if sharding is None else jax.lax.with_sharding_constraint(x, sharding)


@functools.partial(jax.jit, static_argnames=("num_steps", "method", "k", "sharding"))
def _run(key, model, x0_BN, start_step, *, num_steps, method, k, sharding):
  step = make_step(method, k, model.n)

  def body(x_BN, t):
    x_BN = step(kernel.step_key(key, t), model, x_BN)
    return _constrain(x_BN, sharding), None

  x_BN, _ = jax.lax.scan(body, _constrain(x0_BN, sharding), start_step + jnp.arange(num_steps))
  return x_BN


def sample(key: jax.Array, model: Ising, x0_BN, num_steps: int, *, method: Method = "gibbs",
           k: int = 1, start_step: int = 0, mesh: Mesh | None = None) -> jax.Array:
  """Runs num_steps steps of the sampler from x0[B, N] in {-1,+1}; returns the final states.

  `start_step` continues a run: sample(.., n1 + n2) == sample(sample(.., n1), n2, start_step=n1).
  """
  x0_BN = jnp.asarray(x0_BN, jnp.int8)
  _check_chains(model, x0_BN)
  if num_steps < 0:
    raise ValueError(f"num_steps must be >= 0, got {num_steps}")
  make_step(method, k, model.n)  # validates method and k eagerly
  sharding = chain_sharding(mesh)
  if sharding is not None:
    x0_BN = jax.device_put(x0_BN, sharding)
  return _run(key, model, x0_BN, jnp.int32(start_step), num_steps=num_steps, method=method, k=k,
              sharding=sharding)


@functools.partial(jax.jit, static_argnames=("num_steps", "method", "k", "clique_size", "sharding"))
def _hitting(key, model, x0_BN, *, num_steps, method, k, clique_size, sharding):
  step = make_step(method, k, model.n)

  def body(carry, t):
    x_BN, hit_B = carry
    x_BN = _constrain(step(kernel.step_key(key, t), model, x_BN), sharding)
    reached_B = jnp.all(x_BN[:, :clique_size] == 1, axis=1)
    hit_B = jnp.where((hit_B < 0) & reached_B, t + 1, hit_B)
    return (x_BN, hit_B), None

  hit0_B = jnp.full(x0_BN.shape[:1], -1, jnp.int32)
  (_, hit_B), _ = jax.lax.scan(body, (_constrain(x0_BN, sharding), hit0_B), jnp.arange(num_steps))
  return hit_B


def hitting_times_to_mode(key: jax.Array, model: Ising, x0_BN, clique_size: int, num_steps: int, *,
                          method: Method = "gibbs", k: int = 1,
                          mesh: Mesh | None = None) -> jax.Array:
  """First step t in [1, num_steps] at which each chain is in R_1 (all clique spins +1, eq. 6);
  -1 for chains that never get there within the budget."""
  x0_BN = jnp.asarray(x0_BN, jnp.int8)
  _check_chains(model, x0_BN)
  if not 1 <= clique_size <= model.n:
    raise ValueError(f"clique_size must be in [1, N={model.n}], got {clique_size}")
  make_step(method, k, model.n)
  sharding = chain_sharding(mesh)
  if sharding is not None:
    x0_BN = jax.device_put(x0_BN, sharding)
  return _hitting(key, model, x0_BN, num_steps=num_steps, method=method, k=k,
                  clique_size=clique_size, sharding=sharding)


def random_states(key: jax.Array, num_chains: int, n: int) -> jax.Array:
  if num_chains < 1:
    raise ValueError(f"num_chains must be >= 1, got {num_chains}")
  return (2 * jax.random.bernoulli(key, 0.5, (num_chains, n)).astype(jnp.int8) - 1)


def mode_states(num_chains: int, n: int, clique_size: int, sign: int, key: jax.Array | None = None):
  """States in R_sign: clique spins fixed to `sign`, the others uniform (or all `sign` if no key)."""
  if num_chains < 1:
    raise ValueError(f"num_chains must be >= 1, got {num_chains}")
  if key is None:
    x = jnp.full((num_chains, n), sign, jnp.int8)
  else:
    x = random_states(key, num_chains, n)
  return x.at[:, :clique_size].set(jnp.int8(sign))
