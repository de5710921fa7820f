"""Masked-LM logits for the samplers: at K chosen positions only, or at all positions.

Jitted pure functions of (model, arrays); they also compose inside a caller's jit, vmap, or a
mesh-sharded jit (nnx modules are pytrees, so the model is an ordinary argument).
"""

from __future__ import annotations

import jax

Array = jax.Array


# On CPU a batch of more than this many tokens runs in chunks (cache blocking): BERT-base at 20
# tokens ran at 75% of the matmul peak as one batch of 256 sequences and at ~95% as 4 x 64.
CPU_CHUNK_TOKENS = 2048


def _num_chunks(B: int, L: int, max_tokens: int) -> int:
  """The fewest equal chunks (a divisor of B, so no padding and a mesh-sharded batch axis stays
  sharded) of at most max_tokens tokens each; 1 where only chunks under max_tokens / 4 would
  fit (a batch size with no good divisor runs whole)."""
  if B * L <= max_tokens or jax.default_backend() != "cpu":
    return 1
  for d in range(2, B + 1):
    if B % d == 0 and (B // d) * L <= max_tokens:
      return d if (B // d) * L * 4 >= max_tokens else 1
  return 1


def _masked_logits(model, tokens_BL, positions_BK, attention_mask_BL):
  return model.mlm_logits(model.encode(tokens_BL, attention_mask_BL, rows_BK=positions_BK))


@jax.jit
def masked_logits(
  model, tokens_BL: Array, positions_BK: Array, attention_mask_BL: Array | None = None
) -> Array:
  """logits_BKV (float32) at positions_BK. Every layer but the last runs on all tokens; the last
  layer's queries, output projection and MLP and the head run at positions_BK only (nothing else
  reaches the logits there), which saves ~(1 - K/L) of a layer. On CPU, batches of more than
  CPU_CHUNK_TOKENS tokens run chunk by chunk (rows c * num_chunks + j form chunk j, so the
  major part of the batch axis, the part a mesh shards, stays whole in every chunk)."""
  B, L = tokens_BL.shape
  nc = _num_chunks(B, L, CPU_CHUNK_TOKENS)
  if nc == 1:
    return _masked_logits(model, tokens_BL, positions_BK, attention_mask_BL)
  split = lambda x: None if x is None else x.reshape(B // nc, nc, *x.shape[1:]).swapaxes(0, 1)
  # J chunks, each a batch of B / J sequences
  out_JBKV = jax.lax.map(
    lambda a: _masked_logits(model, *a),
    (split(tokens_BL), split(positions_BK), split(attention_mask_BL)),
  )
  return out_JBKV.swapaxes(0, 1).reshape(B, *out_JBKV.shape[2:])


@jax.jit
def full_logits(model, tokens_BL: Array, attention_mask_BL: Array | None = None) -> Array:
  """logits_BLV (float32) at every position."""
  return model.mlm_logits(model.encode(tokens_BL, attention_mask_BL))
