"""benchmarks/torch_ar.py: the eager PyTorch port of greedy AR decoding gives the JAX decoder's tokens
and, step by step, its logits (the benchmark's PyTorch row decodes the same model)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import padir_util
import pytest

from padir.data import tokenizer as tok
from padir.decoding import autoregressive as decode
from padir.decoding import decoders

torch_ar = padir_util.benchmark_module("torch_ar")
INPUTS = np.array([[7, 8, 9, 1, 0, 0], [10, 11, 12, 13, 14, 1], [5, 1, 0, 0, 0, 0]], np.int32)


def _jax_step_logits(model, inputs, tokens_BT):
  """decode_step's logits [B, T, V] along the given tokens (BOS first, then tokens[t-1])."""
  B, T = tokens_BT.shape
  prev_TB = np.concatenate([np.full((B, 1), tok.BOS_ID), tokens_BT[:, :-1]], 1).T

  def run(m, x, prev_TB):
    enc, mask = m.encode(x)

    def step(cache, t_prev):
      logits, cache = m.decode_step(t_prev[1], t_prev[0], cache)
      return cache, logits

    _, logits_TBV = jax.lax.scan(step, m.init_cache(enc, mask, T), (jnp.arange(T), prev_TB))
    return jnp.swapaxes(logits_TBV, 0, 1)

  return np.asarray(decoders.pure_jit(run, model)(jnp.asarray(inputs), jnp.asarray(prev_TB)))


@pytest.mark.parametrize("positional_attention", [True, False])
def test_torch_greedy_gives_the_jax_tokens_and_logits(positional_attention):
  for seed in range(2):
    model = padir_util.tiny_model(
      "ar", seed=seed, positional_attention=positional_attention, max_target_length=8
    )
    ours = np.asarray(decode.greedy_ar(model, jnp.asarray(INPUTS)))
    tokens, logits = torch_ar.TorchGreedy(model)(INPUTS, logits=True)
    np.testing.assert_array_equal(tokens, ours)
    steps = logits.shape[1]
    want = _jax_step_logits(model, INPUTS, ours)[:, :steps]
    np.testing.assert_allclose(logits, want, atol=1e-5, rtol=1e-5)


def test_torch_greedy_stops_at_the_last_eos():
  """A model whose output layer favours EOS from the start: one step, then PAD."""
  model = padir_util.tiny_model("ar", max_target_length=8)
  emb = model.embed_VD[...]
  model.embed_VD[...] = emb.at[tok.EOS_ID].set(100.0 * jnp.sign(emb.sum(0)))
  tokens, logits = torch_ar.TorchGreedy(model)(INPUTS, logits=True)
  np.testing.assert_array_equal(tokens, np.asarray(decode.greedy_ar(model, jnp.asarray(INPUTS))))
  assert (tokens[:, 0] == tok.EOS_ID).all() and logits.shape[1] == 1


def test_torch_greedy_refuses_a_padir_model():
  with pytest.raises(ValueError, match="decoder='ar'"):
    torch_ar.TorchGreedy(padir_util.tiny_model("nar"))
