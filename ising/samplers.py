"""Samplers on Ising models: k-Gibbs (eq. 3), Glauber (k = 1) and the independent parallel
sampler (eq. 4), as block dynamics over the exact Ising conditional oracle.

All run thousands of chains at once (batched over the leading axis), step with a jitted
`lax.scan`, and can shard the chains over a device mesh axis. Step t uses the key
`fold_in(key, t)`, so the same key gives the same chains on 1 or 8 devices, and a run split
into pieces (start_step) equals one run in a single piece.

On an accelerator a step of small chains (N = 10) is a few microseconds of work, so a loop of one
update per iteration is launch-bound (~15 us a step on an H100 for 65,536 chains): the scans
run `unroll` steps per loop iteration (lax.scan's unroll; the key of step t is still
fold_in(key, t), so the chains do not depend on it). The default, `default_unroll()`, is UNROLL
on an accelerator and 1 on a CPU, where a loop iteration costs little and unrolling measured
slower (N = 10, 4,096 chains: 19 us a step at 1, 25 at 8; 2026-11-27).
"""

from __future__ import annotations

import functools
from typing import Callable, Literal

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from gmlm.core import blocks, draws, randbits
from gmlm.core.mesh import batch_sharding, constrain
from ising.model import Ising, block_configs, check_block_size

Method = Literal["gibbs", "parallel"]
METHODS = ("gibbs", "parallel")
SPIN_VALUES = jnp.array([-1, 1], jnp.int8)
UNROLL = 8  # sampler steps per loop iteration (the module docstring)
MAX_SEQUENTIAL_BLOCK = 8  # larger blocks: top-k of N uniforms (O(k^2) sequential draws cost more)


def block_logits(model: Ising, x_BN: jax.Array, sites_BK: jax.Array, configs_CK: jax.Array):
  """Exact joint conditional of each chain's block: logits over its 2^k configurations.

  log p(x_K = y | x_-K) = sum_a y_a e_a + sum_{a != b} J_{K_a K_b} y_a y_b + const, with the
  external field e_a = h_{K_a} + 2 sum_{j not in K} J_{K_a j} x_j.
  """
  x_BN = x_BN.astype(jnp.float32)
  y_CK = configs_CK.astype(jnp.float32)
  J_BKN = model.J[sites_BK]  # rows of the block sites
  J_BKK = jnp.take_along_axis(J_BKN, sites_BK[:, None, :], axis=2)  # couplings inside the block
  x_BK = jnp.take_along_axis(x_BN, sites_BK, axis=1)
  e_BK = (
    model.h[sites_BK]
    + 2.0 * jnp.einsum("bkn,bn->bk", J_BKN, x_BN)
    - 2.0 * jnp.einsum("bkl,bl->bk", J_BKK, x_BK)
  )
  k = configs_CK.shape[1]
  yy_CP = jnp.einsum("ck,cl->ckl", y_CK, y_CK).reshape(-1, k * k)  # P = k*k pairs
  return jnp.einsum("ck,bk->bc", y_CK, e_BK) + jnp.einsum(
    "cp,bp->bc", yy_CP, J_BKK.reshape(-1, k * k)
  )


def glauber_update(model: Ising, x_BN: jax.Array, site_B: jax.Array, u_B: jax.Array) -> jax.Array:
  """The k = 1 case of block_logits + categorical_from_uniform + write_block, with the same
  law and less work: x_s <- +1 iff u < sigmoid(2 f_s), f_s = h_s + 2 sum_j J_sj x_j.

  Uses J_ss = 0 (the Ising invariant, enforced by `ising`; `_run` zeroes the diagonal before
  Gibbs steps, which leaves every block conditional unchanged)."""
  J_BN = model.J[site_B]
  f_B = model.h[site_B] + 2.0 * jnp.sum(J_BN * x_BN.astype(jnp.float32), axis=-1)
  new_B = jnp.where(u_B < jax.nn.sigmoid(2.0 * f_B), 1, -1).astype(x_BN.dtype)
  return blocks.write_block(x_BN, site_B[:, None], new_B[:, None])


def without_self_couplings(model: Ising) -> Ising:
  """The same model with J_ii = 0: x_i^2 = 1 makes J_ii a constant of phi, so no Gibbs
  conditional depends on it (a no-op for models built by `ising`)."""
  n = model.J.shape[0]
  return model.replace(J=jnp.where(jnp.eye(n, dtype=bool), 0.0, model.J))


def site_logits(model: Ising, x_BN: jax.Array) -> jax.Array:
  """Single-site conditionals of every site given the rest: logits[B, N, 2] over (-1, +1)."""
  f_BN = model.h + 2.0 * jnp.einsum("bm,nm->bn", x_BN.astype(jnp.float32), model.J)
  return jnp.stack([-f_BN, f_BN], axis=-1)


def make_step(method: Method, k: int, n: int) -> Callable:
  """One step x_t -> x_{t+1} as a pure function step(key, model, x_BN)."""
  if method == "gibbs":
    check_block_size(n, k)
    configs_CK = jnp.asarray(block_configs(k))

    if n < randbits.MAX_WORD_INDEX_RANGE and k <= MAX_SEQUENTIAL_BLOCK:
      # All of a step's randomness from one array of words: k site draws without replacement
      # and the uniform of the block draw, (k + 1) / 2 Threefry hashes per chain (3 for
      # Glauber before; k > 1 drew N uniforms for a top-k), same law.
      def step(key, model, x_BN):
        words_BW = randbits.random_words(key, (x_BN.shape[0], k + 1))
        if k == 1 and n > 1:
          return glauber_update(
            model,
            x_BN,
            randbits.index_from_words(words_BW[:, 0], n),
            randbits.uniform_from_words(words_BW[:, 1]),
          )
        if k == n:
          sites_BK = blocks.all_sites(x_BN.shape[0], n)
        else:
          sites_BK = randbits.distinct_indices_from_words(words_BW[:, :k], n)
        logits_BC = block_logits(model, x_BN, sites_BK, configs_CK)
        c_B = draws.categorical_from_uniform(randbits.uniform_from_words(words_BW[:, k]), logits_BC)
        return blocks.write_block(x_BN, sites_BK, configs_CK[c_B])
    else:

      def step(key, model, x_BN):
        k_sites, k_draw = jax.random.split(key)
        sites_BK = blocks.random_blocks(k_sites, x_BN.shape[0], n, k)
        logits_BC = block_logits(model, x_BN, sites_BK, configs_CK)
        return draws.draw_joint(k_draw, x_BN, sites_BK, logits_BC, configs_CK)
  elif method == "parallel":
    if k != 1:
      raise ValueError(
        f"method='parallel' updates all sites per step; block size k={k!r} "
        "applies to 'gibbs' only (pass k=1)"
      )

    def step(key, model, x_BN):
      sites_BN = blocks.all_sites(x_BN.shape[0], n)
      return draws.draw_product(key, x_BN, sites_BN, site_logits(model, x_BN), SPIN_VALUES)
  else:
    raise ValueError(f"unknown sampler method {method!r}; choose one of {METHODS}")
  return step


def _check_chains(model: Ising, x0_BN) -> None:
  if x0_BN.ndim != 2 or x0_BN.shape[1] != model.n:
    raise ValueError(f"initial states must have shape [num_chains, N={model.n}], got {x0_BN.shape}")
  if x0_BN.shape[0] < 1:
    raise ValueError("num_chains must be >= 1, got 0 chains")


MAX_TABLE_N = 16  # Glauber on N <= 16 spins looks its conditionals up in a 2^N x N table


def _glauber_table_codec(model: Ising, n: int):
  """Glauber on packed states: each chain is one uint32 with bit i set iff x_i = +1, and the
  conditional oracle is a table of p(x_i = +1 | x_-i) for all 2^N states (one gather per
  update). The same random words as `glauber_update` choose the site and the uniform, so the
  law is the same; it is ~6x faster at N = 10 on CPU."""
  i_N = jnp.arange(n, dtype=jnp.uint32)
  bits_SN = ((jnp.arange(2**n, dtype=jnp.uint32)[:, None] >> i_N) & 1).astype(jnp.int32)
  x_SN = (2 * bits_SN - 1).astype(jnp.float32)
  p_up = jax.nn.sigmoid(2.0 * (model.h + 2.0 * jnp.einsum("sm,nm->sn", x_SN, model.J))).reshape(-1)

  def encode(x_BN):
    return jnp.sum((x_BN > 0).astype(jnp.uint32) << i_N, axis=1, dtype=jnp.uint32)

  def decode(s_B):
    return (2 * ((s_B[:, None] >> i_N) & 1).astype(jnp.int32) - 1).astype(jnp.int8)

  def step(key, s_B):
    words_BW = randbits.random_words(key, (s_B.shape[0], 2))
    site_B = randbits.index_from_words(words_BW[:, 0], n)
    up_B = randbits.uniform_from_words(words_BW[:, 1]) < p_up[s_B.astype(jnp.int32) * n + site_B]
    bit_B = jnp.uint32(1) << site_B.astype(jnp.uint32)
    return jnp.where(up_B, s_B | bit_B, s_B & ~bit_B)

  def clique_up(s_B, clique_size):
    mask = jnp.uint32(2**clique_size - 1)
    return (s_B & mask) == mask

  return encode, step, decode, clique_up


def _codec(method: Method, k: int, model: Ising):
  """(encode, step, decode, clique_up) of the chain state carried through the scan."""
  n = model.n
  if method == "gibbs":
    model = without_self_couplings(model)
    if k == 1 and 1 < n <= MAX_TABLE_N:
      return _glauber_table_codec(model, n)
  one_step = make_step(method, k, n)
  return (
    lambda x: x,
    lambda key, x: one_step(key, model, x),
    lambda x: x,
    lambda x, c: jnp.all(x[:, :c] == 1, axis=1),
  )


def default_unroll() -> int:
  """Steps per loop iteration when a caller names none: UNROLL, or 1 on a CPU backend."""
  return 1 if jax.default_backend() == "cpu" else UNROLL


def _check_unroll(unroll: int | None) -> int:
  if unroll is None:
    return default_unroll()
  if not isinstance(unroll, int) or unroll < 1:
    raise ValueError(f"unroll must be an int >= 1 (steps per loop iteration), got {unroll!r}")
  return unroll


@functools.partial(jax.jit, static_argnames=("num_steps", "method", "k", "mesh", "unroll"))
def _run(key, model, x0_BN, start_step, *, num_steps, method, k, mesh, unroll=UNROLL):
  encode, step, decode, _ = _codec(method, k, model)
  c0 = encode(x0_BN)
  carry_sharding = batch_sharding(mesh, c0.ndim)  # chains over "data", whatever the encoding

  def body(c, t):
    return constrain(step(blocks.step_key(key, t), c), carry_sharding), None

  steps = start_step + jnp.arange(num_steps)
  c, _ = jax.lax.scan(
    body, constrain(c0, carry_sharding), steps, unroll=max(1, min(unroll, num_steps))
  )
  return constrain(decode(c), batch_sharding(mesh, 2))


def sample(
  key: jax.Array,
  model: Ising,
  x0_BN,
  num_steps: int,
  *,
  method: Method = "gibbs",
  k: int = 1,
  start_step: int = 0,
  mesh: Mesh | None = None,
  unroll: int | None = None,
) -> jax.Array:
  """Runs num_steps steps of the sampler from x0[B, N] in {-1,+1}; returns the final states.

  `start_step` continues a run: sample(.., n1 + n2) == sample(sample(.., n1), n2, start_step=n1).
  `unroll`: steps per loop iteration (the same chains for every value; None: default_unroll()).
  """
  unroll = _check_unroll(unroll)
  x0_BN = jnp.asarray(x0_BN, jnp.int8)
  _check_chains(model, x0_BN)
  if num_steps < 0:
    raise ValueError(f"num_steps must be >= 0, got {num_steps}")
  make_step(method, k, model.n)  # validates method and k eagerly
  if mesh is not None:
    x0_BN = jax.device_put(x0_BN, batch_sharding(mesh, 2))
  return _run(
    key, model, x0_BN, jnp.int32(start_step), num_steps=num_steps, method=method, k=k, mesh=mesh,
    unroll=unroll,
  )  # fmt: skip


@functools.partial(
  jax.jit, static_argnames=("num_steps", "method", "k", "clique_size", "mesh", "unroll")
)
def _hitting(key, model, x0_BN, *, num_steps, method, k, clique_size, mesh, unroll=UNROLL):
  encode, step, _, clique_up = _codec(method, k, model)
  c0 = encode(x0_BN)
  carry_sharding = batch_sharding(mesh, c0.ndim)

  def body(carry, t):
    c, hit_B = carry
    c = constrain(step(blocks.step_key(key, t), c), carry_sharding)
    hit_B = jnp.where((hit_B < 0) & clique_up(c, clique_size), t + 1, hit_B)
    return (c, hit_B), None

  hit0_B = jnp.full(x0_BN.shape[:1], -1, jnp.int32)
  carry = (constrain(c0, carry_sharding), hit0_B)
  (_, hit_B), _ = jax.lax.scan(
    body, carry, jnp.arange(num_steps), unroll=max(1, min(unroll, num_steps))
  )
  return hit_B


def hitting_times_to_mode(
  key: jax.Array,
  model: Ising,
  x0_BN,
  clique_size: int,
  num_steps: int,
  *,
  method: Method = "gibbs",
  k: int = 1,
  mesh: Mesh | None = None,
  unroll: int | None = None,
) -> jax.Array:
  """First step t in [1, num_steps] at which each chain is in R_1 (all clique spins +1, eq. 6);
  -1 for chains that never get there within the budget. `unroll`: as `sample`'s."""
  unroll = _check_unroll(unroll)
  x0_BN = jnp.asarray(x0_BN, jnp.int8)
  _check_chains(model, x0_BN)
  if not 1 <= clique_size <= model.n:
    raise ValueError(f"clique_size must be in [1, N={model.n}], got {clique_size}")
  make_step(method, k, model.n)
  if mesh is not None:
    x0_BN = jax.device_put(x0_BN, batch_sharding(mesh, 2))
  return _hitting(
    key, model, x0_BN, num_steps=num_steps, method=method, k=k, clique_size=clique_size, mesh=mesh,
    unroll=unroll,
  )  # fmt: skip


def random_states(key: jax.Array, num_chains: int, n: int) -> jax.Array:
  if num_chains < 1:
    raise ValueError(f"num_chains must be >= 1, got {num_chains}")
  return 2 * jax.random.bernoulli(key, 0.5, (num_chains, n)).astype(jnp.int8) - 1


def mode_states(num_chains: int, n: int, clique_size: int, sign: int, key: jax.Array | None = None):
  """States in R_sign: clique spins fixed to `sign`, the others uniform (all `sign` if no key)."""
  if num_chains < 1:
    raise ValueError(f"num_chains must be >= 1, got {num_chains}")
  if key is None:
    x = jnp.full((num_chains, n), sign, jnp.int8)
  else:
    x = random_states(key, num_chains, n)
  return x.at[:, :clique_size].set(jnp.int8(sign))
