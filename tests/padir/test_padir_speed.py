"""padir.speed.decode_fn: the once-split jitted decoders give what the decoding functions give
when called directly, and follow the model's parameters."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import padir_util
from flax import nnx

from padir import decode, refinement, speed

INPUTS = jnp.array([[7, 8, 9, 1, 0, 0], [10, 11, 12, 13, 14, 1]], jnp.int32)


def test_each_decoder_equals_its_function_called_directly():
  nar, ar = padir_util.tiny_model("nar"), padir_util.tiny_model("ar", seed=1)
  key = jax.random.key(2)
  options = refinement.RefineOptions(num_lengths=2, rerank="ar")
  tokens, passes = speed.decode_fn(nar, speed.Decoder("p", "padir", options), ar)(INPUTS, key)
  direct = refinement.refine(nar, INPUTS, key, options, ar_model=ar)
  np.testing.assert_array_equal(np.asarray(tokens), np.asarray(direct["tokens"]))
  assert float(passes) == float(direct["passes"].mean())
  tokens, _ = speed.decode_fn(ar, speed.Decoder("g", "greedy"))(INPUTS, key)
  np.testing.assert_array_equal(np.asarray(tokens), np.asarray(decode.greedy_ar(ar, INPUTS)))
  tokens, steps = speed.decode_fn(ar, speed.Decoder("b", "beam", beam_size=3))(INPUTS, key)
  beam = decode.beam_search(ar, INPUTS, 3)
  np.testing.assert_array_equal(np.asarray(tokens), np.asarray(beam["tokens"]))
  assert int(steps) == int(beam["steps"])


def test_a_decoder_reads_the_models_current_parameters_not_a_stale_copy():
  ar = padir_util.tiny_model("ar", seed=1)
  before = np.asarray(decode.greedy_ar(ar, INPUTS))
  fn = speed.decode_fn(ar, speed.Decoder("g", "greedy"))
  np.testing.assert_array_equal(np.asarray(fn(INPUTS, jax.random.key(0))[0]), before)
  nnx.update(ar, nnx.state(padir_util.tiny_model("ar", seed=7), nnx.Param))
  after = np.asarray(decode.greedy_ar(ar, INPUTS))
  assert not np.array_equal(after, before)  # the update changes the output
  np.testing.assert_array_equal(np.asarray(fn(INPUTS, jax.random.key(0))[0]), after)
