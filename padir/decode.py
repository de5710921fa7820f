"""Inference: PaDIR iterative refinement (paper App. L.1.1) and greedy AR decoding.

PaDIR: encode once; take the top-k target lengths of the length predictor; for each, start from
random tokens (or [MASK]) and run T decoder passes X(t+1) = argmax decoder(X(t), h), stopping
early when no hypothesis changes. Optionally (paper App. L.2) token-level stutter (a token equal
to its left neighbour) is re-masked between iterations and dropped after the last one
(`drop_stutter`, on the host). The candidate with the best mean token log-probability wins.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from padir import losses
from padir import model as model_lib
from padir import tokenizer as tokenizer_lib

Array = jax.Array


def _valid_lengths(length_logits_BC: Array) -> Array:
  """Length 0 is impossible (targets end with EOS)."""
  return length_logits_BC.at[:, 0].set(-jnp.inf)


def _stutter_BT(x_BT: Array) -> Array:
  prev_BT = jnp.pad(x_BT[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
  return (x_BT == prev_BT) & (x_BT != tokenizer_lib.PAD_ID)


def refine(model: model_lib.Transformer, inputs_BS: Array, key: Array, *, num_steps: int = 4,
           num_lengths: int = 1, init: str = "random", remask_stutter: bool = False,
           target_length: int | None = None) -> dict[str, Array]:
  """PaDIR decoding. Returns tokens [B, T] (PAD after the length), lengths [B], steps_run.

  target_length forces the hypothesis length (EOS included) instead of the length predictor.
  """
  B = inputs_BS.shape[0]
  T = model.cfg.max_target_length
  K = num_lengths
  enc_BSD, enc_mask_BS = model.encode(inputs_BS)
  if target_length is None:
    _, lengths_BK = jax.lax.top_k(_valid_lengths(model.length_logits(enc_BSD)), K)
  else:
    lengths_BK = jnp.full((B, K), target_length, jnp.int32)
  lengths_M = lengths_BK.reshape(B * K)  # M = B * K candidates
  enc_MSD = jnp.repeat(enc_BSD, K, axis=0)
  enc_mask_MS = jnp.repeat(enc_mask_BS, K, axis=0)
  inside_MT = jnp.arange(T)[None] < lengths_M[:, None]
  if init == "random":
    x0_MT = jax.random.randint(key, (B * K, T), tokenizer_lib.NUM_SPECIAL, model.cfg.vocab_size)
  elif init == "mask":
    x0_MT = jnp.full((B * K, T), tokenizer_lib.MASK_ID)
  else:
    raise ValueError(f"init must be 'random' or 'mask', got {init!r}")
  x0_MT = jnp.where(inside_MT, x0_MT, tokenizer_lib.PAD_ID).astype(jnp.int32)

  def step(x_MT):
    logits_MTV = losses.ban_never_predicted(model.decode(x_MT, enc_MSD, enc_mask_MS))
    pred_MT = jnp.where(inside_MT, jnp.argmax(logits_MTV, -1), tokenizer_lib.PAD_ID)
    logp_MT = jnp.take_along_axis(jax.nn.log_softmax(logits_MTV, -1), pred_MT[..., None], -1)[..., 0]
    return pred_MT.astype(jnp.int32), logp_MT

  def cond(state):
    t, _, _, changed = state
    return (t < num_steps) & changed

  def body(state):
    t, x_MT, _, _ = state
    pred_MT, logp_MT = step(x_MT)
    changed = jnp.any(pred_MT != x_MT)
    if remask_stutter:
      pred_MT = jnp.where(_stutter_BT(pred_MT) & (t + 1 < num_steps), tokenizer_lib.MASK_ID, pred_MT)
    return t + 1, pred_MT, logp_MT, changed

  logp0_MT = jnp.zeros((B * K, T), jnp.float32)
  steps, x_MT, logp_MT, _ = jax.lax.while_loop(cond, body, (0, x0_MT, logp0_MT, True))
  score_M = (logp_MT * inside_MT).sum(-1) / lengths_M
  best_B = jnp.argmax(score_M.reshape(B, K), axis=-1)
  pick = lambda a: a.reshape(B, K, *a.shape[1:])[jnp.arange(B), best_B]
  return {"tokens": pick(x_MT), "lengths": pick(lengths_M), "steps": steps}


def greedy_ar(model: model_lib.Transformer, inputs_BS: Array) -> Array:
  """Greedy decoding of the AR baseline: tokens [B, T], PAD after the first EOS (no KV cache)."""
  B, T = inputs_BS.shape[0], model.cfg.max_target_length
  enc_BSD, enc_mask_BS = model.encode(inputs_BS)

  def body(t, state):
    out_BT, done_B = state
    dec_in_BT = jnp.concatenate([jnp.full((B, 1), tokenizer_lib.BOS_ID, jnp.int32), out_BT[:, :-1]], 1)
    dec_in_BT = jnp.where(jnp.arange(T)[None] <= t, dec_in_BT, tokenizer_lib.PAD_ID)
    logits_BTV = losses.ban_never_predicted(model.decode(dec_in_BT, enc_BSD, enc_mask_BS))
    next_B = jnp.argmax(logits_BTV[:, t], -1).astype(jnp.int32)
    next_B = jnp.where(done_B, tokenizer_lib.PAD_ID, next_B)
    return out_BT.at[:, t].set(next_B), done_B | (next_B == tokenizer_lib.EOS_ID)

  out_BT = jnp.full((B, T), tokenizer_lib.PAD_ID, jnp.int32)
  out_BT, _ = jax.lax.fori_loop(0, T, body, (out_BT, jnp.zeros((B,), bool)))
  return out_BT


def drop_stutter(ids: Sequence[int] | np.ndarray) -> list[int]:
  """Removes tokens equal to their left neighbour (the paper's post-processing)."""
  out = []
  for i in np.asarray(ids).tolist():
    if not out or i != out[-1]:
      out.append(i)
  return out
