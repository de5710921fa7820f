"""Rejection-free Glauber dynamics (the n-fold way, Bortz, Kalos and Lebowitz 1975).

At low temperature a Glauber step almost always redraws the token already there. Per
iteration this mode evaluates all n site conditionals of the current state in one batch of
B*n one-mask sequences and jumps straight to the next step that changes the state:

  stay probability   s = (1/n) Σ_i p_i^T(x_i | x_-i)
  holding time       G ~ Geometric: P(G = g) = s^g (1 - s), g = 0, 1, ...   (steps that stay)
  the jump           site i ∝ 1 - p_i^T(x_i | x_-i), then token a ∝ p_i^T(a | x_-i), a ≠ x_i

and the chain's step counter advances by G + 1. The step-indexed trajectory has exactly the law
of plain Glauber (`chains.run(method="glauber")`). Chains advance different numbers of steps
per iteration; each runs to the next recording step t_r = (r + 1) * record_every: a holding
time that would pass t_r stops there with the state unchanged (exact: the chain is Markov and
the geometric law memoryless), so a snapshot at step t is the state after exactly t steps,
as in plain mode. The iterations loop until every chain reaches t_r.

Cost: one iteration is n forward rows against one per plain step, and advances on average
1/(1 - s) steps; worth it when the median s exceeds about 1 - 1/n (`choose_mode`). Stay
probabilities within ~1e-6 of 1 are not resolved in float32.

Iteration j uses the key fold_in(key, j) (j = state.t counts iterations here), so resumed and
sharded runs reproduce bitwise. Different record_every give different (equally exact) draws.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from glauber import kernel
from glauber.chains import (ChainState, Spec, all_site_logprobs, chain_sharding, constrain,
                            current_logprobs, place)


def stay_probabilities(model, spec: Spec, tokens_BL: jax.Array) -> jax.Array:
  """s_B = (1/n) Σ_i p_i^T(x_i | x_-i): the probability that a Glauber step changes nothing."""
  logp_BN = current_logprobs(spec, tokens_BL, all_site_logprobs(model, spec, tokens_BL))
  return jnp.exp(logp_BN).mean(-1)


def choose_mode(model, spec: Spec, tokens_BL, threshold: float | None = None,
                max_chains: int = 64) -> tuple[str, float]:
  """'rejection_free' when the median stay probability over (up to max_chains) chains is at
  least `threshold` (default 1 - 1/n: where an iteration of n rows beats n plain steps),
  else 'plain'; also returns the measured median."""
  if threshold is None:
    threshold = 1.0 - 1.0 / spec.num_sites
  s_B = jax.jit(stay_probabilities)(model, spec, jnp.asarray(tokens_BL)[:max_chains])
  median = float(np.median(np.asarray(s_B)))
  return ("rejection_free" if median >= threshold else "plain"), median


def _safe_logits(logits_BX: jax.Array) -> jax.Array:
  """Rows with no finite entry (never drawn from: their chains do not jump) become uniform."""
  return jnp.where(jnp.isfinite(logits_BX).any(-1, keepdims=True), logits_BX, 0.0)


def iteration(key: jax.Array, model, spec: Spec, tokens_BL: jax.Array, steps_B: jax.Array,
              target_B: jax.Array):
  """One rejection-free iteration of every chain towards its target step.
  Returns (tokens_BL, steps_B, stay_B)."""
  B = tokens_BL.shape[0]
  k_hold, k_site, k_token = jax.random.split(key, 3)
  logp_BNC = all_site_logprobs(model, spec, tokens_BL)
  logp_BN = current_logprobs(spec, tokens_BL, logp_BNC)
  leave_BN = -jnp.expm1(logp_BN)                                  # 1 - p_i(x_i | x_-i)
  leave_B = leave_BN.mean(-1)                                     # 1 - s
  u_B = 1.0 - jax.random.uniform(k_hold, (B,))                    # (0, 1]
  hold_B = jnp.where(leave_B > 0, jnp.floor(jnp.log(u_B) / jnp.log1p(-leave_B)), jnp.inf)
  remaining_B = target_B - steps_B
  jump_B = (remaining_B > 0) & (hold_B < remaining_B.astype(jnp.float32))
  hold_B = jnp.where(jump_B, hold_B, 0.0).astype(jnp.int32)
  steps_B = jnp.where(jump_B, steps_B + hold_B + 1, jnp.maximum(steps_B, target_B))

  site_B = kernel.categorical(k_site, _safe_logits(jnp.log(leave_BN)))
  logp_BC = jnp.take_along_axis(logp_BNC, site_B[:, None, None], axis=1)[:, 0]
  current_B = jnp.take_along_axis(spec.index_V[spec.free(tokens_BL)], site_B[:, None], 1)[:, 0]
  C = logp_BC.shape[-1]
  logp_BC = jnp.where(jnp.arange(C)[None] == current_B[:, None], -jnp.inf, logp_BC)
  new_B = spec.candidates_C[kernel.categorical(k_token, _safe_logits(logp_BC))]
  jumped_BL = kernel.write_block(tokens_BL, spec.offset + site_B[:, None], new_B[:, None])
  tokens_BL = jnp.where(jump_B[:, None], jumped_BL, tokens_BL)
  return tokens_BL, steps_B, 1.0 - leave_B


@functools.partial(jax.jit, static_argnames=("num_records", "record_every", "record_logprobs",
                                             "sharding"))
def _run(key, model, spec, state, *, num_records, record_every, record_logprobs, sharding):
  def cond(carry):
    _, steps_B, _, target_B, _ = carry
    return jnp.any(steps_B < target_B)

  def body(carry):
    tokens_BL, steps_B, t, target_B, jumps_B = carry
    new_BL, new_steps_B, _ = iteration(kernel.step_key(key, t), model, spec, tokens_BL, steps_B,
                                       target_B)
    jumps_B = jumps_B + jnp.any(new_BL != tokens_BL, axis=-1).astype(jnp.int32)
    return (constrain(new_BL, sharding), constrain(new_steps_B, sharding), t + 1, target_B,
            jumps_B)

  def one_record(carry, _):
    tokens_BL, steps_B, t = carry
    target_B = steps_B + record_every
    tokens_BL, steps_B, t_end, _, jumps_B = jax.lax.while_loop(
        cond, body, (tokens_BL, steps_B, t, target_B, jnp.zeros_like(steps_B)))
    out = {"tokens_BN": spec.free(tokens_BL), "iterations": t_end - t, "changes_BN": jumps_B}
    if record_logprobs:
      out["logp_BN"] = current_logprobs(spec, tokens_BL, all_site_logprobs(model, spec, tokens_BL))
    return (tokens_BL, steps_B, t_end), out

  init = (constrain(state.tokens_BL, sharding), constrain(state.steps_B, sharding), state.t)
  (tokens_BL, steps_B, t), rec = jax.lax.scan(one_record, init, None, length=num_records)
  return ChainState(tokens_BL, steps_B, t), rec


def run(key: jax.Array, model, spec: Spec, state: ChainState, num_records: int,
        record_every: int = 1, *, record_logprobs: bool = False, mesh: Mesh | None = None):
  """Rejection-free twin of `chains.run(method="glauber")`: the same records (states after
  every record_every steps of each chain), plus records["iterations_R"] (iterations spent on
  each record) and records["changes_RB"] (jumps of each chain in it)."""
  if num_records < 0 or record_every < 1:
    raise ValueError(f"need num_records >= 0 and record_every >= 1, got {num_records}, "
                     f"{record_every}")
  model, state = place(model, state, mesh)
  state, rec = _run(key, model, spec, state, num_records=num_records, record_every=record_every,
                    record_logprobs=record_logprobs, sharding=chain_sharding(mesh))
  out = {"tokens_RBN": rec["tokens_BN"], "iterations_R": rec["iterations"],
         "changes_RB": rec["changes_BN"]}
  if record_logprobs:
    out["logp_RBN"] = rec["logp_BN"]
  return state, out
