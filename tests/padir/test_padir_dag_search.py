"""Search or model (padir.evaluation.dag_search): the scores it gives a reference and the beam's
translation are the beam's objective by brute-force enumeration over every translation of tiny
graphs, and its classes follow from them: a narrow beam that misses the enumeration's best has
made a search error, a full beam never does, and a reference the DAG prefers but the n-gram
term or length normalisation turns is an objective error."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_padir_dag import V, _graph, _marginal

from padir.data import tokenizer as tok
from padir.decoding import ngram
from padir.evaluation import dag_search
from padir.model.dag_links import NEG

WORDS = [y for y in range(V) if y not in (tok.EOS_ID, tok.PAD_ID)]


def _rows(seqs, width):
  out = np.full((len(seqs), width), tok.PAD_ID, np.int32)
  for b, y in enumerate(seqs):
    out[b, : len(y)] = y
  return jnp.asarray(out)


def _every(logp, links, n, lm, w, b, walked):
  """{y (EOS last): (s(y), log P(y | x))} over every translation of a graph of n live vertices,
  by enumeration of paths and the n-gram model's own walk (kept in `walked`, one per y)."""
  every = {}
  for m in range(n):
    for y in itertools.product(WORDS, repeat=m):
      dag = _marginal(logp, links, n, (*y, tok.EOS_ID))
      if y not in walked:
        walked[y] = max(ngram.sentence_logprob(lm, y), NEG)
      joint = dag + w * walked[y]
      every[(*y, tok.EOS_ID)] = (joint / (m + 1) ** b, dag)
  return every


def _upto_eos(row):
  row = list(np.asarray(row))
  return tuple(row[: row.index(tok.EOS_ID) + 1])


def test_the_n_gram_score_of_a_batch_is_the_automaton_s_walk():
  rng = np.random.default_rng(0)
  lm = ngram.build([list(rng.choice([3, 5, 6], rng.integers(1, 5))) for _ in range(8)], V, 3)
  seqs = [[3, 5, tok.EOS_ID], [6, 6, 6, 3, tok.EOS_ID], [tok.EOS_ID], [4, 3, tok.EOS_ID]]
  got = dag_search.lm_logprob(lm.tables(), _rows(seqs, 7))
  want = [ngram.sentence_logprob(lm, y) for y in seqs]
  np.testing.assert_allclose(got, want, rtol=1e-5)
  assert len(set(np.round(want, 3))) == len(want)  # the rows differ: a mix-up would show
  np.testing.assert_array_equal(dag_search.lm_logprob(None, _rows(seqs, 7)), 0.0)


@pytest.mark.parametrize("seed, w, b", [(1, 0.7, 1.0), (3, 0.5, 0.0)])
def test_scores_are_the_beam_s_objective_and_a_missed_best_is_a_search_error(seed, w, b):
  """With the enumeration's best translation as the reference: its score and the beam's
  translation's are their objectives by enumeration, and the beam's own score agrees; a beam of
  1 that returns something else has made a search error (and one that returns the best has
  made none); a full beam never has."""
  counts = [5, 5, 4, 3, 5, 4]
  logp, links, live = _graph(seed, counts, A=5)
  rng = np.random.default_rng(seed)
  lm = ngram.build([list(rng.choice([3, 5, 6], rng.integers(1, 4))) for _ in range(6)], V, 2)
  args = (jnp.asarray(logp), jnp.asarray(links), jnp.asarray(live))
  walked = {}
  every = [_every(logp[r], links[r], n, lm, w, b, walked) for r, n in enumerate(counts)]
  best = [max(e, key=lambda y: e[y][0]) for e in every]
  refs = _rows(best, 5)
  wide = len(WORDS) ** (max(counts) - 1)
  missed = 0
  for k in (1, wide):
    out = dag_search.score_graph(*args, refs, lm.tables(), w, b, k)
    for r in range(len(counts)):
      hyp = _upto_eos(out["tokens"][r])
      np.testing.assert_allclose(out["ref_score"][r], every[r][best[r]][0], rtol=1e-4)
      np.testing.assert_allclose(out["hyp_score"][r], every[r][hyp][0], rtol=1e-4)
      np.testing.assert_allclose(out["beam_score"][r], every[r][hyp][0], rtol=1e-4)
      np.testing.assert_allclose(out["ref_dag"][r], every[r][best[r]][1], rtol=1e-4)
      np.testing.assert_allclose(out["hyp_dag"][r], every[r][hyp][1], rtol=1e-4)
      got = dag_search.classify(
        hyp != best[r],
        bool(out["feasible"][r]),
        *(float(out[key][r]) for key in ("hyp_score", "ref_score", "hyp_dag", "ref_dag")),
      )
      if every[r][best[r]][0] - every[r][hyp][0] > dag_search.TOLERANCE:
        assert got == "search"
      elif hyp == best[r]:
        assert got is None
      else:  # a tie with the best
        assert got != "search"
      if k == wide:
        assert got is None
      missed += got == "search"
  assert missed  # the narrow beam missed somewhere: the comparison can fail


def test_told_the_reference_length_the_beam_returns_the_best_translation_of_that_length():
  """oracle_length: a full beam's translation is the best by the objective among translations
  as long as the reference (by enumeration), in some row not the unconstrained best."""
  counts = [5, 5, 4, 3]
  logp, links, live = _graph(2, counts, A=5)
  lm = ngram.build([[3, 5, 6], [6, 5], [4, 4, 3]], V, 2)
  args = (jnp.asarray(logp), jnp.asarray(links), jnp.asarray(live))
  refs = [(3, 4, 5, 6, tok.EOS_ID), (5, tok.EOS_ID), (3, 3, tok.EOS_ID), (6, 6, tok.EOS_ID)]
  wide = len(WORDS) ** (max(counts) - 1)
  out = dag_search.score_graph(*args, _rows(refs, 5), lm.tables(), 0.5, 1.0, wide, True)
  free = dag_search.score_graph(*args, _rows(refs, 5), lm.tables(), 0.5, 1.0, wide)
  walked, differs = {}, False
  for r, n in enumerate(counts):
    every = _every(logp[r], links[r], n, lm, 0.5, 1.0, walked)
    same = {y: v for y, v in every.items() if len(y) == len(refs[r])}
    best = max(same, key=lambda y: same[y][0])
    assert _upto_eos(out["tokens"][r]) == best
    differs |= _upto_eos(free["tokens"][r]) != best
  assert differs


def test_a_reference_the_dag_prefers_but_the_n_gram_model_turns_is_an_objective_error():
  """The reference is each graph's argmax of log P(y | x) alone; the full beam, ranking by the
  joint score, returns another translation where the n-gram model outweighs the DAG: an
  objective error exactly there, and a model error for a reference both rank below the
  beam's translation."""
  counts = [5, 5, 4, 4, 5, 3]
  logp, links, live = _graph(7, counts, A=5)
  lm = ngram.build([[3, 3, 3], [3, 3], [3]], V, 2)  # an n-gram model that wants 3s
  w = 2.0
  args = (jnp.asarray(logp), jnp.asarray(links), jnp.asarray(live))
  walked = {}
  every = [_every(logp[r], links[r], n, lm, w, 0.0, walked) for r, n in enumerate(counts)]
  dag_best = [max(e, key=lambda y: e[y][1]) for e in every]
  wide = len(WORDS) ** (max(counts) - 1)
  out = dag_search.score_graph(*args, _rows(dag_best, 5), lm.tables(), w, 0.0, wide)
  turned = 0
  for r in range(len(counts)):
    hyp = _upto_eos(out["tokens"][r])
    got = dag_search.classify(
      hyp != dag_best[r],
      bool(out["feasible"][r]),
      *(float(out[key][r]) for key in ("hyp_score", "ref_score", "hyp_dag", "ref_dag")),
    )
    want = None if hyp == dag_best[r] else "objective"
    assert got == want, (r, hyp, dag_best[r])
    turned += got == "objective"
    # the DAG's least likely translation: below the beam's in both rankings, a model error
    low = min(every[r], key=lambda y: every[r][y][1])
    scores = (every[r][hyp][0], every[r][low][0], every[r][hyp][1], every[r][low][1])
    assert dag_search.classify(True, True, *scores) == "model"
  assert turned  # the n-gram model turned some row: the comparison can fail


def test_an_infeasible_reference_is_its_own_class():
  assert dag_search.classify(True, False, -1.0, 0.0, -1.0, 0.0) == "infeasible"
  assert dag_search.classify(False, False, -1.0, 0.0, -1.0, 0.0) is None


@pytest.mark.parametrize(
  "argv, match",
  [
    (["--run", "nowhere", "--beam-sizes", "5,x"], "--beam-sizes '5,x'"),
    (["--run", "nowhere", "--beam-sizes", "0"], "--beam-sizes '0'"),
    (["--run", "nowhere", "--split", "dev"], "--split 'dev'"),
    (["--run", "nowhere"], "--run 'nowhere': no checkpoint"),
    (["--run", "nowhere", "--average", "0"], "--average 0"),
  ],
)
def test_the_cli_refuses_bad_input_in_one_line(argv, match, capsys):
  with pytest.raises(SystemExit):
    dag_search.main(argv)
  err = capsys.readouterr().err.strip().splitlines()[-1]
  assert match in err


def test_errors_by_fill_count_each_sentence_in_its_range():
  a = dag_search.Attribution(
    sentences=5,
    wrong=2,
    counts={"infeasible": 0, "search": 0, "objective": 0, "model": 2},
    classes=[None, "model", None, None, "model"],
    hypotheses=[""] * 5,
    fills=[0.5, 0.65, 0.69, 0.75, 0.95],
  )
  got = dag_search.by_fill(a)
  assert got == [
    ("[0, 0.6)", 1, 0.0),
    ("[0.6, 0.7)", 2, 0.5),
    ("[0.7, 0.8)", 1, 0.0),
    (">= 0.8", 1, 1.0),
  ]


@pytest.mark.slow  # a tiny DAG run trained two steps, then its test split decoded
def test_the_cli_attributes_every_wrong_translation_of_a_trained_run(toy_corpus, tmp_path, capsys):
  """Each beam width's classes add up to its wrong share, the fill table counts every test
  sentence once, and the translations are the translate path's n-gram beam's (the family
  benchmark takes them for its "dag beam+lm" rows)."""
  from padir_util import tiny_run_config

  from padir.data import corpus
  from padir.evaluation import translation
  from padir.jobs import train as train_job
  from padir.model import restore

  c = tiny_run_config(toy_corpus, steps=2, eval_every=1, checkpoint_every=1)
  c.model.dag_upsample = 2
  c.decode.update(num_examples=4, dag_decoder="beam", dag_lm_order=2, dag_beam_grid="0.3:1.0")
  train_job.run(c, str(tmp_path / "dag"))
  assert dag_search.main(["--run", str(tmp_path / "dag"), "--beam-sizes", "1,3"]) == 0
  out = capsys.readouterr().out
  assert "w 0.3, b 1" in out
  rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ")]
  beams = [r for r in rows if r[0].strip() in ("1", "3")]
  assert len(beams) == 2
  for r in beams:
    wrong, *parts = (float(x) for x in r[2:])
    assert abs(wrong - sum(parts)) <= 0.3
  fill = [r for r in rows if r[0].strip().startswith(("[", ">="))]
  assert sum(int(r[1]) for r in fill) == 16  # toy_corpus's test split
  # the training split too (does the model err on what it learnt from?), cut by --limit
  assert dag_search.main(["--run", str(tmp_path / "dag"), "--split", "train", "--limit", "5"]) == 0
  out = capsys.readouterr().out
  assert "train (5 pairs)" in out
  fill = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith(("| [", "| >="))]
  assert sum(int(r[1]) for r in fill) == 5
  model, tok, config = restore.load_model(str(tmp_path / "dag"))
  d = config.data
  pairs = corpus.read_split(d.corpus_dir, "test", d.source_lang, d.target_lang)
  sources, references = [s for s, _ in pairs], [t for _, t in pairs]
  lm = ngram.from_corpus(config.data, tok, 2)
  kw = dict(lm=lm, lm_weight=0.3, length_norm=1.0, batch_size=8)
  mine = dag_search.attribute(model, tok, sources, references, **kw).hypotheses
  theirs = translation.translate(
    model, tok, sources, jax.random.key(0), batch_size=8, dag_decoder="beam", dag_lm=lm,
    dag_lm_weight=0.3, dag_length_norm=1.0,
  )  # fmt: skip
  assert mine == theirs
  # two checkpoints averaged, the beam told the lengths: the header says both
  argv = ["--run", str(tmp_path / "dag"), "--average", "2", "--limit", "4", "--oracle-length"]
  assert dag_search.main(argv) == 0
  out = capsys.readouterr().out
  assert "parameters averaged over steps [" in out and "told each reference's length" in out
  with pytest.raises(SystemExit):  # more checkpoints than the run kept: one line
    dag_search.main(["--run", str(tmp_path / "dag"), "--average", "9"])
  assert "--average 9:" in capsys.readouterr().err
  with pytest.raises(SystemExit):  # a step the run never saved: one line naming it
    dag_search.main(["--run", str(tmp_path / "dag"), "--step", "99"])
  assert "--step 99: no such checkpoint" in capsys.readouterr().err
