"""Early stopping on validation BLEU (padir.training.early_stopping): the rule stops exactly where
a hand count says on hand-made curves, and a training killed before its stop resumes to the same
stopping step and the same curve as one that was never killed."""

import pytest
from padir_util import Killed, checkpoints_killed_after, tiny_run_config

from gmlm.checks import ConfigError
from gmlm.runs import RunDir
from padir.jobs import train as train_job
from padir.training import early_stopping as es
from padir.training import loop as training


def _stop_index(curve, patience):
  """The evaluation index at which training stops (None: never), by the state at each prefix."""
  for i in range(len(curve)):
    if es.state(curve[: i + 1], patience).stop:
      return i
  return None


@pytest.mark.parametrize(
  "curve, patience, stop, best",
  [
    # Improvements of more than 0.2 keep it going; three evaluations without one stop it.
    ([10.0, 20.0, 30.0, 30.1, 30.2, 30.15], 3, 5, 30.0),
    # 30.25 is an improvement (by 0.25 > 0.2) and restarts the wait.
    ([10.0, 30.0, 30.1, 30.25, 30.3, 30.4, 30.0], 3, 6, 30.25),
    # Each gain is measured against the last improvement, not the previous evaluation: 30.15
    # does not improve on 30.0, 30.3 does (by 0.3), 30.35 and 30.4 do not improve on 30.3.
    ([30.0, 30.15, 30.3, 30.35, 30.4, 30.45], 2, 4, 30.3),
    # Patience 1 stops at the first evaluation that does not improve.
    ([5.0, 4.0, 9.0], 1, 1, 5.0),
    # A curve still improving never stops; patience 0 is off.
    ([1.0, 2.0, 3.0, 4.0], 1, None, 4.0),
    ([1.0, 1.0, 1.0, 1.0], 0, None, 1.0),
  ],
)
def test_the_rule_stops_where_the_hand_count_says(curve, patience, stop, best):
  assert _stop_index(curve, patience) == stop
  end = curve if stop is None else curve[: stop + 1]
  assert es.state(end, patience).best == best
  assert es.MIN_DELTA == 0.2


def test_an_empty_history_does_not_stop_and_a_negative_patience_is_refused():
  assert es.state([], 3) == es.EarlyStopping(float("-inf"), -1, 0, False)
  with pytest.raises(ValueError):
    es.state([1.0], -1)


def test_the_history_is_the_last_record_of_each_evaluated_step():
  records = [
    {"step": 2, "train_loss": 1.0},
    {"step": 2, "valid_bleu": 1.0},
    {"step": 4, "valid_bleu": 2.0},
    {"step": 4, "valid_bleu": 3.0},  # a resumed leg's record of the same step wins
    {"step": 6, "valid_loss": 0.5},
  ]
  assert es.history(records) == [1.0, 3.0]


def _config(corpus_dir, patience=2):
  c = tiny_run_config(corpus_dir, steps=40, eval_every=2, checkpoint_every=2, keep_checkpoints=3)
  c.model.decoder = "ar"
  c.decode.update(num_examples=4)
  c.train.early_stopping_patience = patience
  return c


def test_early_stopping_needs_translation_during_training(toy_corpus):
  c = _config(toy_corpus)
  c.decode.num_examples = 0
  with pytest.raises(ConfigError, match="decode.num_examples"):
    training.validate(c)


@pytest.mark.slow  # two short AR trainings with greedy translation at each evaluation
def test_a_killed_run_resumes_to_the_same_stopping_step(toy_corpus, tmp_path, monkeypatch):
  straight, interrupted = str(tmp_path / "straight"), str(tmp_path / "killed")
  config = _config(toy_corpus)
  last = train_job.run(config, straight)
  evals = [r for r in RunDir(straight).metrics() if "valid_bleu" in r]
  stop_step = last["step"]
  # It stopped early, at the evaluation where the rule (by hand: patience 2) says.
  assert stop_step < config.train.num_train_steps and last["early_stopped"] is True
  bleus = [r["valid_bleu"] for r in evals]
  assert evals[-1]["step"] == stop_step
  assert evals[_stop_index(bleus, 2)]["step"] == stop_step

  assert stop_step > 4  # the kill comes before the stop
  with monkeypatch.context() as m:
    m.setattr(training, "Checkpoints", checkpoints_killed_after(4))
    with pytest.raises(Killed):
      train_job.run(config, interrupted)
  resumed = train_job.run(config, interrupted)
  assert resumed["step"] == stop_step and resumed["early_stopped"] is True
  again = [r for r in RunDir(interrupted).metrics() if "valid_bleu" in r]
  assert [r["valid_bleu"] for r in again] == bleus
  # A stopped run, run again, trains no further step.
  n = len(RunDir(interrupted).metrics())
  train_job.run(config, interrupted)
  assert len(RunDir(interrupted).metrics()) == n
