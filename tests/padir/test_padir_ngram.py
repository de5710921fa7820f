"""The n-gram model of DA-Transformer's joint beam search (padir.decoding.ngram): every row of
its automaton is a distribution, and a sentence's log-probability read along the automaton's
states equals the interpolated absolute-discounting formula computed on the full history from
raw n-gram counts (so collapsing histories to seen contexts loses nothing)."""

import collections
import math

import jax.numpy as jnp
import numpy as np
import pytest

from padir.data import tokenizer as tokenizer_lib
from padir.decoding import ngram

BOS, EOS, PAD, MASK = (
  tokenizer_lib.BOS_ID,
  tokenizer_lib.EOS_ID,
  tokenizer_lib.PAD_ID,
  tokenizer_lib.MASK_ID,
)
V = 12
WORDS = list(range(V))
NEVER = {PAD, BOS, MASK}


def _corpus(seed, n=40):
  rng = np.random.default_rng(seed)
  allowed = [w for w in WORDS if w not in NEVER | {EOS}]
  # a skewed vocabulary, so some n-grams repeat and others are seen once
  p = np.array([1.0 / (i + 1) for i in range(len(allowed))])
  return [list(rng.choice(allowed, rng.integers(1, 7), p=p / p.sum())) for _ in range(n)]


def _reference(corpus, order, D, vocab=V):
  """log P(w | history) by the formula on the full history, from raw n-gram counts."""
  grams = collections.Counter()
  for sent in corpus:
    toks = [BOS] * (order - 1) + list(sent) + [EOS]
    for i in range(order - 1, len(toks)):
      for n in range(1, order + 1):
        grams[tuple(toks[i - n + 1 : i + 1])] += 1
  total_tokens = sum(len(s) + 1 for s in corpus)

  def prob(w, h):
    if not h:
      return 0.0 if w in NEVER else (grams[(w,)] + 1) / (total_tokens + vocab - len(NEVER))
    follow = {g[-1]: c for g, c in grams.items() if len(g) == len(h) + 1 and g[:-1] == h}
    if not follow:
      return prob(w, h[1:])
    c_h = sum(follow.values())
    seen = max(follow.get(w, 0) - D, 0.0) / c_h
    return seen + D * len(follow) / c_h * prob(w, h[1:])

  def logprob(sent):
    toks = [BOS] * (order - 1) + list(sent) + [EOS]
    total = 0.0
    for i in range(order - 1, len(toks)):
      h = tuple(toks[max(0, i - order + 1) : i])
      total += math.log(prob(toks[i], h))
    return total

  return prob, logprob


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_rows_are_distributions_and_sentences_match_the_formula(order):
  corpus = _corpus(0)
  lm = ngram.build(corpus, V, order=order, discount=0.6)
  probs = np.exp(lm.dense_rows().astype(np.float64))
  np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-6)
  assert (probs[:, sorted(NEVER)] == 0).all()
  _, logprob = _reference(corpus, order, 0.6)
  # training sentences, and fresh ones whose contexts were never seen
  for sent in corpus[:10] + _corpus(1, 10):
    want = pytest.approx(logprob(sent), rel=1e-5, abs=1e-5)
    assert ngram.sentence_logprob(lm, sent, dense=False) == want  # rows formed per step
    assert ngram.sentence_logprob(lm, sent, dense=True) == want  # rows read from the table


def test_the_stored_rows_and_moves_are_the_formed_ones():
  """A small model's whole tables (NgramLM.tables(dense=True)) hold, for every state and
  token, the row `rows` forms and the move `advance` makes on the sparse tables."""
  lm = ngram.build(_corpus(3), V, order=3, discount=0.6)
  sparse, dense = lm.tables(dense=False), lm.tables(dense=True)
  assert sparse.logp_SV is None and dense.logp_SV.shape == (lm.num_states, V)
  states = jnp.arange(lm.num_states)
  np.testing.assert_array_equal(dense.logp_SV, ngram.rows(sparse, states))
  for w in range(V):
    np.testing.assert_array_equal(
      dense.next_SV[:, w], ngram.advance(sparse, states, jnp.full_like(states, w))
    )
  assert len(set(np.asarray(dense.next_SV).ravel().tolist())) > V  # moves reach longer contexts


def test_order_one_is_the_add_one_unigram():
  lm = ngram.build([[5, 5, 6]], V, order=1)
  allowed = V - len(NEVER)
  # 4 tokens read (EOS included): 5 twice, 6 and EOS once
  rows = lm.dense_rows()
  assert math.exp(rows[lm.start, 5]) == pytest.approx(3 / (4 + allowed))
  assert math.exp(rows[lm.start, 7]) == pytest.approx(1 / (4 + allowed))


def test_a_large_vocabulary_costs_entries_not_contexts_times_vocabulary():
  """With 50,000 tokens the tables hold the n-grams seen (plus one fanout of padding) and the
  unigram row, not contexts x vocabulary; rows formed on the device are still
  distributions and sentences still match the formula."""
  big = 50_000
  corpus = [[w * 997 % (big - 10) + 5 for w in sent] for sent in _corpus(2, 60)]
  lm = ngram.build(corpus, big, order=4, discount=0.6)
  stored = sum(a.size for k, a in lm.arrays.items() if k != "unigram_V")
  grams = sum(len(s) + 1 for s in corpus) * 4  # every position's n-grams of orders 1-4, at most
  # 3 arrays of entries (n-grams seen, then one fanout of padding), 4 + 3 per state
  assert lm.num_entries <= grams
  assert stored <= 3 * (lm.num_entries + max(lm.fanout)) + 7 * lm.num_states
  assert lm.num_states * big > 100 * stored  # what a dense table would have held
  rows = np.asarray(ngram.rows(lm.tables(), np.arange(0, lm.num_states, 7)), np.float64)
  np.testing.assert_allclose(np.exp(rows).sum(1), 1.0, rtol=1e-5)
  _, logprob = _reference(corpus, 4, 0.6, big)
  for sent in corpus[:5]:
    assert ngram.sentence_logprob(lm, sent) == pytest.approx(logprob(sent), rel=1e-5)


def test_bad_settings_are_one_line_each():
  with pytest.raises(ValueError, match="order must be >= 1"):
    ngram.build([[4]], V, order=0)
  with pytest.raises(ValueError, match="discount"):
    ngram.build([[4]], V, discount=1.0)
  with pytest.raises(ValueError, match="lower the order"):
    ngram.build(_corpus(0), V, order=3, max_entries=50)
