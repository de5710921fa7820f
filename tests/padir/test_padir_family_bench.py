"""benchmarks/padir_family.py's comparison: a model's validation BLEU at the AR's CPU seconds is
the model's last evaluation reached by then (its CPU per step constant), and the interval against
AR greedy is the paired bootstrap's; the DAG validates with the decoder its last row reports."""

import pytest
from padir_util import benchmark_module

from padir.evaluation import metrics

family = benchmark_module("padir_family")


def _row(model, hyps, cpu, steps=100, evals=()):
  return family.Row("t", model, 0.0, hyps, steps, 0.0, cpu, list(evals))


def test_a_model_at_the_ars_cpu_is_its_last_evaluation_reached_by_then():
  refs = ["a b c d", "e f g h", "a c e g"]
  ar = _row("ar", ["a b c d", "e f x h", "a c e g"], 45.0, evals=[(20, 10.0)])
  # 2 CPU s a step: within the AR's 45 s it reached step 20 (40 s), not step 40 (80 s)
  ctc = _row("ctc", ["a b c d", "e f g h", "a x e g"], 200.0, evals=[(20, 30.0), (40, 50.0)])
  dag = _row("dag", refs, 1000.0, evals=[(20, 60.0)])  # 10 s a step: none reached
  family.compare([ar, ctc, dag], refs, "cx", resamples=50)
  assert (ar.at_ar_cpu, ctc.at_ar_cpu, dag.at_ar_cpu) == ("-", "30.00", "-")
  cheap = _row("ctc", refs, 50.0, evals=[(20, 30.0), (40, 50.0), (100, 70.0)])  # 0.5 s a step
  family.compare([ar, cheap], refs, "cx", resamples=50)
  assert cheap.at_ar_cpu == "50.00"  # step 40 at 20 s; step 100 at 50 s is past 45
  p = metrics.paired_bootstrap(ctc.hypotheses, ar.hypotheses, refs, "cx", 50)
  assert ctc.delta == f"{p.delta:+.2f} [{p.low:+.2f}, {p.high:+.2f}]" and ar.delta == "reference"
  assert "| t | ctc | 0.00 | " + ctc.delta in family.table([ar, ctc])


def _args(**over):
  """The benchmark's arguments for a tiny task of 300 pairs."""
  import argparse

  base = dict(dag_upsample=2, ctc_upsample=2.0, pairs=300, tiny=True, grammar_seed=0)
  # the defaults: no glancing, no dropout, the backbone's decoder depth
  base.update(dag_glancing=(0.0, 0.0), dag_dropout=0.0, dag_decoder_layers=0)
  base.update(dag_beam_grid="", dag_lm_weight=1.5, dag_length_norm=1.5)
  base.update(steps=10, eval_every=5, patience=2, valid_sentences=8, vocab_size=120)
  base.update(distill_beams=2, distill_refs=False)  # the Bible students' teacher: 2 beams
  base.update(dag_beam_on_valid=False, dag_decode_grid="1.0:1.0")
  return argparse.Namespace(**{**base, **over})


def test_length_limits_keep_every_pair_and_a_held_aside_seed_is_another_task(tmp_path):
  """The limits are the corpus's longest sentence in pieces (EOS included), over every split,
  so no pair is dropped or cut; a grammar seed other than 0 writes a different corpus beside."""
  args = _args(vocab_size=120)
  root = str(tmp_path)
  config = family.run_config("ctc", "sov_long", root, args)
  tok = family.vocab.prepare_vocabulary(config)
  longest = 0
  for split in ("train", "valid", "test"):
    pairs = family.data.read_split(config.data.corpus_dir, split, "en", "cx")
    longest = max(longest, *(len(tok.encode(s)) + 1 for pair in pairs for s in pair))
  assert config.data.max_source_length == config.data.max_target_length
  assert longest <= config.data.max_target_length < longest + 8
  assert config.data.max_target_length % 8 == 0
  args.grammar_seed = 3
  other = family.run_config("ctc", "sov_long", root, args)
  assert other.data.corpus_dir.endswith("sov_long_seed3")
  read = lambda c: open(f"{c.data.corpus_dir}/train.tsv", encoding="utf-8").read()
  assert read(other) != read(config)


def test_a_vocabulary_the_corpus_cannot_fill_is_lowered_to_what_it_allows(tmp_path):
  """run_config asks SentencePiece for --vocab-size pieces; on a corpus that cannot fill them it
  trains the largest size the refusal names (padir.data.vocab's one-line error) instead."""
  args = _args(vocab_size=5000)
  config = family.run_config("ar", "sov", str(tmp_path), args)
  tok = family.vocab.prepare_vocabulary(config)
  assert 16 < config.data.vocab_size < 5000
  assert tok.vocab_size == config.data.vocab_size


def test_the_dag_validates_with_its_beam_and_n_gram_model(tmp_path):
  """Early stopping reads the BLEU of the decoder the table's last DAG row reports (the beam
  joined by the n-gram model, length-normalised), and without an n-gram model, lookahead."""
  args = _args(dag_lm_order=5, dag_lm_weight=1.5, dag_length_norm=1.5)
  d = family.run_config("dag", "sov", str(tmp_path), args).decode
  assert (d.dag_decoder, d.dag_lm_order, d.dag_lm_weight, d.dag_length_norm) == (
    "beam",
    5,
    1.5,
    1.5,
  )
  family.training.validate(family.run_config("dag", "sov", str(tmp_path), args))
  args.dag_beam_grid = family.padir_family.BEAM_GRID  # the default: chosen at every validation
  config = family.run_config("dag", "sov", str(tmp_path), args)
  assert config.decode.dag_beam_grid == args.dag_beam_grid
  family.training.validate(config)
  args.dag_lm_order = 0
  d = family.run_config("dag", "sov", str(tmp_path), args).decode
  assert (d.dag_decoder, d.dag_lm_order, d.dag_length_norm) == ("lookahead", 0, 0.0)
  assert d.dag_beam_grid == ""


def test_the_beam_lm_row_decodes_with_the_setting_validation_chose_at_its_step(monkeypatch):
  """The "dag beam+lm" row's weight and length normalisation are the ones the run's validation
  picked at the evaluation of the checkpoint decoded; without a grid (or a record of the pick)
  they are the fixed arguments."""
  evals = [
    {"step": 250, "valid_bleu": 90.0, "valid_dag_lm_weight": 1.5, "valid_dag_length_norm": 1.5},
    {"step": 500, "valid_bleu": 95.0, "valid_dag_lm_weight": 1.0, "valid_dag_length_norm": 1.0},
    {"step": 750, "valid_bleu": 96.0},
  ]
  monkeypatch.setattr(family.curves, "read_metrics", lambda workdir: ([], evals))
  args = _args(dag_beam_grid="1.5:1.5,1.0:1.0", dag_lm_weight=0.3, dag_length_norm=0.7)
  assert family.beam_setting("wd", 500, args) == (1.0, 1.0)
  assert family.beam_setting("wd", 250, args) == (1.5, 1.5)
  assert family.beam_setting("wd", 750, args) == (0.3, 0.7)  # evaluated without the grid
  args.dag_beam_grid = ""
  assert family.beam_setting("wd", 500, args) == (0.3, 0.7)


def test_on_valid_the_beam_lm_row_takes_the_choosers_pick_from_the_decode_grid(monkeypatch, capsys):
  """--dag-beam-on-valid: the chooser decode_rows passes (the best on the whole valid split)
  gets --dag-decode-grid parsed, and its pick replaces validation's record, with or without a
  validation grid; an empty or malformed decode grid is refused in one line."""
  evals = [
    {"step": 500, "valid_bleu": 95.0, "valid_dag_lm_weight": 1.0, "valid_dag_length_norm": 1.0}
  ]
  monkeypatch.setattr(family.curves, "read_metrics", lambda workdir: ([], evals))
  asked = []
  choose = lambda grid: asked.append(grid) or (0.5, 1.5)
  args = _args(dag_beam_grid="1.0:1.0", dag_decode_grid="1.0:1.0, 0.5:1.5", dag_beam_on_valid=True)
  assert family.beam_setting("wd", 500, args, choose) == (0.5, 1.5)
  assert family.beam_setting("wd", 500, args) == (1.0, 1.0)  # no chooser: validation's pick
  args.dag_beam_grid = ""
  assert family.beam_setting("wd", 500, args, choose) == (0.5, 1.5)
  assert asked == [((1.0, 1.0), (0.5, 1.5))] * 2
  grid = family.evaluate.parse_beam_grid(family.padir_family.DECODE_GRID)  # the default
  assert grid[:2] == ((1.0, 1.5), (0.5, 1.0)) and len(set(grid)) == len(grid) == 10
  with pytest.raises(SystemExit):
    family.main(["--dag-beam-on-valid", "--dag-decode-grid", "", "--tiny"])
  assert "--dag-beam-on-valid chooses from --dag-decode-grid" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    family.main(["--dag-decode-grid", "1.0", "--tiny"])
  assert "--dag-decode-grid '1.0': '1.0' is not 'w:b'" in capsys.readouterr().err


def test_the_row_at_the_ars_cpu_decodes_the_last_checkpoint_within_it(monkeypatch):
  """A model that outspent the AR is decoded again from the last checkpoint it had saved within
  the AR's CPU seconds (its CPU per step constant); one within the AR's budget gets no such row."""
  asked = []
  monkeypatch.setattr(family.restore, "checkpoint_steps", lambda workdir: [250, 500, 750, 1000])
  monkeypatch.setattr(
    family, "decode_rows", lambda *a, step=None, **k: asked.append((a[4], step)) or ["row"]
  )
  args = _args(dag_lm_order=5)
  ar = _row("ar", [], 1500.0, steps=1500)
  dag = _row("dag beam+lm", [], 2000.0, steps=1000)  # 2 CPU s a step: step 750 at 1,500 s
  assert family.at_ar_cpu_rows("dag", "sov", "root", args, ar, dag) == ["row"]
  assert asked == [([], 750)]  # the beam+lm row only (decode_rows adds it)
  args.dag_lm_order = 0
  family.at_ar_cpu_rows("dag", "sov", "root", args, ar, _row("dag", [], 2000.0, steps=1000))
  assert asked[-1] == (["lookahead"], 750)
  assert family.at_ar_cpu_rows("ctc", "sov", "root", args, ar, _row("ctc", [], 1400.0)) == []
  poor = _row("ctc", [], 1e6, steps=1000)  # 1,000 CPU s a step: no checkpoint by 1,500 s
  assert family.at_ar_cpu_rows("ctc", "sov", "root", args, ar, poor) == []


def test_the_time_columns_are_the_runs_clock_where_it_kept_one(tmp_path, monkeypatch):
  """A run's wall and CPU seconds at each step are the clock its records carry (the last record
  of a step: its evaluation's); the comparisons at the AR's CPU seconds read it step by step,
  where the old rule (CPU per step constant) picked another checkpoint; a run with a record
  without the clock (begun before it) keeps its timing file's sum and the constant rule."""
  import json

  def write(records):
    with open(tmp_path / "metrics.jsonl", "w", encoding="utf-8") as f:
      f.writelines(json.dumps(r) + "\n" for r in records)

  records = []
  for step, cpu in ((250, 1000.0), (500, 1100.0), (750, 1200.0), (1000, 2000.0)):
    clock = {"wall_seconds": cpu / 2, "cpu_seconds": cpu}
    records.append({"step": step, "train_loss": 1.0, "wall_seconds": 1.0, "cpu_seconds": 1.0})
    records.append({"step": step, "valid_bleu": step / 100, **clock})
  write(records)
  clock = family.run_clock(str(tmp_path))
  assert clock == {250: (500.0, 1000.0), 500: (550.0, 1100.0), 750: (600.0, 1200.0),
                   1000: (1000.0, 2000.0)}  # fmt: skip
  timing = {"wall": 1.0, "cpu": 2.0, "finished": True}
  assert family.with_clock(str(tmp_path), timing) == {
    "wall": 1000.0,
    "cpu": 2000.0,
    "finished": True,
  }
  dag = _row("dag beam+lm", [], 2000.0, steps=1000, evals=[(s, s / 100) for s in clock])
  dag.clock = {s: c for s, (_, c) in clock.items()}
  ar = _row("ar", [], 1250.0, steps=1000)
  assert dag.cpu_at(750) == 1200.0 and family.at_cpu(dag, ar.cpu) == "7.50"
  monkeypatch.setattr(family.restore, "checkpoint_steps", lambda workdir: sorted(clock))
  asked = []
  monkeypatch.setattr(
    family, "decode_rows", lambda *a, step=None, **k: asked.append(step) or ["row"]
  )
  family.at_ar_cpu_rows("dag", "sov", "root", _args(dag_lm_order=5), ar, dag)
  dag.clock = {}  # the constant rule: 2 CPU s a step, step 500 the last within 1,250 s
  family.at_ar_cpu_rows("dag", "sov", "root", _args(dag_lm_order=5), ar, dag)
  assert asked == [750, 500] and family.at_cpu(dag, ar.cpu) == "5.00"
  write(records + [{"step": 1250, "train_loss": 1.0}])  # a leg run before the clock
  assert family.run_clock(str(tmp_path)) == {}
  assert family.with_clock(str(tmp_path), timing) == timing
  assert family.run_clock(str(tmp_path / "nowhere")) == {}


def test_a_finished_run_is_not_opened_again_and_adds_no_time(tmp_path, monkeypatch):
  """The first leg that returns from fit marks the run finished; a rerun of the benchmark then
  returns its timing without fitting (each such rerun used to add its restore's seconds), and a
  leg that ends by an exception adds its time without marking the run finished."""
  from gmlm.runs import RunDir

  fits = []
  monkeypatch.setattr(family.training, "open_run", lambda c, w: RunDir(w, c))

  def fit(config, rd):
    fits.append(1)
    if len(fits) == 1:
      raise KeyboardInterrupt

  monkeypatch.setattr(family.training, "fit", fit)
  config = family.model_config("ar", 2)
  workdir = str(tmp_path / "run")
  try:
    family.train(config, workdir)
  except KeyboardInterrupt:
    pass
  first = family.json.load(open(f"{workdir}/{family.TIMING}"))
  assert first["finished"] is False and len(fits) == 1
  second = family.train(config, workdir)
  assert second["finished"] is True and second["cpu"] >= first["cpu"] and len(fits) == 2
  assert family.train(config, workdir) == second and len(fits) == 2
  # finished, it is not opened: a config changed since (here another model's) is no refusal
  monkeypatch.setattr(family.training, "open_run", lambda c, w: pytest.fail("opened"))
  assert family.train(family.model_config("dag", 2), workdir) == second


def test_an_unknown_task_is_refused_in_one_line_naming_the_tasks(capsys):
  with pytest.raises(SystemExit):
    family.main(["--tasks", "sov,klingon"])
  err = capsys.readouterr().err.strip().splitlines()[-1]
  assert "--tasks 'klingon': not a task" in err and "bible_es_en" in err and "sov_long" in err


@pytest.mark.slow  # a tiny AR trained, its translations made, a tiny DAG trained from them
def test_a_bible_student_learns_from_its_ars_translations_and_starts_from_its_weights(
  toy_corpus, tmp_path
):
  """On a Bible task the PaDIR models train on the task's AR run's 2-beam translations of the
  training sources (valid and test are the corpus's own) and warm-start from its weights; before
  the AR has finished they are refused in one line. --distill-beams 3 makes the teacher's
  3-beam translations another corpus beside, its students' run directories named after it."""
  import json
  import shutil

  from padir.model import restore
  from padir.training import distill

  root = str(tmp_path)
  shutil.copytree(toy_corpus, f"{root}/data/bible_en_es")  # the corpus, as if fetched
  args = _args(steps=4, eval_every=2, valid_sentences=4, dag_lm_order=0, resamples=20)
  with pytest.raises(SystemExit, match="has not finished training: list ar first"):
    family.run_config("dag", "bible_en_es", root, args)
  (ar,) = family.run_model("ar", "bible_en_es", root, args)
  config = family.run_config("dag", "bible_en_es", root, args)
  assert config.init_from == f"{root}/bible_en_es/ar"
  assert config.data.corpus_dir == f"{root}/data/bible_en_es_distilled"
  family.on_bible(full := family.model_config("dag", 2), "dag", "bible_en_es", root)
  assert full.data.bucket_boundaries == family.BIBLE_BUCKETS and full.model.d_model == 256
  assert config.model.d_model == 32 and config.train.batch_size == 16  # --tiny's sizes
  read = lambda d, split: family.data.read_split(d, split, "en", "es")
  teacher, tok, _ = restore.load_model(f"{root}/bible_en_es/ar")
  sources = [s for s, _ in read(toy_corpus, "train")]
  targets, _ = distill.translate_sources(
    teacher, tok, sources, beam_size=2, length_penalty=0.6, batch_size=64
  )
  want = [(s, t) for s, t in zip(sources, targets) if t is not None]
  assert read(config.data.corpus_dir, "train") == want and want  # (the rest left out: too long)
  assert want != read(toy_corpus, "train")[: len(want)]  # a 4-step teacher's, not the references
  for split in ("valid", "test"):
    assert read(config.data.corpus_dir, split) == read(toy_corpus, split)
  rows = family.run_model("dag", "bible_en_es", root, args)
  record = json.load(open(f"{root}/bible_en_es/dag/{family.training.warm_start.RECORD}"))
  assert record["run"] == f"{root}/bible_en_es/ar" and "embed_VD" in record["copied"]
  assert [r.task for r in rows] == ["bible_en_es"] * 2 and ar.task == "bible_en_es"
  assert all(len(r.hypotheses) == len(read(toy_corpus, "test")) for r in rows)
  two_beams, args.distill_beams = want, 3
  three = family.run_config("dag", "bible_en_es", root, args)
  assert three.data.corpus_dir == f"{root}/data/bible_en_es_distilled_b3"
  targets, _ = distill.translate_sources(
    teacher, tok, sources, beam_size=3, length_penalty=0.6, batch_size=64
  )
  want = [(s, t) for s, t in zip(sources, targets) if t is not None]
  assert read(three.data.corpus_dir, "train") == want != two_beams  # (3 beams find others)
  assert family.model_dir("dag", "bible_en_es", root, args) == f"{root}/bible_en_es/dag_b3"
  assert family.model_dir("ar", "bible_en_es", root, args) == f"{root}/bible_en_es/ar"
  assert read(config.data.corpus_dir, "train") == two_beams  # kept as it was
  args.distill_refs = True  # the 3-beam translations, then the references
  mixed = family.run_config("dag", "bible_en_es", root, args)
  assert mixed.data.corpus_dir == f"{root}/data/bible_en_es_distilled_b3_refs"
  assert read(mixed.data.corpus_dir, "train") == want + read(toy_corpus, "train")
  assert family.model_dir("dag", "bible_en_es", root, args) == f"{root}/bible_en_es/dag_b3_refs"
  assert mixed.data.vocab_path == f"{root}/data/bible_en_es_distilled_b3_refs/teacher_spm.model"
