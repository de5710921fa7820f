"""configs/padir_family.py: every task and model of the reordering family is a valid run config
(the benchmark's model configs, the task's data); a bad parameter is one line naming the form;
the job writes the task's corpus once (data.grammar_task) and refuses a directory holding
another task's; a run trains on a corpus it wrote itself; and a Bible task is the benchmark's
config, its PaDIR models students of its AR run through padir.jobs.distill."""

import argparse
import json
import os
import shutil

import pytest
from conftest import REPO
from padir_util import benchmark_module

from configs import padir_family
from gmlm import checks
from padir.data import grammar
from padir.jobs import train as train_job
from padir.training import loop as training

# where a benchmark run's config and train.py's may differ: the paths, the vocabulary size the
# toy corpus allows, the progress bar and the checkpoints the benchmark keeps
PATHS = ("data.corpus_dir", "data.vocab_path", "data.vocab_size", "init_from")
KEPT = ("train.progress_bar", "train.keep_checkpoints")


@pytest.mark.parametrize("model", padir_family.MODELS)
def test_every_task_and_model_is_a_valid_config_built_as_the_benchmark_builds_it(model):
  family = benchmark_module("padir_family")
  for task in grammar.FAMILY:
    c = padir_family.get_config(f"{task},{model}")
    training.validate(c)
    assert c.data.grammar_task == task and c.data.grammar_seed == 0
    vocab_size, longest = padir_family.SIZES[task]
    assert (c.data.vocab_size, c.data.max_target_length) == (vocab_size, longest)
    bench = family.model_config(model, 2, 2.0)  # the benchmark's --dag-upsample default
    assert c.model.to_dict() == bench.model.to_dict()  # the benchmark's model, unchanged
    assert c.loss.to_dict() == bench.loss.to_dict()
  held = padir_family.get_config("vso,ctc,7")
  assert held.data.grammar_seed == 7 and held.data.corpus_dir.endswith("vso_seed7")


@pytest.mark.parametrize("arg", ["sov", "nope,ctc", "sov,ctc,1,2", "sov,rnn", "bible_en_es,ar,1"])
def test_a_bad_parameter_names_the_form(arg):
  with pytest.raises(ValueError, match="TASK,MODEL"):
    padir_family.get_config(arg)


def test_the_corpus_is_written_once_and_another_tasks_is_refused(tmp_path):
  out = str(tmp_path / "c")
  first = grammar.prepare_if_missing(out, "mirror", seed=0, train_pairs=50)
  stamp = os.path.getmtime(os.path.join(out, "train.tsv"))
  again = grammar.prepare_if_missing(out, "mirror", seed=0, train_pairs=50)
  assert again == first and os.path.getmtime(os.path.join(out, "train.tsv")) == stamp
  assert first["counts"] == {"train": 50, "valid": 512, "test": 1024}
  for task, seed, pairs in (("sov", 0, 50), ("mirror", 1, 50), ("mirror", 0, 60)):
    with pytest.raises(ValueError, match="data.corpus_dir=.*another corpus"):
      grammar.prepare_if_missing(out, task, seed=seed, train_pairs=pairs)
  with pytest.raises(ValueError, match="not a family task"):
    grammar.prepare_if_missing(out, "klingon")


@pytest.mark.slow  # a 1+1-layer CTC run of 2 steps
def test_a_run_writes_its_task_and_trains_on_it(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # the config's data/family/... lands here
  c = padir_family.get_config("mirror,ctc")
  c.data.grammar_pairs = 400
  c.data.vocab_size = 60  # what 400 pairs fill
  c.model.update(num_encoder_layers=1, num_decoder_layers=1, num_heads=2, d_model=16, d_ff=32)
  c.train.update(batch_size=8, num_train_steps=2, eval_every=2, checkpoint_every=2, log_every=1)
  c.train.update(eval_batches=1, progress_bar=False, early_stopping_patience=0)
  c.decode.update(num_examples=0)
  train_job.run(c, str(tmp_path / "run"))
  manifest = grammar.prepare_if_missing(c.data.corpus_dir, "mirror", 0, 400)
  assert manifest["knobs"]["mirror"] is True
  assert os.path.isfile(os.path.join(c.data.corpus_dir, "spm.model"))
  assert os.path.isfile(str(tmp_path / "run" / "metrics.jsonl"))


def test_the_dags_glancing_is_a_knob_and_off_skips_its_schedule():
  """--dag-glancing START:END sets the DAG's anneal; 0 turns glancing off (no first pass: the
  loss's schedule is None); a bad value is one line naming the flag and the form."""
  import argparse

  family = benchmark_module("padir_family")
  assert family.glancing_arg("0.5:0.3") == (0.5, 0.3) and family.glancing_arg("0") == (0.0, 0.0)
  on = family.model_config("dag", 2, 2.0, family.glancing_arg("0.5:0.3"))
  assert training.glancing_schedule(on)[:2] == (0.5, 0.3)
  off = family.model_config("dag", 2, 2.0, family.glancing_arg("0"))
  assert training.glancing_schedule(off) is None
  assert training.glancing_schedule(family.model_config("dag", 2, 2.0)) is None  # the default
  assert training.glancing_schedule(padir_family.get_config("sov,dag")) is None
  training.validate(off)
  assert family.model_config("ctc", 2, 2.0, (0.0, 0.0)).loss.glancing_ratio == 0.5  # CTC's own
  for bad in ("0.5", "0:0.3", "1.5:0.3", "x"):
    with pytest.raises(argparse.ArgumentTypeError, match="--dag-glancing"):
      family.glancing_arg(bad)


def test_the_dags_dropout_is_a_knob_that_leaves_the_other_models_alone():
  """--dag-dropout sets the DAG's dropout rate only (the AR keeps its 0.1, CTC its 0); the
  default is the PaDIR configs' 0; a rate outside [0, 1) is refused by the config check in one
  line naming the key."""
  family = benchmark_module("padir_family")
  assert family.model_config("dag", 2, 2.0).model.dropout_rate == 0.0
  assert padir_family.get_config("sov,dag").model.dropout_rate == 0.0
  on = family.model_config("dag", 2, 2.0, (0.0, 0.0), 0.1)
  assert on.model.dropout_rate == 0.1
  training.validate(on)
  assert family.model_config("ar", 2, 2.0, (0.0, 0.0), 0.3).model.dropout_rate == 0.1
  assert family.model_config("ctc", 2, 2.0, (0.0, 0.0), 0.3).model.dropout_rate == 0.0
  with pytest.raises(ValueError, match="model.dropout_rate"):
    training.validate(family.model_config("dag", 2, 2.0, (0.0, 0.0), 1.0))


def _bench_args(steps: int) -> argparse.Namespace:
  """benchmarks/padir_family.py's arguments as the Bible results were trained with (the
  defaults, --patience 3, --steps STEPS)."""
  return argparse.Namespace(
    **dict(pairs=60_000, steps=steps, eval_every=250, patience=3, valid_sentences=256),
    **dict(vocab_size=512, dag_upsample=2, ctc_upsample=2.0, grammar_seed=0, tiny=False),
    **dict(dag_glancing=(0.0, 0.0), dag_dropout=0.0, dag_lm_order=5, dag_lm_weight=1.5),
    **dict(dag_decoder_layers=0, distill_beams=2, distill_refs=False),
    **dict(dag_length_norm=1.5, dag_beam_grid=padir_family.BEAM_GRID),
  )


def _flat(d: dict, prefix: str = "") -> dict:
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(_flat(v, f"{prefix}{k}."))
    else:
      out[prefix + k] = list(v) if isinstance(v, tuple) else v
  return out


@pytest.mark.parametrize("task", ["bible_en_es", "bible_es_en"])
def test_a_bible_task_is_the_benchmarks_config_its_students_distilled_from_its_ar(
  task, toy_corpus, tmp_path, monkeypatch
):
  """`padir_family.py:bible_en_es,ar` is the config benchmarks/padir_family.py trains the AR
  teacher with (its Bible results), and `...,dag` the DAG student's once padir.jobs.distill
  has put the teacher's translations in its data: equal key for key but for the paths, the
  vocabulary size the toy corpus allows, the progress bar and the checkpoints the benchmark
  keeps to decode its "@ AR's CPU" rows. The sizes are the Bible AR config's, independently."""
  from configs import padir_bible_en_es_ar
  from padir.jobs import distill as distill_job
  from padir.training import distill

  family = benchmark_module("padir_family")
  monkeypatch.chdir(tmp_path)  # the config's relative runs/ and data/ land here
  root = str(tmp_path / "bench")
  shutil.copytree(toy_corpus, f"{root}/data/{task}")  # the corpus, as if fetched
  # the teacher's translations, as if made: the benchmark then only points its student there
  os.makedirs(f"{root}/data/{task}_distilled")
  open(f"{root}/data/{task}_distilled/{distill.MANIFEST}", "w").close()
  for model, steps in (("ar", 8_000), ("dag", 3_000)):
    c = padir_family.get_config(f"{task},{model}")
    bench = _flat(family.run_config(model, task, root, _bench_args(steps)).to_dict())
    if model == "ar":
      training.validate(c)
      assert c.job == "padir.jobs.train" and c.data.corpus_dir == f"data/{task}"
      assert c.decode.beam_size == 1 and c.model.decoder == "ar"  # greedy, the reference
      mine = _flat(c.to_dict())
    else:
      distill_job.validate(c)
      assert c.job == "padir.jobs.distill" and c.init_from == c.distill.teacher_workdir
      assert c.distill.teacher_workdir == f"runs/family_{task}_ar"
      assert (c.distill.beam_size, c.model.dag_upsample) == (2, 2.0)
      # no teacher yet: one line naming the config that trains it, before any run directory
      with pytest.raises(checks.UserError, match=f"--config configs/padir_family.py:{task},ar "):
        distill_job.run(c, f"{root}/student")
      assert not os.path.exists(f"{root}/student")
      student = distill.student_config(c, c.distill.corpus_dir)
      assert student.data.vocab_path.startswith(c.distill.corpus_dir)  # the teacher's pieces
      mine = _flat(student.to_dict())
      del mine["job"], bench["job"]  # the distill job trains as padir.jobs.train (its test)
      assert all(k.startswith("distill.") for k in set(mine) - set(bench))
      mine = {k: v for k, v in mine.items() if not k.startswith("distill.")}
    assert set(mine) == set(bench)
    differ = {k for k in mine if mine[k] != bench[k]} - {*PATHS, *KEPT}
    assert not differ, {k: (mine[k], bench[k]) for k in differ}
    assert mine["data.vocab_size"] == 8_000 > bench["data.vocab_size"]  # (the toy corpus's)
    ref = padir_bible_en_es_ar.get_config()
    for k in ("d_model", "d_ff", "num_heads", "num_encoder_layers", "num_decoder_layers"):
      assert mine[f"model.{k}"] == ref.model[k]
    for k in ("batch_size", "peak_lr", "warmup_steps"):
      assert mine[f"train.{k}"] == ref.train[k]
    assert (mine["train.num_train_steps"], mine["train.early_stopping_patience"]) == (steps, 3)
  d = padir_family.get_config(f"{task},ar").data
  assert (d.source_lang, d.target_lang) == tuple(task.split("_")[1:])  # the task's direction
  # --dag-dropout reaches the Bible's DAG (the Bible config's 0 is the others'), the AR keeps 0
  args = _bench_args(3_000)
  args.dag_dropout = 0.1
  assert family.run_config("dag", task, root, args).model.dropout_rate == 0.1
  assert family.run_config("ar", task, root, args).model.dropout_rate == 0.0
  # --dag-decoder-layers reaches the DAG's decoder alone: the AR (the teacher) keeps its depth
  args.dag_decoder_layers = 2
  assert family.run_config("dag", task, root, args).model.num_decoder_layers == 2
  assert (
    family.run_config("ar", task, root, args).model.num_decoder_layers
    == ref.model.num_decoder_layers
  )


@pytest.mark.slow  # a tiny DAG student distilled from the session's tiny AR run
def test_the_bible_student_config_trains_from_its_teachers_translations_and_weights(
  toy_corpus, tiny_ar_run, tmp_path
):
  """`bible_en_es,dag`, shrunk to the tiny AR teacher's sizes, through train.py's job
  (padir.jobs.distill): it translates the training sources with the teacher, trains on the
  translations from the teacher's weights, and records the teacher."""
  from padir.jobs import distill as distill_job
  from padir.model import restore
  from padir.training import distill, warm_start

  c = padir_family.get_config("bible_en_es,dag")
  c.data.update(corpus_dir=toy_corpus, prepare_bible=False, bucket_boundaries=(), vocab_size=40)
  c.data.update(max_source_length=16, max_target_length=16)
  c.model.update(num_encoder_layers=1, num_decoder_layers=1, num_heads=2, d_model=16, d_ff=32)
  c.train.update(batch_size=4, num_train_steps=2, warmup_steps=1, eval_every=2, log_every=1)
  c.train.update(checkpoint_every=2, eval_batches=1, progress_bar=False)
  c.decode.update(num_examples=4, batch_size=4, num_lengths=2, dag_lm_order=0, dag_lm_weight=0.0)
  c.decode.update(dag_beam_grid="", dag_decoder="lookahead", dag_length_norm=0.0)
  c.distill.update(teacher_workdir=tiny_ar_run, corpus_dir=str(tmp_path / "distilled"))
  c.init_from = tiny_ar_run
  distill_job.validate(c)
  distill_job.run(c, str(tmp_path / "dag"))
  with open(tmp_path / "distilled" / distill.MANIFEST, encoding="utf-8") as f:
    assert json.load(f)["teacher_workdir"] == tiny_ar_run
  with open(tmp_path / "dag" / warm_start.RECORD, encoding="utf-8") as f:
    assert json.load(f)["run"] == tiny_ar_run
  trained = restore.trained_config(str(tmp_path / "dag"))
  assert trained.data.corpus_dir == str(tmp_path / "distilled") and trained.model.dag_upsample
  assert restore.checkpoint_steps(str(tmp_path / "dag"))[-1] == 2


# ES->EN's student recipe as train.py overrides (docs/padir_family_bible.md), and the same
# recipe as the benchmark's flags (--dag-dropout 0.1 --distill-beams 5 --distill-refs --steps 2000)
ES_EN_STUDENT = {
  "model.dropout_rate": 0.1,
  "distill.beam_size": 5,
  "distill.corpus_dir": "data/bible_es_en_family_distilled_b5",
  "distill.mix_references": True,
  "train.num_train_steps": 2000,
  "train.warmup_steps": 200,
}


def test_es_en_students_overrides_are_the_benchmarks_recipe_key_for_key(tmp_path, monkeypatch):
  """`padir_family.py:bible_es_en,dag` with the overrides docs/padir_family_bible.md gives is
  the student the benchmark trains with --dag-dropout 0.1 --distill-beams 5 --distill-refs
  --steps 2000: equal key for key but for the paths (its corpus the 5-beam translations with the
  references mixed in, "_b5_refs" in both), the progress bar and the checkpoints kept."""
  from padir.jobs import distill as distill_job
  from padir.training import distill

  family = benchmark_module("padir_family")
  monkeypatch.chdir(tmp_path)
  root = str(tmp_path / "bench")
  os.makedirs(f"{root}/data/bible_es_en_distilled_b5")
  open(f"{root}/data/bible_es_en_distilled_b5/{distill.MANIFEST}", "w").close()
  args = _bench_args(2_000)
  args.dag_dropout, args.distill_beams, args.distill_refs = 0.1, 5, True
  # the mixing itself is padir.training.distill's (its tests): here only where it lands
  monkeypatch.setattr(distill, "with_references", lambda out, corpus, **_: out + "_refs")
  bench_config = family.run_config("dag", "bible_es_en", root, args)
  assert bench_config.data.corpus_dir == f"{root}/data/bible_es_en_distilled_b5_refs"
  c = padir_family.get_config("bible_es_en,dag")
  for key, value in ES_EN_STUDENT.items():
    section, name = key.split(".")
    assert name in c[section], key  # an override of a key the config has, as train.py requires
    c[section][name] = value
  distill_job.validate(c)
  out = c.distill.corpus_dir + ("_refs" if c.distill.mix_references else "")
  assert out.endswith("_b5_refs")
  mine = _flat(distill.student_config(c, out).to_dict())
  bench = _flat(bench_config.to_dict())
  del mine["job"], bench["job"]
  mine = {k: v for k, v in mine.items() if not k.startswith("distill.")}
  assert set(mine) == set(bench)
  differ = {k for k in mine if mine[k] != bench[k]} - {*PATHS, *KEPT}
  assert not differ, {k: (mine[k], bench[k]) for k in differ}
  assert (mine["model.dropout_rate"], mine["train.num_train_steps"]) == (0.1, 2000)
  with open(REPO / "docs" / "padir_family_bible.md", encoding="utf-8") as f:
    page = " ".join(f.read().split())  # the overrides as the page gives them
  for key, value in ES_EN_STUDENT.items():
    assert f"--config.{key}={value}" in page, key
