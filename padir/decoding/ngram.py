"""An n-gram language model over the target's tokens, as an automaton a decoder can step in JAX:
the joint n-gram scoring of DA-Transformer's beam search (Huang et al. 2022, Sec. 2.4; used by
padir.decoding.dag.beam).

The model is interpolated absolute discounting (Ney et al. 1994) over the training targets, each
sentence read after n - 1 BOS tokens and ending in EOS:
    P(w | h) = max(c(h w) - D, 0) / c(h) + D N(h) / c(h) P(w | h')      for a context h seen,
    P(w | h) = P(w | h')                                                 for one never seen,
with h' the context h without its first token, N(h) the number of distinct tokens seen after h,
c(h) = sum_w c(h w), D the discount (default 0.75), and at the bottom the add-one unigram
P(w) = (c(w) + 1) / (N + V) over the tokens a sentence may contain (not PAD, BOS or [MASK], which
get probability 0, stored as the finite log NEVER). Every P(. | h) sums to 1.

The automaton's states are the contexts seen in training (of every length up to n - 1, the
empty one included); a state's row is log P(. | h) over the vocabulary, and reading token w
moves to the longest suffix of (h w), cut to its last n - 1 tokens, that is a state: all of
P's dependence on h is the state's, so a sentence's log-probability is the sum of the rows
read along its path (`sentence_logprob`). The start state is n - 1 BOS tokens. Its tables are
[states, V]: the number of seen contexts times the vocabulary, which `build` bounds
(max_entries) with one line naming the sizes.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Any, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from padir.data import corpus
from padir.data import tokenizer as tokenizer_lib

DISCOUNT = 0.75
NEVER = -1e9  # the log-probability of a token no sentence contains (exp: exactly 0)
MAX_ENTRIES = 50_000_000  # [states, V] entries of each table (200 MB of float32)


@dataclasses.dataclass(frozen=True)
class NgramLM:
  """logp_SV: log P(w | state) [S, V], float32 (NEVER, finite, for PAD, BOS and [MASK], so that
  a decoder's weighted sums stay finite without a pass over the table); next_SV: the
  state after reading w [S, V], int32; start: the state of a sentence's beginning."""

  order: int
  logp_SV: np.ndarray
  next_SV: np.ndarray
  start: int

  def beam_tables(self) -> tuple[jax.Array, jax.Array, int]:
    """(logp_SV, next_SV) on the device and the start state: padir.decoding.dag.beam's `lm`."""
    return jnp.asarray(self.logp_SV), jnp.asarray(self.next_SV), self.start


def _never(V: int) -> np.ndarray:
  """[V] the tokens no sentence contains."""
  out = np.zeros(V, bool)
  for t in (tokenizer_lib.PAD_ID, tokenizer_lib.BOS_ID, tokenizer_lib.MASK_ID):
    if t < V:
      out[t] = True
  return out


def _counts(sequences: Iterable[Sequence[int]], order: int):
  """c(h w) for every seen n-gram of orders 1..order, by context: {h: Counter(w)}."""
  table: dict[tuple, collections.Counter] = collections.defaultdict(collections.Counter)
  bos, eos = tokenizer_lib.BOS_ID, tokenizer_lib.EOS_ID
  for seq in sequences:
    toks = [bos] * (order - 1) + [int(t) for t in seq if t != eos] + [eos]
    for i in range(order - 1, len(toks)):
      for n in range(order):  # context length n
        table[tuple(toks[i - n : i])][toks[i]] += 1
  return table


def build(
  sequences: Iterable[Sequence[int]],
  vocab_size: int,
  order: int = 3,
  discount: float = DISCOUNT,
  max_entries: int = MAX_ENTRIES,
) -> NgramLM:
  """The automaton of the module docstring from token-id sequences (EOS optional at the end)."""
  if order < 1:
    raise ValueError(f"the n-gram order must be >= 1, got {order}")
  if not 0.0 < discount < 1.0:
    raise ValueError(f"the n-gram discount must be in (0, 1), got {discount}")
  V = int(vocab_size)
  table = _counts(sequences, order)
  if not table:
    raise ValueError("an n-gram model needs at least one training sentence")
  # contexts in order of length: a context's suffix is a state before it
  states = sorted(table, key=lambda h: (len(h), h))
  if len(states) * V > max_entries:
    raise ValueError(
      f"an order-{order} n-gram model here has {len(states):,} contexts x {V:,} tokens = "
      f"{len(states) * V:,} table entries, over the {max_entries:,} allowed: lower the order"
    )
  index = {h: s for s, h in enumerate(states)}
  never_V = _never(V)
  prob_SV = np.zeros((len(states), V), np.float64)
  for s, h in enumerate(states):
    c = table[h]
    if not h:
      uni_V = np.ones(V)
      for w, k in c.items():
        uni_V[w] += k
      uni_V[never_V] = 0.0
      prob_SV[s] = uni_V / uni_V.sum()
      continue
    total = sum(c.values())
    below_V = prob_SV[index[h[1:]]]  # P(. | h'), already built (shorter contexts first)
    row_V = discount * len(c) / total * below_V
    for w, k in c.items():
      row_V[w] += max(k - discount, 0.0) / total
    prob_SV[s] = row_V
  # Reading w in h: h w when it is a state (h shorter than n - 1); otherwise what reading w does
  # in h's suffix h' (for h of length n - 1, h w cut to n - 1 tokens is h' w, which is h''s
  # own candidate), so rows are built shortest context first.
  next_SV = np.zeros((len(states), V), np.int32)
  children: dict[tuple, list[tuple]] = collections.defaultdict(list)
  for g in states[1:]:
    children[g[:-1]].append(g)
  for s, h in enumerate(states):
    if h:
      next_SV[s] = next_SV[index[h[1:]]]
    if len(h) < order - 1:
      for g in children[h]:
        next_SV[s, g[-1]] = index[g]
  with np.errstate(divide="ignore"):
    logp_SV = np.maximum(np.log(prob_SV), NEVER).astype(np.float32)
  start = index[(tokenizer_lib.BOS_ID,) * (order - 1)] if order > 1 else index[()]
  return NgramLM(order, logp_SV, next_SV, start)


def sentence_logprob(lm: NgramLM, tokens: Sequence[int]) -> float:
  """log P(tokens EOS) by walking the automaton (EOS appended unless last)."""
  toks = [int(t) for t in tokens]
  if not toks or toks[-1] != tokenizer_lib.EOS_ID:
    toks.append(tokenizer_lib.EOS_ID)
  s, total = lm.start, 0.0
  for w in toks:
    total += float(lm.logp_SV[s, w])
    s = int(lm.next_SV[s, w])
  return total


@functools.lru_cache(maxsize=4)
def _from_corpus(corpus_dir: str, source: str, target: str, tok, order: int) -> NgramLM:
  pairs = corpus.read_split(corpus_dir, "train", source, target)
  return build((tok.encode(t) for _, t in pairs), tok.vocab_size, order)


def from_corpus(data: Any, tok, order: int) -> NgramLM:
  """An n-gram model of `order` over a run's training targets (its config.data), built once a
  process for each corpus, tokenizer and order."""
  return _from_corpus(data.corpus_dir, data.source_lang, data.target_lang, tok, int(order))
