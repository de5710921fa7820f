"""CTC over an upsampled decoder (issue 26, item 4): PaDIR without a length predictor.

Libovický & Helcl (2018), Saharia et al. (2020, Imputer), Gu & Kong (2021): the non-autoregressive
decoder runs over A = k S alignment slots, k = model.ctc_upsample, reading the source tokens each
repeated k times (PAD stays PAD: a source of n tokens gets k n slots). Every slot predicts a token
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

A target that no alignment of its source's slots can produce (more tokens, plus one blank
between each pair of equal neighbours, than slots) has probability 0: it is left out of the loss
and counted (aux "ctc_infeasible"). Shape letters: padir/__init__.py; A alignment slots.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from padir import losses, refinement
from padir import model as model_lib
from padir import tokenizer as tokenizer_lib

Array = jax.Array
BLANK_ID = tokenizer_lib.MASK_ID  # the blank: [MASK] never occurs inside a target
# Never predicted at a slot: the blank is, unlike in refinement (losses.NEVER_PREDICTED).
NEVER_AT_SLOT = tuple(i for i in tokenizer_lib.NEVER_PREDICTED if i != BLANK_ID)


def upsample(inputs_BS: Array, k: int) -> Array:
  """[B, k S] the decoder's first input: each source token repeated k times, PAD kept."""
  if k < 1:
    raise ValueError(f"the CTC upsampling factor must be >= 1, got {k}")
  return jnp.repeat(inputs_BS, k, axis=1)


def slot_argmax(logits_BAV: Array, slots_BA: Array) -> Array:
  """[B, A] each slot's most probable token or blank (PAD, BOS, [LEN] banned); PAD outside the
  slots."""
  V = logits_BAV.shape[-1]
  banned_V = np.isin(np.arange(V), NEVER_AT_SLOT)
  bias_V = jnp.asarray(np.where(banned_V, -np.inf, 0.0), logits_BAV.dtype)
  best_BA = jnp.argmax(logits_BAV + bias_V, axis=-1).astype(jnp.int32)
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


def output_lengths(tokens_BT: Array) -> Array:
  """[B] tokens of collapsed outputs (EOS included)."""
  return (tokens_BT != tokenizer_lib.PAD_ID).sum(-1)


def ctc_loss(
  model: model_lib.Transformer,
  batch: dict[str, Array],
  *,
  num_stages: int = 2,
  stage_reduction: str = "mean",
) -> tuple[Array, dict[str, Array]]:
  """The multi-stage CTC loss of a model with ctc_upsample = k > 0 (module docstring); aux:
  each stage's loss, the share of infeasible rows, and the last stage's collapsed output's
  length accuracy (exact, within 1 and 2 tokens: the same keys as the length head's)."""
  k = model.cfg.ctc_upsample
  if k < 1:
    raise ValueError("ctc_loss needs a model with ctc_upsample >= 1")
  if num_stages < 1:
    raise ValueError(f"num_stages must be >= 1, got {num_stages}")
  inputs_BS, targets_BT = batch["inputs"], batch["targets"]
  enc_BSD, enc_mask_BS = model.encode(inputs_BS)
  fixed = model.project_encoder(enc_BSD)
  x_BA = upsample(inputs_BS, k)
  slots_BA = x_BA != tokenizer_lib.PAD_ID
  aux, total = {}, 0.0
  for s in range(1, num_stages + 1):
    logits_BAV = model.decode(x_BA, None, enc_mask_BS, fixed)
    loss, feasible_B, _ = stage_loss(logits_BAV, slots_BA, targets_BT)
    aux[f"stage{s}_loss"] = loss
    total = total + loss
    x_BA = jax.lax.stop_gradient(slot_argmax(logits_BAV, slots_BA))
  if stage_reduction == "mean":
    total = total / num_stages
  elif stage_reduction != "sum":
    raise ValueError(f"stage_reduction must be 'mean' or 'sum', got {stage_reduction!r}")
  error_B = jnp.abs(
    output_lengths(collapse(x_BA, targets_BT.shape[1])) - losses.target_lengths(targets_BT)
  )
  aux.update(
    token_loss=total,
    ctc_infeasible=1.0 - feasible_B.mean(),
    length_accuracy=(error_B == 0).mean(),
    length_within1=(error_B <= 1).mean(),
    length_within2=(error_B <= 2).mean(),
  )
  return total, aux


def decode(model: model_lib.Transformer, inputs_BS: Array, num_passes: int = 1) -> dict[str, Array]:
  """CTC decoding (module docstring): tokens [B, max_target_length] (PAD after the first EOS),
  passes [B] (the passes run while the row was live: until one left its alignment unchanged, at
  most num_passes) and the last alignment [B, k S]."""
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
    return slot_argmax(model.decode(x_BA, None, enc_mask_BS, fixed), slots_BA)

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
