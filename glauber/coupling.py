"""Maximally coupled Glauber chains: coalescence times of two chain populations.

Pairs (X_b, Y_b) step together: both update the SAME uniformly chosen site, and the two new
tokens are drawn from a maximal coupling of the two conditionals p = p_i^T(. | X_-i) and
q = p_i^T(. | Y_-i): with probability 1 - TV(p, q) one token from the overlap min(p, q)
(normalised) goes to both, otherwise each chain draws from its own normalised residual
(p - min(p, q), q - min(p, q)). Each chain alone is a plain Glauber chain; the pair meets at
the first step where all free tokens agree and stays together afterwards (identical inputs
give identical conditionals). Under the contraction condition α < 1 of the math note the
expected Hamming distance shrinks by (1 - (1 - α)/n) per step.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from glauber.chains import Spec, chain_sharding, constrain, init_state, place, site_logprobs
from glauber.oracle import MaskedLM
from gmlm.core import blocks, draws


def _log_mass(w_XC: jax.Array) -> jax.Array:
  """log of a nonnegative mass vector; an all-zero row becomes uniform (its draw is unused)."""
  w_XC = jnp.maximum(w_XC, 0.0)
  return jnp.where(w_XC.sum(-1, keepdims=True) > 0, jnp.log(w_XC), 0.0)


def maximal_coupling(key: jax.Array, logp_XC: jax.Array, logq_XC: jax.Array):
  """(a_X, b_X) with a ~ p, b ~ q and P(a != b) = TV(p, q) (the least possible)."""
  p_XC, q_XC = jnp.exp(logp_XC), jnp.exp(logq_XC)
  m_XC = jnp.minimum(p_XC, q_XC)
  overlap_X = m_XC.sum(-1)  # 1 - TV(p, q)
  k_u, k_m, k_p, k_q = jax.random.split(key, 4)
  same_X = jax.random.uniform(k_u, overlap_X.shape) < overlap_X
  c_X = draws.categorical(k_m, _log_mass(m_XC))
  a_X = jnp.where(same_X, c_X, draws.categorical(k_p, _log_mass(p_XC - m_XC)))
  b_X = jnp.where(same_X, c_X, draws.categorical(k_q, _log_mass(q_XC - m_XC)))
  return a_X, b_X


def coupled_step(key, model: MaskedLM, spec: Spec, x_BL: jax.Array, y_BL: jax.Array):
  """One maximally coupled Glauber step of every pair."""
  B = x_BL.shape[0]
  k_site, k_draw = jax.random.split(key)
  sites_B1 = blocks.random_blocks(k_site, B, spec.num_sites, 1)
  sites_X1 = jnp.concatenate([sites_B1, sites_B1])  # X = 2B: both populations
  logp_XC = site_logprobs(model, spec, jnp.concatenate([x_BL, y_BL]), sites_X1)[:, 0]
  a_B, b_B = maximal_coupling(k_draw, logp_XC[:B], logp_XC[B:])
  positions_B1 = spec.offset + sites_B1
  return (
    blocks.write_block(x_BL, positions_B1, spec.candidates_C[a_B][:, None]),
    blocks.write_block(y_BL, positions_B1, spec.candidates_C[b_B][:, None]),
  )


@functools.partial(jax.jit, static_argnames=("num_records", "record_every", "sharding"))
def _run(key, model, spec, x_BL, y_BL, start_step, met_B, *, num_records, record_every, sharding):
  def one_step(carry, t):
    x_BL, y_BL, meet_B = carry
    x_BL, y_BL = coupled_step(blocks.step_key(key, t), model, spec, x_BL, y_BL)
    equal_B = jnp.all(spec.free(x_BL) == spec.free(y_BL), axis=-1)
    meet_B = jnp.where((meet_B < 0) & equal_B, t + 1, meet_B)
    return (constrain(x_BL, sharding), constrain(y_BL, sharding), meet_B), None

  def one_record(carry, t0):
    carry, _ = jax.lax.scan(one_step, carry, t0 + jnp.arange(record_every))
    x_BL, y_BL, _ = carry
    return carry, jnp.sum(spec.free(x_BL) != spec.free(y_BL), axis=-1)

  equal_B = jnp.all(spec.free(x_BL) == spec.free(y_BL), axis=-1)
  meet_B = jnp.where(met_B >= 0, met_B, jnp.where(equal_B, start_step, -1))
  starts_R = start_step + record_every * jnp.arange(num_records)
  (x_BL, y_BL, meet_B), distance_RB = jax.lax.scan(
    one_record, (constrain(x_BL, sharding), constrain(y_BL, sharding), meet_B), starts_R
  )
  return x_BL, y_BL, meet_B, distance_RB


def run(
  key: jax.Array,
  model: MaskedLM,
  spec: Spec,
  x_BL,
  y_BL,
  num_records: int,
  record_every: int = 1,
  *,
  start_step: int = 0,
  meet_B=None,
  mesh: Mesh | None = None,
):
  """num_records * record_every coupled steps from (x_BL, y_BL). Returns (x_BL, y_BL, meet_B,
  distance_RB): meet_B is the first step at which the pair's free tokens agree (start_step if
  they start equal, -1 if they never do), distance_RB the Hamming distance after each record.

  A run in pieces equals one run (step t uses the key fold_in(key, t)): pass each piece the
  previous piece's x_BL, y_BL and meet_B, and start_step = the steps done so far."""
  x, y = init_state(x_BL), init_state(y_BL)
  if x.tokens_BL.shape != y.tokens_BL.shape:
    raise ValueError(
      f"the two populations differ in shape: {x.tokens_BL.shape} vs {y.tokens_BL.shape}"
    )
  if num_records < 0 or record_every < 1:
    raise ValueError(
      f"need num_records >= 0 and record_every >= 1, got {num_records}, {record_every}"
    )
  model, x = place(model, x, mesh)
  _, y = place(model, y, mesh)
  met_B = jnp.full(x.tokens_BL.shape[:1], -1, jnp.int32) if meet_B is None else meet_B
  return _run(
    key,
    model,
    spec,
    x.tokens_BL,
    y.tokens_BL,
    jnp.int32(start_step),
    jnp.asarray(met_B, jnp.int32),
    num_records=num_records,
    record_every=record_every,
    sharding=chain_sharding(mesh),
  )
