"""Masked-LM logits for the samplers: at K chosen positions only, or at all positions.

Jitted pure functions of (model, arrays); they also compose inside a caller's jit, vmap, or a
mesh-sharded jit (nnx modules are pytrees, so the model is an ordinary argument).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


@jax.jit
def masked_logits(model, tokens_BL: Array, positions_BK: Array,
                  attention_mask_BL: Array | None = None) -> Array:
  """logits_BKV (float32) at positions_BK: the encoder runs on all tokens, the head only there."""
  h_BLD = model.encode(tokens_BL, attention_mask_BL)
  h_BKD = jnp.take_along_axis(h_BLD, positions_BK[..., None].astype(jnp.int32), axis=1)
  return model.mlm_logits(h_BKD)


@jax.jit
def full_logits(model, tokens_BL: Array, attention_mask_BL: Array | None = None) -> Array:
  """logits_BLV (float32) at every position."""
  return model.mlm_logits(model.encode(tokens_BL, attention_mask_BL))
