"""Generating from a masked LM by unmasking, on the Glauber engine: thousands of chains, jitted.

Today's masked-diffusion LMs (MaskGIT, MDLM, LLaDA, ReMDM) and Mask-Predict generate by starting
with every free site [MASK]ed and revealing sites. A `Sampler` names one such procedure:

  unmasking   S steps (S = 0: one site per step, ancestral unmasking). The m sites masked at the
              start are revealed k_1 + ... + k_S = m, k_s >= 1, by a schedule: after step s,
              m_s = clip(ceil(m γ(s / S)), S - s, m_{s-1} - 1) sites stay masked, γ(r) = 1 - r
              ("linear") or cos(π r / 2) ("cosine", MaskGIT); with S = m every schedule reveals
              one site per step. Which k_s of the masked sites: "random" (uniformly),
              "left_to_right" (the first), "confidence" (largest max_a p_i(a | z) first; with
              S < m this is LLaDA's low-confidence remasking). The k_s revealed sites are drawn
              INDEPENDENTLY, each from its own conditional p_i^T(. | z) given the current partly
              masked state z (paper B's independent parallel sampler; for k_s = 1 an exact
              ancestral step of the MLM's conditionals).
  remasking   then R rounds (ReMDM, Mask-Predict): k sites of the full sequence are re-masked,
              "random" (uniform k-subset) or "confidence" (the k smallest p_i(x_i | x_-i), from
              n one-mask rows), and redrawn independently given the rest. With k = 1 and
              "random" a round IS a Glauber step (`chains.make_step("glauber")`, the same code and
              key), with k > 1 `chains`' block step (not a Gibbs kernel).
  glauber     then G steps of Glauber dynamics, plain or rejection-free (`chains.run`,
              `rejection_free.run`): the hybrid "unmask, then mix".

Confidences are untempered: p_i = softmax of the MLM's scores over the candidates at T = 1 (no
top-k / top-p), so the order does not depend on T and T = 0 with the confidence order is greedy
decoding. The draws use the Spec: temperature (0 = argmax), top-k / top-p, candidate tokens.

Cost, in MLM forward rows (sequences through the encoder) per generated sequence
(`Sampler.forward_rows`): one per unmasking step (its head at the k_s revealed sites, or every
masked site for "confidence"), one per random remasking round, n (k = 1) or n + 1 per
confidence round, one per plain Glauber step, n per rejection-free iteration.

Randomness: step t (unmasking steps, then rounds, then Glauber steps, counted from state.t) uses
fold_in(key, t), with every draw of global shape [B, ...]: the same key gives the same chains
however the chain axis is sharded, a chain's draws do not depend on how many chains run beside
it, and Glauber after the sampler continues the same key schedule. The result is the Glauber
runners' (ChainState, Records).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from glauber import chains, init_states, rejection_free
from glauber.chains import ChainState, Records, Spec
from glauber.oracle import MaskedLM
from glauber.scoring import scoring_spec
from gmlm.core import blocks, draws
from gmlm.nn import masked_logits

ORDERS = ("random", "left_to_right", "confidence")
SCHEDULES = ("linear", "cosine")
REMASK_ORDERS = ("random", "confidence")
GLAUBER_MODES = ("plain", "rejection_free")


def reveal_counts(masked: int, steps: int, schedule: str = "linear") -> tuple[int, ...]:
  """k_1..k_S: the sites revealed at each step (module docstring), each >= 1, summing to
  `masked`."""
  if schedule not in SCHEDULES:
    raise ValueError(f"schedule={schedule!r}: unknown; choose one of {SCHEDULES}")
  if not 1 <= steps <= masked:
    raise ValueError(
      f"steps={steps}: must be in [1, {masked}] (each step reveals at least one of the "
      f"{masked} masked sites)"
    )
  left = [masked]
  for s in range(1, steps + 1):
    r = s / steps
    g = 1.0 - r if schedule == "linear" else math.cos(math.pi * r / 2)
    want = math.ceil(masked * g - 1e-9)
    left.append(min(max(want, steps - s), left[-1] - 1))
  return tuple(a - b for a, b in zip(left[:-1], left[1:]))


@dataclasses.dataclass(frozen=True)
class Sampler:
  """One way to generate (module docstring). steps = 0: one site per step."""

  steps: int = 0
  schedule: str = "linear"
  order: str = "random"
  remask_rounds: int = 0
  remask_sites: int = 1
  remask_order: str = "random"
  glauber_steps: int = 0
  glauber_mode: str = "plain"

  def check(self, masked: int, num_sites: int) -> None:
    """A ValueError naming the first bad field, for `masked` of `num_sites` sites masked."""
    if self.order not in ORDERS:
      raise ValueError(f"order={self.order!r}: unknown order rule; choose one of {ORDERS}")
    if self.remask_order not in REMASK_ORDERS:
      raise ValueError(f"remask_order={self.remask_order!r}: choose one of {REMASK_ORDERS}")
    if self.glauber_mode not in GLAUBER_MODES:
      raise ValueError(f"glauber_mode={self.glauber_mode!r}: choose one of {GLAUBER_MODES}")
    if self.steps < 0:
      raise ValueError(f"steps={self.steps}: must be >= 0 (0 = one site per step)")
    if masked:
      reveal_counts(masked, self.steps or masked, self.schedule)
    elif self.schedule not in SCHEDULES:
      raise ValueError(f"schedule={self.schedule!r}: unknown; choose one of {SCHEDULES}")
    if self.remask_rounds < 0 or self.glauber_steps < 0:
      raise ValueError("remask_rounds and glauber_steps must be >= 0")
    if self.remask_rounds and not 1 <= self.remask_sites <= num_sites:
      raise ValueError(f"remask_sites={self.remask_sites}: must be in [1, n={num_sites}]")

  def counts(self, masked: int) -> tuple[int, ...]:
    return reveal_counts(masked, self.steps or masked, self.schedule) if masked else ()

  def round_rows(self, num_sites: int) -> int:
    """Forward rows of one remasking round."""
    if self.remask_order == "random":
      return 1
    return num_sites + (self.remask_sites > 1)

  def forward_rows(self, num_sites: int, masked: int | None = None) -> int:
    """MLM forward rows per sequence (rejection-free Glauber not included: its iterations are
    random; each costs n)."""
    m = num_sites if masked is None else masked
    glauber = self.glauber_steps if self.glauber_mode == "plain" else 0
    return len(self.counts(m)) + self.remask_rounds * self.round_rows(num_sites) + glauber

  @property
  def name(self) -> str:
    parts = [
      ("ancestral" if not self.steps else f"parallel S={self.steps} {self.schedule}")
      + f" {self.order}"
    ]
    if self.remask_rounds:
      parts.append(f"remask {self.remask_rounds}x{self.remask_sites} {self.remask_order}")
    if self.glauber_steps:
      parts.append(f"glauber {self.glauber_steps} {self.glauber_mode}")
    return " + ".join(parts)


Order = Literal["random", "left_to_right", "confidence"]


def segment_budget(masked: int) -> int:
  """How many scans (compiled encoders) one unmasking run may use: twice the power-of-two
  buckets of `masked` rows, so compile time stays ~log2(m) encoders."""
  return 2 * (max(masked - 1, 0).bit_length() + 1)


def _segments(counts: tuple[int, ...], masked: int, order: str, budget: int | None = None) -> tuple:
  """The unmasking steps grouped into consecutive runs that share one static number of head
  rows (a step needs its k_s revealed sites, or every masked site for "confidence"), each run at
  the largest need in it: ((rows, draws, (k_s, ...)), ...), draws = the largest k_s. One
  lax.scan per run. The runs are the partition of the steps into at most `budget`
  (`segment_budget(masked)` by default) runs with the fewest head rows in all (dynamic
  programming over the split points; among equally few rows, the fewest runs), so a schedule
  with few distinct needs pads nothing and ancestral confidence pads ~1/budget of its rows."""
  needs, left = [], masked
  for k in counts:
    needs.append(left if order == "confidence" else k)
    left -= k
  S = len(needs)
  if not S:
    return ()
  G = min(S, budget or segment_budget(masked))
  r = np.asarray(needs, dtype=np.int64)
  cost = np.full((S + 1, S + 1), np.iinfo(np.int64).max // 4)  # cost[i, j]: steps i..j-1 as one run
  for i in range(S):
    cost[i, i + 1 :] = np.maximum.accumulate(r[i:]) * np.arange(1, S - i + 1)
  best = np.full(S + 1, np.iinfo(np.int64).max // 4)
  best[0] = 0
  splits, found, found_g = [], None, 0
  for g in range(1, G + 1):
    total = best[:, None] + cost  # total[i, j]: the first g-1 runs end at i, the last is i..j-1
    arg = total.argmin(0)  # ties: the earliest split
    best = total[arg, np.arange(S + 1)]
    splits.append(arg)
    if found is None or best[S] < found:
      found, found_g = best[S], g
  ends, j = [S], S
  for g in range(found_g - 1, 0, -1):
    j = int(splits[g][j])
    ends.append(j)
  ends = ends[::-1]
  out, start = [], 0
  for end in ends:
    ks = tuple(counts[start:end])
    out.append((int(r[start:end].max()), max(ks), ks))
    start = end
  return tuple(out)


def unmask_step(
  key: jax.Array,
  model: MaskedLM,
  spec: Spec,
  tokens_BL: jax.Array,
  k: jax.Array,
  rows: int,
  order: Order,
  most: int | None = None,
) -> jax.Array:
  """Reveals k (traced, at most `most`, static) of the masked free sites of every chain, each
  drawn independently from its conditional given the current state; the head runs at `rows`
  (static) sites: the k chosen (random / left_to_right; rows >= k) or every masked site
  (confidence; rows >= masked), and the draws at `most` of them."""
  B, n = tokens_BL.shape[0], spec.num_sites
  most = rows if most is None else min(most, rows)
  k_pick, k_draw = jax.random.split(key)
  free_BN = spec.free(tokens_BL)
  masked_BN = free_BN == spec.mask_id
  if order == "random":
    score_BN = jax.random.uniform(k_pick, (B, n))
  else:
    score_BN = jnp.broadcast_to(-jnp.arange(n, dtype=jnp.float32), (B, n))
  _, sites_BQ = jax.lax.top_k(jnp.where(masked_BN, score_BN, -jnp.inf), rows)
  valid_BQ = jnp.take_along_axis(masked_BN, sites_BQ, axis=1)
  logits_BQV = masked_logits(model, tokens_BL, spec.offset + sites_BQ)
  if order == "confidence":  # the `most` most confident rows, best first (ties: lower site)
    # In vocabulary space (no gather of the candidates at every masked row: slow on CPU).
    # log p_max = -log sum exp(s - max s): two passes over the row, 20% less than
    # max - logsumexp (a third pass) at 12 x 64 rows of 30,522 (README, unmasking speed).
    s_BQV = jnp.where(spec.index_V >= 0, logits_BQV, -jnp.inf)
    m_BQ = s_BQV.max(-1)
    log_pmax_BQ = -jnp.log(jnp.exp(s_BQV - m_BQ[..., None]).sum(-1))
    conf_BQ = jnp.where(valid_BQ, log_pmax_BQ, -jnp.inf)
    top_BA = jnp.argsort(-conf_BQ, axis=-1, stable=True)[:, :most]
    sites_BA = jnp.take_along_axis(sites_BQ, top_BA, axis=1)
    valid_BA = jnp.take_along_axis(valid_BQ, top_BA, axis=1)
    logits_BAV = jnp.take_along_axis(logits_BQV, top_BA[..., None], axis=1)
  else:  # rows come in order already
    sites_BA, valid_BA, logits_BAV = sites_BQ[:, :most], valid_BQ[:, :most], logits_BQV[:, :most]
  reveal_BA = valid_BA & (jnp.arange(most) < k)[None]
  if 0 < spec.temperature < math.inf and not spec.top_k and spec.top_p >= 1.0:
    # In vocabulary space, non-candidates at zero mass: the same law (and, candidates in
    # vocabulary order, the same uniform picks the same token up to the CDF's float rounding)
    # without gathering C columns and a second softmax at every drawn row.
    z_BAV = jnp.where(spec.index_V >= 0, logits_BAV / jnp.float32(spec.temperature), -jnp.inf)
    new_BA = draws.categorical(k_draw, z_BAV)
  else:
    logp_BAC = chains.tempered_logprobs(spec, logits_BAV)
    new_BA = spec.candidates_C[draws.categorical(k_draw, logp_BAC)]
  old_BA = jnp.take_along_axis(free_BN, sites_BA, axis=1)
  return blocks.write_block(tokens_BL, spec.offset + sites_BA, jnp.where(reveal_BA, new_BA, old_BA))


def remask_round(
  key: jax.Array,
  t: jax.Array,
  model: MaskedLM,
  spec: Spec,
  tokens_BL: jax.Array,
  k: int,
  order: str,
) -> jax.Array:
  """One remasking round: k sites re-masked (random: `chains`' glauber / block step itself;
  confidence: the k smallest untempered p_i(x_i | x_-i)) and redrawn independently."""
  if order == "random":
    return chains.make_step("glauber" if k == 1 else "block", k)(key, t, model, spec, tokens_BL)
  _, k_draw = jax.random.split(key)
  score = scoring_spec(spec)
  logp1_BNC = chains.all_site_logprobs(model, score, tokens_BL)
  own_BN = chains.current_logprobs(score, tokens_BL, logp1_BNC)
  _, sites_BK = jax.lax.top_k(-own_BN, k)  # the lowest; ties to the lower site
  if k == 1:  # its one-mask conditional is already there
    logp_BKC = draws.temper(
      jnp.take_along_axis(logp1_BNC, sites_BK[..., None], axis=1),
      spec.temperature,
      spec.top_k,
      spec.top_p,
    )
  else:
    logp_BKC = chains.site_logprobs(model, spec, tokens_BL, sites_BK)
  return draws.draw_product(k_draw, tokens_BL, spec.offset + sites_BK, logp_BKC, spec.candidates_C)


def _run(key, model, spec, state, *, plan, order, remask, record, sharding):
  segments, rounds = plan
  remask_k, remask_order = remask
  tokens_BL, t = chains.constrain(state.tokens_BL, sharding), state.t
  recs = []
  for rows, most, ks in segments:

    def one(tokens_BL, x, rows=rows, most=most):
      t_s, k_s = x
      new = unmask_step(blocks.step_key(key, t_s), model, spec, tokens_BL, k_s, rows, order, most)
      new = chains.constrain(new, sharding)
      return new, spec.free(new) if record else None

    xs = (t + jnp.arange(len(ks)), jnp.asarray(ks, jnp.int32))
    tokens_BL, rec = jax.lax.scan(one, tokens_BL, xs)
    t = t + len(ks)
    recs.append(rec)
  if rounds:

    def round_(tokens_BL, t_r):
      new = remask_round(
        blocks.step_key(key, t_r), t_r, model, spec, tokens_BL, remask_k, remask_order
      )
      new = chains.constrain(new, sharding)
      return new, spec.free(new) if record else None

    tokens_BL, rec = jax.lax.scan(round_, tokens_BL, t + jnp.arange(rounds))
    t = t + rounds
    recs.append(rec)
  done = t - state.t
  if record:
    tokens_RBN = jnp.concatenate(recs) if recs else spec.free(tokens_BL)[None][:0]
  else:
    tokens_RBN = spec.free(tokens_BL)[None]
  return ChainState(tokens_BL, state.steps_B + done, t), Records(tokens_RBN)


_run_jit = jax.jit(_run, static_argnames=("plan", "order", "remask", "record", "sharding"))


def masked_scores(model: MaskedLM, spec: Spec, tokens_BL: jax.Array) -> jax.Array:
  """scores_BNC: the MLM's raw scores over the candidates at every free site of the sequences as
  they are (masks in place), one forward row per sequence: at a masked site, the conditional
  the unmasking samplers draw from (`measures.unmasking_laws` enumerates it)."""
  B = tokens_BL.shape[0]
  positions_BN = jnp.broadcast_to(spec.positions_N, (B, spec.num_sites))
  return jnp.take(masked_logits(model, tokens_BL, positions_BN), spec.candidates_C, axis=-1)


def masked_count(spec: Spec, tokens_BL) -> int:
  """The number of masked free sites, the same in every chain (else a ValueError)."""
  m_B = np.asarray(spec.free(jnp.asarray(tokens_BL)) == spec.mask_id).sum(-1)
  if m_B.size and (m_B != m_B[0]).any():
    raise ValueError(
      f"every chain must start with the same number of masked free sites (the schedule is "
      f"static), got {sorted(set(m_B.tolist()))}"
    )
  return int(m_B[0]) if m_B.size else 0


def all_masked(spec: Spec, num_chains: int) -> ChainState:
  """num_chains chains with every free site masked (the usual start)."""
  return chains.init_state(init_states.all_mask(spec.layout, num_chains))


def run(
  key: jax.Array,
  model: MaskedLM,
  spec: Spec,
  state: ChainState,
  sampler: Sampler,
  *,
  record: bool = False,
  mesh: Mesh | None = None,
) -> tuple[ChainState, Records]:
  """The sampler from `state` (its masked free sites, the same number in every chain, are
  generated; the others are kept): (final state, Records). records.tokens_RBN is the final free
  tokens (R = 1), or with record=True the free tokens after every unmasking step and remasking
  round (mask_id where still masked), then the Glauber records (record_every = 1 step).
  state.t advances by one per step, round and Glauber step (rejection-free: per iteration)."""
  n = spec.num_sites
  m = masked_count(spec, state.tokens_BL)
  sampler.check(m, n)
  counts = sampler.counts(m)
  plan = (_segments(counts, m, sampler.order), sampler.remask_rounds)
  if counts or sampler.remask_rounds:
    model_p, state = chains.place(model, state, mesh)
    state, records = _run_jit(
      key,
      model_p,
      spec,
      state,
      plan=plan,
      order=sampler.order,
      remask=(sampler.remask_sites, sampler.remask_order),
      record=record,
      sharding=chains.chain_sharding(mesh),
    )
  else:
    records = Records(spec.free(state.tokens_BL)[None][: 0 if record else 1])
  if not sampler.glauber_steps:
    return state, records
  G = sampler.glauber_steps
  if sampler.glauber_mode == "plain":
    state, more = chains.run(
      key, model, spec, state, G if record else 1, 1 if record else G, mesh=mesh
    )
  else:
    state, more = rejection_free.run(
      key, model, spec, state, G if record else 1, 1 if record else G, mesh=mesh
    )
  tokens_RBN = jnp.concatenate([records.tokens_RBN, more.tokens_RBN]) if record else more.tokens_RBN
  return state, Records(
    tokens_RBN, iterations=more.iterations, changes_B=more.changes_B, memo_hits_B=more.memo_hits_B
  )
