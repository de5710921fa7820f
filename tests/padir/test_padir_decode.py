"""padir.decoding.autoregressive: one refinement pass and greedy AR decoding against step-by-step recomputations."""

import jax
import jax.numpy as jnp
import numpy as np
import padir_util
import pytest
from flax import nnx

from padir.data import tokenizer as tok_lib
from padir.decoding import autoregressive as decode

INPUTS = jnp.array([[7, 8, 9, 1, 0, 0], [10, 11, 12, 13, 14, 1]], jnp.int32)


@nnx.jit
def _decode_pass(model, hyp):
  """Logits of one decoder pass, with the ids that never occur in targets at -inf."""
  enc, mask = model.encode(INPUTS)
  logits = model.decode(hyp, enc, mask)
  return logits.at[..., jnp.asarray(tok_lib.NEVER_PREDICTED)].set(-jnp.inf)


def test_one_refinement_step_from_masks_is_one_argmax_pass_cut_after_its_first_eos():
  model = padir_util.tiny_model("nar")
  n = 4
  one = nnx.jit(
    lambda m: decode.refine(
      m,
      INPUTS,
      jax.random.key(0),
      num_steps=1,
      init="mask",
      stutter="keep",
      drop="none",
      target_length=n,
    )
  )(model)
  hyp = np.full((2, 6), tok_lib.PAD_ID, np.int32)
  hyp[:, :n] = tok_lib.MASK_ID
  argmax = np.asarray(_decode_pass(model, jnp.asarray(hyp))).argmax(-1)
  for b in range(2):
    row = list(argmax[b, :n])
    row = row[: row.index(tok_lib.EOS_ID) + 1] if tok_lib.EOS_ID in row else row
    expected = row + [tok_lib.PAD_ID] * (6 - len(row))
    np.testing.assert_array_equal(np.asarray(one["tokens"][b]), expected)
    assert int(one["lengths"][b]) == len(row)


def test_greedy_ar_matches_a_token_by_token_recomputation():
  model = padir_util.tiny_model("ar")
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


@pytest.mark.parametrize("positional", [True, False])
def test_greedy_with_a_cache_window_gives_the_whole_cache_tokens(positional):
  """greedy_ar(window=k): steps [0, k) over k cache slots, [k, 2k) over 2k, ...: the tokens of
  the whole-cache loop, with rows ending (EOS) in different windows, before the first window
  ends and never, with and without the positional attention (whose weights are cut too)."""
  x = jnp.array(
    [[7, 8, 9, 1, 0, 0], [10, 11, 12, 13, 14, 1], [5, 1, 0, 0, 0, 0], [9, 9, 9, 9, 9, 1]]
  )
  model = padir_util.tiny_model("ar", max_target_length=12, seed=1, positional_attention=positional)
  model.embed_VD[...] = model.embed_VD[...].at[tok_lib.EOS_ID].multiply(3.0)  # some rows end
  full = np.asarray(decode.greedy_ar(model, x))
  ends = {list(r).index(tok_lib.EOS_ID) if tok_lib.EOS_ID in r else -1 for r in full}
  assert len(ends) >= 2 and -1 in ends or len(ends) >= 3  # rows end at different steps
  for window in (1, 2, 4, 5, 11, 12, 20):
    widths = decode.cache_widths(12, window)
    assert widths[-1] == 12 and all(b - a == window for a, b in zip(widths, widths[1:-1]))
    got = np.asarray(nnx.jit(decode.greedy_ar, static_argnames="window")(model, x, window=window))
    np.testing.assert_array_equal(got, full)
  with pytest.raises(ValueError, match="window must be >= 0"):
    decode.cache_widths(12, -1)
