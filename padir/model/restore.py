"""A trained run for other code: `load_model(workdir)` -> (model, tokenizer, config).

A training run directory holds config.json, the vocabulary it names and checkpoints/ (padir.
training). A job that trains on a config derived from its own (distillation's student) records
that derived config as TRAINED_CONFIG beside config.json; the model is rebuilt from it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from gmlm.checkpoints import Checkpoints
from padir.data import tokenizer as tokenizer_lib
from padir.data import vocab
from padir.model import layer_stack
from padir.model import transformer as model_lib

CHECKPOINTS = "checkpoints"
TRAINED_CONFIG = "train_config.json"

Loaded = tuple[model_lib.Transformer, tokenizer_lib.Tokenizer, ml_collections.ConfigDict]


def trained_config(workdir: str) -> ml_collections.ConfigDict:
  """The config the run's model was trained with (TRAINED_CONFIG, else config.json)."""
  config_path = os.path.join(workdir, "config.json")
  if not os.path.isfile(config_path):
    raise FileNotFoundError(
      f"{config_path} does not exist: {workdir!r} is not a training run "
      f"directory (train.py writes config.json and checkpoints/ there)"
    )
  derived = os.path.join(workdir, TRAINED_CONFIG)
  with open(derived if os.path.isfile(derived) else config_path, encoding="utf-8") as f:
    return ml_collections.ConfigDict(json.load(f))


def checkpoint_steps(workdir: str) -> list[int]:
  """The steps of the run's checkpoints, ascending ([] without checkpoints/)."""
  directory = os.path.join(workdir, CHECKPOINTS)
  if not os.path.isdir(directory):
    return []
  ckpt = Checkpoints(directory)
  steps = ckpt.all_steps()
  ckpt.close()
  return steps


def load_model(workdir: str, step: int | Sequence[int] | None = None) -> Loaded:
  """The trained model of a run directory (its config, vocabulary and the parameters of
  checkpoint `step`, default the latest), in eval mode, on the default device. A sequence of
  steps averages their parameters (checkpoint averaging, as fairseq's average_checkpoints:
  the float32 mean of each parameter over the checkpoints)."""
  config = trained_config(workdir)
  steps = checkpoint_steps(workdir)
  wanted = [] if step is None else [step] if isinstance(step, int) else list(step)
  absent = [s for s in wanted if s not in steps]
  if not steps or absent or (step is not None and not wanted):
    raise FileNotFoundError(
      f"no checkpoint {'at step %s ' % absent if absent else ''}in "
      f"{os.path.abspath(os.path.join(workdir, CHECKPOINTS))} (found steps {steps}): train the "
      f"model first, or resume its run"
    )
  wanted = wanted or [max(steps)]
  tok = vocab.load(vocab.vocabulary_path(config))  # the record's SHA-256 is checked
  model = model_lib.Transformer(
    model_lib.ModelConfig.from_run_config(config, tok.vocab_size), rngs=nnx.Rngs(0)
  )
  ckpt = Checkpoints(os.path.join(workdir, CHECKPOINTS))
  # written per layer in both storage layouts (padir.model.layer_stack)
  like = {"params": layer_stack.unstack_layers(nnx.state(model, nnx.Param))}
  params = [ckpt.restore(s, like)["params"] for s in wanted]
  ckpt.close()
  nnx.update(
    model, layer_stack.stack_layers(average(params)) if model.cfg.scanned else average(params)
  )
  model.eval()
  return model, tok, config


def average(states: list[nnx.State]) -> nnx.State:
  """The leafwise mean of parameter states of one model (one state: itself), accumulated in
  float32 and cast back to each leaf's dtype."""
  if len(states) == 1:
    return states[0]

  def mean(*leaves):
    total = sum(jnp.asarray(x, jnp.float32) for x in leaves)
    return (total / len(leaves)).astype(leaves[0].dtype)

  return jax.tree.map(mean, *states)
