"""The oracle Glauber dynamics queries: a masked LM's conditional logits at chosen positions.

  model, tokenizer = load_mlm("default")          # the embedded English MLM (gmlm.nn presets)
  logits_BKV = gmlm.nn.masked_logits(model, tokens_BL, positions_BK)

Any model with an encoder and an MLM head (`gmlm.nn` BERT, RoBERTa, ModernBERT) is a `MaskedLM`;
the chains need its tokenizer too (for [CLS] / [SEP] / [MASK] and the candidate vocabulary).
"""

from __future__ import annotations

from typing import Any, Protocol

import jax

from gmlm import checks
from gmlm.checks import UserError

DTYPES = ("float32", "bfloat16", "float16")


class MaskedLM(Protocol):
  """What the chains use of a model: its config (vocab_size, max_positions), the encoder and the
  MLM head (`gmlm.nn.masked_logits` composes the two)."""

  config: Any

  def encode(
    self,
    tokens_BL: jax.Array,
    attention_mask_BL: jax.Array | None = None,
    token_types_BL: jax.Array | None = None,
    rows_BK: jax.Array | None = None,
  ) -> jax.Array:
    """Final hidden states h_BLD (h_BKD at rows_BK only)."""

  def mlm_logits(self, h_BKD: jax.Array) -> jax.Array:
    """logits_BKV (float32) of the MLM head."""


def load_mlm(name: str, dtype: str = "float32", allow_pickle: bool = False) -> tuple[MaskedLM, Any]:
  """(model, tokenizer) of a masked LM: "default" (or "") is the embedded English MLM, else an
  HF id or a local directory (allow_pickle: also read a pytorch_model.bin). Raises UserError
  when it cannot be loaded, has no MLM head or ships no tokenizer."""
  import jax.numpy as jnp

  from gmlm import nn as gm

  name = name or "default"
  try:
    model, tokenizer = gm.load(name, dtype=jnp.dtype(dtype), allow_pickle=allow_pickle)
  except (OSError, FileNotFoundError) as e:
    raise UserError(f"cannot load model {name!r}: {e}") from e
  if not hasattr(model, "mlm_logits") or getattr(model, "head", True) is None:
    raise UserError(
      f"model {name!r} has no MLM head ({type(model).__name__}); Glauber chains "
      "and fill-mask need a *ForMaskedLM checkpoint (or 'default')."
    )
  if tokenizer is None:
    raise UserError(
      f"model {name!r} ships no tokenizer; Glauber chains need one (its "
      "[CLS] / [SEP] / [MASK] ids and vocabulary). Add the tokenizer files to the "
      "model directory."
    )
  return model, tokenizer


def validate_model(config) -> None:
  """config.model (a preset name, HF id or directory; "" = "default"), config.dtype (the
  compute dtype) and config.allow_pickle, checked without loading anything."""
  checks.check_model_path(config, "model")
  checks.check_choice(config, "dtype", DTYPES)
  pickle = checks.get(config, "allow_pickle")
  checks.check(
    isinstance(pickle, bool),
    "allow_pickle",
    pickle,
    "must be True or False (True: "
    "also read a checkpoint's pytorch_model.bin, a pickle that can run code)",
  )


def position_limit(name: str) -> int | None:
  """The longest sequence config.model takes, when its config.json tells without loading it
  (the default MLM, a local directory); None otherwise (a hub id: checked after loading)."""
  import os

  from gmlm.nn import loading, presets

  if name in ("", "default"):
    try:
      return loading.position_limit(presets.minilm_dir())
    except FileNotFoundError:
      return None
  return loading.position_limit(name) if os.path.isdir(name) else None


def vocab_size(name: str) -> int | None:
  """config.model's vocabulary size when its config.json tells without loading it (the default
  MLM, a local directory); None otherwise."""
  import json
  import os

  from gmlm.nn import presets

  try:
    path = presets.minilm_dir() if name in ("", "default") else name
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
      v = json.load(f).get("vocab_size")
  except (OSError, ValueError):
    return None
  return v if isinstance(v, int) and v > 0 else None


def check_chain_memory(config, key: str) -> None:
  """Refuses a chain count whose memory cannot fit this machine, before anything is allocated:
  every step computes at least one site's logits over the vocabulary per chain (float32), a
  lower bound of what the run needs (the model and its activations come on top)."""
  vocab = vocab_size(config.model)
  if vocab is not None:
    count = config[key]
    checks.check_memory(
      key, count, 4.0 * count * vocab, f"{count} x {vocab} float32 logits per step, a lower bound"
    )


def check_sites(config, *keys: str) -> None:
  """Each key's number(s) of free sites plus [CLS] and [SEP] fit the model's positions (a prefix
  takes more: checked once the tokenizer is loaded). Loads nothing."""
  limit = position_limit(config.model)
  if limit is None:
    return
  for key in keys:
    value = checks.get(config, key)
    for n in value if isinstance(value, (list, tuple)) else [value]:
      checks.check(
        isinstance(n, int) and n + 2 <= limit,
        key,
        value,
        f"the model takes {limit} positions, so n + 2 ([CLS], [SEP]) + the prefix must fit: "
        f"use n <= {limit - 2}",
      )


def model_name(name: str) -> str:
  """How reports name a model."""
  return "default (the embedded English MLM)" if name in ("", "default") else name
