"""PaDIR's noising rule and training losses (paper App. L.1.2 and L.2).

Noising: the initial hypothesis X(0) has the target's length; each target position keeps the
correct token with probability `keep_rate` (paper: 15%) and is otherwise replaced, by [MASK]
with probability `mask_rate` and else by a uniformly random regular vocabulary token (paper:
mask_rate = 0, i.e. 85% random tokens). PAD positions stay PAD.

Multi-stage loss (Ghazvininejad et al. 2020; Savinov et al. 2022): stage 1 refines X(0); stage
s+1 refines X(s) = the argmax (or a sample) of stage s, with no gradient through that choice;
    loss = (1/num_stages) sum_s CE(decoder(X(s-1), encoder(source)), target)
           + length_weight * CE_length
(the paper's average over stages; `stage_reduction="sum"` drops the 1/num_stages). Token CE is
averaged over non-PAD target positions; the length CE over examples (over offset classes with
the model's max_length_offset).

Glancing (Qian et al. 2021, GLAT; off by default): a first decoder pass on X(0) without
gradient; floor(ratio x its Hamming distance from the target) reference tokens, at uniform
random non-PAD positions, replace X(0) there; the stages run from that input and their token
loss leaves the revealed positions out. The ratio follows a schedule over training steps
(`glancing_ratio`).
"""

from __future__ import annotations

import functools
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from padir.data import tokenizer as tokenizer_lib
from padir.model import transformer as model_lib

Array = jax.Array


def initial_hypothesis(
  key: Array, targets_BT: Array, *, vocab_size: int, keep_rate: float = 0.15, mask_rate: float = 0.0
) -> Array:
  """X(0) for training: per non-PAD position, keep w.p. keep_rate, else [MASK] or random token."""
  key_keep, key_mask, key_token = jax.random.split(key, 3)
  keep_BT = jax.random.bernoulli(key_keep, keep_rate, targets_BT.shape)
  use_mask_BT = jax.random.bernoulli(key_mask, mask_rate, targets_BT.shape)
  random_BT = jax.random.randint(
    key_token, targets_BT.shape, tokenizer_lib.NUM_SPECIAL, vocab_size, dtype=targets_BT.dtype
  )
  noise_BT = jnp.where(use_mask_BT, jnp.asarray(tokenizer_lib.MASK_ID, targets_BT.dtype), random_BT)
  x0_BT = jnp.where(keep_BT, targets_BT, noise_BT)
  return jnp.where(targets_BT == tokenizer_lib.PAD_ID, targets_BT, x0_BT)


def token_cross_entropy(
  logits_BTV: Array, targets_BT: Array, loss_mask_BT: Array | None = None
) -> tuple[Array, Array]:
  """(mean CE over non-PAD target positions, accuracy of the argmax over the same positions);
  loss_mask_BT (e.g. glancing's unrevealed positions) narrows the positions further."""
  weights_BT = token_weights(targets_BT, loss_mask_BT)
  logp_BTV = jax.nn.log_softmax(logits_BTV.astype(jnp.float32), axis=-1)
  # A one-hot product, not take_along_axis: on XLA CPU the gather's gradient (a scatter into
  # [B, T, V]) made the loss gradient ~1.5x slower.
  nll_BT = -jnp.einsum("BTV,BTV->BT", logp_BTV, jax.nn.one_hot(targets_BT, logits_BTV.shape[-1]))
  denom = jnp.maximum(weights_BT.sum(), 1.0)
  accuracy = ((jnp.argmax(logits_BTV, -1) == targets_BT) * weights_BT).sum() / denom
  return (nll_BT * weights_BT).sum() / denom, accuracy


def token_weights(targets_BT: Array, loss_mask_BT: Array | None = None) -> Array:
  """[B, T] float32: 1 where token_cross_entropy counts a position (non-PAD, in loss_mask)."""
  weights_BT = targets_BT != tokenizer_lib.PAD_ID
  if loss_mask_BT is not None:
    weights_BT = weights_BT & loss_mask_BT
  return weights_BT.astype(jnp.float32)


def chunked_token_loss(
  cfg: model_lib.ModelConfig,
  h_BTD: Array,
  embed_VD: Array,
  targets_BT: Array,
  loss_mask_BT: Array | None = None,
  *,
  chunk: int,
) -> tuple[Array, Array, Array]:
  """token_cross_entropy(output_logits(cfg, h_BTD, embed_VD), ...) without the [B, T, V] float32
  logits held for the backward pass (config.loss.logits_chunk, issue 40): the B T positions in
  chunks of `chunk` under jax.lax.scan, each chunk's logits, log-softmax and one-hot product under
  jax.checkpoint, so the backward pass recomputes them chunk by chunk from the states it keeps
  ([B, T, D]). Returns (loss, accuracy, [B, T] the argmax with ban_never_predicted's ids banned:
  next_stage_input's "argmax", PAD where the target is PAD)."""
  B, T, D = h_BTD.shape
  n = B * T
  num_chunks = -(-n // chunk)
  pad = num_chunks * chunk - n
  flat = lambda a, value: jnp.pad(
    a.reshape(n, *a.shape[2:]), ((0, pad),) + ((0, 0),) * (a.ndim - 2), constant_values=value
  )
  h_KCD = flat(h_BTD, 0).reshape(num_chunks, chunk, D)
  targets_KC = flat(targets_BT, tokenizer_lib.PAD_ID).reshape(num_chunks, chunk)
  V = cfg.padded_vocab_size
  ban_V = jnp.asarray(np.where(np.isin(np.arange(V), tokenizer_lib.NEVER_PREDICTED), -np.inf, 0.0))

  @functools.partial(jax.checkpoint, prevent_cse=False)
  def one_chunk(embed_VD, h_CD, targets_C):
    logits_CV = model_lib.output_logits(cfg, h_CD, embed_VD)
    logp_CV = jax.nn.log_softmax(logits_CV, axis=-1)
    nll_C = -jnp.einsum("CV,CV->C", logp_CV, jax.nn.one_hot(targets_C, V))
    logits_CV = jax.lax.stop_gradient(logits_CV)
    best_C = jnp.argmax(logits_CV, -1)
    allowed_C = jnp.argmax(logits_CV + ban_V.astype(logits_CV.dtype), -1)
    return nll_C, best_C, allowed_C

  _, (nll_KC, best_KC, allowed_KC) = jax.lax.scan(
    lambda _, xs: (None, one_chunk(embed_VD, *xs)), None, (h_KCD, targets_KC)
  )
  unflat = lambda a_KC: a_KC.reshape(-1)[:n].reshape(B, T)
  weights_BT = token_weights(targets_BT, loss_mask_BT)
  denom = jnp.maximum(weights_BT.sum(), 1.0)
  accuracy = ((unflat(best_KC) == targets_BT) * weights_BT).sum() / denom
  pred_BT = unflat(allowed_KC).astype(targets_BT.dtype)
  pred_BT = jnp.where(targets_BT == tokenizer_lib.PAD_ID, targets_BT, pred_BT)
  return (unflat(nll_KC) * weights_BT).sum() / denom, accuracy, pred_BT


def target_lengths(targets_BT: Array) -> Array:
  return (targets_BT != tokenizer_lib.PAD_ID).sum(axis=-1)


def length_cross_entropy(length_logits_BC: Array, lengths_B: Array) -> tuple[Array, Array]:
  logp_BC = jax.nn.log_softmax(length_logits_BC.astype(jnp.float32), axis=-1)
  nll_B = -jnp.take_along_axis(logp_BC, lengths_B[:, None], axis=-1)[:, 0]
  return nll_B.mean(), (jnp.argmax(length_logits_BC, -1) == lengths_B).mean()


def length_loss(
  model: model_lib.Transformer, enc_BSD: Array, enc_mask_BS: Array, targets_BT: Array
) -> tuple[Array, dict[str, Array]]:
  """The length CE (over absolute lengths, or over offset classes with max_length_offset) and
  the accuracy of the predicted length (the argmax of model.length_logits, an absolute length
  in both parameterisations): exact, and within 1 and 2 tokens."""
  lengths_B = target_lengths(targets_BT)
  head_BK = model.length_head_logits(enc_BSD)
  M = model.cfg.max_length_offset
  if M:
    classes_B = model_lib.offset_classes(model_lib.source_lengths(enc_mask_BS), lengths_B, M)
    loss, _ = length_cross_entropy(head_BK, classes_B)
    predicted_B = jnp.argmax(model.length_logits(enc_BSD, enc_mask_BS), -1)
  else:
    loss, _ = length_cross_entropy(head_BK, lengths_B)
    predicted_B = jnp.argmax(head_BK, -1)
  error_B = jnp.abs(predicted_B - lengths_B)
  return loss, {
    "length_loss": loss,
    "length_accuracy": (error_B == 0).mean(),
    "length_within1": (error_B <= 1).mean(),
    "length_within2": (error_B <= 2).mean(),
  }


def ban_never_predicted(logits_BTV: Array) -> Array:
  """-inf on PAD, BOS, [MASK], [LEN]: ids that never occur inside a target. A constant additive
  bias (0 elsewhere: the other logits unchanged), not a scatter: one fused add in a decoding loop."""
  V = logits_BTV.shape[-1]
  banned_V = np.isin(np.arange(V), tokenizer_lib.NEVER_PREDICTED)
  return logits_BTV + jnp.asarray(np.where(banned_V, -np.inf, 0.0), logits_BTV.dtype)


def next_stage_input(
  key: Array,
  logits_BTV: Array,
  targets_BT: Array,
  stage_input: Literal["argmax", "sample"] = "argmax",
) -> Array:
  """X(s) from stage s's logits (never a special id), PAD where the target is PAD; no gradient
  flows through it."""
  logits_BTV = ban_never_predicted(logits_BTV)
  if stage_input == "argmax":
    pred_BT = jnp.argmax(logits_BTV, axis=-1)
  elif stage_input == "sample":
    pred_BT = jax.random.categorical(key, logits_BTV, axis=-1)
  else:
    raise ValueError(f"stage_input must be 'argmax' or 'sample', got {stage_input!r}")
  pred_BT = jax.lax.stop_gradient(pred_BT).astype(targets_BT.dtype)
  return jnp.where(targets_BT == tokenizer_lib.PAD_ID, targets_BT, pred_BT)


def glancing_ratio(step: Array, start: float, end: float, anneal_steps: int) -> Array:
  """GLAT's ratio at a training step: linear from `start` to `end` over anneal_steps (0: start
  throughout), then `end`."""
  if anneal_steps <= 0:
    return jnp.float32(start)
  frac = jnp.clip(jnp.asarray(step, jnp.float32) / anneal_steps, 0.0, 1.0)
  return jnp.float32(start) + (jnp.float32(end) - jnp.float32(start)) * frac


def glance(
  key: Array, logits_BTV: Array, targets_BT: Array, x_BT: Array, ratio: Array
) -> tuple[Array, Array]:
  """Glancing (Qian et al. 2021, GLAT): from a first pass's logits, per sentence
  N = floor(ratio x Hamming distance of its argmax from the target) positions, uniform among
  the non-PAD ones, take the reference token in the decoder input x_BT. Returns (the new input,
  the revealed positions). No gradient flows through the first pass."""
  logits_BTV = jax.lax.stop_gradient(ban_never_predicted(logits_BTV))
  valid_BT = targets_BT != tokenizer_lib.PAD_ID
  pred_BT = jnp.argmax(logits_BTV, axis=-1)
  distance_B = ((pred_BT != targets_BT) & valid_BT).sum(-1)
  num_B = jnp.floor(ratio * distance_B.astype(jnp.float32)).astype(jnp.int32)
  revealed_BT = random_subset(key, valid_BT, num_B)
  return jnp.where(revealed_BT, targets_BT, x_BT), revealed_BT


def random_subset(key: Array, valid_BT: Array, num_B: Array) -> Array:
  """[B, T] num_B positions per row, uniform among the row's valid ones (glancing's choice)."""
  score_BT = jnp.where(valid_BT, jax.random.uniform(key, valid_BT.shape), jnp.inf)
  rank_BT = jnp.argsort(jnp.argsort(score_BT, axis=-1), axis=-1)
  return (rank_BT < num_B[:, None]) & valid_BT


def multi_stage_loss(
  model: model_lib.Transformer,
  inputs_BS: Array,
  targets_BT: Array,
  x0_BT: Array,
  key: Array,
  *,
  num_stages: int = 2,
  stage_input: Literal["argmax", "sample"] = "argmax",
  stage_reduction: Literal["mean", "sum"] = "mean",
  length_weight: float = 1.0,
  glancing: Array | float | None = None,
  logits_chunk: int = 0,
  scan_stages: bool = False,
) -> tuple[Array, dict[str, Array]]:
  """The PaDIR loss from a given X(0); aux holds per-stage metrics and the stage inputs.
  logits_chunk > 0: each stage's token CE by chunked_token_loss (that many positions a chunk).
  scan_stages (config.loss.scan_stages), with scanned layers: the stages run as one scan, the
  decoder traced once for all of them (`transformer.run_stages`; the same function).

  glancing (None: off): GLAT's ratio. A first decoder pass on X(0), without gradient, then
  `glance` reveals reference tokens in X(0); every stage's token loss leaves the revealed
  positions out (aux["revealed"])."""
  if num_stages < 1:
    raise ValueError(f"num_stages must be >= 1, got {num_stages}")
  enc_BSD, enc_mask_BS = model.encode(inputs_BS)
  len_loss, aux = length_loss(model, enc_BSD, enc_mask_BS, targets_BT)
  loss_mask_BT = None
  if glancing is not None:
    key, key_glance = jax.random.split(key)
    first_BTV = jax.lax.stop_gradient(model.decode(x0_BT, enc_BSD, enc_mask_BS))
    x0_BT, revealed_BT = glance(key_glance, first_BTV, targets_BT, x0_BT, glancing)
    loss_mask_BT = ~revealed_BT
    tokens = jnp.maximum((targets_BT != tokenizer_lib.PAD_ID).sum(), 1)
    aux["glance_ratio"] = jnp.asarray(glancing, jnp.float32)
    aux["glance_revealed"] = revealed_BT.sum() / tokens
    aux["revealed"] = revealed_BT

  def one_stage(m, carry, stage_key):
    """Stage s: its loss on X(s-1) and X(s) (computed after the last stage too, unused there)."""
    x_BT, token_loss = carry
    if logits_chunk:
      h_BTD = m.decode_hidden(x_BT, enc_BSD, enc_mask_BS)
      loss, accuracy, pred_BT = chunked_token_loss(
        m.cfg, h_BTD, m.embed_VD[...], targets_BT, loss_mask_BT, chunk=logits_chunk
      )
      if stage_input == "argmax":
        x_next_BT = jax.lax.stop_gradient(pred_BT)
      else:  # a sample needs the logits: whole, but never kept for the backward
        logits_BTV = jax.lax.stop_gradient(m._logits(h_BTD))
        x_next_BT = next_stage_input(stage_key, logits_BTV, targets_BT, stage_input)
    else:
      logits_BTV = m.decode(x_BT, enc_BSD, enc_mask_BS)
      loss, accuracy = token_cross_entropy(logits_BTV, targets_BT, loss_mask_BT)
      x_next_BT = next_stage_input(stage_key, logits_BTV, targets_BT, stage_input)
    return (x_next_BT, token_loss + loss), (x_BT, loss, accuracy)

  (_, token_loss), (stage_inputs, stage_losses, stage_accuracies) = model_lib.run_stages(
    model,
    one_stage,
    (x0_BT, jnp.float32(0.0)),
    jax.random.split(key, num_stages),
    scan=scan_stages,
  )
  for s in range(num_stages):
    aux[f"stage{s + 1}_loss"], aux[f"stage{s + 1}_accuracy"] = stage_losses[s], stage_accuracies[s]
  if stage_reduction == "mean":
    token_loss = token_loss / num_stages
  elif stage_reduction != "sum":
    raise ValueError(f"stage_reduction must be 'mean' or 'sum', got {stage_reduction!r}")
  aux["token_loss"] = token_loss
  aux["token_count"] = token_weights(targets_BT, loss_mask_BT).sum()  # the CE's denominator
  aux["stage_inputs"] = stage_inputs  # [num_stages, B, T]
  return token_loss + length_weight * len_loss, aux


def padir_loss(
  model: model_lib.Transformer,
  batch: dict[str, Array],
  key: Array,
  *,
  keep_rate: float = 0.15,
  mask_rate: float = 0.0,
  num_stages: int = 2,
  stage_input: Literal["argmax", "sample"] = "argmax",
  stage_reduction: Literal["mean", "sum"] = "mean",
  length_weight: float = 1.0,
  glancing: Array | float | None = None,
  logits_chunk: int = 0,
  scan_stages: bool = False,
) -> tuple[Array, dict[str, Array]]:
  """Noise the targets (initial_hypothesis), then multi_stage_loss (glancing: its ratio)."""
  key_noise, key_stages = jax.random.split(key)
  x0_BT = initial_hypothesis(
    key_noise,
    batch["targets"],
    vocab_size=model.cfg.vocab_size,
    keep_rate=keep_rate,
    mask_rate=mask_rate,
  )
  return multi_stage_loss(
    model,
    batch["inputs"],
    batch["targets"],
    x0_BT,
    key_stages,
    num_stages=num_stages,
    stage_input=stage_input,
    stage_reduction=stage_reduction,
    length_weight=length_weight,
    glancing=glancing,
    logits_chunk=logits_chunk,
    scan_stages=scan_stages,
  )


def shift_right(targets_BT: Array) -> Array:
  """[BOS] + targets[:-1]: the teacher-forcing decoder input of the AR baseline."""
  bos_B1 = jnp.full((targets_BT.shape[0], 1), tokenizer_lib.BOS_ID, targets_BT.dtype)
  shifted_BT = jnp.concatenate([bos_B1, targets_BT[:, :-1]], axis=1)
  return jnp.where(targets_BT == tokenizer_lib.PAD_ID, targets_BT, shifted_BT)


def ar_loss(
  model: model_lib.Transformer, batch: dict[str, Array], logits_chunk: int = 0
) -> tuple[Array, dict[str, Array]]:
  """Teacher-forced next-token CE of the AR baseline (decoder='ar'); logits_chunk > 0: by
  chunked_token_loss."""
  if model.cfg.decoder != "ar":
    raise ValueError("ar_loss needs a model with decoder='ar'")
  targets_BT = batch["targets"]
  enc_BSD, enc_mask_BS = model.encode(batch["inputs"])
  if logits_chunk:
    h_BTD = model.decode_hidden(shift_right(targets_BT), enc_BSD, enc_mask_BS)
    loss, accuracy, _ = chunked_token_loss(
      model.cfg, h_BTD, model.embed_VD[...], targets_BT, chunk=logits_chunk
    )
  else:
    logits_BTV = model.decode(shift_right(targets_BT), enc_BSD, enc_mask_BS)
    loss, accuracy = token_cross_entropy(logits_BTV, targets_BT)
  count = token_weights(targets_BT).sum()
  return loss, {"token_loss": loss, "accuracy": accuracy, "token_count": count}
