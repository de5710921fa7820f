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
read along its path (`sentence_logprob`). The start state is n - 1 BOS tokens.

The automaton is stored sparsely, as the formula is: per state, its suffixes (h' is the state
itself minus its first token, and so on down), its back-off weight D N(h) / c(h), and one entry per token seen
after h (its discounted probability and, where (h w) is a state, that state); the empty
context's row is stored whole. A decoder forms the rows it needs on the device (`rows`: the
add-one unigram, then one back-off level a step down to the state) and moves along the
automaton for the tokens it chose (`advance`), so the tables grow with the n-grams seen, not
with contexts x vocabulary: a 5-gram model of a real corpus with an 8,000-piece vocabulary
fits in tens of megabytes. `build` bounds the entries (max_entries) with one line naming the
sizes.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Any, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from padir.data import corpus
from padir.data import tokenizer as tokenizer_lib

DISCOUNT = 0.75
NEVER = -1e9  # the log-probability of a token no sentence contains (exp: exactly 0)
MAX_ENTRIES = 50_000_000  # table entries (n-grams seen) at most: 400 MB of arrays
# states x vocabulary up to which the rows and moves are also stored whole (2 x 4 bytes each,
# 128 MB at most): a decoder then reads a row instead of forming it (the DAG beam with the
# family's sov 5-gram model, 7.8M entries: 2.25 against 2.76 ms a sentence at batch 1)
DENSE_MAX = 16_000_000


@struct.dataclass
class Tables:
  """The automaton on the device (module docstring), a pytree a jitted decoder takes as an
  argument. S states in order of context length (state 0 the empty context), E entries grouped
  by state in token order, then padding so that a slice of a length's fanout from any state
  never runs past the arrays (the slots past a state's count are masked).

  unigram_V: P(w) of the empty context; level_SL: [S, n - 1] the states of h's suffixes of
  length 1 .. n - 1 (-1 past h's length; h's parent h' is the one a length shorter);
  backoff_S: D N(h) / c(h); first_S, count_S: where h's entries start and how many;
  token_E, prob_E, child_E: each entry's token w, max(c(h w) - D, 0) / c(h), and the state
  (h w) or -1. fanout: per context length 0 .. n - 1, the most entries a state of it has.
  logp_SV, next_SV: where states x vocabulary <= DENSE_MAX, every state's row and move, as
  `rows` and `advance` form them (the same numbers, read instead of formed)."""

  unigram_V: jax.Array
  level_SL: jax.Array
  backoff_S: jax.Array
  first_S: jax.Array
  count_S: jax.Array
  token_E: jax.Array
  prob_E: jax.Array
  child_E: jax.Array
  # every state's row and move, formed once by `rows` / `advance` (small models; else None)
  logp_SV: jax.Array | None
  next_SV: jax.Array | None
  order: int = struct.field(pytree_node=False)
  start: int = struct.field(pytree_node=False)
  fanout: tuple[int, ...] = struct.field(pytree_node=False)


@dataclasses.dataclass(frozen=True)
class NgramLM:
  """The host side of the automaton: its arrays in numpy (Tables' fields) and `tables()` to
  put them on the device."""

  order: int
  arrays: dict[str, np.ndarray]
  start: int
  fanout: tuple[int, ...]

  @property
  def num_states(self) -> int:
    return len(self.arrays["count_S"])

  @property
  def num_entries(self) -> int:
    return int(self.arrays["count_S"].sum())

  def tables(self, dense: bool | None = None) -> Tables:
    """The device tables padir.decoding.dag.beam takes as its `lm`; with every row and move
    stored whole when dense (default: where states x vocabulary <= DENSE_MAX)."""
    sparse = Tables(
      **{k: jnp.asarray(v) for k, v in self.arrays.items()},
      logp_SV=None,
      next_SV=None,
      order=self.order,
      start=self.start,
      fanout=self.fanout,
    )
    V = len(self.arrays["unigram_V"])
    if dense is None:
      dense = self.num_states * V <= DENSE_MAX
    if not dense:
      return sparse
    logp_SV, next_SV = self._dense(sparse)
    return sparse.replace(logp_SV=logp_SV, next_SV=next_SV)

  def _dense(self, sparse: Tables) -> tuple[jax.Array, jax.Array]:
    """[S, V] every state's row and move, formed by `rows` / `advance` a block of states at a
    time and kept for the object's life."""
    cached = self.__dict__.get("_dense_cache")
    if cached is None:
      V = len(self.arrays["unigram_V"])
      step = max(1, 2**16 // V)  # a block's search is states x V x fanout
      form = jax.jit(
        lambda t, s: (rows(t, s), advance(t, s[:, None], jnp.arange(V, dtype=jnp.int32)[None]))
      )
      parts = [
        form(sparse, jnp.arange(a, min(a + step, self.num_states)))
        for a in range(0, self.num_states, step)
      ]
      cached = tuple(jnp.concatenate(p) for p in zip(*parts))
      object.__setattr__(self, "_dense_cache", cached)
    return cached

  def dense_rows(self) -> np.ndarray:
    """[S, V] every state's log P(. | h), formed by `rows` (tests, small models)."""
    return np.asarray(rows(self.tables(dense=False), jnp.arange(self.num_states)))


def _slice(t: Tables, state: jax.Array, length: int) -> tuple[jax.Array, ...]:
  """[..., F] the entries of `state` (states of context length `length`, F their fanout):
  token, probability, child, and whether the slot holds an entry."""
  F = t.fanout[length]
  at = t.first_S[state][..., None] + jnp.arange(F)
  valid = jnp.arange(F) < t.count_S[state][..., None]
  return t.token_E[at], t.prob_E[at], t.child_E[at], valid


def rows(t: Tables, state: jax.Array) -> jax.Array:
  """[..., V] log P(. | h) of each state, formed from the unigram up (NEVER where 0), or read
  from t.logp_SV."""
  if t.logp_SV is not None:
    return t.logp_SV[state]
  V = t.unigram_V.shape[0]
  p = jnp.broadcast_to(t.unigram_V, (*state.shape, V))
  flat = p.reshape(-1, V)
  for length in range(1, t.order):
    s = t.level_SL[state, length - 1].reshape(-1)
    here = s >= 0
    s = jnp.maximum(s, 0)
    token, prob, _, valid = _slice(t, s, length)
    lower = t.backoff_S[s][:, None] * flat
    rows_ = jnp.arange(flat.shape[0])[:, None]
    lower = lower.at[rows_, token].add(jnp.where(valid, prob, 0.0))
    flat = jnp.where(here[:, None], lower, flat)
  p = flat.reshape(*state.shape, V)
  return jnp.where(p > 0, jnp.log(jnp.maximum(p, 1e-38)), NEVER)


def advance(t: Tables, state: jax.Array, token: jax.Array) -> jax.Array:
  """The state after reading `token` in `state` (same shapes): the longest suffix of
  (h token), cut to n - 1 tokens, that is a state; the empty context when none is (read from
  t.next_SV when stored)."""
  if t.next_SV is not None:
    return t.next_SV[state, token]
  state, token = jnp.broadcast_arrays(state, token)
  out = jnp.zeros_like(state)
  found = jnp.zeros(state.shape, bool)
  # (h[-j:] token) for j = n - 2 down to 0: the first that is a state
  for length in range(t.order - 2, -1, -1):
    s = jnp.zeros_like(state) if length == 0 else t.level_SL[state, length - 1]
    here = s >= 0
    s = jnp.maximum(s, 0)
    tok, _, child, valid = _slice(t, s, length)
    hit = valid & (tok == token[..., None]) & (child >= 0)
    c = jnp.max(jnp.where(hit, child, -1), axis=-1)
    take = here & ~found & (c >= 0)
    out = jnp.where(take, c, out)
    found = found | take
  return out


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
  entries = sum(len(c) for c in table.values())
  if entries > max_entries:
    raise ValueError(
      f"an order-{order} n-gram model here has {entries:,} n-grams over {len(states):,} "
      f"contexts, over the {max_entries:,} entries allowed: lower the order"
    )
  index = {h: s for s, h in enumerate(states)}
  S, L = len(states), max(order - 1, 1)
  never_V = _never(V)
  uni_V = np.ones(V)
  for w, k in table[()].items():
    uni_V[w] += k
  uni_V[never_V] = 0.0
  fanout = [0] * order
  for h in states:
    fanout[len(h)] = max(fanout[len(h)], len(table[h]))
  level_SL = np.full((S, L), -1, np.int32)
  backoff_S = np.zeros(S, np.float32)
  first_S = np.zeros(S, np.int32)
  count_S = np.zeros(S, np.int32)
  token, prob, child = [], [], []
  at = 0
  for s, h in enumerate(states):
    c = table[h]
    total = sum(c.values())
    if h:
      backoff_S[s] = discount * len(c) / total
      for j in range(1, len(h) + 1):
        level_SL[s, j - 1] = index[h[-j:]]
    first_S[s], count_S[s] = at, len(c)
    for w in sorted(c):
      token.append(w)
      prob.append(max(c[w] - discount, 0.0) / total if h else 0.0)
      child.append(index.get((*h, w), -1) if len(h) < order - 1 else -1)
    at += len(c)
  # padding at the end: a slice of any length's fanout from any state's first entry stays
  # inside (the slots past a state's count are masked, whatever they hold)
  pad = max(fanout)
  token += [0] * pad
  prob += [0.0] * pad
  child += [-1] * pad
  arrays = {
    "unigram_V": (uni_V / uni_V.sum()).astype(np.float32),
    "level_SL": level_SL,
    "backoff_S": backoff_S,
    "first_S": first_S,
    "count_S": count_S,
    "token_E": np.asarray(token, np.int32),
    "prob_E": np.asarray(prob, np.float32),
    "child_E": np.asarray(child, np.int32),
  }
  start = index[(tokenizer_lib.BOS_ID,) * (order - 1)] if order > 1 else index[()]
  return NgramLM(order, arrays, start, tuple(fanout))


def sentence_logprob(lm: NgramLM, tokens: Sequence[int], dense: bool | None = None) -> float:
  """log P(tokens EOS) by walking the automaton (EOS appended unless last), on its tables as
  NgramLM.tables(dense) stores them."""
  toks = [int(t) for t in tokens]
  if not toks or toks[-1] != tokenizer_lib.EOS_ID:
    toks.append(tokenizer_lib.EOS_ID)
  t = lm.tables(dense)
  s, total = jnp.asarray(lm.start), 0.0
  for w in toks:
    total += float(rows(t, s)[w])
    s = advance(t, s, jnp.asarray(w))
  return total


@functools.lru_cache(maxsize=4)
def _from_corpus(corpus_dir: str, source: str, target: str, tok, order: int) -> NgramLM:
  pairs = corpus.read_split(corpus_dir, "train", source, target)
  return build((tok.encode(t) for _, t in pairs), tok.vocab_size, order)


def from_corpus(data: Any, tok, order: int) -> NgramLM:
  """An n-gram model of `order` over a run's training targets (its config.data), built once a
  process for each corpus, tokenizer and order."""
  return _from_corpus(data.corpus_dir, data.source_lang, data.target_lang, tok, int(order))
