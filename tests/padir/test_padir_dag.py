"""DA-Transformer's directed acyclic decoder (padir.model.dag, padir.decoding.dag): the path
marginal and the best path equal brute-force enumeration of every path on graphs of up to 8
vertices, the decoders return the paths their rules define, glancing reveals the count its rule
says on hand-made predictions, and a tiny model trains with a finite, decreasing loss."""

import itertools
import json
import pathlib
import shutil
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from flax import nnx
from padir_util import tiny_model, tiny_run_config

from gmlm.checks import ConfigError
from padir.data import tokenizer as tok
from padir.decoding import dag as dag_decoding
from padir.decoding import decoders, ngram
from padir.jobs import train as train_job
from padir.model import dag
from padir.model.dag_links import NEG, LinkHead
from padir.training import loop as training

V = 7


def _graph(seed, live_counts, A=8):
  """Random token log-probabilities [B, A, V] and links [B, A, A] (forward edges between live
  vertices, each row a distribution), built without the code under test."""
  rng = np.random.default_rng(seed)
  B = len(live_counts)
  live = np.arange(A)[None] < np.array(live_counts)[:, None]
  logits = rng.normal(size=(B, A, V)) * 2
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  edge = np.triu(np.ones((A, A), bool), 1)[None] & live[:, None, :] & live[:, :, None]
  scores = np.where(edge, rng.normal(size=(B, A, A)) * 2, -np.inf)
  with np.errstate(invalid="ignore", divide="ignore"):
    links = scores - np.log(np.exp(scores).sum(-1, keepdims=True))
  links = np.where(edge, links, NEG)
  return logp.astype(np.float32), links.astype(np.float32), live


def _paths(n, m):
  """Every path 0 = a_1 < ... < a_m = n - 1 (m vertices)."""
  if m == 1:
    return [(0,)] if n == 1 else []
  return [(0, *mid, n - 1) for mid in itertools.combinations(range(1, n - 1), m - 2)]


def _score(logp, links, path, tokens):
  s = sum(logp[v, y] for v, y in zip(path, tokens))
  return s + sum(links[a, b] for a, b in zip(path, path[1:]))


CASES = [([8, 8, 5, 3], [[1, 2, 3, 4, 1], [5, 6, 1, 0, 0], [2, 2, 1, 0, 0], [3, 3, 1, 0, 0]])]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_path_marginal_and_best_path_equal_enumeration(seed):
  counts, targets = CASES[0]
  rng = np.random.default_rng(10 + seed)
  targets = np.array(targets)
  targets = np.where(targets > 0, rng.integers(1, V, targets.shape), 0)  # random tokens, same shape
  targets[np.arange(4), (targets > 0).sum(1) - 1] = tok.EOS_ID
  logp, links, live = _graph(seed, counts)
  ll = np.asarray(dag.path_logprob(jnp.asarray(logp), jnp.asarray(links), live, targets))
  path, best = dag.best_path(jnp.asarray(logp), jnp.asarray(links), live, targets)
  for b, n in enumerate(counts):
    y = [t for t in targets[b] if t]
    scores = {p: _score(logp[b], links[b], p, y) for p in _paths(n, len(y))}
    assert len(scores) > 1 or n == 3  # more than one path to sum over
    np.testing.assert_allclose(ll[b], np.logaddexp.reduce(list(scores.values())), rtol=1e-5)
    argmax = max(scores, key=scores.get)
    assert tuple(np.asarray(path)[b, : len(y)]) == argmax
    np.testing.assert_allclose(best[b], scores[argmax], rtol=1e-5)


def test_a_target_longer_than_its_vertices_is_infeasible_and_marked():
  logp, links, live = _graph(0, [3, 8])
  targets = np.array([[6, 2, 3, tok.EOS_ID], [3, 4, 5, tok.EOS_ID]])
  ll = dag.path_logprob(jnp.asarray(logp), jnp.asarray(links), live, targets)
  assert ll[0] < NEG / 2 and ll[1] > NEG / 2
  assert dag.feasible(live, targets).tolist() == [False, True]


@pytest.mark.parametrize("k", [2, 2.5, 3])
def test_a_source_of_n_tokens_gets_floor_k_n_vertices_each_token_in_order(k):
  """The graph's vertices: source token i repeated floor((i+1) k) - floor(i k) times (k = 2.5:
  2, 3, 2, 3, ...), in order, then PAD; built here by a loop over the tokens."""
  src = np.array([[11, 12, 13, 14, 15], [21, 22, 23, 0, 0], [31, 0, 0, 0, 0]], np.int32)
  got = np.asarray(dag.upsample(jnp.asarray(src), k))
  for row, x in zip(src, got):
    n = int((row != tok.PAD_ID).sum())
    want = [t for i, t in enumerate(row[:n]) for _ in range(int((i + 1) * k) - int(i * k))]
    assert len(want) == int(n * k)
    assert list(x[: len(want)]) == want and (x[len(want) :] == tok.PAD_ID).all()
  assert got.shape[1] == int(src.shape[1] * k)
  with pytest.raises(ValueError, match=">= 2"):
    dag.upsample(jnp.asarray(src), 1.5)


def test_viterbi_decoding_returns_the_best_path_by_enumeration():
  logp, links, live = _graph(3, [8, 6, 2, 1])
  tokens, on, score = dag_decoding.viterbi(jnp.asarray(logp), jnp.asarray(links), live)
  for b, n in enumerate([8, 6, 2, 1]):
    every = [p for m in range(1, n + 1) for p in _paths(n, m)]
    best_tok = logp[b].argmax(-1)
    scores = {p: _score(logp[b], links[b], p, best_tok[list(p)]) for p in every}
    argmax = max(scores, key=scores.get)
    assert tuple(np.flatnonzero(np.asarray(on)[b])) == argmax
    np.testing.assert_allclose(score[b], scores[argmax], rtol=1e-5)
    assert np.asarray(tokens)[b, : len(argmax)].tolist() == best_tok[list(argmax)].tolist()


def _marginal(logp, links, n, y):
  """log P(y | x) by enumeration: log-sum-exp over every path of len(y) vertices."""
  scores = [_score(logp, links, p, y) for p in _paths(n, len(y))]
  return float(np.logaddexp.reduce(scores)) if scores else -np.inf


@pytest.mark.parametrize("seed", [4, 5])
def test_beam_search_with_a_full_beam_is_the_best_translation_by_enumeration(seed):
  """A beam as wide as every prefix returns argmax_y P(y | x), the marginal over paths, over
  every y of words (not PAD) with EOS last only, and that P(y | x) as its score; the narrow beam's score is the
  marginal of the translation it returns (dag.path_logprob), and no more than the best."""
  counts = [5, 4, 3, 1]
  logp, links, live = _graph(seed, counts, A=5)
  words = [y for y in range(V) if y not in (tok.EOS_ID, tok.PAD_ID)]
  wide = len(words) ** (max(counts) - 1)
  args = (jnp.asarray(logp), jnp.asarray(links), jnp.asarray(live))
  tokens, score = dag_decoding.beam(*args, beam_size=wide)
  narrow, narrow_score = dag_decoding.beam(*args, beam_size=2)
  for b, n in enumerate(counts):
    every = {(*y, tok.EOS_ID): None for m in range(n) for y in itertools.product(words, repeat=m)}
    for y in every:
      every[y] = _marginal(logp[b], links[b], n, y)
    best = max(every, key=every.get)
    got = tuple(np.asarray(tokens)[b, : len(best)].tolist())
    assert got == best, (b, got, best)
    np.testing.assert_allclose(score[b], every[best], rtol=1e-4)
    mine = np.asarray(narrow)[b]
    mine = tuple(mine[: list(mine).index(tok.EOS_ID) + 1].tolist())
    np.testing.assert_allclose(narrow_score[b], every[mine], rtol=1e-4)
    assert narrow_score[b] <= score[b] + 1e-4
  # the model's own marginal agrees on the narrow beam's translations
  np.testing.assert_allclose(dag.path_logprob(*args, narrow), narrow_score, rtol=1e-4)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_length_prior_picks_the_best_translation_of_its_lengths_by_enumeration(seed):
  """With length_logp (a log-prior over |y|, EOS counted), a full beam returns argmax_y
  log P(y | x) + prior[|y|] over every y, and that sum as its score: a prior of 0 at one
  length and NEG elsewhere gives the best translation of that length, which differs from the
  unconstrained best in some row (so the comparison can fail); the early exit changes nothing."""
  counts = [5, 4, 3]
  logp, links, live = _graph(seed, counts, A=5)
  words = [y for y in range(V) if y not in (tok.EOS_ID, tok.PAD_ID)]
  args = (jnp.asarray(logp), jnp.asarray(links), jnp.asarray(live))
  wide = len(words) ** (max(counts) - 1)
  free = np.asarray(dag_decoding.beam(*args, beam_size=wide)[0])
  rng = np.random.default_rng(seed)
  soft = np.log(rng.dirichlet(np.ones(6), size=3)).astype(np.float32)
  forced = np.full((3, 6), NEG, np.float32)
  forced[np.arange(3), [n for n in counts]] = 0.0  # |y| = n: n - 1 words and EOS
  changed = False
  for prior in (soft, forced):
    tokens, score = dag_decoding.beam(*args, beam_size=wide, length_logp=jnp.asarray(prior))
    slow = dag_decoding.beam(
      *args, beam_size=wide, length_logp=jnp.asarray(prior), early_exit=False
    )
    np.testing.assert_array_equal(tokens, slow[0])
    tokens = np.asarray(tokens)
    for row, n in enumerate(counts):
      every = {}
      for m in range(n):
        for y in itertools.product(words, repeat=m):
          every[(*y, tok.EOS_ID)] = _marginal(logp[row], links[row], n, (*y, tok.EOS_ID))
          every[(*y, tok.EOS_ID)] += prior[row, m + 1]
      best = max(every, key=every.get)
      assert tuple(tokens[row, : len(best)].tolist()) == best
      np.testing.assert_allclose(score[row], every[best], rtol=1e-4)
      changed |= not np.array_equal(tokens[row], free[row])
  assert changed


@pytest.mark.parametrize("seed, w, b", [(0, 0.7, 0.0), (1, 0.7, 0.0), (0, 0.5, 1.0), (1, 0.5, 1.0)])
def test_the_joint_n_gram_beam_is_the_best_joint_score_by_enumeration(seed, w, b):
  """With an n-gram model (padir.decoding.ngram) and length_norm b, a full beam returns
  argmax_y (log P(y | x) + w log P_lm(y)) / |y|^b (|y| counting EOS) over every y, and that
  quotient as its score; weight 0 is the plain beam. Each term changes some row's answer (so
  the comparison can fail): the n-gram term against the plain beam, and the normalisation
  towards a longer translation than the unnormalised one."""
  counts = [5, 4, 3]
  logp, links, live = _graph(seed, counts, A=5)
  words = [y for y in range(V) if y not in (tok.EOS_ID, tok.PAD_ID)]
  rng = np.random.default_rng(seed)
  lm = ngram.build([list(rng.choice([3, 5, 6], rng.integers(1, 4))) for _ in range(6)], V, 2)
  tables = lm.tables()
  args = (jnp.asarray(logp), jnp.asarray(links), jnp.asarray(live))
  wide = len(words) ** (max(counts) - 1)
  plain = dag_decoding.beam(*args, beam_size=wide)
  np.testing.assert_array_equal(dag_decoding.beam(*args, wide, tables, 0.0)[0], plain[0])
  other = np.asarray(dag_decoding.beam(*args, wide, tables, w)[0] if b else plain[0])
  tokens, score = dag_decoding.beam(*args, wide, tables, w, length_norm=b)
  tokens = np.asarray(tokens)
  changed = False
  for row, n in enumerate(counts):
    every = {}
    for m in range(n):
      for y in itertools.product(words, repeat=m):
        joint = _marginal(logp[row], links[row], n, (*y, tok.EOS_ID))
        joint += w * max(ngram.sentence_logprob(lm, y), NEG)
        every[(*y, tok.EOS_ID)] = joint / (m + 1) ** b
    best = max(every, key=every.get)
    assert tuple(tokens[row, : len(best)].tolist()) == best
    np.testing.assert_allclose(score[row], every[best], rtol=1e-4)
    if b:
      changed |= (tokens[row] != tok.PAD_ID).sum() > (other[row] != tok.PAD_ID).sum()
    else:
      changed |= not np.array_equal(tokens[row], other[row])
  assert changed


@pytest.mark.parametrize("weight, norm", [(0.0, 0.0), (0.5, 0.0), (0.5, 1.0), (0.0, 0.6)])
def test_the_beam_s_early_exit_changes_nothing(weight, norm):
  """The beam stops once no prefix's mass can beat the best finished translation: the same
  tokens and scores as the search over every token position, on graphs of 16 vertices, with and
  without length normalisation."""
  logp, links, live = _graph(3, [16, 11, 6, 2], A=16)
  lm = ngram.build([[3, 5, 6], [6, 5], [4, 4, 3]], V, 3)
  tables = lm.tables()
  args = (jnp.asarray(logp), jnp.asarray(links), jnp.asarray(live), 3, tables, weight)
  fast = dag_decoding.beam(*args, length_norm=norm)
  slow = dag_decoding.beam(*args, early_exit=False, length_norm=norm)
  np.testing.assert_array_equal(fast[0], slow[0])
  np.testing.assert_array_equal(fast[1], slow[1])


def test_the_normalised_beam_waits_for_a_long_translation_that_pays_its_cost_first():
  """A graph whose long translation pays its cost at its first edge (0.3, then a chain of
  certain links) and whose short one finishes at once (0.7 to the last vertex): normalised by
  length the long one wins, which the early exit must wait for (its bound counts the words a
  prefix can still add, not only those it has)."""
  A = 12
  logp = np.full((1, A, V), -30.0, np.float32)
  for v in range(A - 1):
    logp[0, v, 3 + v % 4] = 0.0
  logp[0, A - 1, tok.EOS_ID] = 0.0
  links = np.full((1, A, A), NEG, np.float32)
  links[0, 0, 1], links[0, 0, A - 1] = np.log(0.3), np.log(0.7)
  for v in range(1, A - 1):
    links[0, v, v + 1] = 0.0
  args = (jnp.asarray(logp), jnp.asarray(links), jnp.ones((1, A), bool), 2)
  short = np.asarray(dag_decoding.beam(*args)[0])[0]
  fast = dag_decoding.beam(*args, length_norm=1.0)
  slow = dag_decoding.beam(*args, early_exit=False, length_norm=1.0)
  assert list(short[:2]) == [3, tok.EOS_ID]  # unnormalised, the short translation
  assert list(np.asarray(slow[0])[0]) == [3 + v % 4 for v in range(A - 1)] + [tok.EOS_ID]
  np.testing.assert_array_equal(fast[0], slow[0])
  np.testing.assert_allclose(fast[1], np.log(0.3) / A, rtol=1e-4)


@pytest.mark.parametrize("lookahead", [False, True])
def test_greedy_and_lookahead_follow_their_rule(lookahead):
  logp, links, live = _graph(4, [8, 5])
  logp[0, 3, tok.EOS_ID] = 5.0  # vertex 3 of row 0 emits EOS if the walk reaches it
  out = np.asarray(dag_decoding.walk(jnp.asarray(logp), jnp.asarray(links), live, lookahead))
  for b, n in enumerate([8, 5]):
    v, expected = 0, []
    while True:  # the rule, by hand
      expected.append(int(logp[b, v].argmax()))
      if expected[-1] == tok.EOS_ID or v == n - 1:
        break
      gain = links[b, v, :n] + (logp[b, :n].max(-1) if lookahead else 0.0)
      v = int(np.argmax(np.where(np.arange(n) > v, gain, -np.inf)))
    assert out[b, : len(expected)].tolist() == expected
    assert (out[b, len(expected) :] == tok.PAD_ID).all()


def _one_path_links(path, A):
  """Links [1, A, A] of A live vertices where the edges of `path` are near-certain."""
  links = np.full((1, A, A), NEG, np.float32)
  for v in range(A - 1):
    links[0, v, v + 1 :] = -9.0
  for a, b in zip(path, path[1:]):
    links[0, a, b] = -1e-3
  return links, np.ones((1, A), bool)


def test_on_a_graph_of_near_certain_links_every_decoder_finds_the_one_path():
  """Links 0 -> 2 -> 5 -> 7 near-certain, tokens 8, 9, 10, EOS there: all three decoders
  return that translation, and it is the Viterbi path by enumeration too."""
  A, path, words = 8, (0, 2, 5, 7), (6, 6 + 2, 6 + 3, tok.EOS_ID)
  logp = np.full((1, A, 12), -5.0, np.float32)
  for v, w in zip(path, words):
    logp[0, v, w] = 0.0
  links, live = _one_path_links(path, A)
  for strategy in ("greedy", "lookahead"):
    out = dag_decoding.walk(jnp.asarray(logp), jnp.asarray(links), live, strategy == "lookahead")
    assert np.asarray(out)[0, :4].tolist() == list(words)
  tokens, on, _ = dag_decoding.viterbi(jnp.asarray(logp), jnp.asarray(links), live)
  assert np.asarray(tokens)[0, :4].tolist() == list(words)
  assert np.flatnonzero(np.asarray(on)[0]).tolist() == list(path)


def test_glancing_reveals_ratio_times_the_wrong_tokens_on_the_best_path():
  """Best path 0 -> 2 -> 5 -> 7 (near-certain links); the argmax tokens there are right at two
  of the four target positions: ratio 0.5 reveals floor(0.5 x 2) = 1 vertex, ratio 1 both
  wrong ones' count (2), each a path vertex holding its target token."""
  A, path = 8, (0, 2, 5, 7)
  target = np.array([[6, 7, 8, tok.EOS_ID, 0]])
  predicted = (6, 11, 11, tok.EOS_ID)  # positions 2 and 3 (0-based 1, 2) wrong
  logp = np.full((1, A, 12), -5.0, np.float32)
  for v, w, y in zip(path, predicted, target[0]):
    logp[0, v, w] = -0.1
    logp[0, v, y] = max(logp[0, v, y], -2.0)  # the target still likelier here than elsewhere
  links, live = _one_path_links(path, A)
  x = np.full((1, A), 20, np.int32)
  best, _ = dag.best_path(jnp.asarray(logp), jnp.asarray(links), live, target)
  assert np.asarray(best)[0, :4].tolist() == list(path)
  for ratio, count in ((0.0, 0), (0.5, 1), (1.0, 2)):
    for seed in range(4):
      new, revealed = dag.glance(
        jax.random.key(seed), jnp.asarray(logp), jnp.asarray(links), live, target, x, ratio
      )
      new, revealed = np.asarray(new)[0], np.asarray(revealed)[0]
      assert revealed.sum() == count
      for v in np.flatnonzero(revealed):
        assert v in path and new[v] == target[0, path.index(v)]
      assert (new[~revealed] == 20).all()


def test_the_link_head_gives_distributions_over_forward_edges_only():
  head = LinkHead(16, 2, rngs=nnx.Rngs(0))
  h = jax.random.normal(jax.random.key(1), (2, 6, 16))
  live = np.array([[True] * 6, [True] * 4 + [False] * 2])
  links = np.asarray(head(h, live))
  for b, n in enumerate([6, 4]):
    for v in range(n - 1):
      np.testing.assert_allclose(np.exp(links[b, v, v + 1 : n]).sum(), 1.0, rtol=1e-5)
    assert (links[b][~np.triu(np.ones((6, 6), bool), 1)] == NEG).all()
    assert (links[b, n - 1] == NEG).all()


def _batch():
  rng = np.random.default_rng(0)
  inputs = rng.integers(tok.NUM_SPECIAL, 24, (8, 6))
  inputs[:, 4:] = tok.PAD_ID
  inputs[:, 3] = tok.EOS_ID
  targets = np.zeros((8, 6), np.int32)
  targets[:, :3] = inputs[:, :3][:, ::-1]  # reverse the source words
  targets[:, 3] = tok.EOS_ID
  return {"inputs": jnp.asarray(inputs), "targets": jnp.asarray(targets)}


@pytest.mark.parametrize("glancing, k", [(None, 2), (0.5, 2.5)])
def test_a_tiny_dag_model_trains_with_a_finite_decreasing_loss(glancing, k):
  model = tiny_model(dag_upsample=k)
  model.train()
  opt = nnx.Optimizer(model, optax.adam(3e-3), wrt=nnx.Param)
  batch = _batch()

  @nnx.jit
  def step(model, opt, key):
    (loss, aux), grads = nnx.value_and_grad(
      lambda m: dag.dag_loss(m, batch, glancing=glancing, key=key), has_aux=True
    )(model)
    opt.update(model, grads)
    return loss, aux, optax.tree.norm(grads)

  losses = []
  for i in range(30):
    loss, aux, norm = step(model, opt, jax.random.key(i))
    assert np.isfinite(loss) and np.isfinite(norm)
    losses.append(float(loss))
  assert float(aux["dag_infeasible"]) == 0.0
  assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5]), losses
  model.eval()
  out = dag_decoding.decode(model, batch["inputs"], "viterbi")["tokens"]
  assert out.shape == (8, model.cfg.max_target_length)


def test_a_dag_config_is_checked(toy_corpus):
  c = tiny_run_config(toy_corpus, steps=2)
  for k in (1.5, 1):
    c.model.dag_upsample = k
    with pytest.raises(ConfigError, match="model.dag_upsample"):
      training.validate(c)
  c.model.update(dag_upsample=2, ctc_upsample=2)
  with pytest.raises(ConfigError, match="model.dag_upsample"):
    training.validate(c)
  c.model.ctc_upsample = 0
  c.decode.dag_decoder = "beam_ngram"
  with pytest.raises(ConfigError, match="decode.dag_decoder"):
    training.validate(c)


@pytest.mark.slow  # a training step and a Viterbi decode compiled
def test_a_dag_run_trains_and_translates(toy_corpus, tmp_path, monkeypatch):
  from padir.evaluation import translation

  fitted = []
  fit = translation.ngram.from_corpus
  monkeypatch.setattr(
    translation.ngram, "from_corpus", lambda *a, **k: fitted.append(1) or fit(*a, **k)
  )
  c = tiny_run_config(toy_corpus, steps=2, eval_every=1)
  c.model.dag_upsample = 2
  c.loss.glancing_ratio = 0.5
  # validation decodes with the beam joined by a bigram model of the training targets
  c.decode.update(
    num_examples=4, dag_decoder="beam", dag_lm_order=2, dag_lm_weight=0.3, dag_length_norm=1.0
  )
  training.validate(c)
  last = train_job.run(c, str(tmp_path / "dag"))
  assert np.isfinite(last["train_loss"]) and "train_glance_revealed" in last
  assert np.isfinite(last["valid_loss"]) and 0 <= last["valid_bleu"] <= 100
  assert len(fitted) == 1  # two validations, one n-gram model fitted for the run
  c.decode.dag_decoder = "lookahead"
  with pytest.raises(ConfigError, match="decode.dag_length_norm"):
    training.validate(c)
  c.decode.dag_length_norm = 0.0
  with pytest.raises(ConfigError, match="decode.dag_lm_order"):
    training.validate(c)


def test_validation_on_a_beam_grid_reports_the_best_setting_and_its_bleu(monkeypatch):
  """With decode.dag_beam_grid, validation decodes at each (n-gram weight, length
  normalisation) and reports the best BLEU, computed here from the same hypotheses, with its
  setting (the first one on a tie); without a grid, the one fixed setting and no choice."""
  from padir.evaluation import metrics, translation

  refs = ["a b c d", "e f g h", "a c e g"]
  made = {  # each setting's hypotheses: (1, 1) and (0.5, 0.5) both exact, (1, 1) first
    (1.5, 1.5): ["a b c d a b c d", "e f g h", "a c e g"],
    (1.0, 1.0): refs,
    (0.5, 0.5): refs,
    (0.0, 2.0): ["a b", "e f", "a"],
  }
  asked = []

  def fake_grid(model, tok, sources, settings, **kw):  # every setting from one pass
    asked.extend(settings)
    return [made[s] for s in settings]

  monkeypatch.setattr(translation, "translate_dag_grid", fake_grid)
  monkeypatch.setattr(translation, "validation_lm", lambda config, tok: None)
  model = types.SimpleNamespace(cfg=types.SimpleNamespace(dag_upsample=2))
  source = [{"source": s.encode(), "target": r.encode()} for s, r in zip(["x", "y", "z"], refs)]
  config = ml_collections.ConfigDict(
    {
      "seed": 0,
      "data": {"target_lang": "cx"},
      "decode": {
        "num_examples": 3,
        "batch_size": 3,
        "num_steps": 1,
        "num_lengths": 1,
        "remask_stutter": False,
        "dag_decoder": "beam",
        "dag_lm_weight": 0.0,
        "dag_length_norm": 2.0,
        "dag_beam_grid": "1.5:1.5, 1.0:1.0,0.5:0.5",
      },
    }
  )
  record = translation.validation_translation(model, source, None, config)
  assert asked == [(1.5, 1.5), (1.0, 1.0), (0.5, 0.5)]
  assert (
    record["valid_bleu"]
    == metrics.bleu(refs, refs, "cx").score
    > (metrics.bleu(made[(1.5, 1.5)], refs, "cx").score)
  )
  assert (record["valid_dag_lm_weight"], record["valid_dag_length_norm"]) == (1.0, 1.0)
  config.decode.dag_beam_grid = ""
  record = translation.validation_translation(model, source, None, config)
  assert asked[-1] == (0.0, 2.0) and "valid_dag_lm_weight" not in record
  assert record["valid_bleu"] == metrics.bleu(made[(0.0, 2.0)], refs, "cx").score


def test_choosing_the_beam_setting_on_held_out_pairs_takes_the_highest_bleu_first_on_a_tie(
  monkeypatch,
):
  """choose_beam_setting (the evaluation job's dag_beam_grid): every setting decoded in one pass,
  each one's BLEU and length ratio computed here from its hypotheses, the best chosen (the first
  of the grid's order on a tie, as validation chooses); a model without a graph is refused."""
  from padir.evaluation import metrics, translation

  refs = ["a b c d", "e f g h", "a c e g"]
  made = {
    (1.5, 1.5): ["a b c d a b c d", "e f g h", "a c e g"],
    (0.5, 1.0): refs,  # exact, and first of the two exact settings in the grid below
    (1.0, 1.5): refs,
    (0.0, 2.0): ["a b", "e f", "a"],
  }
  asked = []

  def fake_grid(model, tok, sources, settings, **kw):
    asked.append(list(settings))
    return [made[s] for s in settings]

  monkeypatch.setattr(translation, "translate_dag_grid", fake_grid)
  model = types.SimpleNamespace(cfg=types.SimpleNamespace(dag_upsample=2))
  grid = [(1.5, 1.5), (0.5, 1.0), (1.0, 1.5), (0.0, 2.0)]
  got = translation.choose_beam_setting(model, None, ["x", "y", "z"], refs, "cx", grid)
  assert asked == [grid] and got["chosen"] == [0.5, 1.0] and got["sentences"] == 3
  want = [metrics.bleu(made[s], refs, "cx").score for s in grid]
  assert [r["bleu"] for r in got["sweep"]] == want and want[1] == want[2] > max(want[0], want[3])
  assert [(r["lm_weight"], r["length_norm"]) for r in got["sweep"]] == grid
  assert [r["length_ratio"] for r in got["sweep"]] == pytest.approx([16 / 12, 1, 1, 5 / 12])
  model.cfg.dag_upsample = 0
  with pytest.raises(ValueError, match="not a DAG model"):
    translation.choose_beam_setting(model, None, ["x"], refs[:1], "cx", grid)


@pytest.mark.parametrize(
  "grid, match",
  [("1.0", "not 'w:b'"), ("1:x", "not 'w:b'"), ("1:1:1", "not 'w:b'"), ("-1:1", ">= 0")],
)
def test_a_bad_beam_grid_is_one_line_naming_the_entry(toy_corpus, grid, match):
  c = tiny_run_config(toy_corpus, steps=2)
  c.model.dag_upsample = 2
  c.decode.update(dag_decoder="beam", dag_beam_grid=grid)
  with pytest.raises(ConfigError, match=f"decode.dag_beam_grid={grid!r}.*{match}"):
    training.validate(c)
  c.decode.update(dag_decoder="lookahead", dag_beam_grid="1:1")
  with pytest.raises(ConfigError, match="decode.dag_beam_grid.*dag_decoder='beam'"):
    training.validate(c)
  c.decode.dag_beam_grid = ""
  training.validate(c)


@pytest.mark.slow  # a training step, then the translate job's beam with its n-gram model
def test_the_translate_cli_decodes_a_dag_run_by_its_beam_and_n_gram_model(toy_corpus, tmp_path):
  from configs import padir_translate
  from padir.data import corpus as corpus_lib
  from padir.jobs import translate as translate_job

  c = tiny_run_config(toy_corpus, steps=1, eval_every=1)
  c.model.dag_upsample = 2
  # validation chooses the beam's weight and normalisation from a grid; translate uses its pick
  c.decode.update(
    num_examples=4, dag_decoder="beam", dag_lm_order=2, dag_beam_grid="0.3:1.0,0.7:0.5"
  )
  train_job.run(c, str(tmp_path / "dag"))
  pick = [r for r in map(json.loads, open(tmp_path / "dag" / "metrics.jsonl")) if "valid_bleu" in r]
  pick = (pick[-1]["valid_dag_lm_weight"], pick[-1]["valid_dag_length_norm"])
  assert pick in ((0.3, 1.0), (0.7, 0.5))
  sources = tmp_path / "sources.txt"
  sources.write_text("a b c\n\nb c\n", encoding="utf-8")
  config = padir_translate.get_config()
  config.update(
    checkpoint=str(tmp_path / "dag"),
    input=str(sources),
    output=str(tmp_path / "out.txt"),
    progress_bar=False,
    dag_lm_order=2,
  )
  translate_job.validate(config)
  results = translate_job.run(config, str(tmp_path / "translate"))
  assert results["decoder"] == "dag" and results["options"]["dag_strategy"] == "beam"
  o = results["options"]
  assert (o["dag_lm_weight"], o["dag_length_norm"], o["dag_beam_chosen_at_step"]) == (*pick, 1)
  # chosen at load on the whole valid split: the sweep's best (first on a tie) is what decodes
  config.dag_beam_grid = "0.3:1.0,0.7:0.5,0.0:0.0"
  translate_job.validate(config)
  results = translate_job.run(config, str(tmp_path / "translate_valid"))
  o, choice = results["options"], results["options"]["dag_beam_chosen_on_valid"]
  bleus = [r["bleu"] for r in choice["sweep"]]
  best = choice["sweep"][bleus.index(max(bleus))]
  assert choice["chosen"] == [best["lm_weight"], best["length_norm"]]
  assert [o["dag_lm_weight"], o["dag_length_norm"]] == choice["chosen"]
  assert "dag_beam_chosen_at_step" not in o and choice["sentences"] == len(
    corpus_lib.read_split(toy_corpus, "valid", "en", "es")
  )
  for bad, why in (("0.3", "not 'w:b'"), ("1:1", "dag_strategy=beam")):
    config.dag_beam_grid = bad
    if bad == "1:1":
      config.dag_strategy = "lookahead"
    with pytest.raises(ConfigError, match=f"dag_beam_grid={bad!r}.*{why}"):
      translate_job.validate(config)
  # a run copied without its corpus: each of the two that read it is refused naming its split
  shutil.copytree(tmp_path / "dag", tmp_path / "copied")
  run_config = json.loads((tmp_path / "copied" / "config.json").read_text())
  run_config["data"]["corpus_dir"] = str(tmp_path / "nowhere")  # its vocabulary alone there
  (tmp_path / "nowhere").mkdir()
  for model_file in pathlib.Path(toy_corpus).glob("spm*.model"):
    shutil.copy(model_file, tmp_path / "nowhere")
  (tmp_path / "copied" / "config.json").write_text(json.dumps(run_config))
  copied = ml_collections.ConfigDict(config.to_dict())
  copied.update(checkpoint=str(tmp_path / "copied"), dag_strategy="beam", dag_beam_grid="1:1")
  with pytest.raises(ConfigError, match="dag_beam_grid=.*run's valid split, which is not here"):
    translate_job.validate(copied)
  copied.dag_beam_grid = ""
  with pytest.raises(ConfigError, match="dag_lm_order=2.*training targets, which is not here"):
    translate_job.validate(copied)
  config.update(dag_beam_grid="", dag_strategy="beam")
  config.dag_beam_from_run = False  # the config's own weight and normalisation
  results = translate_job.run(config, str(tmp_path / "translate_fixed"))
  assert "dag_beam_chosen_at_step" not in results["options"]
  assert results["options"]["dag_length_norm"] == config.dag_length_norm > 0
  assert results["options"]["dag_lm_weight"] == config.dag_lm_weight
  assert results["translated"] == 2 and [s["line"] for s in results["skipped"]] == [2]
  assert len((tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")) == 4
  config.dag_strategy = "lookahead"
  with pytest.raises(ConfigError, match="dag_length_norm"):
    translate_job.validate(config)
  config.dag_length_norm = 0.0
  with pytest.raises(ConfigError, match="dag_lm_order"):
    translate_job.validate(config)


def _interface_model_and_inputs():
  model = tiny_model(dag_upsample=2, max_source_length=8, max_target_length=8)
  inputs = jnp.pad(_batch()["inputs"], ((0, 0), (0, 2)))  # width 8, sources of 4 tokens
  return model, inputs


@pytest.mark.parametrize("strategy", dag_decoding.STRATEGIES)
def test_the_decoder_interface_decodes_a_dag_model_as_the_strategy_does(strategy):
  """decoders.decode_fn with a DAG decoder, untrimmed and trimmed: dag.decode's tokens."""
  model, inputs = _interface_model_and_inputs()
  want = np.asarray(dag_decoding.decode(model, inputs, strategy)["tokens"])
  for trim in (0, 4):
    fn = decoders.decode_fn(model, decoders.Decoder("d", "dag", trim=trim, dag_strategy=strategy))
    tokens, _ = fn(inputs, jax.random.key(0))
    assert np.asarray(tokens).tolist() == want.tolist()


@pytest.mark.parametrize("norm", [0.0, 1.5])
def test_the_decoder_interface_gives_the_n_gram_beam_its_tables(norm):
  """The beam with an n-gram model: its tables go in as arguments; dag.decode's tokens."""
  model, inputs = _interface_model_and_inputs()
  lm = ngram.build([[5, 6, 3], [6, 6]], model.cfg.vocab_size, order=2)
  want = dag_decoding.decode(model, inputs, "beam", lm=lm.tables(), lm_weight=2.0, length_norm=norm)
  for trim in (0, 4):
    d = decoders.Decoder(
      "d",
      "dag",
      trim=trim,
      dag_strategy="beam",
      dag_lm=lm,
      dag_lm_weight=2.0,
      dag_length_norm=norm,
    )
    got = decoders.decode_fn(model, d)(inputs, jax.random.key(0))[0]
    assert np.asarray(got).tolist() == np.asarray(want["tokens"]).tolist()


def test_a_grid_of_beam_settings_from_one_pass_equals_each_setting_decoded_alone():
  """padir.decoding.dag.decode_grid (the graph once, a beam per setting) gives each setting's
  tokens of dag.decode's beam, and translate_dag_grid each setting's translations of
  `translate` (5 sources in batches of 2: a last batch filled up)."""
  from padir.evaluation import translation

  model, inputs = _interface_model_and_inputs()
  lm = ngram.build([[5, 6, 3], [6, 6], [7, 5, 5, 6]], model.cfg.vocab_size, order=2)
  settings = [(0.0, 0.0), (2.0, 1.5), (0.5, 0.5), (2.0, 0.0)]
  got = dag_decoding.decode_grid(
    model, inputs, [w for w, _ in settings], [b for _, b in settings], lm=lm.tables()
  )
  for (w, b), tokens in zip(settings, np.asarray(got)):
    want = dag_decoding.decode(model, inputs, "beam", lm=lm.tables(), lm_weight=w, length_norm=b)
    assert tokens.tolist() == np.asarray(want["tokens"]).tolist(), (w, b)
  words = types.SimpleNamespace(  # a tokenizer of numerals: "5 7 9" <-> [5, 7, 9]
    encode=lambda text: [int(x) for x in text.split()],
    decode=lambda ids: " ".join(str(i) for i in ids if i >= tok.NUM_SPECIAL),
  )
  sources = [" ".join(map(str, row[row >= tok.NUM_SPECIAL])) for row in np.asarray(inputs)[:5]]
  by_setting = translation.translate_dag_grid(
    model, words, sources, settings, batch_size=2, dag_lm=lm
  )
  for (w, b), hyps in zip(settings, by_setting):
    alone = translation.translate(
      model, words, sources, jax.random.key(0), batch_size=2, dag_decoder="beam", dag_lm=lm,
      dag_lm_weight=w, dag_length_norm=b,
    )  # fmt: skip
    assert hyps == alone and len(hyps) == 5, (w, b)
  assert len({tuple(h) for h in by_setting}) > 1  # the settings disagree somewhere


def test_the_decoder_interface_refuses_other_kinds_and_names_the_dag_decoders():
  model, _ = _interface_model_and_inputs()
  lm = ngram.build([[5, 6, 3], [6, 6]], model.cfg.vocab_size, order=2)
  with pytest.raises(ValueError, match="beam search only"):
    decoders.decode_fn(model, decoders.Decoder("d", "dag", dag_lm=lm))
  with pytest.raises(ValueError, match="beam search only"):
    decoders.decode_fn(model, decoders.Decoder("d", "dag", dag_length_norm=1.0))
  with pytest.raises(ValueError, match="cannot decode a DAG model"):
    decoders.decode_fn(model, decoders.Decoder("p", "padir"))
  with pytest.raises(ValueError, match="needs a DAG model"):
    decoders.decode_fn(tiny_model(), decoders.Decoder("d", "dag"))
  assert [d.name for d in decoders.dag_decoders(trims=(0,))] == [
    "dag-greedy",
    "dag-lookahead",
    "dag-viterbi",
    "dag-beam",
  ]


def test_the_evaluation_job_gives_a_dag_model_its_strategies_and_the_n_gram_beam():
  from configs import padir_eval
  from padir.jobs import evaluate as evaluate_job

  config = padir_eval.get_config()
  rows = evaluate_job.decoders(config, "nar", dag=True)
  assert [(d.kind, d.dag_strategy, d.trim) for d in rows] == [
    ("dag", s, config.trim) for s in dag_decoding.STRATEGIES
  ]
  lm = ngram.build([[5, 6]], V, order=2)
  *same, last = evaluate_job.decoders(config, "nar", dag=True, lm=lm)
  assert same == rows and last.dag_lm is lm and last.dag_strategy == "beam"
  assert last.dag_lm_weight == config.dag_lm_weight and last.name == "dag-beam-lm-trim8"
  assert last.dag_length_norm == config.dag_length_norm


def test_decoding_jobs_take_the_beam_settings_the_run_s_validation_picked(tmp_path, monkeypatch):
  """with_chosen_beam (the translate and evaluation jobs' dag_beam_from_run): the weight and
  exponent of the run's evaluation at the checkpoint decoded (default its latest), the job's
  own where that evaluation picked none; the job's config itself is left as it was."""
  from configs import padir_eval
  from padir.evaluation import translation

  records = [
    {"step": 500, "valid_bleu": 90.0, "valid_dag_lm_weight": 0.5, "valid_dag_length_norm": 1.0},
    {"step": 1000, "valid_bleu": 95.0, "valid_dag_lm_weight": 1.0, "valid_dag_length_norm": 1.5},
    {"step": 1500, "valid_bleu": 96.0},  # validated without a grid
  ]
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  steps = [500, 1000]
  monkeypatch.setattr(translation.restore, "checkpoint_steps", lambda run: steps)
  config = padir_eval.get_config()
  own = (config.dag_lm_weight, config.dag_length_norm)
  picked, at = translation.with_chosen_beam(config, str(tmp_path), None)
  assert (picked.dag_lm_weight, picked.dag_length_norm, at) == (1.0, 1.5, 1000)
  picked, at = translation.with_chosen_beam(config, str(tmp_path), 500)
  assert (picked.dag_lm_weight, picked.dag_length_norm, at) == (0.5, 1.0, 500)
  assert (config.dag_lm_weight, config.dag_length_norm) == own
  steps.append(1500)
  assert translation.with_chosen_beam(config, str(tmp_path), None) == (config, None)


@pytest.mark.parametrize("k, used, full", [(3, 12, 18), (2.5, 10, 15)])
def test_the_loss_over_the_used_vertices_is_the_full_graph_s_loss(k, used, full):
  """The graph over the vertex positions the batch's rows use (padir.decoding.ctc.batch_slots:
  floor(k x the longest source)) gives the full graph's loss and gradient: every later vertex
  is PAD."""
  from padir.decoding import ctc

  model = tiny_model(dag_upsample=k, max_source_length=6, max_target_length=6)
  batch = _batch()  # sources of 4 tokens in a width of 6: floor(4 k) of floor(6 k) vertices
  inputs, targets = np.asarray(batch["inputs"]), np.asarray(batch["targets"])
  A = ctc.batch_slots(inputs, targets, k, 0, bucket=1)
  x = np.asarray(dag.upsample(batch["inputs"], k))
  assert (A, x.shape[1]) == (used, full) and (x[:, A:] == tok.PAD_ID).all()

  def loss(m, slots):
    return dag.dag_loss(m, batch, num_slots_used=slots)

  # compiled (op by op, the two-stage loss and its gradient took most of a minute)
  grad = nnx.jit(nnx.value_and_grad(loss, has_aux=True), static_argnums=1)
  (full, aux_full), g_full = grad(model, None)
  (part, aux_part), g_part = grad(model, A)
  np.testing.assert_allclose(part, full, rtol=1e-5)
  assert float(aux_part["dag_infeasible"]) == float(aux_full["dag_infeasible"])
  for a, b in zip(jax.tree.leaves(g_part), jax.tree.leaves(g_full)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # a DAG model warm-started from the session's tiny AR run
def test_a_dag_warm_start_copies_the_backbone_and_starts_the_vertex_positions_fresh(
  toy_corpus, tiny_ar_run
):
  from padir.model import restore
  from padir.model import transformer as model_lib
  from padir.training import warm_start

  c = tiny_run_config(toy_corpus, steps=2)
  c.model.dag_upsample = 2
  c.init_from = tiny_ar_run
  cfg = model_lib.ModelConfig.from_run_config(c, 40)
  model = model_lib.Transformer(cfg, rngs=nnx.Rngs(params=0, dropout=0))
  ar_model, _, _ = restore.load_model(tiny_ar_run)
  # more vertices (2 per source token) than the AR's target positions
  assert model.target_pos_TD[...].shape[0] > ar_model.target_pos_TD[...].shape[0]
  record = warm_start.apply(model, training.check_warm_start(c))
  assert "target_pos_TD" in record["fresh"] and "embed_VD" in record["copied"]
  assert any("link" in name for name in record["fresh"])  # the AR run has no link head
  np.testing.assert_array_equal(
    np.asarray(model.decoder_layers[0].cross_attention.w_q_DNH[...]),
    np.asarray(ar_model.decoder_layers[0].cross_attention.w_q_DNH[...]),
  )
