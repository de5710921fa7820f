"""The matmul FLOPs of one PaDIR training step, counted by hand from the model's shapes.

  flops = step_flops(cfg, Step(batch_size=B, source_length=S, target_length=T, num_stages=2))
  flops = run_step_flops(config, cfg, inputs_shape, targets_shape)   # a run config's step

Every option of a training run: the PaDIR loss (`num_stages` decoder passes, the length head),
CTC (the decoder runs over floor(k S) upsampled slots; the cross-attention keys and values
projected once per step, not per pass), the DAG (one decoder pass over floor(k S) vertices and
its link head; the DP over paths and the emissions' gather are no matmuls), the slot or vertex
positions a batch uses when the loop trims them (`Step.slots`), glancing (one more decoder
pass, forward only: no gradient flows through it), the AR baseline (one causal pass, no length head), and gradient
accumulation (K micro-batches of B / K rows: the positional attention's scores, shared by the
rows of a call, are computed once per micro-batch). A differentiated matmul costs 3x its
forward (the backward computes the gradients of both operands). Only matmuls are counted:
elementwise ops, softmax, the optimizer's update and the CTC recursion add a few % at the
sizes training runs (tests/padir/test_flops.py checks the count against the lowered module's).

Shape letters: padir/__init__.py (A: CTC alignment slots).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from padir.decoding import ctc
from padir.model import transformer as model_lib


@dataclasses.dataclass(frozen=True)
class Step:
  """The shapes and options of one training step that set its FLOPs."""

  batch_size: int  # rows per optimizer step (all micro-batches together)
  source_length: int  # the batch's source width (the encoder adds [LEN])
  target_length: int  # the batch's target width
  num_stages: int = 2
  glancing: bool = False
  grad_accum_steps: int = 1
  slots: int = 0  # a CTC or DAG batch's slot (vertex) positions (loop.slot_count; 0: all)


def _attention(q: int, k: int, D: int) -> int:
  """Scores and the weighted sum of q queries over k keys, all heads."""
  return 2 * 2 * q * k * D


def encoder_flops(cfg: model_lib.ModelConfig, S: int) -> int:
  """Forward FLOPs of the encoder for one row of S source tokens (S + 1 positions)."""
  D, F, Sp = cfg.d_model, cfg.d_ff, S + 1
  layer = 2 * Sp * 4 * D * D + _attention(Sp, Sp, D) + 2 * 2 * Sp * D * F
  return cfg.num_encoder_layers * layer


def decoder_flops(cfg: model_lib.ModelConfig, T: int, S: int, *, cross_kv: bool = True) -> int:
  """Forward FLOPs of one decoder pass for one row: T query positions over S + 1 encoder states,
  the output projection included; cross_kv: the cross-attention keys and values projected in
  this pass (False: project_encoder did it once). The positional attention's query and key
  projections and scores are shared by the rows of a call: `positional_shared_flops`."""
  D, F, Sp = cfg.d_model, cfg.d_ff, S + 1
  layer = 2 * T * 4 * D * D + _attention(T, T, D)  # self-attention
  if cfg.positional_attention:
    layer += 2 * T * 2 * D * D + 2 * T * T * D  # values, output; the weighted sum
  layer += 2 * T * 2 * D * D + _attention(T, Sp, D)  # cross-attention queries, output
  if cross_kv:
    layer += 2 * Sp * 2 * D * D
  layer += 2 * 2 * T * D * F
  output = 2 * T * D * cfg.padded_vocab_size
  return cfg.num_decoder_layers * layer + output


def loss_flops(cfg: model_lib.ModelConfig, T: int, labels: int | None = None) -> int:
  """Forward FLOPs of one row's token loss over the logits of T positions, as a one-hot
  product: the target log-probabilities (labels=None), or CTC's emission log-probabilities of
  `labels` target tokens at each of T slots (optax.ctc_loss). Its backward costs as much again
  (one operand, the one-hot, is constant)."""
  return 2 * T * (labels or 1) * cfg.padded_vocab_size


def positional_shared_flops(cfg: model_lib.ModelConfig, T: int) -> int:
  """Forward FLOPs of one decoder pass that every row of a call shares: the positional
  attention's query and key projections of the T positions and their scores."""
  if not cfg.positional_attention:
    return 0
  D = cfg.d_model
  return cfg.num_decoder_layers * (2 * T * 2 * D * D + 2 * T * T * D)


def cross_kv_flops(cfg: model_lib.ModelConfig, S: int) -> int:
  """Forward FLOPs of projecting one row's S + 1 encoder states to every decoder layer's
  cross-attention keys and values (project_encoder)."""
  return cfg.num_decoder_layers * 2 * (S + 1) * 2 * cfg.d_model * cfg.d_model


def link_flops(cfg: model_lib.ModelConfig, A: int) -> int:
  """Forward FLOPs of the DAG's link head (padir.model.dag_links) for one row of A vertices:
  the query and key projections of every head, their scores and the head gate."""
  D, N = cfg.d_model, cfg.num_heads
  return 2 * A * D * D * 2 + 2 * A * A * D + 2 * A * D * N


def step_flops(cfg: model_lib.ModelConfig, step: Step) -> float:
  """Matmul FLOPs of one optimizer step (module docstring)."""
  K = step.grad_accum_steps
  if K < 1 or step.batch_size % K:
    raise ValueError(
      f"grad_accum_steps={K} must be >= 1 and divide the batch of {step.batch_size} rows"
    )
  B, S, T = step.batch_size // K, step.source_length, step.target_length
  enc = encoder_flops(cfg, S)
  if cfg.decoder == "ar":  # one teacher-forced pass, no length head
    trained = B * (enc + decoder_flops(cfg, T, S)) + positional_shared_flops(cfg, T)
    return float(K * (3 * trained + 2 * B * loss_flops(cfg, T)))
  if cfg.dag_upsample:  # one pass over the vertices, the link head; the DP has no matmul
    A = step.slots or ctc.num_slots(S, cfg.dag_upsample)
    one_pass = B * (
      decoder_flops(cfg, A, S, cross_kv=False) + link_flops(cfg, A)
    ) + positional_shared_flops(cfg, A)
    trained = B * (enc + cross_kv_flops(cfg, S)) + one_pass
    glance = one_pass if step.glancing else 0  # forward only
    return float(K * (3 * trained + glance))
  if cfg.ctc_upsample:
    A = step.slots or ctc.num_slots(S, cfg.ctc_upsample)
    one_pass = B * decoder_flops(cfg, A, S, cross_kv=False) + positional_shared_flops(cfg, A)
    trained = B * (enc + cross_kv_flops(cfg, S)) + step.num_stages * one_pass
    losses = step.num_stages * B * loss_flops(cfg, A, labels=T)
  else:
    one_pass = B * decoder_flops(cfg, T, S) + positional_shared_flops(cfg, T)
    length_head = 2 * cfg.d_model * cfg.num_length_classes
    trained = B * (enc + length_head) + step.num_stages * one_pass
    losses = step.num_stages * B * loss_flops(cfg, T)
  glance = one_pass if step.glancing else 0  # forward only
  return float(K * (3 * trained + 2 * losses + glance))


def run_step(config: Any, inputs_shape: tuple, targets_shape: tuple, slots: int = 0) -> Step:
  """The Step of a run config (loss.num_stages, loss.glancing_ratio, train.grad_accum_steps)
  for a batch of these shapes ([rows, width], or [micro-batches, rows, width]); slots: the
  batch's slot (vertex) positions where the loop trims them (loop.slot_count; 0: all)."""
  rows = 1
  for n in targets_shape[:-1]:
    rows *= int(n)
  loss = config.get("loss", {})
  return Step(
    batch_size=rows,
    source_length=int(inputs_shape[-1]),
    target_length=int(targets_shape[-1]),
    num_stages=int(loss.get("num_stages", 2)),
    glancing=bool(loss.get("glancing_ratio", 0.0)),
    grad_accum_steps=int(config.train.get("grad_accum_steps", 1)),
    slots=int(slots),
  )
