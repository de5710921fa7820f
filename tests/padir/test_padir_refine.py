"""padir.decoding.refinement: the released decoder's rules on hand-made logits (a stub model), candidate
ranking on hand-made log-probabilities, the cached cross-attention, batch invariance, and a
tiny trained model that reproduces memorised targets."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import padir_util
import pytest
from flax import nnx

from padir.data import tokenizer as tok_lib
from padir.decoding import autoregressive as decode
from padir.decoding import refinement

EOS, PAD, MASK = tok_lib.EOS_ID, tok_lib.PAD_ID, tok_lib.MASK_ID


@dataclasses.dataclass(frozen=True)
class StubCfg:
  vocab_size: int
  max_target_length: int
  decoder: str = "nar"


class Stub:
  """A model whose decoder pass returns logits_fn(hypothesis) and whose length predictor
  returns fixed logits: the decoder's rules can be checked on hand-made logits."""

  def __init__(self, V, T, logits_fn, length_logits_C):
    self.cfg = StubCfg(V, T)
    self.logits_fn, self.length_logits_C = logits_fn, length_logits_C

  def encode(self, inputs_BS):
    B, S = inputs_BS.shape
    return jnp.zeros((B, S + 1, 1)), jnp.ones((B, S + 1), bool)

  def length_logits(self, enc_BSD, enc_mask_BS=None):
    return jnp.broadcast_to(
      self.length_logits_C, (enc_BSD.shape[0], self.cfg.max_target_length + 1)
    )

  def project_encoder(self, enc_BSD):
    return ()

  def decode(self, x_MT, enc_MSD, enc_mask_MS, fixed=None):
    return self.logits_fn(x_MT)


V, T = 50, 6
TARGET = np.array([7, 9, 9, 11, EOS, PAD])  # a stutter at position 2
SOURCES = jnp.array([[10, 11, EOS]], jnp.int32)


def _peaked(x_MT):
  """Every pass predicts TARGET (a fixed peak of 5 nats at each position)."""
  return jnp.broadcast_to(5.0 * jax.nn.one_hot(TARGET, V), x_MT.shape + (V,))


def _copy(x_MT):
  """Every pass predicts its input: one pass returns X(0)."""
  return 5.0 * jax.nn.one_hot(x_MT, V)


@functools.cache
def _compiled(logits_fn, options: refinement.RefineOptions):
  """One compilation per decoder and options (the tests below share them)."""
  stub = Stub(V, T, logits_fn, jnp.zeros(T + 1))
  return jax.jit(lambda k: refinement.refine(stub, SOURCES, k, options, target_length=5))


def _run(logits_fn, key=jax.random.key(3), **options):
  out = _compiled(logits_fn, refinement.RefineOptions(**options))(key)
  return {k: np.asarray(v) for k, v in out.items()}


def test_stutter_resets_to_the_initial_noise_on_every_pass_and_is_dropped_with_it():
  # X(0) seen independently: a copying decoder returns it after one pass.
  noise = _run(_copy, num_steps=1, num_lengths=1, stutter="keep", drop="none")["tokens"][0]
  assert (noise[:5] >= tok_lib.NUM_SPECIAL).all() and (noise[5:] == PAD).all()

  kept = _run(_peaked, num_lengths=1, num_steps=10, drop="none")
  np.testing.assert_array_equal(kept["noise"][0], noise)
  reset = [7, 9, noise[2], 11, EOS, PAD]  # the last pass, too, re-noises the repeat
  np.testing.assert_array_equal(kept["tokens"][0], reset)

  dropped = _run(_peaked, num_lengths=1, num_steps=10)  # the defaults: drop="initial"
  expected = [t for t, n in zip(reset[:5], noise[:5]) if t != n]  # incl. chance equalities
  np.testing.assert_array_equal(dropped["tokens"][0], expected + [PAD] * (T - len(expected)))
  assert dropped["lengths"][0] == len(expected)

  # Our former rule: [MASK] between passes, none after the last; no early stop meanwhile.
  former = _run(_peaked, num_lengths=1, num_steps=10, stutter="mask", drop="none")
  np.testing.assert_array_equal(former["tokens"][0], TARGET)
  assert former["passes"][0] == 10


def test_early_stop_ends_refinement_at_the_first_pass_that_changes_nothing():
  out = _run(_peaked, num_lengths=1, num_steps=10)
  assert out["passes"][0] == 2 and out["steps"] == 2  # X(0) -> X(1) -> X(1)
  assert _run(_peaked, num_lengths=1, num_steps=10, early_stop=False)["passes"][0] == 10


def test_candidate_scores_are_the_sum_or_the_mean_with_the_gnmt_brevity_penalty():
  rng = np.random.default_rng(0)
  logp = -rng.exponential(size=(4, T))
  keep = np.arange(T)[None] < np.array([3, 5, 1, 0])[:, None]
  for score, alpha in (("sum", 0.0), ("mean", 0.0), ("sum", 1.5), ("mean", 0.6)):
    opts = refinement.RefineOptions(score=score, brevity_alpha=alpha)
    got = np.asarray(refinement.candidate_scores(jnp.asarray(logp), jnp.asarray(keep), opts))
    for m in range(4):
      n = keep[m].sum()
      s = logp[m, :n].sum() / (n if score == "mean" and n else 1) / ((5 + n) / 6) ** alpha
      assert got[m] == pytest.approx(s if n else -np.inf, rel=1e-5)


PEAK = {3: 3.3, 5: 3.8}  # the length-dependent stub's token logit peaks: log p ~ -1.0, -0.7


def _length_dependent_stub() -> Stub:
  """Top-2 lengths 3 (length logit 2) and 5 (logit 1); every position of a row of length n
  predicts a fixed token (EOS last) with logit PEAK[n]."""

  def logits_fn(x_MT):
    n_M = (x_MT != PAD).sum(-1)
    a_M = jnp.where(n_M == 3, PEAK[3], PEAK[5])
    tgt_MT = jnp.where(jnp.arange(T)[None] == n_M[:, None] - 1, EOS, 10 + jnp.arange(T)[None])
    return a_M[:, None, None] * jax.nn.one_hot(tgt_MT, V)

  return Stub(V, T, logits_fn, jnp.zeros(T + 1).at[3].set(2.0).at[5].set(1.0))


def _token_logp(n: int) -> float:
  """log-softmax of PEAK[n] over the predictable ids, by hand."""
  allowed = V - len(tok_lib.NEVER_PREDICTED)
  return PEAK[n] - np.log(np.exp(PEAK[n]) + allowed - 1)


def test_the_chosen_candidate_is_the_best_under_the_chosen_score():
  """On the length-dependent stub the sum prefers length 3, the mean length 5, and a strong
  brevity penalty length 5 again."""
  stub, logp = _length_dependent_stub(), _token_logp

  scores = {
    (s, a): {n: (logp(n) * n / (n if s == "mean" else 1)) / ((5 + n) / 6) ** a for n in (3, 5)}
    for s, a in (("sum", 0.0), ("mean", 0.0), ("sum", 4.0))
  }
  assert scores[("sum", 0.0)][3] > scores[("sum", 0.0)][5]  # the construction works
  assert scores[("mean", 0.0)][5] > scores[("mean", 0.0)][3]
  for (score, alpha), by_len in scores.items():
    options = refinement.RefineOptions(
      num_lengths=2, score=score, brevity_alpha=alpha, stutter="keep", drop="reset"
    )
    out = jax.jit(lambda k: refinement.refine(stub, SOURCES, k, options))(jax.random.key(0))
    best = max(by_len, key=by_len.get)
    assert int(out["lengths"][0]) == best, (score, alpha)
    assert float(out["scores"][0]) == pytest.approx(by_len[best], rel=1e-5)
    np.testing.assert_array_equal(np.asarray(out["candidate_lengths"][0]), [3, 5])


def test_the_length_prior_adds_the_length_predictors_log_probability():
  """score + log p(n | x) (length 0 excluded from the softmax) by hand; on the length-dependent
  stub it turns the mean's choice (length 5) into length 3, which the predictor prefers."""
  rng = np.random.default_rng(1)
  logp = -rng.exponential(size=(3, T))
  keep = np.arange(T)[None] < np.array([3, 5, 2])[:, None]
  length_logp = np.log(rng.dirichlet(np.ones(3)))
  for score in ("sum", "mean"):
    opts = refinement.RefineOptions(score=score, length_prior=True)
    got = refinement.candidate_scores(
      jnp.asarray(logp), jnp.asarray(keep), opts, length_logp_M=jnp.asarray(length_logp)
    )
    plain = refinement.candidate_scores(
      jnp.asarray(logp), jnp.asarray(keep), dataclasses.replace(opts, length_prior=False)
    )
    np.testing.assert_allclose(np.asarray(got), np.asarray(plain) + length_logp, rtol=1e-5)
  with pytest.raises(ValueError, match="length log-probabilities"):
    refinement.candidate_scores(jnp.asarray(logp), jnp.asarray(keep), opts)

  stub = _length_dependent_stub()
  token_logp = {n: _token_logp(n) for n in (3, 5)}
  log_z = np.log(4 + np.exp(2.0) + np.exp(1.0))  # lengths 1..T: four zeros, 2 and 1
  prior = {3: 2.0 - log_z, 5: 1.0 - log_z}
  for length_prior, want in ((False, 5), (True, 3)):
    options = refinement.RefineOptions(
      num_lengths=2, score="mean", stutter="keep", drop="reset", length_prior=length_prior
    )
    out = jax.jit(lambda k: refinement.refine(stub, SOURCES, k, options))(jax.random.key(0))
    assert int(out["lengths"][0]) == want
    expected = token_logp[want] + (prior[want] if length_prior else 0.0)
    assert float(out["scores"][0]) == pytest.approx(expected, rel=1e-5)


def test_length_offsets_and_starts_multiply_the_candidates():
  stub = Stub(V, T, _peaked, jnp.zeros(T + 1).at[2].set(3.0).at[5].set(2.0))
  options = refinement.RefineOptions(num_lengths=2, length_offsets=3, num_starts=2)
  out = jax.jit(lambda k: refinement.refine(stub, SOURCES, k, options))(jax.random.key(0))
  # [2 - 1, 2, 2 + 1] and [5 - 1, 5, 5 + 1 clipped to T], each twice.
  np.testing.assert_array_equal(
    np.asarray(out["candidate_lengths"][0]), np.repeat([1, 2, 3, 4, 5, 6], 2)
  )


# A tiny random model (1 + 1 layers): the cached path and batch invariance.


INPUTS = jnp.array([[7, 8, 9, 1, 0, 0], [10, 11, 12, 13, 14, 1], [15, 1, 0, 0, 0, 0]], jnp.int32)


def test_cached_cross_attention_gives_the_uncached_logits():
  model = padir_util.tiny_model("nar")
  hyp = jnp.array([[6, 7, 8, 1, 0, 0], [9, 9, 10, 11, 12, 1], [13, 1, 0, 0, 0, 0]], jnp.int32)

  @nnx.jit
  def both(m):
    enc, mask = m.encode(INPUTS)
    return m.decode(hyp, enc, mask), m.decode(hyp, None, mask, fixed=m.project_encoder(enc))

  plain, cached = both(model)
  np.testing.assert_allclose(np.asarray(cached), np.asarray(plain), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
  "options",
  [
    refinement.RefineOptions(num_lengths=2),
    refinement.RefineOptions(
      num_lengths=2,
      length_offsets=3,
      num_starts=2,
      remask="confidence",
      temperature=0.7,
      top_k=5,
      brevity_alpha=0.5,
      rerank="ar",
      length_prior=True,
    ),
  ],
  ids=["defaults", "every_option"],
)
def test_a_source_decodes_alone_uncached_as_inside_a_padded_batch_cached(options):
  """Batch invariance and the cached cross-attention at once (two compilations, not four):
  the cached batch's row equals the source decoded alone, with less padding, uncached."""
  model, ar = padir_util.tiny_model("nar"), padir_util.tiny_model("ar", seed=1)
  keys = jax.random.split(jax.random.key(5), 3)
  batch = refinement.refine_jit(model, INPUTS, keys, options, ar)
  uncached = dataclasses.replace(options, cache_cross=False)
  alone = refinement.refine_jit(model, INPUTS[2:3, :2], keys[2:3], uncached, ar)
  for name in ("tokens", "passes", "candidates"):
    np.testing.assert_array_equal(np.asarray(alone[name][0]), np.asarray(batch[name][2]), name)
  np.testing.assert_allclose(alone["scores"][0], batch["scores"][2], rtol=1e-5)


def test_ar_rerank_score_is_the_beam_searchs_summed_log_probability():
  """ar_log_prob (teacher forced, one pass) against beam_search's incremental KV-cached sum of
  log p(y_t | y_<t, x) (length_penalty 0) of its own output."""
  ar = padir_util.tiny_model("ar", seed=1)

  @nnx.jit
  def both(m):
    beam = decode.beam_search(m, INPUTS, 2, length_penalty=0.0)
    return beam["scores"], refinement.ar_log_prob(m, INPUTS, beam["tokens"], 1)

  beam_scores, rescored = both(ar)
  np.testing.assert_allclose(np.asarray(rescored), np.asarray(beam_scores), rtol=1e-5)


class _WordIds:
  """A tokenizer stub for evaluate.translate: words are ids, ids print as words."""

  def encode(self, text):
    return [int(w) for w in text.split()]

  def decode(self, ids):
    return " ".join(str(int(i)) for i in ids if i > tok_lib.EOS_ID)


@pytest.mark.parametrize("variant", ["paper", "length-prior-reset"])
def test_translation_with_a_named_variant_decodes_with_its_options(variant):
  """evaluate.translate(decoder=...) (training's validation BLEU, decode.decoder) equals
  refine with RefineOptions(**refinement.VARIANTS[variant]) on the same batch and key."""
  from padir.evaluation import translation as evaluate

  model = padir_util.tiny_model("nar")
  sources = ["7 8 9", "10 11 12 13 14", "15"]
  key = jax.random.key(4)
  got = evaluate.translate(
    model, _WordIds(), sources, key, batch_size=4, num_lengths=2, decoder=variant
  )
  options = refinement.RefineOptions(num_steps=4, num_lengths=2, **refinement.VARIANTS[variant])
  inputs = evaluate.encode_batch(_WordIds(), sources, 4, model.cfg.max_source_length)
  tokens = refinement.refine_jit(model, jnp.asarray(inputs), jax.random.fold_in(key, 0), options)
  assert got == [_WordIds().decode(row) for row in np.asarray(tokens["tokens"])[:3]]
  if variant != "paper":  # the variant changes the output here, so the wiring is seen
    paper = evaluate.translate(model, _WordIds(), sources, key, batch_size=4, num_lengths=2)
    assert got != paper
