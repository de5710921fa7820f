"""The PaDIR training job (padir.jobs.train -> padir.training.loop.fit): a few steps on a tiny corpus
write metrics and checkpoints, and resume exactly; the run directory and the config are checked
before anything is written."""

import json
import os
import time

import numpy as np
import pytest
from padir_util import tiny_run_config

from configs import padir_bible_en_es, padir_bible_en_es_distill
from gmlm import cli, runs
from gmlm.checks import ConfigError, UserError
from gmlm.runs import RunDir
from padir.jobs import train as train_job
from padir.model.transformer import ModelConfig
from padir.training import flops, optim
from padir.training import loop as training


def _config(corpus_dir: str, steps: int, translate: bool = False):
  c = tiny_run_config(corpus_dir, steps)
  c.decode.update(num_examples=4 if translate else 0)
  return c


def _metrics(workdir: str) -> list[dict]:
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    return [json.loads(line) for line in f]


@pytest.mark.slow  # a training with its evaluations and checkpoints
def test_training_writes_metrics_and_keeps_the_last_k_checkpoints(toy_corpus, tmp_path, caplog):
  workdir = str(tmp_path / "run")
  with caplog.at_level("WARNING"):
    train_job.run(_config(toy_corpus, steps=4), workdir)
  # Pairs over the maximum lengths (16: about half the toy pairs) are dropped with a WARNING and
  # a line in report.md, the counts in data.json (they were logged at INFO only).
  counts = json.loads((tmp_path / "run" / "data.json").read_text())["train"]
  assert counts["total"] == 200 and 0 < counts["too_long"] == 200 - counts["kept"]
  line = (
    f"dropped {counts['too_long']} of 200 pairs longer than max_source_length=16 / "
    f"max_target_length=16 tokens"
  )
  assert any(line in r.getMessage() and r.levelname == "WARNING" for r in caplog.records)
  assert line in (tmp_path / "run" / "report.md").read_text()
  records = _metrics(workdir)
  assert [r["step"] for r in records if "train_loss" in r] == [2, 4]
  assert [r["step"] for r in records if "valid_loss" in r] == [4]
  assert all(np.isfinite(r["train_loss"]) for r in records if "train_loss" in r)
  # Speed (padir.training.throughput): MFU is the window's FLOPs over its time and the peak; a
  # step's FLOPs lie between the hand counts of the shortest and the longest batch shapes.
  config = _config(toy_corpus, steps=4)
  cfg = ModelConfig.from_run_config(config, config.data.vocab_size)  # the toy's vocabulary
  B, S, T = config.train.batch_size, config.data.max_source_length, config.data.max_target_length
  shortest = flops.step_flops(cfg, flops.run_step(config, (B, 1), (B, 1)))
  longest = flops.step_flops(cfg, flops.run_step(config, (B, S), (B, T)))
  for r in (r for r in records if "train_loss" in r):
    assert r["mfu"] == pytest.approx(r["flops_per_step"] / r["step_seconds"] / r["peak_flops"])
    assert shortest <= r["flops_per_step"] <= longest and 0 < r["mfu"] < 1, r
    assert 0 < r["target_tokens_per_s"] * r["step_seconds"] <= B * T, r
  assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["2", "4"]
  assert os.path.isfile(os.path.join(workdir, "config.json"))
  # The TensorBoard event file, read as raw TFRecords and decoded with the Event protobuf,
  # holds the same scalars as metrics.jsonl (a tag logged twice at a step, the run's clock in
  # its training and evaluation records, by its later value in both).
  scalars = _event_scalars(os.path.join(workdir, "tb"))
  logged = {(k, r["step"]): v for r in records for k, v in r.items() if isinstance(v, float)}
  assert ("cpu_seconds", 4) in logged and set(logged) <= set(scalars)
  for key, v in logged.items():
    assert scalars[key] == pytest.approx(v, rel=1e-6), key
  assert ("train_loss", 2) in scalars and ("valid_loss", 4) in scalars
  assert os.path.isfile(os.path.join(workdir, "report.md"))


def test_a_validation_split_smaller_than_the_batch_is_refused_before_training(toy_corpus, tmp_path):
  """It failed at the first evaluation (~9 minutes into the shipped config's run)."""
  config = _config(toy_corpus, steps=4)
  config.train.batch_size = 32  # the toy valid split has 16 pairs
  with pytest.raises(
    UserError,
    match=r"valid split .* has \d+ pairs within max_source_length"
    r"=16 / max_target_length=16 tokens \(16 in all\), fewer "
    r"than train.batch_size=32",
  ):
    train_job.run(config, str(tmp_path / "run"))
  assert not os.path.exists(tmp_path / "run" / "checkpoints")
  assert not os.path.exists(tmp_path / "run" / "metrics.jsonl")


def _event_scalars(logdir):
  import struct

  from tensorboardX.proto import event_pb2

  out = {}
  for name in os.listdir(logdir):
    data = open(os.path.join(logdir, name), "rb").read()
    i = 0
    while i < len(data):  # TFRecord: u64 length, u32 crc, payload, u32 crc
      (n,) = struct.unpack("<Q", data[i : i + 8])
      event = event_pb2.Event.FromString(data[i + 12 : i + 12 + n])
      i += 12 + n + 4
      for value in event.summary.value:
        out[(value.tag, event.step)] = value.simple_value
  return out


def test_a_rerun_with_another_config_is_refused_before_anything_is_written(toy_corpus, tmp_path):
  """The guard, through the CLI's path and inside the job: config.json stays the old run's."""
  workdir = tmp_path / "run"
  RunDir(workdir, _config(toy_corpus, steps=4))  # what an earlier run left there
  before = (workdir / "config.json").read_text()
  other = _config(toy_corpus, steps=4)
  other.train.batch_size = 8
  with pytest.raises(UserError, match="holds a run of a different config"):
    cli.run(other, str(workdir), "train.py")
  with pytest.raises(UserError, match="holds a run of a different config"):
    train_job.run(other, str(workdir))
  assert (workdir / "config.json").read_text() == before
  assert sorted(set(os.listdir(workdir)) - {runs.LOCK}) == ["config.json"]  # the earlier run's lock
  cli.prepare(_config(toy_corpus, steps=4), str(workdir), "train.py")  # the same config resumes


@pytest.mark.parametrize(
  "make, key, value",
  [
    (padir_bible_en_es.get_config, "train.batch_size", 0),
    (padir_bible_en_es.get_config, "model.decoder", "rnn"),
    (padir_bible_en_es.get_config, "loss.keep_rate", 1.5),
    (padir_bible_en_es_distill.get_config, "distill.beam_size", 0),
  ],
)
def test_a_bad_config_value_is_named_before_the_workdir_exists(make, key, value, tmp_path):
  config = make()
  section, name = key.split(".")
  config[section][name] = value
  with pytest.raises(ConfigError, match=rf"config\.{key}={value!r}"):
    cli.run(config, str(tmp_path / "run"), "train.py")
  assert not (tmp_path / "run").exists()


def test_learning_rate_warms_up_linearly_then_decays_to_the_floor():
  t = _config("unused", steps=100).train
  t.update(warmup_steps=10, peak_lr=3e-3, min_lr=1e-5)
  lr = optim.learning_rate_schedule(t)
  np.testing.assert_allclose(
    [float(lr(0)), float(lr(5)), float(lr(10)), float(lr(100))],
    [1e-5, 1e-5 + 0.5 * (3e-3 - 1e-5), 3e-3, 1e-5],
    rtol=1e-5,
  )
  assert float(lr(55)) == pytest.approx(1e-5 + 0.5 * (3e-3 - 1e-5), rel=1e-4)  # cosine midpoint


class _Killed(Exception):
  """A preemption, simulated right after the checkpoint at step 4 is on disk."""


@pytest.mark.slow  # three short trainings, one with translation (a refinement compile)
def test_resumed_run_matches_an_uninterrupted_one(toy_corpus, tmp_path, monkeypatch):
  interrupted, straight = str(tmp_path / "a"), str(tmp_path / "b")
  config = _config(toy_corpus, steps=6, translate=True)  # a rerun resumes the same config

  class KilledAfterStep4(training.Checkpoints):
    def save(self, step, items, **kwargs):
      saved = super().save(step, items, **{**kwargs, "wait": True})
      if step == 4:
        raise _Killed
      return saved

  with monkeypatch.context() as m:
    m.setattr(training, "Checkpoints", KilledAfterStep4)
    with pytest.raises(_Killed):
      train_job.run(config, interrupted)
  last = train_job.run(config, interrupted)  # resumes at 4
  train_job.run(_config(toy_corpus, steps=6), straight)
  assert last["bleu_signature"].startswith("nrefs:1|case:mixed") and 0 <= last["valid_bleu"] <= 100
  last_a = [r for r in _metrics(interrupted) if r["step"] == 6 and "train_loss" in r][0]
  last_b = [r for r in _metrics(straight) if r["step"] == 6 and "train_loss" in r][0]
  assert last_a["train_loss"] == pytest.approx(last_b["train_loss"], rel=1e-6)


@pytest.mark.slow  # two legs of a short training
def test_a_runs_clock_counts_a_killed_legs_lost_steps_once(toy_corpus, tmp_path, monkeypatch):
  """Each record carries the wall and CPU seconds the run has spent over its legs
  (padir.training.throughput.RunClock). A leg killed after logging steps 5-6 but before their
  checkpoint, its CPU clock made to jump by 1,000 s after step 4's checkpoint: the resumed leg
  starts from the clock of step 4, so the run's total is at most that plus the resumed leg's
  own time (measured around it), the lost 1,000 s not in it."""
  from padir.training import throughput

  workdir = str(tmp_path / "run")
  config = _config(toy_corpus, steps=8)
  real, jump = throughput.process_cpu_seconds, [0.0]
  monkeypatch.setattr(throughput, "process_cpu_seconds", lambda: real() + jump[0])

  class KilledBeforeStep6(training.Checkpoints):
    def save(self, step, items, **kwargs):
      if step == 6:
        raise _Killed
      saved = super().save(step, items, **{**kwargs, "wait": True})
      jump[0] += 1000.0 if step == 4 else 0.0  # steps 5-6: time the resume will redo
      return saved

  clocks = lambda: (time.time(), throughput.process_cpu_seconds())
  with monkeypatch.context() as m:
    m.setattr(training, "Checkpoints", KilledBeforeStep6)
    w0, c0 = clocks()
    with pytest.raises(_Killed):
      train_job.run(config, workdir)
  w1, c1 = clocks()
  killed = _metrics(workdir)
  at4 = [r for r in killed if r["step"] == 4][-1]  # the evaluation record, after the training one
  lost = [r for r in killed if r["step"] == 6][-1]
  assert 0 < at4["cpu_seconds"] < at4["cpu_seconds"] + 1000 < lost["cpu_seconds"] <= c1 - c0
  assert 0 < at4["wall_seconds"] < lost["wall_seconds"] <= w1 - w0
  train_job.run(config, workdir)
  w2, c2 = clocks()
  records = _metrics(workdir)
  assert [r for r in records if r["step"] <= 4] == [r for r in killed if r["step"] <= 4]
  assert [r["step"] for r in records if "train_loss" in r] == [2, 4, 6, 8]
  for key, leg in (("cpu_seconds", c2 - c1), ("wall_seconds", w2 - w1)):
    values = [r[key] for r in records]
    assert values == sorted(values), key  # in the order written, never back
    resumed = [r[key] for r in records if r["step"] > 4]
    assert at4[key] < resumed[0] and resumed[-1] <= at4[key] + leg, key
  assert [r["cpu_seconds"] for r in records][-1] < lost["cpu_seconds"]


@pytest.mark.slow  # compiles the AR training step and greedy decoding
def test_ar_baseline_trains_and_translates(toy_corpus, tmp_path):
  c = _config(toy_corpus, steps=2, translate=True)
  c.model.decoder = "ar"
  last = train_job.run(c, str(tmp_path / "ar"))
  assert np.isfinite(last["train_loss"]) and "train_stage1_loss" not in last
  assert np.isfinite(last["valid_loss"]) and 0 <= last["valid_bleu"] <= 100


def test_curves_and_report_show_every_evaluation_of_the_run(tmp_path):
  """A resumed run's metrics.jsonl may repeat a step: the last record counts; the report's
  table holds each evaluation once, with its values, and the figure is written."""
  from padir.evaluation import curves

  records = [
    {"step": 50, "train_loss": 9.0, "steps_per_second": 0.5},
    {"step": 100, "train_loss": 8.0, "steps_per_second": 0.5},
    {"step": 100, "valid_loss": 7.5, "valid_bleu": 1.25, "example": {"source": "a"}},
    {"step": 100, "train_loss": 7.9, "steps_per_second": 0.4},  # after a resume
    {"step": 200, "valid_loss": 6.5, "valid_bleu": 3.5, "wall_seconds": 90.0, "cpu_seconds": 170.0},
  ]
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  train, evals = curves.read_metrics(str(tmp_path))
  assert [r["train_loss"] for r in train] == [9.0, 7.9]
  assert [r["step"] for r in evals] == [100, 200]
  curves.write_report(RunDir(tmp_path))
  assert (tmp_path / "curves.png").stat().st_size > 1000
  text = (tmp_path / "report.md").read_text()
  assert "| 100 | 7.5 | 1.25 |" in text and "| 200 | 6.5 | 3.5 |" in text
  assert "last training loss 7.900, 2.50 s/step" in text
  assert "; 1.5 wall minutes and 170 CPU seconds in all." in text  # the run's clock (RunClock)
  with pytest.raises(FileNotFoundError, match="not a training run directory"):
    curves.read_metrics(str(tmp_path / "nowhere"))


def test_step_seconds_and_mfu_leave_out_the_validation_the_wall_clock_keeps(
  toy_corpus, tmp_path, monkeypatch
):
  """A validation that takes 2 s more (a sleep around the real one) lands in the next window's
  wall-clock rate (steps_per_second, which the minutes curves sum) and not in its step_seconds,
  whose FLOPs MFU divides: the two differ by at least the sleep over that window only."""
  import time

  from padir.evaluation import translation as evaluate

  real = evaluate.validation_loss

  def slow(*args, **kwargs):
    time.sleep(2.0)
    return real(*args, **kwargs)

  monkeypatch.setattr(evaluate, "validation_loss", slow)
  c = _config(toy_corpus, steps=4)
  c.train.update(eval_every=2, log_every=2)
  train_job.run(c, str(tmp_path / "run"))
  train = {r["step"]: r for r in _metrics(str(tmp_path / "run")) if "train_loss" in r}
  wall = {s: 2 / r["steps_per_second"] for s, r in train.items()}  # the window's two steps
  steps = {s: 2 * r["step_seconds"] for s, r in train.items()}
  assert wall[4] - steps[4] >= 2.0, (wall, steps)  # the evaluation at step 2, set aside
  assert wall[2] - steps[2] < 0.5, (wall, steps)  # no evaluation in the first window
