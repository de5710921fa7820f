"""Sentence embeddings from an encoder (e.g. all-MiniLM-L6-v2): mean pooling + L2 normalisation."""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp

Array = jax.Array


def mean_pool(h_BLD: Array, attention_mask_BL: Array) -> Array:
  """The mean of the hidden states of real tokens: pooled_BD."""
  m_BL1 = attention_mask_BL.astype(jnp.float32)[..., None]
  return (h_BLD.astype(jnp.float32) * m_BL1).sum(1) / jnp.maximum(m_BL1.sum(1), 1e-9)


@jax.jit
def _embed(model, tokens_BL: Array, attention_mask_BL: Array) -> Array:
  e_BD = mean_pool(model.encode(tokens_BL, attention_mask_BL), attention_mask_BL)
  return e_BD / jnp.maximum(jnp.linalg.norm(e_BD, axis=-1, keepdims=True), 1e-12)


def embed(model, tokenizer, texts: Sequence[str], max_length: int = 256) -> Array:
  """Unit-norm sentence embeddings e_BD of `texts` (sentence-transformers' mean pooling)."""
  batch = tokenizer(
    list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="np"
  )
  return _embed(
    model,
    jnp.asarray(batch["input_ids"], jnp.int32),
    jnp.asarray(batch["attention_mask"], jnp.int32),
  )
