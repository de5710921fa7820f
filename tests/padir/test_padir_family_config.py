"""configs/padir_family.py: every task and model of the reordering family is a valid run config
(the benchmark's model configs, the task's data); a bad parameter is one line naming the form;
the job writes the task's corpus once (data.grammar_task) and refuses a directory holding
another task's; and a run trains on a corpus it wrote itself."""

import os

import pytest
from padir_util import benchmark_module

from configs import padir_family
from padir.data import grammar
from padir.jobs import train as train_job
from padir.training import loop as training


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


@pytest.mark.parametrize("arg", ["sov", "nope,ctc", "sov,ctc,1,2"])
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
