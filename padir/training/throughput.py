"""What a training run logs about its speed: per logged window, the seconds per step, target
tokens per second, the FLOPs of a step (padir.training.flops, the hand count) and MFU against the
devices' peak (gmlm.devices: published per device kind, measured on a CPU).

  meter = StepMeter(config, cfg)
  batch = place(meter.add(host_batch, slots))     # each step's host batch (and its slots)
  record.update(meter.window(seconds))           # at each log: the steps since the last one

The seconds are the training steps' alone (padir.training.loop leaves out the validation and
checkpoints between them; its steps_per_second keeps them, the wall clock of the curves).

Each process counts the rows it reads; a step's FLOPs and tokens are its own times the number
of processes (every process reads as many rows), and the peak is the sum over all devices.

  clock = RunClock()                            # as a leg starts
  clock.resume(rd.metrics(), step)              # after the restore, at `step`
  record.update(clock.now())                    # wall_seconds, cpu_seconds: the run's so far

`RunClock` is what a run has cost over all its legs: its records carry the wall and CPU seconds
(this process's, user + system) spent since the run began, up to that record. A leg starts
from the clock of the last record at or before the step it resumed from, so the time a killed
leg spent past its last checkpoint (whose records the resume drops) is counted once, by the leg
that redoes those steps; each leg's start-up (data, compilation, restore) counts.
"""

from __future__ import annotations

import resource
import time
from typing import Any, Iterable

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
    self._shapes: dict[tuple, float] = {}  # (inputs, targets shape, slots) -> a step's FLOPs

  def add(self, batch: dict, slots: int = 0) -> dict:
    """Counts one step's batch (host arrays: [rows, width]; slots: a CTC or DAG batch's slot
    positions, loop.slot_count); returns it unchanged."""
    shapes = (tuple(np.shape(batch["inputs"])), tuple(np.shape(batch["targets"])), slots)
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


WALL, CPU = "wall_seconds", "cpu_seconds"


def process_cpu_seconds() -> float:
  """This process's CPU seconds so far, user + system, every thread."""
  r = resource.getrusage(resource.RUSAGE_SELF)
  return r.ru_utime + r.ru_stime


class RunClock:
  """The wall and CPU seconds a run has spent, over its legs (the module docstring)."""

  def __init__(self):
    """Started at the beginning of a leg, before its data, model and restore."""
    self._wall = self._cpu = 0.0
    self._t, self._c = time.time(), process_cpu_seconds()

  def resume(self, records: Iterable[dict], step: int) -> None:
    """Adds the earlier legs' time: the clock of the last of the run's records (metrics.jsonl,
    in the order written) at or before `step`, the step this leg resumed from (0: none)."""
    for r in records:
      if r["step"] <= step and CPU in r:
        self._wall, self._cpu = r[WALL], r[CPU]

  def now(self) -> dict[str, float]:
    """{wall_seconds, cpu_seconds}: the run's so far."""
    return {
      WALL: self._wall + time.time() - self._t,
      CPU: self._cpu + process_cpu_seconds() - self._c,
    }
