"""Log-probabilities under causal LMs (GPT-2, Llama): per token and per sequence."""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


@jax.jit
def logits(model, tokens_BL: Array, attention_mask_BL: Array | None = None) -> Array:
  """Next-token logits_BLV (float32): row t predicts token t + 1."""
  return model.lm_logits(model.hidden(tokens_BL, attention_mask_BL))


@jax.jit
def token_logprobs(model, tokens_BL: Array, attention_mask_BL: Array | None = None) -> Array:
  """logp_B(L-1): log p(x[t+1] | x[:t+1]) for t < L - 1; 0 where x[t+1] is padding."""
  logits_BLV = logits(model, tokens_BL, attention_mask_BL)
  logp_BLV = jax.nn.log_softmax(logits_BLV[:, :-1], axis=-1)
  logp_BL = jnp.take_along_axis(logp_BLV, tokens_BL[:, 1:, None], axis=-1)[..., 0]
  if attention_mask_BL is not None:
    logp_BL = jnp.where(attention_mask_BL[:, 1:].astype(bool), logp_BL, 0.0)
  return logp_BL


@jax.jit
def sequence_logprob(model, tokens_BL: Array, attention_mask_BL: Array | None = None) -> Array:
  """logp_B: the sum of next-token log-probabilities (the first token is conditioned on)."""
  return token_logprobs(model, tokens_BL, attention_mask_BL).sum(axis=-1)
