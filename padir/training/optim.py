"""The learning-rate schedule and the optimizer of PaDIR training (paper App. L.2)."""

from __future__ import annotations

import ml_collections
import optax


def learning_rate_schedule(cfg: ml_collections.ConfigDict) -> optax.Schedule:
  """Linear warm-up from min_lr to peak_lr, then cosine decay back to min_lr (paper App. L.2)."""
  return optax.warmup_cosine_decay_schedule(
    init_value=cfg.min_lr,
    peak_value=cfg.peak_lr,
    warmup_steps=cfg.warmup_steps,
    decay_steps=max(cfg.num_train_steps, cfg.warmup_steps + 1),
    end_value=cfg.min_lr,
  )


def make_optimizer(cfg: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """AdaFactor with T5X-like defaults (factored second moments, decay 0.8, update clipping 1.0)."""
  return optax.adafactor(
    learning_rate=learning_rate_schedule(cfg),
    decay_rate=0.8,
    clipping_threshold=1.0,
    multiply_by_parameter_scale=True,
  )
