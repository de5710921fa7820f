"""padir.model.transformer: sizes, attention structure (NAR sees the whole hypothesis, AR only the past)."""

import jax.numpy as jnp
import numpy as np
import padir_util
from flax import nnx

from padir.model import transformer as model_lib


def test_paper_size_has_67m_parameters():
  cfg = model_lib.ModelConfig(vocab_size=32_000, max_source_length=256, max_target_length=256)
  D, F, V, L = 512, 2048, 32_000, 6
  attention = 4 * D * D
  ffn = 2 * D * F + F + D
  norm = 2 * D
  encoder = L * (attention + ffn + 2 * norm) + norm
  decoder = L * (3 * attention + ffn + 4 * norm) + norm  # self + positional + cross attention
  embeddings = V * D + (256 + 1) * D + 256 * D  # tied token embedding, learned positions
  length_head = D * 257 + 257
  expected = encoder + decoder + embeddings + length_head
  assert model_lib.abstract_param_count(cfg) == expected
  assert 66e6 < expected < 68e6  # "The total number of parameters is 67M" (App. L.2)


def test_positional_attention_is_one_attention_block_per_decoder_layer():
  cfg = model_lib.ModelConfig(
    vocab_size=100, num_encoder_layers=1, num_decoder_layers=3, d_model=32, num_heads=4, d_ff=64
  )
  without = model_lib.ModelConfig(**{**cfg.__dict__, "positional_attention": False})
  diff = model_lib.abstract_param_count(cfg) - model_lib.abstract_param_count(without)
  assert diff == 3 * (4 * 32 * 32 + 2 * 32)  # Q, K, V, O projections + its LayerNorm


def _dependency(decoder: str) -> np.ndarray:
  """dep[t, u]: does the output at position t change when the input token at u changes?"""
  model = padir_util.tiny_model(decoder, vocab_size=30, max_source_length=4, max_target_length=5)
  inputs = jnp.array([[7, 8, 9, 1]])
  hyp = jnp.array([[10, 11, 12, 13, 14]])

  @nnx.jit
  def all_logits(model, hyps):  # hyps [U+1, T]: the original and one edit per position
    enc, mask = model.encode(jnp.repeat(inputs, hyps.shape[0], 0))
    return model.decode(hyps, enc, mask)

  edits = jnp.concatenate([hyp, hyp + 5 * jnp.eye(5, dtype=hyp.dtype)])
  logits = np.asarray(all_logits(model, edits))
  return np.abs(logits[1:] - logits[:1]).max(-1).T > 1e-6  # [t, u]


def test_nar_decoder_is_non_causal_and_ar_decoder_is_causal():
  np.testing.assert_array_equal(_dependency("nar"), np.ones((5, 5), bool))
  np.testing.assert_array_equal(_dependency("ar"), np.tril(np.ones((5, 5), bool)))
