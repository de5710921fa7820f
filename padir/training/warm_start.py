"""Warm start (`--config.init_from=RUN`): PaDIR starts from a trained AR run of the same backbone.

Every parameter PaDIR shares with the AR model is copied from RUN's latest checkpoint: the token
and positional embeddings, the encoder, and in each decoder layer the self-attention, the
cross-attention, the FFN and their LayerNorms, and the final LayerNorms. The parts the AR run
has no trained counterpart for start from the seed as they would without a warm start: the
positional attention (and its LayerNorm) of each decoder layer, and the length head (the AR loss
never trains its length head); with CTC (model.ctc_upsample, padir.decoding.ctc) or the DAG decoder
(model.dag_upsample, padir.model.dag) also the decoder's positional embeddings when there are more
alignment slots or vertices than AR target positions. The optimizer starts fresh (AdaFactor's state does not depend on
the parameter values).

`check` refuses, in one line naming the mismatch and before any run directory is written, a
RUN that is not a trained AR run (config.json and a checkpoint, decoder "ar"), has another
backbone (layers, heads, widths, maximum lengths) or another vocabulary (a different
SentencePiece model file, by SHA-256, or another size). A resumed run restores its own
checkpoint; the copy happens only at step 0.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import jax
import ml_collections
from flax import nnx

from gmlm.checks import ConfigError
from padir.data import vocab
from padir.model import layer_stack, restore
from padir.model import transformer as model_lib

KEY = "init_from"
RECORD = "init_from.json"  # what a warm-started run copied, in its run directory
# Config keys that fix the shapes of the shared parameters.
BACKBONE = (
  "model.num_encoder_layers",
  "model.num_decoder_layers",
  "model.num_heads",
  "model.d_model",
  "model.d_ff",
  "data.max_source_length",
  "data.max_target_length",
  "data.vocab_size",
)
# Parameters that start fresh: a path holding one of these names is not copied.
FRESH = ("positional_attention", "norm_positional", "length_head")


def is_shared(path: tuple[Any, ...]) -> bool:
  """Whether the parameter at this nnx state path is copied from the AR run."""
  return not any(str(p) in FRESH for p in path)


def _sha256(path: str) -> str:
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def _get(config: ml_collections.ConfigDict, dotted: str) -> Any:
  node = config
  for part in dotted.split("."):
    node = node[part]
  return node


def check(config: ml_collections.ConfigDict, vocab_path: str) -> dict[str, Any]:
  """Refuses (ConfigError on init_from, one line) an init_from run this config cannot start
  from; vocab_path is the vocabulary this run will use. Reads files only; writes nothing.
  Returns {run, step, vocabulary}: what `apply` copies."""
  run = config.get(KEY, "")
  fail = lambda why: ConfigError(KEY, run, why)
  steps = restore.checkpoint_steps(run) if os.path.isdir(run) else []
  if not steps or not os.path.isfile(os.path.join(run, "config.json")):
    raise fail("holds no trained run (config.json and checkpoints/): train the AR model first")
  theirs = restore.trained_config(run)
  if theirs.model.decoder != "ar":
    raise fail(f"is a model.decoder={theirs.model.decoder!r} run; a warm start needs an AR run")
  for key in BACKBONE:
    a, b = _get(config, key), _get(theirs, key)
    if a != b:
      raise fail(f"another backbone: its {key}={b!r}, this run's {a!r}")
  their_vocab = vocab.vocabulary_path(theirs)
  if not os.path.isfile(their_vocab):
    raise fail(f"its vocabulary {their_vocab} is missing")
  if not os.path.isfile(vocab_path):
    raise fail(
      f"this run's vocabulary {vocab_path} does not exist yet, so it cannot be the AR run's; "
      f"set config.data.vocab_path={their_vocab}"
    )
  if os.path.abspath(vocab_path) != os.path.abspath(their_vocab):
    if _sha256(vocab_path) != _sha256(their_vocab):
      raise fail(f"another vocabulary: its {their_vocab} differs from this run's {vocab_path}")
  return {"run": os.path.abspath(run), "step": max(steps), "vocabulary": their_vocab}


def apply(model: model_lib.Transformer, source: dict[str, Any]) -> dict[str, Any]:
  """Copies the shared parameters of the AR run `source` (from `check`) into model in place
  (each keeps its current sharding); returns the record: the copied and the fresh paths."""
  ar_model, _, _ = restore.load_model(source["run"], source["step"])
  # both per layer, whatever either model's storage layout (padir.model.layer_stack)
  theirs = dict(nnx.to_flat_state(layer_stack.unstack_layers(nnx.state(ar_model, nnx.Param))))
  ours = layer_stack.unstack_layers(nnx.state(model, nnx.Param))
  copied, fresh = [], []
  for path, var in nnx.to_flat_state(ours):
    name = "/".join(str(p) for p in path)
    if not is_shared(path) or path not in theirs:
      fresh.append(name)
      continue
    value = theirs[path][...]
    upsampled = model.cfg.ctc_upsample or model.cfg.dag_upsample
    if name == "target_pos_TD" and upsampled and value.shape != var[...].shape:
      fresh.append(name)  # CTC's alignment slots, the DAG's vertices: not the AR's positions
      continue
    if value.shape != var[...].shape:  # check() compares the backbone keys: a bug if reached
      raise ValueError(f"{name}: shape {value.shape} in the AR run, {var[...].shape} here")
    sharding = getattr(var[...], "sharding", None)
    var[...] = jax.device_put(value, sharding) if sharding is not None else value
    copied.append(name)
  nnx.update(model, layer_stack.stack_layers(ours) if model.cfg.scanned else ours)
  return {**source, "copied": copied, "fresh": fresh}
