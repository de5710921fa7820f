"""padir.decode: refinement and greedy AR decoding against step-by-step recomputations."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from padir import decode
from padir import model as model_lib
from padir import tokenizer as tok_lib

INPUTS = jnp.array([[7, 8, 9, 1, 0, 0], [10, 11, 12, 13, 14, 1]], jnp.int32)


def _model(decoder: str) -> model_lib.Transformer:
  cfg = model_lib.ModelConfig(
    vocab_size=24,
    max_source_length=6,
    max_target_length=6,
    num_encoder_layers=1,
    num_decoder_layers=1,
    num_heads=2,
    d_model=16,
    d_ff=16,
    dropout_rate=0.0,
    decoder=decoder,
  )
  model = model_lib.Transformer(cfg, rngs=nnx.Rngs(0))
  model.eval()
  return model


@nnx.jit
def _decode_pass(model, hyp):
  """Logits of one decoder pass, with the ids that never occur in targets at -inf."""
  enc, mask = model.encode(INPUTS)
  logits = model.decode(hyp, enc, mask)
  return logits.at[..., jnp.asarray(tok_lib.NEVER_PREDICTED)].set(-jnp.inf)


def test_one_refinement_step_from_masks_is_one_argmax_pass_and_early_stop_is_a_fixed_point():
  model = _model("nar")
  n = 4
  one = nnx.jit(
    lambda m: decode.refine(m, INPUTS, jax.random.key(0), num_steps=1, init="mask", target_length=n)
  )(model)
  hyp = np.full((2, 6), tok_lib.PAD_ID, np.int32)
  hyp[:, :n] = tok_lib.MASK_ID
  expected = np.asarray(_decode_pass(model, jnp.asarray(hyp))).argmax(-1)
  expected[:, n:] = tok_lib.PAD_ID
  np.testing.assert_array_equal(np.asarray(one["tokens"]), expected)
  np.testing.assert_array_equal(np.asarray(one["lengths"]), [n, n])

  many = nnx.jit(
    lambda m: decode.refine(m, INPUTS, jax.random.key(0), num_steps=50, num_lengths=3)
  )(model)
  tokens = np.asarray(many["tokens"])
  assert int(many["steps"]) < 50  # converged before the budget ...
  again = np.asarray(_decode_pass(model, jnp.asarray(tokens))).argmax(-1)
  inside = tokens != tok_lib.PAD_ID
  np.testing.assert_array_equal(again[inside], tokens[inside])  # ... at a fixed point
  lengths = np.asarray(many["lengths"])
  np.testing.assert_array_equal(inside.sum(1), lengths)
  assert (lengths >= 1).all()


def test_greedy_ar_matches_a_token_by_token_recomputation():
  model = _model("ar")
  out = np.asarray(nnx.jit(decode.greedy_ar)(model, INPUTS))
  B, T = out.shape
  expected = np.full((B, T), tok_lib.PAD_ID, np.int32)
  for b in range(B):
    prefix = [tok_lib.BOS_ID]
    for t in range(T):
      hyp = np.full((B, T), tok_lib.PAD_ID, np.int32)
      hyp[:, : len(prefix)] = prefix
      token = int(np.asarray(_decode_pass(model, jnp.asarray(hyp)))[b, t].argmax())
      expected[b, t] = token
      if token == tok_lib.EOS_ID:
        break
      prefix.append(token)
  np.testing.assert_array_equal(out, expected)


def test_drop_stutter_removes_adjacent_repeats_only():
  assert decode.drop_stutter([5, 5, 6, 5, 7, 7, 7, 1]) == [5, 6, 5, 7, 1]
