"""CTC over an upsampled decoder (issue 26, item 4): PaDIR without a length predictor.

Libovický & Helcl (2018), Saharia et al. (2020, Imputer), Gu & Kong (2021): the non-autoregressive
decoder runs over A = k S alignment slots, k = model.ctc_upsample, reading the source tokens each
repeated k times (PAD stays PAD: a source of n tokens gets k n slots). A fractional k >= 1
(e.g. 1.5) repeats the positions alternately floor(k) and ceil(k) times (`slot_repeats`): a
source of n tokens gets floor(k n) slots, fewer for the decoder to run over where the targets
are about as long as the sources (issue 30's latency). Every slot predicts a token
or the blank ([MASK], never a target token); the output is the slots' argmax with adjacent equal
tokens merged and the blanks then removed (`collapse`), cut after its first EOS. Training
maximises the probability of every alignment that collapses to the target,
    loss = -log sum_{a: collapse(a) = y} prod_i p(a_i | slots, x)    (optax.ctc_loss),
summed over the batch and divided by its target tokens. The length is whatever the alignment
leaves: the length head is not trained, and a wrong length (6-12% exact on the Bible with the
length head: README) is no longer a decision made before the tokens.

Refinement, as PaDIR's multi-stage objective: pass 1 reads the upsampled source; pass s+1 reads
pass s's argmax alignment (blank slots as [MASK]). In training, stage s+1 reads the stage-s
argmax without gradient and the loss is the mean over stages; in decoding the passes stop once
a pass leaves every row's alignment unchanged (a pass is a deterministic function of its input,
so a row at a fixed point stays there and the batch's other rows do not change its result).

Glancing over the best alignment (Gu & Kong 2021, GLAT with CTC; `glancing` ratio, off by
default): a first pass on the upsampled source, without gradient; its best alignment to the
target (`best_alignment`, Viterbi: the alignment that collapses to the target with the largest
summed slot log-probability); N = floor(ratio x the Hamming distance between the first pass's
slot argmax and that alignment) slots, uniform among the row's slots, then read the alignment's
token (the blank as [MASK], which is the blank) instead of the source token; the CTC loss of the
stages runs from there over every slot (CTC scores whole alignments, so no slot is left out).

A ratio per batch (`model.ctc_upsample_max` = K > k; off when 0): in training each batch runs
over floor(r n) slots per source of n tokens, r the smallest of k, k + 0.5, ..., K for which
every target of the batch fits (`batch_ratio`; K if none does), in a batch of floor(K S) slot
positions (the same jitted step for every r: r is traced, `upsample_ratio`). Decoding uses k.

A target that no alignment of its source's slots can produce (more tokens, plus one blank
between each pair of equal neighbours, than slots) has probability 0: it is left out of the loss
and counted (aux "ctc_infeasible"). Shape letters: padir/__init__.py; A alignment slots.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from gmlm.core import draws
from padir.data import tokenizer as tokenizer_lib
from padir.decoding import refinement
from padir.model import losses
from padir.model import transformer as model_lib
from padir.model.slots import num_slots, slot_repeats, upsample  # the layout CTC and DAG share

Array = jax.Array
BLANK_ID = tokenizer_lib.MASK_ID  # the blank: [MASK] never occurs inside a target
# Never predicted at a slot: the blank is, unlike in refinement (losses.NEVER_PREDICTED).
NEVER_AT_SLOT = tuple(i for i in tokenizer_lib.NEVER_PREDICTED if i != BLANK_ID)
RATIO_STEP = 0.5


def upsample_ratio(inputs_BS: Array, r: Array, A: int) -> Array:
  """[B, A] the slots of a traced ratio r >= 1 in A >= floor(r S) positions: source position i
  gets slots floor(i r) .. floor((i + 1) r) - 1 (the layout of `upsample` for k = r), PAD after
  floor(r S) and wherever the source is PAD."""
  S = inputs_BS.shape[1]
  ends_S = jnp.floor(jnp.arange(1, S + 1, dtype=jnp.float32) * r + 1e-4).astype(jnp.int32)
  j_A = jnp.arange(A)
  src_A = jnp.minimum((ends_S[None, :] <= j_A[:, None]).sum(-1), S - 1)
  x_BA = jnp.take(inputs_BS, src_A, axis=1)
  return jnp.where(j_A[None] < ends_S[-1], x_BA, tokenizer_lib.PAD_ID)


def batch_ratio(inputs_BS: Array, targets_BT: Array, k: float, k_max: float) -> Array:
  """The smallest r in k, k + RATIO_STEP, ..., k_max with floor(r n) >= needed_slots for every
  row (n its source tokens), else the largest: a traced float32 scalar."""
  return _ratio(jnp, inputs_BS, targets_BT, k, k_max)


def _ratio(xp, inputs_BS, targets_BT, k: float, k_max: float):
  """batch_ratio in the array module xp: jnp traced, np on the host (batch_slots); float32 in
  both, so the two choose the same ratio."""
  grid_G = xp.asarray(np.arange(k, k_max + 1e-9, RATIO_STEP), xp.float32)
  n_B = (inputs_BS != tokenizer_lib.PAD_ID).sum(-1).astype(xp.float32)
  slots_GB = xp.floor(grid_G[:, None] * n_B[None] + xp.float32(1e-4)).astype(xp.int32)
  fits_G = (slots_GB >= needed_slots(targets_BT)[None]).all(-1)
  return grid_G[xp.where(fits_G.any(), xp.argmax(fits_G), grid_G.shape[0] - 1)]


def batch_slots(
  inputs_BS: np.ndarray, targets_BT: np.ndarray, k: float, k_max: float, bucket: int
) -> int:
  """The slot positions a training batch uses, on the host: the most any row of it has
  (floor(r n), r the batch's ratio (`batch_ratio`, or k without k_max), n the row's source
  tokens), rounded up to a multiple of `bucket` and at most the full width floor(K S). Every
  position past it is PAD in every row, so a loss over these positions alone is the loss over
  all (tests/padir/test_padir_ctc.py), with a decoder that runs over fewer positions; the
  bucket bounds how many programs the shapes compile to."""
  inputs_BS, targets_BT = np.asarray(inputs_BS), np.asarray(targets_BT)
  S = inputs_BS.shape[1]
  n_B = (inputs_BS != tokenizer_lib.PAD_ID).sum(-1)
  if k_max and k_max > k:
    r = _ratio(np, inputs_BS, targets_BT, k, k_max)
    full = num_slots(S, k_max)
    used = int(np.floor(r * n_B.astype(np.float32) + np.float32(1e-4)).max(initial=0))
  else:
    full = num_slots(S, k)
    used = max((int(slot_repeats(S, k)[:n].sum()) for n in n_B), default=0)
  return min(full, max(bucket, -(-used // bucket) * bucket))


def _slot_bias(V: int, blank_penalty: float = 0.0) -> np.ndarray:
  """[V] added to a slot's logits: -inf at the tokens no slot predicts, -blank_penalty at the
  blank, 0 elsewhere."""
  bias_V = np.where(np.isin(np.arange(V), NEVER_AT_SLOT), -np.inf, 0.0)
  bias_V[BLANK_ID] = -blank_penalty
  return bias_V


def slot_argmax(logits_BAV: Array, slots_BA: Array, blank_penalty: float = 0.0) -> Array:
  """[B, A] each slot's most probable token or blank (PAD, BOS, [LEN] banned; the blank's logit
  lowered by blank_penalty, decoding's length control); PAD outside the slots."""
  bias_V = jnp.asarray(_slot_bias(logits_BAV.shape[-1], blank_penalty), logits_BAV.dtype)
  best_BA = draws.argmax(logits_BAV + bias_V)
  return jnp.where(slots_BA, best_BA, tokenizer_lib.PAD_ID)


def collapse(align_BA: Array, max_len: int) -> Array:
  """[B, max_len] the output of alignments: adjacent equal tokens merged, blanks (and PAD)
  removed, the rest moved left in order, cut after the first EOS, PAD after (and truncated to
  max_len)."""
  prev_BA = jnp.concatenate([jnp.full_like(align_BA[:, :1], -1), align_BA[:, :-1]], axis=1)
  keep_BA = (align_BA != BLANK_ID) & (align_BA != tokenizer_lib.PAD_ID) & (align_BA != prev_BA)
  tokens_BA, _, _ = refinement.compact(align_BA, keep_BA, jnp.zeros(align_BA.shape, jnp.float32))
  A = tokens_BA.shape[1]
  if A >= max_len:
    return tokens_BA[:, :max_len]
  return jnp.pad(tokens_BA, ((0, 0), (0, max_len - A)), constant_values=tokenizer_lib.PAD_ID)


def needed_slots(targets_BT: Array) -> Array:
  """[B] the fewest slots an alignment to each target needs: its tokens plus one blank between
  each pair of equal neighbours."""
  valid_BT = targets_BT != tokenizer_lib.PAD_ID
  repeats_BT = valid_BT[:, 1:] & (targets_BT[:, 1:] == targets_BT[:, :-1])
  return valid_BT.sum(-1) + repeats_BT.sum(-1)


def stage_loss(logits_BAV: Array, slots_BA: Array, targets_BT: Array) -> tuple[Array, Array, Array]:
  """(the CTC loss summed over the feasible rows / their target tokens, [B] feasible rows,
  [B] per-row negative log-likelihoods)."""
  feasible_B = needed_slots(targets_BT) <= slots_BA.sum(-1)
  nll_B = optax.ctc_loss(
    logits_BAV.astype(jnp.float32),
    (~slots_BA).astype(jnp.float32),
    targets_BT,
    (targets_BT == tokenizer_lib.PAD_ID).astype(jnp.float32),
    blank_id=BLANK_ID,
  )
  tokens_B = (targets_BT != tokenizer_lib.PAD_ID).sum(-1)
  denom = jnp.maximum((tokens_B * feasible_B).sum(), 1).astype(jnp.float32)
  return jnp.where(feasible_B, nll_B, 0.0).sum() / denom, feasible_B, nll_B


def extended_labels(targets_BT: Array) -> Array:
  """[B, 2T + 1] the target with a blank before, between and after its tokens (PAD tokens
  stay PAD): position 2j + 1 holds token j, the even positions the blank."""
  B, T = targets_BT.shape
  ext = jnp.full((B, 2 * T + 1), BLANK_ID, targets_BT.dtype)
  return ext.at[:, 1::2].set(targets_BT)


def best_alignment(logits_BAV: Array, slots_BA: Array, targets_BT: Array) -> tuple[Array, Array]:
  """Viterbi over the CTC lattice: (a* [B, A], its summed log-probability [B]). a* is the
  alignment of the row's slots (a prefix of the A positions; PAD after) that collapses to the
  target (`collapse`) with the largest sum of slot log-probabilities (log_softmax of the logits,
  the tokens `slot_argmax` bans excluded). A row whose target needs more slots than it has gets
  score -inf and an alignment of blanks (its glancing reveals nothing)."""
  B, A, V = logits_BAV.shape
  bias_V = jnp.asarray(_slot_bias(V), jnp.float32)
  logp_BAV = jax.nn.log_softmax(logits_BAV.astype(jnp.float32) + bias_V, axis=-1)
  ext_BE = extended_labels(targets_BT)
  E = ext_BE.shape[1]
  U_B = (targets_BT != tokenizer_lib.PAD_ID).sum(-1)
  emit_ABE = jnp.take_along_axis(logp_BAV, ext_BE[:, None, :], axis=-1).swapaxes(0, 1)
  e_E = jnp.arange(E)
  in_path_BE = e_E[None] <= 2 * U_B[:, None]
  # A skip (e - 2 -> e) is allowed into a token position whose token differs from the one two
  # back (no skipping the blank between two equal tokens).
  ext_prev2_BE = jnp.pad(ext_BE, ((0, 0), (2, 0)), constant_values=BLANK_ID)[:, :E]
  skip_BE = (e_E[None] % 2 == 1) & (e_E[None] >= 2) & (ext_BE != ext_prev2_BE)
  neg = jnp.float32(-jnp.inf)
  start_BE = jnp.where((e_E[None] <= 1) & in_path_BE, emit_ABE[0], neg)
  live_AB = slots_BA.swapaxes(0, 1)

  def step(delta_BE, x):
    emit_BE, live_B = x
    stay, one = delta_BE, jnp.pad(delta_BE, ((0, 0), (1, 0)), constant_values=neg)[:, :E]
    two = jnp.where(skip_BE, jnp.pad(delta_BE, ((0, 0), (2, 0)), constant_values=neg)[:, :E], neg)
    cand_BE3 = jnp.stack([stay, one, two], axis=-1)
    back_BE = jnp.argmax(cand_BE3, axis=-1).astype(jnp.int8)
    new_BE = jnp.where(in_path_BE, cand_BE3.max(-1) + emit_BE, neg)
    new_BE = jnp.where(live_B[:, None], new_BE, delta_BE)
    back_BE = jnp.where(live_B[:, None], back_BE, jnp.int8(0))  # a padded slot: stay
    return new_BE, back_BE

  last_BE, back_ABE = jax.lax.scan(step, start_BE, (emit_ABE[1:], live_AB[1:]))
  end_tok = jnp.take_along_axis(last_BE, jnp.maximum(2 * U_B - 1, 0)[:, None], axis=1)[:, 0]
  end_blank = jnp.take_along_axis(last_BE, (2 * U_B)[:, None], axis=1)[:, 0]
  end_B = jnp.where((end_tok > end_blank) & (U_B > 0), 2 * U_B - 1, 2 * U_B).astype(jnp.int32)
  score_B = jnp.maximum(end_tok, end_blank)

  def back(e_B, back_BE):
    prev_B = e_B - jnp.take_along_axis(back_BE, e_B[:, None], axis=1)[:, 0].astype(jnp.int32)
    return prev_B, e_B

  first_B, path_AB = jax.lax.scan(back, end_B, back_ABE, reverse=True)
  path_BA = jnp.concatenate([first_B[:, None], path_AB.swapaxes(0, 1)], axis=1)
  align_BA = jnp.take_along_axis(ext_BE, path_BA, axis=1)
  feasible_B = jnp.isfinite(score_B)
  align_BA = jnp.where(feasible_B[:, None], align_BA, BLANK_ID)
  return jnp.where(slots_BA, align_BA, tokenizer_lib.PAD_ID), score_B


def glance(
  key: Array, logits_BAV: Array, slots_BA: Array, targets_BT: Array, x_BA: Array, ratio: Array
) -> tuple[Array, Array]:
  """Glancing over the best alignment (module docstring): (the new decoder input, the revealed
  slots [B, A]). No gradient flows through the first pass's logits."""
  logits_BAV = jax.lax.stop_gradient(logits_BAV)
  best_BA, score_B = best_alignment(logits_BAV, slots_BA, targets_BT)
  pred_BA = slot_argmax(logits_BAV, slots_BA)
  distance_B = ((pred_BA != best_BA) & slots_BA).sum(-1)
  distance_B = jnp.where(jnp.isfinite(score_B), distance_B, 0)
  num_B = jnp.floor(ratio * distance_B.astype(jnp.float32)).astype(jnp.int32)
  revealed_BA = losses.random_subset(key, slots_BA, num_B)
  return jnp.where(revealed_BA, best_BA, x_BA), revealed_BA


def output_lengths(tokens_BT: Array) -> Array:
  """[B] tokens of collapsed outputs (EOS included)."""
  return (tokens_BT != tokenizer_lib.PAD_ID).sum(-1)


def ctc_loss(
  model: model_lib.Transformer,
  batch: dict[str, Array],
  *,
  num_stages: int = 2,
  stage_reduction: str = "mean",
  glancing: Array | float | None = None,
  key: Array | None = None,
  num_slots_used: int | None = None,
  scan_stages: bool = False,
) -> tuple[Array, dict[str, Array]]:
  """The multi-stage CTC loss of a model with ctc_upsample = k > 0 (module docstring); aux:
  each stage's loss, the share of infeasible rows, and the last stage's collapsed output's
  length accuracy (exact, within 1 and 2 tokens: the same keys as the length head's).
  glancing (None: off): the ratio of glancing over the best alignment, which draws its slots
  from `key`; aux then has glance_ratio and glance_revealed (revealed slots per target token).
  num_slots_used (static; `batch_slots`): the decoder runs over the first this many slot
  positions only, the ones the batch's rows use (None: all floor(K S)). scan_stages, with
  scanned layers: the stages run as one scan (`transformer.run_stages`; the same function)."""
  k = model.cfg.ctc_upsample
  if k < 1:
    raise ValueError("ctc_loss needs a model with ctc_upsample >= 1")
  if num_stages < 1:
    raise ValueError(f"num_stages must be >= 1, got {num_stages}")
  inputs_BS, targets_BT = batch["inputs"], batch["targets"]
  enc_BSD, enc_mask_BS = model.encode(inputs_BS)
  fixed = model.project_encoder(enc_BSD)
  aux = {}
  k_max = model.cfg.ctc_upsample_max
  if k_max and k_max > k:
    aux["ctc_ratio"] = batch_ratio(inputs_BS, targets_BT, k, k_max)
    A = num_slots_used or num_slots(inputs_BS.shape[1], k_max)
    x_BA = upsample_ratio(inputs_BS, aux["ctc_ratio"], A)
  else:
    x_BA = upsample(inputs_BS, k)[:, :num_slots_used]
  slots_BA = x_BA != tokenizer_lib.PAD_ID
  if glancing is not None:
    if key is None:
      raise ValueError("glancing draws its slots from a key: pass key=")
    first_BAV = jax.lax.stop_gradient(model.decode(x_BA, None, enc_mask_BS, fixed))
    x_BA, revealed_BA = glance(key, first_BAV, slots_BA, targets_BT, x_BA, glancing)
    tokens = jnp.maximum((targets_BT != tokenizer_lib.PAD_ID).sum(), 1)
    aux["glance_ratio"] = jnp.asarray(glancing, jnp.float32)
    aux["glance_revealed"] = revealed_BA.sum() / tokens

  def one_stage(m, carry, _):
    x_BA, total = carry
    logits_BAV = m.decode(x_BA, None, enc_mask_BS, fixed)
    loss, feasible_B, _ = stage_loss(logits_BAV, slots_BA, targets_BT)
    x_BA = jax.lax.stop_gradient(slot_argmax(logits_BAV, slots_BA))
    return (x_BA, total + loss), (loss, feasible_B)

  (x_BA, total), (stage_losses, feasible_SB) = model_lib.run_stages(
    model,
    one_stage,
    (x_BA, jnp.float32(0.0)),
    jnp.arange(num_stages),
    scan=scan_stages,
  )
  feasible_B = feasible_SB[-1]
  for s in range(num_stages):
    aux[f"stage{s + 1}_loss"] = stage_losses[s]
  if stage_reduction == "mean":
    total = total / num_stages
  elif stage_reduction != "sum":
    raise ValueError(f"stage_reduction must be 'mean' or 'sum', got {stage_reduction!r}")
  error_B = jnp.abs(
    output_lengths(collapse(x_BA, targets_BT.shape[1])) - losses.target_lengths(targets_BT)
  )
  tokens_B = (targets_BT != tokenizer_lib.PAD_ID).sum(-1)
  aux.update(
    token_loss=total,
    token_count=(tokens_B * feasible_B).sum().astype(jnp.float32),  # the loss's denominator
    ctc_infeasible=1.0 - feasible_B.mean(),
    length_accuracy=(error_B == 0).mean(),
    length_within1=(error_B <= 1).mean(),
    length_within2=(error_B <= 2).mean(),
  )
  return total, aux


def decode(
  model: model_lib.Transformer, inputs_BS: Array, num_passes: int = 1, blank_penalty: float = 0.0
) -> dict[str, Array]:
  """CTC decoding (module docstring): tokens [B, max_target_length] (PAD after the first EOS),
  passes [B] (the passes run while the row was live: until one left its alignment unchanged, at
  most num_passes) and the last alignment [B, k S]. blank_penalty > 0 lowers the blank's logit
  at every slot (longer outputs; 0 = the model's argmax)."""
  k = model.cfg.ctc_upsample
  if k < 1:
    raise ValueError("CTC decoding needs a model with ctc_upsample >= 1")
  if num_passes < 1:
    raise ValueError(f"num_passes must be >= 1, got {num_passes}")
  enc_BSD, enc_mask_BS = model.encode(inputs_BS)
  fixed = model.project_encoder(enc_BSD)
  x_BA = upsample(inputs_BS, k)
  slots_BA = x_BA != tokenizer_lib.PAD_ID

  def one_pass(x_BA):
    return slot_argmax(model.decode(x_BA, None, enc_mask_BS, fixed), slots_BA, blank_penalty)

  def body(state):
    t, x_BA, passes_B, live_B = state
    y_BA = one_pass(x_BA)
    return t + 1, y_BA, passes_B + live_B, live_B & jnp.any(y_BA != x_BA, axis=-1)

  def running(state):
    t, _, _, live_B = state
    return (t < num_passes) & jnp.any(live_B)

  B = inputs_BS.shape[0]
  state = (jnp.int32(1), one_pass(x_BA), jnp.ones((B,), jnp.int32), jnp.ones((B,), bool))
  _, align_BA, passes_B, _ = jax.lax.while_loop(running, body, state)
  return {
    "tokens": collapse(align_BA, model.cfg.max_target_length),
    "passes": passes_B,
    "alignment": align_BA,
  }
