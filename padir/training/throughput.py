"""What a training run logs about its speed: per logged window, the seconds per step, target
tokens per second, the FLOPs of a step (padir.training.flops, the hand count) and MFU against the
devices' peak (gmlm.devices: published per device kind, measured on a CPU).

  meter = StepMeter(config, cfg)
  batch = place(meter.add(next(train_iter)))     # the host batch of each step
  record.update(meter.window(seconds))           # at each log: the steps since the last one

The seconds are the training steps' alone (padir.training.loop leaves out the validation and
checkpoints between them; its steps_per_second keeps them, the wall clock of the curves).

Each process counts the rows it reads; a step's FLOPs and tokens are its own times the number
of processes (every process reads as many rows), and the peak is the sum over all devices.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from gmlm import devices
from padir.data import tokenizer as tok_lib
from padir.model import transformer as model_lib
from padir.training import flops


class StepMeter:
  """Sums the FLOPs and target tokens of the steps of one logging window."""

  def __init__(self, config: Any, cfg: model_lib.ModelConfig):
    self.config, self.cfg = config, cfg
    self.flops, self.tokens, self.steps = 0.0, 0, 0
    self._shapes: dict[tuple, float] = {}  # (inputs, targets) shape -> FLOPs of a step

  def add(self, batch: dict) -> dict:
    """Counts one step's batch (host arrays: [rows, width]); returns it unchanged."""
    shapes = (tuple(np.shape(batch["inputs"])), tuple(np.shape(batch["targets"])))
    if shapes not in self._shapes:  # bucketed batches: one count per shape
      step = flops.run_step(self.config, *shapes)
      self._shapes[shapes] = flops.step_flops(self.cfg, step)
    self.flops += self._shapes[shapes] * jax.process_count()
    self.tokens += int(np.count_nonzero(np.asarray(batch["targets"]) != tok_lib.PAD_ID))
    self.steps += 1
    return batch

  def window(self, seconds: float) -> dict[str, float]:
    """The window's speed since the last call (which it resets): step_seconds,
    target_tokens_per_s, flops_per_step, mfu, peak_flops (all devices)."""
    if not self.steps or seconds <= 0:
      return {}
    peak = sum(devices.peak_flops(self.cfg.dtype, d)[0] for d in jax.devices())
    out = {
      "step_seconds": seconds / self.steps,
      "target_tokens_per_s": self.tokens * jax.process_count() / seconds,
      "flops_per_step": self.flops / self.steps,
      "mfu": self.flops / seconds / peak,
      "peak_flops": peak,
    }
    self.flops, self.tokens, self.steps = 0.0, 0, 0
    return out
