"""`load(name_or_path)`: a Hugging Face checkpoint -> (our flax.nnx model, its tokenizer).

The architecture is read from config.json (`architectures`, else `model_type`); a `.gguf` file
(or a directory holding one and no config.json) loads as a Llama-family causal LM.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any, Callable

import jax.numpy as jnp
from flax import nnx

from gmlm.nn import bert, gguf, gpt2, llama, modernbert, roberta
from gmlm.nn._checkpoint import read_config, read_tensors, resolve

# architecture -> (model class, config from HF dict and overrides, weight loader)
_FAMILIES: dict[str, tuple[type, Callable[..., Any], Callable[..., Any]]] = {
  "BertForMaskedLM": (
    bert.Bert,
    lambda hf, **kw: bert.BertConfig.from_hf(hf, **kw),
    bert.load_weights,
  ),
  "BertModel": (
    bert.Bert,
    lambda hf, **kw: bert.BertConfig.from_hf(hf, with_mlm_head=False, **kw),
    bert.load_weights,
  ),
  "BertForPreTraining": (
    bert.Bert,
    lambda hf, **kw: bert.BertConfig.from_hf(hf, **kw),
    bert.load_weights,
  ),  # its MLM head; the next-sentence head is ignored
  "RobertaForMaskedLM": (bert.Bert, roberta.config_from_hf, roberta.load_weights),
  "XLMRobertaForMaskedLM": (bert.Bert, roberta.config_from_hf, roberta.load_weights),
  "RobertaModel": (
    bert.Bert,
    lambda hf, **kw: roberta.config_from_hf(hf, with_mlm_head=False, **kw),
    roberta.load_weights,
  ),
  "ModernBertForMaskedLM": (
    modernbert.ModernBert,
    modernbert.ModernBertConfig.from_hf,
    modernbert.load_weights,
  ),
  "ModernBertModel": (
    modernbert.ModernBert,
    lambda hf, **kw: modernbert.ModernBertConfig.from_hf(hf, with_mlm_head=False, **kw),
    modernbert.load_weights,
  ),
  "GPT2LMHeadModel": (gpt2.GPT2, gpt2.GPT2Config.from_hf, gpt2.load_weights),
  "LlamaForCausalLM": (llama.Llama, llama.LlamaConfig.from_hf, llama.load_weights),
}
_BY_MODEL_TYPE = {
  "bert": "BertForMaskedLM",
  "roberta": "RobertaForMaskedLM",
  "xlm-roberta": "XLMRobertaForMaskedLM",
  "modernbert": "ModernBertForMaskedLM",
  "gpt2": "GPT2LMHeadModel",
  "llama": "LlamaForCausalLM",
}
# Named presets: name -> loader(dtype=..., tokenizer_only=...) returning (model, tokenizer).
# `gmlm.nn.presets` registers "default" (the embedded English MLM); any package may add its own.
_PRESETS: dict[str, Callable[..., tuple[Any, Any]]] = {}

_TOKENIZER_FILES = (
  "tokenizer.json",
  "tokenizer_config.json",
  "vocab.txt",
  "vocab.json",
  "tokenizer.model",
)


def register_preset(name: str, loader: Callable[..., tuple[Any, Any]]) -> None:
  """Makes `load(name)` call loader(dtype=...) -> (model, tokenizer) instead of reading a path."""
  _PRESETS[name] = loader


def preset_names() -> list[str]:
  """The names `load` accepts besides paths and hub ids (e.g. "default")."""
  return sorted(_PRESETS)


def architecture(hf_config: dict[str, Any]) -> str:
  """The supported architecture named by a config.json (its `architectures`, else `model_type`)."""
  for arch in hf_config.get("architectures") or []:
    if arch in _FAMILIES:
      return arch
  if not hf_config.get("architectures") and hf_config.get("model_type") in _BY_MODEL_TYPE:
    return _BY_MODEL_TYPE[hf_config["model_type"]]
  raise ValueError(
    f"Unsupported architecture: config.json has architectures={hf_config.get('architectures')} "
    f"and model_type={hf_config.get('model_type')!r}. Supported: {sorted(_FAMILIES)} "
    f"(model_type {sorted(_BY_MODEL_TYPE)}). Use a checkpoint of one of these, or set "
    "`architectures` in config.json if it is one of them under another name."
  )


def from_config(
  hf_config: dict[str, Any],
  *,
  rngs: nnx.Rngs | None = None,
  dtype=jnp.float32,
  param_dtype=jnp.float32,
) -> nnx.Module:
  """A randomly initialised model of a config.json's architecture (for training from scratch)."""
  cls, make_config, _ = _FAMILIES[architecture(hf_config)]
  config = make_config(hf_config, dtype=dtype, param_dtype=param_dtype)
  return cls(config, rngs or nnx.Rngs(0))


def with_dtype(model: nnx.Module, dtype) -> nnx.Module:
  """The same weights (same arrays, same param dtype) computing in `dtype`: e.g. bfloat16
  matmuls over float32 parameters. Norms, softmax and the logits stay float32 either way."""
  config = dataclasses.replace(model.config, dtype=dtype)
  new = nnx.eval_shape(lambda: type(model)(config, nnx.Rngs(0)))  # shapes only, filled below
  nnx.update(new, nnx.state(model))
  return new


def load_model(
  name_or_path: str | os.PathLike,
  *,
  dtype=jnp.float32,
  param_dtype=jnp.float32,
  allow_pickle: bool = False,
  cache_dir: str | None = None,
  revision: str | None = None,
) -> nnx.Module:
  """Only the model: see `load`."""
  if str(name_or_path) in _PRESETS:
    return _PRESETS[str(name_or_path)](dtype=dtype)[0]
  path = resolve(name_or_path, cache_dir=cache_dir, revision=revision)
  gguf_file = _gguf_file(path)
  if gguf_file is not None:
    return llama.load_gguf(gguf_file, dtype=dtype, param_dtype=param_dtype)
  hf_config = read_config(path)
  cls, make_config, load_weights = _FAMILIES[architecture(hf_config)]
  tensors = read_tensors(path, allow_pickle=allow_pickle)
  config = make_config(hf_config, dtype=dtype, param_dtype=param_dtype)
  model = nnx.eval_shape(lambda: cls(config, nnx.Rngs(0)))  # shapes only, filled below
  return load_weights(model, tensors)


def position_limit(model_dir: str | os.PathLike) -> int | None:
  """The longest token sequence a local checkpoint directory's position table takes, from its
  config.json alone (no weights read); None when the directory has no config.json or names no
  max_position_embeddings (RoBERTa counts positions from pad_token_id + 1)."""
  path = pathlib.Path(model_dir)
  if not (path / "config.json").is_file():
    return None
  hf = read_config(path)
  limit = hf.get("max_position_embeddings")
  if not isinstance(limit, int):
    return None
  if hf.get("model_type") in ("roberta", "xlm-roberta", "camembert"):
    return limit - int(hf.get("pad_token_id") or 0) - 1
  return limit


def load_tokenizer(
  name_or_path: str | os.PathLike, *, cache_dir: str | None = None, revision: str | None = None
):
  """The checkpoint's tokenizer (transformers AutoTokenizer), or None if it ships none."""
  if str(name_or_path) in _PRESETS:
    return _PRESETS[str(name_or_path)](tokenizer_only=True)[1]
  path = resolve(name_or_path, cache_dir=cache_dir, revision=revision)
  from transformers import AutoTokenizer  # Imported here: the models themselves do not need it.

  gguf_file = _gguf_file(path)
  if gguf_file is not None:  # our reader: transformers' GGUF reader imports torch
    return gguf.tokenizer(gguf_file)
  if not any((path / f).is_file() for f in _TOKENIZER_FILES):
    return None
  return AutoTokenizer.from_pretrained(str(path))


def load(
  name_or_path: str | os.PathLike,
  *,
  dtype=jnp.float32,
  param_dtype=jnp.float32,
  allow_pickle: bool = False,
  cache_dir: str | None = None,
  revision: str | None = None,
):
  """(model, tokenizer) from a local checkpoint directory, a .gguf file, a hub id, or a preset.

  A registered preset name loads that preset: "default" is the embedded English MLM,
  all-MiniLM-L6-v2 + a shipped LoRA/head delta (gmlm/nn/presets.py).

  A hub id is looked up with huggingface_hub (only the local cache when HF_HUB_OFFLINE=1).
  dtype: compute dtype (float32, or bfloat16 for speed); param_dtype: stored weights.
  allow_pickle: also read a `pytorch_model.bin` (needs torch). The tokenizer is None when the
  checkpoint has no tokenizer files.
  """
  if str(name_or_path) in _PRESETS:  # e.g. "default", the embedded English MLM
    return _PRESETS[str(name_or_path)](dtype=dtype)
  model = load_model(
    name_or_path,
    dtype=dtype,
    param_dtype=param_dtype,
    allow_pickle=allow_pickle,
    cache_dir=cache_dir,
    revision=revision,
  )
  return model, load_tokenizer(name_or_path, cache_dir=cache_dir, revision=revision)


def _gguf_file(path: pathlib.Path) -> pathlib.Path | None:
  if path.is_file() and path.suffix == ".gguf":
    return path
  if path.is_dir() and not (path / "config.json").is_file():
    found = sorted(path.glob("*.gguf"))
    if len(found) == 1:
      return found[0]
  return None
