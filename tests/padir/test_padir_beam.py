"""padir.decoding.autoregressive.beam_search vs brute-force enumeration, greedy decoding and a plain-Python beam.

Every reference scores a hypothesis y by one teacher-forced pass of the AR decoder over
[BOS] + y[:-1]: sum_t log p(y_t | y_<t, x) with the never-predicted ids banned, divided by
((5 + |y|) / 6) ** length_penalty.
"""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import padir_util
import pytest
from flax import nnx

from padir.data import tokenizer as tok_lib
from padir.decoding import autoregressive as decode
from padir.model import transformer as model_lib

V = 10  # predictable ids: EOS, UNK and 6..9
INPUTS = jnp.array([[7, 8, 9, 1, 0], [6, 9, 8, 7, 1]], jnp.int32)
PREDICTABLE = [v for v in range(V) if v not in tok_lib.NEVER_PREDICTED]
CONTINUE = [v for v in PREDICTABLE if v != tok_lib.EOS_ID]


def _model(max_target_length: int, seed: int = 0) -> model_lib.Transformer:
  return padir_util.tiny_model(
    "ar", seed, vocab_size=V, max_source_length=5, max_target_length=max_target_length
  )


@functools.partial(nnx.jit, static_argnames=("beam_size", "max_len", "length_penalty"))
def _beam(model, inputs, beam_size, max_len=None, length_penalty=0.6):
  return decode.beam_search(model, inputs, beam_size, max_len, length_penalty)


@nnx.jit
def _logp(model, inputs_1S, dec_in_NL):
  """log p over the vocabulary at every position of teacher-forced decoder inputs."""
  enc, mask = model.encode(inputs_1S)
  n = dec_in_NL.shape[0]
  logits = model.decode(dec_in_NL, jnp.repeat(enc, n, 0), jnp.repeat(mask, n, 0))
  logits = logits.at[..., jnp.asarray(tok_lib.NEVER_PREDICTED)].set(-jnp.inf)
  return jax.nn.log_softmax(logits, -1)


def _decoder_inputs(seqs, L):
  dec_in = np.full((len(seqs), L), tok_lib.PAD_ID, np.int32)
  for i, seq in enumerate(seqs):
    row = [tok_lib.BOS_ID, *seq[:-1]]
    dec_in[i, : len(row)] = row
  return dec_in


def _lp(n, alpha):
  return ((5 + n) / 6) ** alpha


def _all_hypotheses(L):
  """Every output of length <= L: EOS-terminated, or L tokens without EOS (truncated)."""
  hyps = [
    (*prefix, tok_lib.EOS_ID) for n in range(L) for prefix in itertools.product(CONTINUE, repeat=n)
  ]
  return hyps + list(itertools.product(CONTINUE, repeat=L))


def _trim(row):
  row = [int(x) for x in row if x != tok_lib.PAD_ID]
  return tuple(row)


@pytest.mark.slow  # beam searches compiled per length penalty
@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_a_beam_as_large_as_the_hypothesis_space_is_exhaustive_search(length_penalty):
  L = 3
  model = _model(max_target_length=6)  # decode only the first L positions
  hyps = _all_hypotheses(L)
  K = len(PREDICTABLE) ** L  # 216 >= len(hyps) = 156 and >= the candidates of any step
  out = _beam(model, INPUTS, K, L, length_penalty)
  for b in range(INPUTS.shape[0]):
    logp = np.asarray(_logp(model, INPUTS[b : b + 1], jnp.asarray(_decoder_inputs(hyps, L))))
    scores = np.array(
      [
        sum(logp[i, t, y] for t, y in enumerate(h)) / _lp(len(h), length_penalty)
        for i, h in enumerate(hyps)
      ]
    )
    order = np.argsort(-scores)
    assert scores[order[0]] - scores[order[1]] > 1e-4  # a unique best: no tie to break
    beams = [_trim(r) for r in np.asarray(out["beams"][b])]
    beam_scores = np.asarray(out["beam_scores"][b])
    assert _trim(out["tokens"][b]) == hyps[order[0]]
    np.testing.assert_allclose(float(out["scores"][b]), scores[order[0]], rtol=1e-5)
    # Every hypothesis finished, once, with its brute-force score, best first; the rest is empty.
    n = len(hyps)
    assert sorted(beams[:n]) == sorted(hyps) and np.isneginf(beam_scores[n:]).all()
    np.testing.assert_allclose(beam_scores[:n], scores[order], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
      [scores[hyps.index(h)] for h in beams[:n]], beam_scores[:n], rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_size_one_is_greedy_decoding(seed):
  model = _model(max_target_length=6, seed=seed)
  inputs = jnp.concatenate([INPUTS, INPUTS[:, ::-1]])
  greedy = np.asarray(nnx.jit(decode.greedy_ar)(model, inputs))
  out = _beam(model, inputs, 1)
  np.testing.assert_array_equal(np.asarray(out["tokens"]), greedy)


def _reference_beam(model, b, K, L, alpha):
  """Plain-Python beam search with the documented rules, one decoder call per prefix."""
  alive, finished = [((), 0.0)], []
  for t in range(L):
    if len(finished) >= K:
      break
    cands = []
    for prefix, s in alive:
      dec_in = jnp.asarray(_decoder_inputs([prefix + (0,)], L))  # the last token is not read
      logp = np.asarray(_logp(model, INPUTS[b : b + 1], dec_in))
      cands += [(s + float(logp[0, t, v]), prefix + (v,)) for v in PREDICTABLE]
    cands = sorted(cands, key=lambda c: -c[0])[: 2 * K]
    ends = [seq[-1] == tok_lib.EOS_ID or t == L - 1 for _, seq in cands]
    finished += [
      (s / _lp(t + 1, alpha), seq)
      for r, ((s, seq), e) in enumerate(zip(cands, ends))
      if e and r < K
    ]
    alive = [(seq, s) for (s, seq), e in zip(cands, ends) if not e][:K]
  return sorted(finished, key=lambda f: -f[0])[:K]


@pytest.mark.slow  # a compiled beam search against a Python one
def test_small_beam_matches_a_plain_python_beam_search():
  L, K, alpha = 5, 3, 0.6
  stopped_early, truncated = False, False
  for seed in (0, 3):  # seed 0: all beams end in EOS early; seed 3: mostly truncated at L
    model = _model(max_target_length=L, seed=seed)
    out = _beam(model, INPUTS, K, None, alpha)
    for b in range(INPUTS.shape[0]):
      expected = _reference_beam(model, b, K, L, alpha)
      got = [_trim(r) for r in np.asarray(out["beams"][b])]
      assert got == [seq for _, seq in expected]
      np.testing.assert_allclose(
        np.asarray(out["beam_scores"][b]), [s for s, _ in expected], rtol=1e-5
      )
      truncated |= any(seq[-1] != tok_lib.EOS_ID for _, seq in expected)
    stopped_early |= int(out["steps"]) < L
  # Both ways to end were exercised: K finished before max_len, and truncation at max_len.
  assert stopped_early and truncated


def test_beam_search_rejects_a_nar_model():
  cfg = model_lib.ModelConfig(
    vocab_size=V,
    max_source_length=5,
    max_target_length=4,
    num_encoder_layers=1,
    num_decoder_layers=1,
    num_heads=2,
    d_model=16,
    d_ff=16,
    decoder="nar",
  )
  with pytest.raises(ValueError, match="decoder='ar'"):
    decode.beam_search(model_lib.Transformer(cfg, rngs=nnx.Rngs(0)), INPUTS, 2)


@pytest.mark.parametrize("positional_attention", [True, False])
def test_kv_cached_decode_step_equals_the_full_causal_decoder_pass(positional_attention):
  """decode_step at position t, fed one token at a time, gives decode()'s logits row t."""
  cfg = model_lib.ModelConfig(
    vocab_size=V,
    max_source_length=5,
    max_target_length=7,
    num_encoder_layers=1,
    num_decoder_layers=2,
    num_heads=2,
    d_model=16,
    d_ff=16,
    dropout_rate=0.0,
    decoder="ar",
    positional_attention=positional_attention,
  )
  model = model_lib.Transformer(cfg, rngs=nnx.Rngs(3))
  model.eval()
  T = cfg.max_target_length
  dec_in = np.random.default_rng(0).integers(6, V, size=(2, T)).astype(np.int32)
  dec_in[:, 0] = tok_lib.BOS_ID
  enc, mask = model.encode(INPUTS)  # the second source has a PAD
  full = np.asarray(model.decode(jnp.asarray(dec_in), enc, mask))
  cache = model.init_cache(enc, mask, T)
  for t in range(T):
    logits, cache = model.decode_step(jnp.asarray(dec_in[:, t]), jnp.int32(t), cache)
    np.testing.assert_allclose(np.asarray(logits), full[:, t], rtol=1e-5, atol=1e-5)


def test_greedy_decoding_equals_step_by_step_argmax_of_the_full_decoder():
  model = _model(max_target_length=6, seed=2)
  got = np.asarray(nnx.jit(decode.greedy_ar)(model, INPUTS))
  for b in range(INPUTS.shape[0]):
    out = []
    while len(out) < 6 and (not out or out[-1] != tok_lib.EOS_ID):
      logp = np.asarray(_logp(model, INPUTS[b : b + 1], _decoder_inputs([out + [0]], 6)))
      out.append(int(np.argmax(logp[0, len(out)])))
    np.testing.assert_array_equal(got[b, : len(out)], out)
    assert (got[b, len(out) :] == tok_lib.PAD_ID).all()
