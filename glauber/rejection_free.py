"""Rejection-free Glauber dynamics (the "n-fold way" of Bortz, Kalos and Lebowitz 1975).

At low temperature a Glauber step almost always redraws the token already there. Per
iteration this mode evaluates all n site conditionals of the current state in one batch of
B*n one-mask sequences and jumps straight to the next step that changes the state:

  stay probability   s = (1/n) Σ_i p_i^T(x_i | x_-i)
  holding time       G ~ Geometric: P(G = g) = s^g (1 - s), g = 0, 1, ...   (steps that stay)
  the jump           site i ∝ 1 - p_i^T(x_i | x_-i), then token a ∝ p_i^T(a | x_-i), a ≠ x_i

and the chain's step counter advances by G + 1. The step-indexed trajectory has exactly the law
of plain Glauber (`chains.run(method="glauber")`). Chains advance different numbers of steps
per iteration, each on its own: every recording step t_r = r * record_every that falls in a
holding time [s, s + G] gets the held state, so a snapshot at step t is the state after
exactly t steps, as in plain mode. A holding time that would pass the end of the call stops
there with the state unchanged (exact: the chain is Markov and the geometric law memoryless);
the iterations loop until every chain reaches the end of the call. Chains that are done retire
from the batch (`run(retire_every=, granule=)`), so a chain that keeps jumping (two near-tied
tokens) does not make every finished chain pay n rows per iteration while it catches up.

Cost: one iteration is n forward rows against one per plain step, and advances on average
1/(1 - s) steps; worth it when the median s exceeds about 1 - 1/n (`choose_mode`). Each chain
also remembers the conditionals of its most recently used states (`run(memo=)`, up to 8): a
chain that flips between near-tied tokens pays for each state once, not at every return. Stay
probabilities within ~1e-6 of 1 are not resolved in float32.

Iteration j uses the key fold_in(key, j) (j = state.t counts iterations here), so resumed and
sharded runs reproduce bitwise. Calls of other lengths (another chunking of the same steps)
give different, equally exact, draws.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh

from glauber.chains import (
  ChainState,
  Records,
  Spec,
  all_site_logprobs,
  chain_sharding,
  constrain,
  current_logprobs,
  place,
)
from glauber.oracle import MaskedLM
from gmlm.core import blocks, draws


def stay_probabilities(model: MaskedLM, spec: Spec, tokens_BL: jax.Array) -> jax.Array:
  """s_B = (1/n) Σ_i p_i^T(x_i | x_-i): the probability that a Glauber step changes nothing."""
  logp_BN = current_logprobs(spec, tokens_BL, all_site_logprobs(model, spec, tokens_BL))
  return jnp.exp(logp_BN).mean(-1)


def choose_mode(
  model: MaskedLM, spec: Spec, tokens_BL, threshold: float | None = None, max_chains: int = 64
) -> tuple[str, float]:
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


def iteration(
  key: jax.Array,
  model: MaskedLM,
  spec: Spec,
  tokens_BL: jax.Array,
  steps_B: jax.Array,
  target_B: jax.Array,
  logp_BNC: jax.Array | None = None,
):
  """One rejection-free iteration of every chain towards its target step.
  Returns (tokens_BL, steps_B, stay_B, logp_BN) with logp_BN = log p^T(x_i | x_-i) of the
  state before the iteration. logp_BNC: the state's site conditionals, if already known."""
  B = tokens_BL.shape[0]
  k_hold, k_site, k_token = jax.random.split(key, 3)
  if logp_BNC is None:
    logp_BNC = all_site_logprobs(model, spec, tokens_BL)
  logp_BN = current_logprobs(spec, tokens_BL, logp_BNC)
  leave_BN = -jnp.expm1(logp_BN)  # 1 - p_i(x_i | x_-i)
  leave_B = leave_BN.mean(-1)  # 1 - s
  u_B = 1.0 - jax.random.uniform(k_hold, (B,))  # (0, 1]
  hold_B = jnp.where(leave_B > 0, jnp.floor(jnp.log(u_B) / jnp.log1p(-leave_B)), jnp.inf)
  remaining_B = target_B - steps_B
  jump_B = (remaining_B > 0) & (hold_B < remaining_B.astype(jnp.float32))
  hold_B = jnp.where(jump_B, hold_B, 0.0).astype(jnp.int32)
  steps_B = jnp.where(jump_B, steps_B + hold_B + 1, jnp.maximum(steps_B, target_B))

  site_B = draws.categorical(k_site, _safe_logits(jnp.log(leave_BN)))
  logp_BC = jnp.take_along_axis(logp_BNC, site_B[:, None, None], axis=1)[:, 0]
  current_B = jnp.take_along_axis(spec.index_V[spec.free(tokens_BL)], site_B[:, None], 1)[:, 0]
  C = logp_BC.shape[-1]
  logp_BC = jnp.where(jnp.arange(C)[None] == current_B[:, None], -jnp.inf, logp_BC)
  new_B = spec.candidates_C[draws.categorical(k_token, _safe_logits(logp_BC))]
  jumped_BL = blocks.write_block(tokens_BL, spec.offset + site_B[:, None], new_B[:, None])
  tokens_BL = jnp.where(jump_B[:, None], jumped_BL, tokens_BL)
  return tokens_BL, steps_B, 1.0 - leave_B, logp_BN


def memo_slots(spec: Spec, num_chains: int, budget_bytes: float = 256e6, most: int = 8) -> int:
  """The default memo: as many recent states per chain (up to `most`) as fit in budget_bytes,
  none if fewer than 2 fit. Near a mode a few sites flip between near-tied tokens, so a chain
  wanders over a handful of states (2^m for m such sites)."""
  per_state = num_chains * spec.num_sites * spec.candidates_C.shape[0] * 4
  slots = min(most, int(budget_bytes // max(per_state, 1)))
  return slots if slots >= 2 else 0


@struct.dataclass
class Memo:
  """Each chain's S most recently used states and their n site conditionals (S = 0: no memo)."""

  tokens_BSN: jax.Array  # free tokens of each remembered state
  logp_BSNC: jax.Array  # its conditionals log p_i^T(. | x_-i)
  used_BS: jax.Array  # the iteration a slot was last used (-1: empty)
  hits_B: jax.Array  # iterations served from the memo (chains still active)

  @property
  def num_slots(self) -> int:
    return self.tokens_BSN.shape[1]

  @classmethod
  def empty(cls, B: int, slots: int, spec: Spec, dtype) -> "Memo":
    n, C = spec.num_sites, spec.candidates_C.shape[0]
    return cls(
      jnp.full((B, slots, n), -1, dtype),
      jnp.zeros((B, slots, n, C), jnp.float32),
      jnp.full((B, slots), -1, jnp.int32),
      jnp.zeros((B,), jnp.int32),
    )


def _conditionals(model, spec: Spec, tokens_BL, memo: Memo, active_B, t):
  """logp_BNC of the current states, from the memo where a chain's state is in it (no forward
  pass at all when every chain's is), and the memo with the missed states written in, each in
  its chain's least recently used slot; hits count for the chains still active_B."""
  free_BN = spec.free(tokens_BL)
  hit_BS = jnp.all(memo.tokens_BSN == free_BN[:, None], axis=-1) & (memo.used_BS >= 0)
  hit_B = hit_BS.any(-1)
  cached_BNC = jnp.take_along_axis(
    memo.logp_BSNC, jnp.argmax(hit_BS, -1)[:, None, None, None], axis=1
  )[:, 0]
  logp_BNC = jax.lax.cond(
    jnp.all(hit_B),
    lambda: cached_BNC,
    lambda: jnp.where(hit_B[:, None, None], cached_BNC, all_site_logprobs(model, spec, tokens_BL)),
  )
  victim_BS = jax.nn.one_hot(jnp.argmin(memo.used_BS, -1), memo.num_slots, dtype=jnp.bool_)
  write_BS = ~hit_B[:, None] & victim_BS
  return logp_BNC, memo.replace(
    tokens_BSN=jnp.where(write_BS[..., None], free_BN[:, None], memo.tokens_BSN),
    logp_BSNC=jnp.where(write_BS[..., None, None], logp_BNC[:, None], memo.logp_BSNC),
    used_BS=jnp.where(write_BS | hit_BS, t, memo.used_BS),
    hits_B=memo.hits_B + (hit_B & active_B).astype(jnp.int32),
  )


# Everything the loop carries is donated: `run` passes fresh buffers (or the previous call's
# results) and keeps only what this call returns; the memo alone may hold 256 MB.
@functools.partial(
  jax.jit,
  static_argnames=("record_every", "max_iterations", "sharding"),
  donate_argnames=("tokens_BL", "steps_B", "rec_RBN", "logp_RBN", "jumps_B", "memo"),
)
def _iterate(
  key,
  model,
  spec,
  tokens_BL,
  steps_B,
  t,
  start_B,
  end_B,
  rec_RBN,
  logp_RBN,
  jumps_B,
  memo,
  *,
  record_every,
  max_iterations,
  sharding,
):
  """Up to max_iterations rejection-free iterations (fewer if every chain reaches end_B).
  rec_RBN / logp_RBN collect the snapshots due at start_B + r * record_every (r = 1..R).
  memo: see Memo (no slots: no memo)."""
  num_records = rec_RBN.shape[0]
  due_RB = start_B[None] + record_every * (1 + jnp.arange(num_records))[:, None]
  t0 = t
  use_memo = memo.num_slots > 0

  def cond(carry):
    return jnp.any(carry[1] < end_B) & (carry[2] - t0 < max_iterations)

  def body(carry):
    tokens_BL, steps_B, t, rec_RBN, logp_RBN, jumps_B, memo = carry
    logp_BNC = None
    if use_memo:
      logp_BNC, memo = _conditionals(model, spec, tokens_BL, memo, steps_B < end_B, t)
    new_BL, new_steps_B, _, logp_BN = iteration(
      blocks.step_key(key, t), model, spec, tokens_BL, steps_B, end_B, logp_BNC
    )
    # Snapshots due at steps s..s+G (the held state), all before the end of the call.
    held_RB = (due_RB >= steps_B[None]) & (due_RB < new_steps_B[None])
    rec_RBN = jnp.where(held_RB[..., None], spec.free(tokens_BL)[None], rec_RBN)
    logp_RBN = jnp.where(held_RB[..., None], logp_BN[None], logp_RBN)
    jumps_B = jumps_B + jnp.any(new_BL != tokens_BL, axis=-1).astype(jnp.int32)
    return (
      constrain(new_BL, sharding),
      constrain(new_steps_B, sharding),
      t + 1,
      rec_RBN,
      logp_RBN,
      jumps_B,
      memo,
    )

  init = (
    constrain(tokens_BL, sharding),
    constrain(steps_B, sharding),
    t,
    rec_RBN,
    logp_RBN,
    jumps_B,
    memo,
  )
  return jax.lax.while_loop(cond, body, init)


def _bucket(n: int, granule: int) -> int:
  """The batch size that carries n unfinished chains: a power of two times granule, >= n."""
  size = granule
  while size < n:
    size *= 2
  return size


def run(
  key: jax.Array,
  model: MaskedLM,
  spec: Spec,
  state: ChainState,
  num_records: int,
  record_every: int = 1,
  *,
  record_logprobs: bool = False,
  mesh: Mesh | None = None,
  retire_every: int = 32,
  granule: int = 8,
  memo: int | None = None,
) -> tuple[ChainState, Records]:
  """Rejection-free twin of `chains.run(method="glauber")`: the same records (the states after
  every record_every steps of each chain), plus records.iterations (iterations spent) and
  records.changes_B (jumps of each chain). Chains run unsynchronised until the end of the
  call (snapshots that fall inside a holding time are the held state).

  Chains that reach the end retire: every `retire_every` iterations, once the unfinished chains
  fit a batch of half the size (sizes are granule * 2^j, never below `granule`), only they go on,
  so a call costs about sum over rounds of (batch size x iterations), not B x max_b(jumps_b).
  The schedule is a deterministic function of the call's inputs, so results are reproducible
  (resume, 1 vs 8 devices when 8 divides every batch size); retire_every=0 keeps the full batch.

  memo: how many recently used states each chain keeps the n site conditionals of (default
  `memo_slots`: up to 8 within 256 MB, else 0). A chain back in a remembered state (the
  flip-flops between near-tied tokens of the slow regime) reuses them instead of a forward
  pass; the conditionals are a function of the state, so the draws are the same with or
  without. records.memo_hits_B counts the iterations each chain was served from it.
  """
  if num_records < 0 or record_every < 1:
    raise ValueError(
      f"need num_records >= 0 and record_every >= 1, got {num_records}, {record_every}"
    )
  if retire_every < 0 or granule < 1:
    raise ValueError(f"need retire_every >= 0 and granule >= 1, got {retire_every}, {granule}")
  if memo is not None and memo < 0:
    raise ValueError(f"memo={memo}: the number of remembered states per chain must be >= 0")
  model, state = place(model, state, mesh)
  sharding = chain_sharding(mesh)
  devices = 1 if mesh is None else mesh.shape["data"]
  B, n = state.tokens_BL.shape[0], spec.num_sites
  start_B = np.array(state.steps_B)
  end_B = start_B + num_records * record_every
  tokens = np.array(state.tokens_BL)
  steps, t = start_B.copy(), state.t
  rec = np.zeros((num_records, B, n), tokens.dtype)
  logp = np.zeros((num_records, B, n), np.float32)
  jumps = np.zeros(B, np.int32)
  rows = np.arange(B)  # the chains in the batch being iterated
  limit = retire_every or np.iinfo(np.int32).max
  put = (lambda x: jax.device_put(x, sharding)) if sharding is not None else jnp.asarray
  slots = memo_slots(spec, B) if memo is None else memo
  memo_b = jax.tree.map(put, Memo.empty(B, slots, spec, tokens.dtype))
  hits = np.zeros(B, np.int32)
  while True:
    tok_b, steps_b, t, rec_b, logp_b, jumps_b, memo_b = _iterate(
      key,
      model,
      spec,
      put(tokens[rows]),
      put(steps[rows]),
      t,
      put(start_B[rows]),
      put(end_B[rows]),
      jnp.asarray(rec[:, rows]),
      jnp.asarray(logp[:, rows]),
      put(jumps[rows]),
      memo_b,
      record_every=record_every,
      max_iterations=int(limit),
      sharding=sharding,
    )
    tokens[rows], steps[rows], jumps[rows] = tok_b, steps_b, jumps_b
    rec[:, rows], logp[:, rows] = rec_b, logp_b
    hits[rows] += np.asarray(memo_b.hits_B)
    active = np.flatnonzero(steps < end_B)
    if active.size == 0:
      break
    size = _bucket(active.size, granule)
    if size < rows.size and size % devices == 0 and retire_every:
      done = np.flatnonzero(steps >= end_B)  # padding: finished chains, which never jump
      new_rows = np.concatenate([active, done[: size - active.size]])
      # The memo follows its chains; a padding chain new to the batch starts with an empty one.
      where = {r: i for i, r in enumerate(rows)}
      idx = np.array([where.get(r, -1) for r in new_rows])
      fresh = Memo.empty(size, slots, spec, tokens.dtype)
      memo_b = jax.tree.map(
        lambda m, f: put(
          jnp.where((idx >= 0).reshape((-1,) + (1,) * (m.ndim - 1)), m[np.maximum(idx, 0)], f)
        ),
        memo_b,
        fresh,
      )
      rows = new_rows
    memo_b = memo_b.replace(hits_B=put(jnp.zeros((rows.size,), jnp.int32)))
  tokens_BL = jnp.asarray(tokens)
  if num_records:  # the snapshot at the end of the call is the final state
    rec[-1] = np.asarray(spec.free(tokens_BL))
    if record_logprobs:
      logp[-1] = np.asarray(
        current_logprobs(spec, tokens_BL, all_site_logprobs(model, spec, tokens_BL))
      )
  out = Records(
    jnp.asarray(rec),
    jnp.asarray(logp) if record_logprobs else None,
    iterations=t - state.t,
    changes_B=jnp.asarray(jumps),
    memo_hits_B=jnp.asarray(hits),
  )
  new_state = ChainState(tokens_BL, jnp.asarray(steps), t)
  if mesh is not None:
    _, new_state = place(model, new_state, mesh)
  return new_state, out
