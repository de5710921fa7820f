"""Finding and reading Hugging Face checkpoints: a local directory or a hub id in the local cache.

Weights are read from `model.safetensors` (or the shards listed in
`model.safetensors.index.json`). A `pytorch_model.bin` is a pickle: it is read only when the
caller opts in with `allow_pickle=True` and torch is installed, and then with
`torch.load(weights_only=True)`.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import numpy as np

from gmlm.checks import UserError, missing_path, reads_as_path

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_BIN = "pytorch_model.bin"

# What a model needs from a hub snapshot: config, weights, tokenizer files.
_HUB_PATTERNS = [
  "config.json",
  "*.safetensors",
  SAFETENSORS_INDEX,
  "tokenizer*",
  "vocab*",
  "merges.txt",
  "special_tokens_map.json",
  "added_tokens.json",
  "*.model",
  "*.gguf",
]


def _offline() -> bool:
  return os.environ.get("HF_HUB_OFFLINE", "0").strip().upper() in {"1", "ON", "YES", "TRUE"}


class ModelNotFoundError(UserError, FileNotFoundError):
  """A model path or hub id that names nothing loadable (a UserError: reported as one line)."""


def resolve(
  name_or_path: str | os.PathLike, *, cache_dir: str | None = None, revision: str | None = None
) -> pathlib.Path:
  """A local directory (or .gguf file) for `name_or_path`: itself, or its hub-cache snapshot.

  A name that reads as a path (starts with . / ~, has two slashes, ends in .gguf, or its first
  component exists here) is never looked up on the Hub: a typo is reported as a missing path.
  """
  path = pathlib.Path(name_or_path).expanduser()
  if path.is_dir() or (path.is_file() and path.suffix == ".gguf"):
    return path
  name = str(name_or_path)
  if reads_as_path(name):
    raise ModelNotFoundError(
      f"{name!r} is neither an existing directory nor a Hugging Face model id (owner/name): "
      f"{missing_path(path)}. Pass a directory holding config.json and model.safetensors, or a "
      ".gguf file."
    )
  import huggingface_hub  # Imported here: only hub ids need it.

  offline = _offline()
  try:
    snapshot = huggingface_hub.snapshot_download(
      name,
      revision=revision,
      cache_dir=cache_dir,
      allow_patterns=_HUB_PATTERNS,
      local_files_only=offline,
    )
  except Exception as e:  # The hub raises many types (offline, not found, gated, network).
    where = cache_dir or "the Hugging Face cache (HF_HUB_CACHE / HF_HOME)"
    hint = (
      f"HF_HUB_OFFLINE=1 is set, so only {where} is searched: download it once where "
      f"the hub is reachable (`huggingface-cli download {name}`) or pass a local directory."
      if offline
      else "Check the id, your network and token, or pass a local directory."
    )
    raise ModelNotFoundError(
      f"Could not find model {name!r}: it is not a local path ({missing_path(path)}) and the Hub "
      f"lookup failed: {type(e).__name__}: {_one_line(e)} {hint}"
    ) from e
  return pathlib.Path(snapshot)


def _one_line(e: Exception) -> str:
  """huggingface_hub's message on one line (its errors span several), ending in a period."""
  text = " ".join(str(e).split()).rstrip(".")
  return text + "." if text else ""


def open_safetensors(file: pathlib.Path):
  """safetensors' reader of `file`, or a UserError naming the file when it is corrupt."""
  from safetensors import safe_open

  try:
    return safe_open(str(file), framework="np")
  except Exception as e:  # SafetensorError (bad header, truncated) or OSError
    raise UserError(
      f"{file} is not a readable safetensors file ({type(e).__name__}: {e}); it is truncated or "
      "corrupt (an interrupted download or copy?). Replace it: copy or download the checkpoint "
      "again (from the hub: `huggingface-cli download ID --force-download`)."
    ) from e


def read_config(model_dir: pathlib.Path) -> dict[str, Any]:
  config_path = model_dir / "config.json"
  if not config_path.is_file():
    raise FileNotFoundError(
      f"{model_dir} has no config.json; a Hugging Face checkpoint directory "
      "needs config.json next to its weights (save it with save_pretrained)."
    )
  with open(config_path) as f:
    return json.load(f)


class Tensors:
  """Lazily read, named tensors of a checkpoint, as numpy arrays in their stored dtype."""

  def __init__(self, files: dict[str, pathlib.Path], source: str, arrays: dict | None = None):
    self._files = files  # tensor name -> file holding it (safetensors)
    self._arrays = arrays  # or tensor name -> array (already read, e.g. from a pickle or GGUF)
    self.source = source
    self.used: set[str] = set()
    self._handles: dict[pathlib.Path, Any] = {}
    # Old BERT checkpoints call LayerNorm parameters gamma/beta.
    stored = arrays if arrays is not None else files
    self._alias = {
      k.replace("LayerNorm.gamma", "LayerNorm.weight").replace(
        "LayerNorm.beta", "LayerNorm.bias"
      ): k
      for k in stored
      if "LayerNorm.gamma" in k or "LayerNorm.beta" in k
    }

  def names(self) -> list[str]:
    return sorted(self._arrays if self._arrays is not None else self._files)

  def __contains__(self, name: str) -> bool:
    name = self._alias.get(name, name)
    return name in (self._arrays if self._arrays is not None else self._files)

  def get(self, name: str) -> np.ndarray:
    if name not in self:
      raise KeyError(
        f"The checkpoint {self.source} has no tensor {name!r}; it holds e.g. "
        f"{self.names()[:4]}. Is config.json's architecture right for these weights?"
      )
    name = self._alias.get(name, name)
    self.used.add(name)
    if self._arrays is not None:
      return np.asarray(self._arrays[name])
    file = self._files[name]
    if file not in self._handles:
      self._handles[file] = open_safetensors(file)
    try:
      return self._handles[file].get_tensor(name)
    except Exception as e:
      raise UserError(
        f"{file}: tensor {name!r} cannot be read ({type(e).__name__}: {e}); the "
        "file is corrupt. Copy or download the checkpoint again."
      ) from e

  def unused(self) -> list[str]:
    return [n for n in self.names() if n not in self.used]


def read_tensors(model_dir: pathlib.Path, *, allow_pickle: bool = False) -> Tensors:
  """The tensors of `model_dir`: single or sharded safetensors, or an opted-in pytorch_model.bin."""
  single, index = model_dir / SAFETENSORS, model_dir / SAFETENSORS_INDEX
  if single.is_file():
    with open_safetensors(single) as f:
      return Tensors({k: single for k in f.keys()}, str(single))
  if index.is_file():
    with open(index) as f:
      weight_map = json.load(f)["weight_map"]
    files = {name: model_dir / shard for name, shard in weight_map.items()}
    missing = sorted({str(p) for p in files.values() if not p.is_file()})
    if missing:
      raise FileNotFoundError(
        f"{index} lists shards that are not there: {missing[:3]}. "
        "Download every shard of the checkpoint."
      )
    return Tensors(files, str(index))
  pickle_file = model_dir / PYTORCH_BIN
  if pickle_file.is_file():
    if not allow_pickle:
      raise FileNotFoundError(
        f"{model_dir} has only {PYTORCH_BIN}, a pickle, which is not read by default. Convert it "
        "to model.safetensors (transformers: `save_pretrained(dir, safe_serialization=True)`), or "
        "pass allow_pickle=True (needs torch; read with torch.load(weights_only=True))."
      )
    try:
      import torch
    except ImportError:
      raise ImportError(
        f"allow_pickle=True needs torch to read {pickle_file}; install torch or "
        "convert the checkpoint to safetensors."
      ) from None
    state = torch.load(str(pickle_file), map_location="cpu", weights_only=True)
    arrays = {
      k: v.float().numpy() if v.dtype == torch.bfloat16 else v.numpy() for k, v in state.items()
    }
    return Tensors({}, str(pickle_file), arrays=arrays)
  raise FileNotFoundError(
    f"{model_dir} holds no weights: expected {SAFETENSORS} or "
    f"{SAFETENSORS_INDEX} (or {PYTORCH_BIN} with allow_pickle=True)."
  )
