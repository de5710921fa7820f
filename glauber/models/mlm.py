"""Masked-LM logits for the samplers: at K chosen positions only, or at all positions.

Jitted pure functions of (model, arrays); they also compose inside a caller's jit, vmap, or a
mesh-sharded jit (nnx modules are pytrees, so the model is an ordinary argument).
"""

from __future__ import annotations

import jax

Array = jax.Array


@jax.jit
def masked_logits(model, tokens_BL: Array, positions_BK: Array,
                  attention_mask_BL: Array | None = None) -> Array:
  """logits_BKV (float32) at positions_BK. Every layer but the last runs on all tokens; the last
  layer's queries, output projection and MLP and the head run at positions_BK only (nothing else
  reaches the logits there), which saves ~(1 - K/L) of a layer."""
  return model.mlm_logits(model.encode(tokens_BL, attention_mask_BL, rows_BK=positions_BK))


@jax.jit
def full_logits(model, tokens_BL: Array, attention_mask_BL: Array | None = None) -> Array:
  """logits_BLV (float32) at every position."""
  return model.mlm_logits(model.encode(tokens_BL, attention_mask_BL))
