"""The evaluation job (configs/padir_eval.py): on tiny PaDIR and AR checkpoints it writes
report.md (the Table L.1 row per decoder, the attention tables) and results.json whose numbers
match an independent recomputation; a missing checkpoint is refused before anything is written;
a rerun reuses the finished cells."""

import json
import os

import jax
import numpy as np
import pytest
from flax import nnx
from test_padir_train import _config

from configs import padir_eval
from gmlm import runs as runs_lib
from gmlm.checkpoints import Checkpoints
from gmlm.checks import ConfigError, UserError
from gmlm.runs import RunDir
from padir.data import vocab
from padir.evaluation import metrics
from padir.jobs import evaluate as eval_job
from padir.model import restore
from padir.model import transformer as model_lib


@pytest.fixture(scope="module")
def runs(toy_corpus, tmp_path_factory):
  """A PaDIR and an AR run directory as training leaves them (config.json, the vocabulary,
  checkpoints/1 with the parameters), of randomly initialized models: training them (~1 CPU-min
  of compilation) would change nothing this test checks."""
  out = []
  for decoder in ("nar", "ar"):
    workdir = str(tmp_path_factory.mktemp(f"run_{decoder}"))
    c = _config(toy_corpus, steps=2)
    c.model.decoder = decoder
    tok = vocab.prepare_vocabulary(c)
    model = model_lib.Transformer(
      model_lib.ModelConfig.from_run_config(c, tok.vocab_size), rngs=nnx.Rngs(0)
    )
    RunDir(workdir, c).close()  # writes config.json
    ckpt = Checkpoints(os.path.join(workdir, restore.CHECKPOINTS))
    ckpt.save(1, {"params": nnx.state(model, nnx.Param)})
    ckpt.close()
    out.append(workdir)
  return out


def _eval_config(runs):
  c = padir_eval.get_config()
  c.update(
    checkpoints=",".join(runs),
    max_sentences=6,
    padir_passes=(2,),
    num_lengths=2,
    beam_size=2,
    batch_size=4,
    latency_sentences=2,
    attention_sentences=5,
  )
  return c


@pytest.mark.slow  # the evaluation job end to end: every decoder compiled (~1 CPU-min)
def test_the_job_writes_the_tables_and_resumes(runs, tmp_path, toy_corpus):
  workdir = tmp_path / "eval"
  results = eval_job.run(_eval_config(runs), str(workdir))
  nar, ar = results["models"]
  assert (nar["kind"], ar["kind"]) == ("nar", "ar")
  assert [r["decoder"] for r in nar["rows"]] == ["padir-2", "padir-2-length-prior-reset"]
  assert [r["decoder"] for r in ar["rows"]] == ["ar-greedy", "ar-beam2"]
  assert [r["hypotheses"] for r in nar["rows"] + ar["rows"]] == [2, 2, 1, 2]
  assert 1 <= nar["rows"][0]["passes"] <= 2 and ar["rows"][0]["passes"] == 16
  # Each row holds scores in range with their signatures and its first examples against the
  # split's references (the scores themselves: test_stutter_of_the_job_is_the_metric).
  with open(os.path.join(toy_corpus, "test.tsv"), encoding="utf-8") as f:
    refs = [line.rstrip("\n").split("\t")[1] for line in f][:6]
  for row in nar["rows"] + ar["rows"]:
    assert 0 <= row["bleu"] <= 100 and 0 <= row["chrf"] <= 100 and 0 <= row["stutter"] <= 1
    assert row["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert [e["reference"] for e in row["examples"]] == refs[:3]
    t = row["timing"]
    assert 0 < t["p50_ms"] <= t["p99_ms"] and t["sentences"] == 2 and t["throughput"] > 0
  # Attention: every adjacent content pair of the 5 analysed outputs is counted once.
  stats = nar["attention"]
  pairs = stats["cross"]["stutter"]["pairs"] + stats["cross"]["other"]["pairs"]
  assert stats["self"]["other"]["pairs"] == stats["cross"]["other"]["pairs"] and pairs > 0
  report = (workdir / "report.md").read_text()
  assert "| model | decoder | # hyp. | passes | BLEU | chrF | stutter | p50 ms | p99 ms |" in report
  assert "(Table 4)" in report and "(Table 5)" in report
  acc = nar["length_accuracy"]  # the length predictor on the 6 test sentences (PaDIR only)
  assert acc["sentences"] == 6 and 0 <= acc["exact"] <= acc["within1"] <= acc["within2"] <= 1
  assert ar["length_accuracy"] is None and "| model | exact | within 1 | within 2 |" in report
  assert (workdir / "quality_speed.png").is_file() and (workdir / "attention.png").is_file()
  assert json.loads((workdir / "results.json").read_text()) == results
  # Each row's hypotheses are on disk, one line per sentence, beside the references; the
  # paired bootstrap compares every other row with the AR greedy row on them.
  names = [os.path.basename(r) for r in runs]
  assert (workdir / "hypotheses" / f"0_{names[0]}.reference.txt").read_text().splitlines() == refs
  for k, m in enumerate((nar, ar)):
    for row in m["rows"]:
      lines = (workdir / eval_job.hypotheses_file(k, names[k], row["decoder"])).read_text()
      assert len(lines.splitlines()) == 6
      assert lines.splitlines()[:3] == [e["hypothesis"] for e in row["examples"]]
  tests = results["significance"]
  assert [(t["a"], t["b"]) for t in tests] == [
    (f"{names[0]}: padir-2", f"{names[1]}: ar-greedy"),
    (f"{names[0]}: padir-2-length-prior-reset", f"{names[1]}: ar-greedy"),
    (f"{names[1]}: ar-beam2", f"{names[1]}: ar-greedy"),
  ]
  for t, row in zip(tests, nar["rows"] + ar["rows"][1:]):
    assert t["bleu_a"] == pytest.approx(row["bleu"]) and t["resamples"] == 1000
    assert t["bleu_b"] == pytest.approx(ar["rows"][0]["bleu"])
    assert t["low"] <= t["delta"] <= t["high"] and 0 < t["p_value"] <= 1
  assert "Paired bootstrap (Koehn 2004" in report and "| A | B | BLEU A |" in report
  # A rerun reads the cells back instead of decoding again.
  cell = workdir / "cells" / "checkpoint_0.json"
  stored = json.loads(cell.read_text())
  stored["rows"][0]["bleu"] = -1.0
  cell.write_text(json.dumps(stored))
  again = eval_job.run(_eval_config(runs), str(workdir))
  assert again["models"][0]["rows"][0]["bleu"] == -1.0
  assert again["models"][1] == ar


def _ctc_run(toy_corpus, workdir, graph: str = "ctc_upsample", seed: int = 1) -> str:
  """A CTC run directory (graph "dag_upsample": a DAG one) as training leaves it, randomly
  initialized (as `runs`)."""
  c = _config(toy_corpus, steps=2)
  c.model[graph] = 2
  tok = vocab.prepare_vocabulary(c)
  model = model_lib.Transformer(
    model_lib.ModelConfig.from_run_config(c, tok.vocab_size), rngs=nnx.Rngs(seed)
  )
  RunDir(str(workdir), c).close()
  ckpt = Checkpoints(os.path.join(str(workdir), restore.CHECKPOINTS))
  ckpt.save(1, {"params": nnx.state(model, nnx.Param)})
  ckpt.close()
  return str(workdir)


@pytest.mark.slow  # the evaluation job end to end: every decoder compiled (~1 CPU-min)
def test_a_ctc_models_blank_penalty_is_chosen_on_valid_and_used_on_test(toy_corpus, tmp_path):
  """With ctc_blank_penalty_grid, the job decodes the valid split at every penalty (BLEU and
  length ratio recomputed here with evaluate.translate and metrics.bleu), picks the highest
  BLEU (ties to the smaller penalty), and decodes the test split at it (the hypotheses file is
  evaluate.translate's at that penalty, and so is the length table); without a grid it uses
  ctc_blank_penalty."""
  from padir.data import corpus as data
  from padir.evaluation import translation as evaluate

  run = _ctc_run(toy_corpus, tmp_path / "ctc")
  c = _eval_config([run])
  c.padir_passes = (1,)
  c.ctc_blank_penalty_grid = (2.0, 0.0, 0.5)
  results = eval_job.run(c, str(tmp_path / "eval"))
  (m,) = results["models"]
  choice = m["blank_penalty"]["chosen_on_valid"]
  model, tok, tconf = restore.load_model(run)
  valid = data.read_split(toy_corpus, "valid", "en", "es")[:6]
  want = []
  for p in (0.0, 0.5, 2.0):  # sorted
    hyps = evaluate.translate(
      model, tok, [s for s, _ in valid], None, batch_size=4, num_steps=1, blank_penalty=p
    )
    refs = [t for _, t in valid]
    ratio = sum(len(h.split()) for h in hyps) / sum(len(r.split()) for r in refs)
    want.append({"penalty": p, "bleu": metrics.bleu(hyps, refs, "es").score, "length_ratio": ratio})
  as_rows = lambda rows: [r[k] for r in rows for k in ("penalty", "bleu", "length_ratio")]
  assert as_rows(choice["sweep"]) == pytest.approx(as_rows(want)) and choice["sentences"] == 6
  best = max(r["bleu"] for r in want)
  chosen = min(r["penalty"] for r in want if r["bleu"] == best)
  assert choice["chosen"] == chosen == m["blank_penalty"]["used"]
  test = data.read_split(toy_corpus, "test", "en", "es")[:6]
  hyps = evaluate.translate(
    model, tok, [s for s, _ in test], None, batch_size=4, num_steps=1, blank_penalty=chosen
  )
  name = os.path.basename(run)
  got = (tmp_path / "eval" / eval_job.hypotheses_file(0, name, "ctc-1")).read_text().splitlines()
  assert got == [" ".join(h.splitlines()) for h in hyps]
  acc = evaluate.length_accuracy(
    model, tok, [s for s, _ in test], [t for _, t in test], 4, 1, chosen
  )
  assert m["length_accuracy"] == acc
  assert "blank penalty chosen on 6 valid pairs" in (tmp_path / "eval" / "report.md").read_text()
  c.ctc_blank_penalty_grid = ()
  c.ctc_blank_penalty = 0.5
  plain = eval_job.run(c, str(tmp_path / "eval_plain"))["models"][0]["blank_penalty"]
  assert plain == {"used": 0.5, "chosen_on_valid": None}


@pytest.mark.slow  # the evaluation job end to end: a DAG model's five rows compiled (~1 CPU-min)
def test_a_dag_models_beam_setting_is_chosen_on_valid_and_used_on_test(toy_corpus, tmp_path):
  """With dag_beam_grid, the job decodes the valid split at every (n-gram weight, length
  exponent) (BLEU recomputed here with evaluate.translate at each setting, one at a time),
  picks the highest BLEU (the first on a tie), and decodes the test split's beam + n-gram row
  at it (its hypotheses file is evaluate.translate's there); without a grid, and a run that
  validated on none, it uses the config's own; a malformed grid is refused in one line."""
  from padir.data import corpus as data
  from padir.decoding import ngram
  from padir.evaluation import translation as evaluate

  run = _ctc_run(toy_corpus, tmp_path / "dag", graph="dag_upsample", seed=2)
  c = _eval_config([run])
  c.update(dag_lm_order=2, dag_beam_grid="0.3:1.0,0.0:0.0,0.7:0.5")
  results = eval_job.run(c, str(tmp_path / "eval"))
  (m,) = results["models"]
  choice = m["dag_beam"]["chosen_on_valid"]
  model, tok, tconf = restore.load_model(run)
  lm = ngram.from_corpus(tconf.data, tok, 2)
  beam = lambda pairs, w, b: evaluate.translate(  # the beam with the n-gram model, alone
    model, tok, [s for s, _ in pairs], None, batch_size=4, dag_decoder="beam", dag_lm=lm,
    dag_lm_weight=w, dag_length_norm=b,
  )  # fmt: skip
  valid = data.read_split(toy_corpus, "valid", "en", "es")[:6]
  refs = [t for _, t in valid]
  grid = [(0.3, 1.0), (0.0, 0.0), (0.7, 0.5)]
  want = [metrics.bleu(beam(valid, w, b), refs, "es").score for w, b in grid]
  assert [r["bleu"] for r in choice["sweep"]] == pytest.approx(want) and choice["sentences"] == 6
  chosen = list(grid[want.index(max(want))])
  assert choice["chosen"] == chosen == m["dag_beam"]["used"]
  assert m["dag_beam"]["chosen_at_step"] is None
  hyps = beam(data.read_split(toy_corpus, "test", "en", "es")[:6], *chosen)
  name = os.path.basename(run)
  got = (tmp_path / "eval" / eval_job.hypotheses_file(0, name, "dag-beam-lm-trim8")).read_text()
  assert got.splitlines() == [" ".join(h.splitlines()) for h in hyps]
  assert "chosen on 6 valid pairs" in (tmp_path / "eval" / "report.md").read_text()
  c.dag_beam_grid = ""
  plain = eval_job.run(c, str(tmp_path / "eval_plain"))["models"][0]["dag_beam"]
  assert plain == {
    "used": [c.dag_lm_weight, c.dag_length_norm],
    "chosen_on_valid": None,
    "chosen_at_step": None,
  }
  for bad, why in (("1.0", "not 'w:b'"), ("-1:1", ">= 0")):
    c.dag_beam_grid = bad
    with pytest.raises(ConfigError, match=f"dag_beam_grid={bad!r}.*{why}"):
      eval_job.validate(c)
  c.update(dag_beam_grid="1:1", dag_lm_order=0)
  with pytest.raises(ConfigError, match="dag_beam_grid.*dag_lm_order > 0"):
    eval_job.validate(c)


def _two_step_ar_run(toy_corpus, tmp_path) -> tuple[str, list]:
  """An AR run directory with checkpoints at steps 1 and 2 (different seeds' parameters), and
  those parameters as numpy trees."""
  c = _config(toy_corpus, steps=2)
  c.model.decoder = "ar"
  tok = vocab.prepare_vocabulary(c)
  workdir = str(tmp_path / "ar")
  RunDir(workdir, c).close()
  ckpt = Checkpoints(os.path.join(workdir, restore.CHECKPOINTS))
  saved = []
  for step, seed in ((1, 0), (2, 5)):
    model = model_lib.Transformer(
      model_lib.ModelConfig.from_run_config(c, tok.vocab_size), rngs=nnx.Rngs(seed)
    )
    saved.append(jax.tree.map(np.asarray, nnx.state(model, nnx.Param)))
    ckpt.save(step, {"params": nnx.state(model, nnx.Param)})
  ckpt.close()
  return workdir, saved


@pytest.mark.slow  # the evaluation job end to end: every decoder compiled (~1 CPU-min)
def test_run_at_step_evaluates_that_checkpoint_and_a_missing_step_is_refused(toy_corpus, tmp_path):
  """RUN@STEP decodes the run's checkpoint at STEP (its greedy hypotheses are those of the
  parameters saved there, not the latest's); a step the run lacks is refused before writing."""
  from padir.data import corpus as data
  from padir.evaluation import translation as evaluate

  workdir, _ = _two_step_ar_run(toy_corpus, tmp_path)
  e = _eval_config([f"{workdir}@1", workdir])
  e.bootstrap_resamples = 0
  with pytest.raises(UserError, match="no such checkpoint step"):
    eval_job.run(_eval_config([f"{workdir}@7"]), str(tmp_path / "bad"))
  assert not (tmp_path / "bad").exists()
  results = eval_job.run(e, str(tmp_path / "eval"))
  assert [m["name"] for m in results["models"]] == ["ar@1", "ar"]
  test = data.read_split(toy_corpus, "test", "en", "es")[:6]
  for k, step in ((0, 1), (1, 2)):
    model, tok, _ = restore.load_model(workdir, step)
    want = evaluate.translate(model, tok, [s for s, _ in test], None, batch_size=4)
    got = results["models"][k]["rows"][0]
    assert got["decoder"] == "ar-greedy"
    assert [x["hypothesis"] for x in got["examples"]] == want[:3]
  rows = [m["rows"][0]["examples"] for m in results["models"]]
  assert rows[0] != rows[1]  # the two steps' parameters decode differently


def test_averaged_checkpoints_are_the_mean_of_their_parameters_and_decode_as_it(
  toy_corpus, tmp_path
):
  """RUN@S1+S2 loads the leafwise mean of the two checkpoints' parameters (checked against numpy
  on the saved arrays) and padir_eval decodes with it; repeated or missing steps are refused."""
  from padir.data import corpus as data
  from padir.evaluation import translation as evaluate

  workdir, saved = _two_step_ar_run(toy_corpus, tmp_path)
  tok = vocab.load(vocab.vocabulary_path(restore.trained_config(workdir)))
  averaged, _, _ = restore.load_model(workdir, (1, 2))
  got = jax.tree.map(np.asarray, nnx.state(averaged, nnx.Param))
  want = jax.tree.map(lambda a, b: (a.astype(np.float32) + b) / 2, *saved)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
    np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
  assert eval_job.split_step(f"{workdir}@1+2") == (workdir, (1, 2))
  assert eval_job.split_step(f"{workdir}@1+1") == (f"{workdir}@1+1", -1)
  for bad in (f"{workdir}@1+1", f"{workdir}@1+7"):
    with pytest.raises(UserError, match="no such checkpoint step|hold no trained run"):
      eval_job.run(_eval_config([bad]), str(tmp_path / "bad"))
    assert not (tmp_path / "bad").exists()
  e = _eval_config([f"{workdir}@1+2"])
  e.bootstrap_resamples = 0
  results = eval_job.run(e, str(tmp_path / "eval"))
  assert results["models"][0]["name"] == "ar@1+2"
  test = data.read_split(toy_corpus, "test", "en", "es")[:6]
  want_hyps = evaluate.translate(averaged, tok, [s for s, _ in test], None, batch_size=4)
  row = results["models"][0]["rows"][0]
  assert [x["hypothesis"] for x in row["examples"]] == want_hyps[:3]


def test_choose_blank_penalty_takes_the_highest_bleu_and_ties_to_the_smaller(monkeypatch):
  """The rule alone, on hypotheses made by hand per penalty."""
  from padir.evaluation import translation as evaluate

  refs = ["the cat sat on the mat", "a dog ran in the park"]
  made = {
    0.0: ["the cat", "a dog"],  # short
    1.0: refs,  # the best
    2.0: refs,  # as good: the smaller penalty wins
    3.0: ["the cat sat on the mat mat mat", "a dog ran in the park park"],
  }
  monkeypatch.setattr(evaluate, "translate", lambda *a, blank_penalty, **k: made[blank_penalty])

  class Ctc:
    class cfg:
      ctc_upsample = 2

  got = evaluate.choose_blank_penalty(Ctc(), None, ["x", "y"], refs, "en", [3, 2, 1, 0])
  assert got["chosen"] == 1.0 and [r["penalty"] for r in got["sweep"]] == [0, 1, 2, 3]
  assert [r["length_ratio"] for r in got["sweep"]] == pytest.approx([4 / 12, 1, 1, 15 / 12])
  assert got["sweep"][1]["bleu"] == pytest.approx(100)
  with pytest.raises(ValueError, match="not a CTC model"):
    Ctc.cfg.ctc_upsample = 0
    evaluate.choose_blank_penalty(Ctc(), None, ["x"], refs[:1], "en", [0])


def test_stutter_of_the_job_is_the_metric(runs, tmp_path):
  """The stored stutter equals padir.evaluation.metrics' on the examples when all sentences are examples."""
  c = _eval_config(runs[1:])
  c.max_sentences = 3
  c.padir_passes = (1,)
  results = eval_job.run(c, str(tmp_path / "eval"))
  for row in results["models"][0]["rows"]:
    hyps = [e["hypothesis"] for e in row["examples"]]
    refs = [e["reference"] for e in row["examples"]]
    assert row["stutter"] == metrics.stutter_rate(hyps, refs)
    assert row["bleu"] == metrics.bleu(hyps, refs, "es").score


def test_missing_or_malformed_checkpoints_are_refused_before_writing(tmp_path, runs):
  c = _eval_config([runs[0], str(tmp_path / "nothing")])
  with pytest.raises(UserError, match="nothing'\\] hold no trained run.*padir.data.synthetic"):
    eval_job.run(c, str(tmp_path / "eval"))
  c.checkpoints = f"{runs[0]},,{runs[1]}"
  with pytest.raises(ConfigError, match="config.checkpoints="):
    eval_job.run(c, str(tmp_path / "eval"))
  c.checkpoints = ",".join(runs)
  for grid in ((0.5, -1.0), ("x",)):
    c.ctc_blank_penalty_grid = grid
    with pytest.raises(ConfigError, match="config.ctc_blank_penalty_grid="):
      eval_job.run(c, str(tmp_path / "eval"))
  assert not (tmp_path / "eval").exists()


def _models(*decoders_per_model):
  return [
    {"name": f"m{k}", "index": k, "rows": [{"decoder": d} for d in decoders]}
    for k, decoders in enumerate(decoders_per_model)
  ]


def test_comparisons_pair_every_row_with_the_baseline_and_each_decoder_across_models():
  """Hand-written: two PaDIR models with the same decoders and an AR model between them."""
  models = _models(("padir-4", "padir-10"), ("ar-greedy", "ar-beam5"), ("padir-4", "padir-10"))
  assert eval_job.comparisons(models) == [
    ((0, 0), (1, 0)),
    ((0, 1), (1, 0)),
    ((1, 1), (1, 0)),
    ((2, 0), (1, 0)),
    ((2, 1), (1, 0)),
    ((2, 0), (0, 0)),
    ((2, 1), (0, 1)),
  ]
  # Without an AR greedy row the first row is the baseline; a pair is never listed twice.
  assert eval_job.comparisons(_models(("padir-4",), ("padir-4",))) == [((1, 0), (0, 0))]


def test_rows_on_different_sentences_or_without_hypotheses_are_not_compared(tmp_path):
  """significance() pairs only rows decoded on the same references whose files exist."""
  config = padir_eval.get_config()
  config.bootstrap_resamples = 20
  rd = RunDir(tmp_path / "eval")
  models = _models(("ar-greedy",), ("padir-4",), ("padir-4",), ("padir-10",))
  refs = ["the cat sat", "a dog ran off", "it is here"]
  for k, model in enumerate(models):
    other = ["no such thing"] * 3 if k == 2 else refs  # model 2: another corpus
    eval_job._write_lines(rd, eval_job.hypotheses_file(k, model["name"], "reference"), other)
    if k != 3:  # model 3: a cell from before hypotheses/ existed
      hyps = refs if k == 0 else ["the cat cat", "a dog ran", "it here"]
      decoder = model["rows"][0]["decoder"]
      eval_job._write_lines(rd, eval_job.hypotheses_file(k, model["name"], decoder), hyps)
  tests = eval_job.significance(rd, models, config)
  assert [(t["a"], t["b"]) for t in tests] == [("m1: padir-4", "m0: ar-greedy")]
  assert tests[0]["bleu_a"] == pytest.approx(
    metrics.bleu(["the cat cat", "a dog ran", "it here"], refs, "en").score
  )
  assert tests[0]["bleu_b"] == pytest.approx(100.0) and tests[0]["resamples"] == 20
  config.bootstrap_resamples = 0
  assert eval_job.significance(rd, models, config) == []


def test_a_report_renders_when_no_pair_stutters(tmp_path):
  """No stuttering pair among the analysed outputs (common on an easy task): its statistics are
  NaN, stored in results.json as "nan"; the report still renders them, as nan."""
  nan = float("nan")
  group = lambda n, v: {
    "pairs": n,
    **{k: [v, v] for k in ("min", "avg", "max", "tv_min", "tv_avg", "tv_max")},
    **{k: [v, v] for k in ("cos_min", "cos_avg", "cos_max")},
    "top1": v,
    "top2": v,
  }
  stats = {t: {"stutter": group(0, nan), "other": group(9, 0.5)} for t in ("self", "cross")}
  row = {
    "decoder": "padir-4",
    "hypotheses": 5,
    "passes": 2.0,
    "bleu": 50.0,
    "chrf": 60.0,
    "stutter": 0.0,
    "bleu_signature": "b",
    "chrf_signature": "c",
    "timing": {"p50_ms": 1.0, "p99_ms": 2.0},
  }
  model = {"name": "m", "rows": [row], "attention": stats}
  results = json.loads(runs_lib.dumps({"models": [model], "significance": []}))
  assert results["models"][0]["attention"]["self"]["stutter"]["avg"] == ["nan", "nan"]
  rd = RunDir(tmp_path / "eval")
  eval_job.render(rd, results)
  report = (tmp_path / "eval" / "report.md").read_text()
  assert "| stutter | 0 | nan ± nan |" in report and "| other | 9 | 0.5 ± 0.5 |" in report


def test_config_decoder_keeps_its_kinds_rows_and_auto_keeps_each_runs_own():
  """ "auto": a CTC model's ctc rows, a PaDIR model's padir rows, an AR model's greedy and beam;
  a named kind: the same rows of that kind only (none of another)."""
  c = _eval_config([])
  c.update(padir_passes=(2, 4), padir_variants=("paper",))
  auto = {
    "ctc": eval_job.decoders(c, "nar", ctc=True),
    "padir": eval_job.decoders(c, "nar"),
    "ar": eval_job.decoders(c, "ar"),
  }
  assert [d.name for d in auto["ctc"]] == ["ctc-2", "ctc-4"]
  assert [d.name for d in auto["padir"]] == ["padir-2", "padir-4"]
  assert [(d.name, d.kind) for d in auto["ar"]] == [("ar-greedy", "greedy"), ("ar-beam2", "beam")]
  for kind in ("greedy", "beam"):
    c.decoder = kind
    assert eval_job.decoders(c, "ar") == [d for d in auto["ar"] if d.kind == kind]
  c.decoder = "ctc"
  assert eval_job.decoders(c, "nar", ctc=True) == auto["ctc"]


def test_a_decoder_a_checkpoint_cannot_use_is_refused_in_one_line_before_writing(tmp_path, runs):
  """decoder="ctc" on a PaDIR and an AR run: refused naming the first run that cannot use it,
  its kind and the fix, before any model loads or the workdir is made; "greedy" names the
  PaDIR run."""
  c = _eval_config(runs)
  for decoder, kind in (("ctc", "a PaDIR \\(refinement\\) model"), ("greedy", "a PaDIR")):
    c.decoder = decoder
    with pytest.raises(UserError, match=f"config.decoder='{decoder}'.*{runs[0]} is {kind}") as e:
      eval_job.run(c, str(tmp_path / "eval"))
    assert "\n" not in str(e.value)
  c.checkpoints, c.decoder = runs[1], "padir"
  with pytest.raises(UserError, match=f"cannot decode an AR model.*{runs[1]} is an AR model"):
    eval_job.run(c, str(tmp_path / "eval"))
  assert not (tmp_path / "eval").exists()
