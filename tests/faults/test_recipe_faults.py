"""PaDIR training killed at each class of named point resumes to the run an uninterrupted
process writes: parameters and optimizer state bit for bit, metrics.jsonl line by line. The
config is issue 26's recipe (length offsets, annealed glancing, a warm start from an AR run):
the plain tiny PaDIR run plus the state a resume must also restore, so one family of kills
covers both (the plain run's own three kills were near-duplicates of these). Killed before its
first checkpoint, the rerun warm-starts again from the same AR checkpoint."""

from __future__ import annotations

import pytest
from test_training_faults import assert_training_resumes, padir_config

from gmlm import cli


def recipe_config(corpus_dir: str, ar_run: str):
  c = padir_config(corpus_dir)
  c.model.max_length_offset = 4
  c.loss.glancing_ratio, c.loss.glancing_ratio_end, c.loss.glancing_anneal_steps = 0.5, 0.3, 4
  c.init_from = ar_run
  return c


@pytest.fixture(scope="module")
def recipe_straight(toy_corpus, tmp_path_factory):
  """(config, run directory) of the uninterrupted recipe run, and the AR run it starts from."""
  root = tmp_path_factory.mktemp("recipe")
  ar = padir_config(toy_corpus)
  ar.model.decoder, ar.train.num_train_steps = "ar", 2
  cli.run(ar, str(root / "ar"), "train.py")
  config = recipe_config(toy_corpus, str(root / "ar"))
  cli.run(config, str(root / "straight"), "train.py")
  return config, root / "straight"


@pytest.mark.slow  # an AR run, the uninterrupted run and two PaDIR compiles per case
@pytest.mark.parametrize(
  "fault",
  [
    "metrics_logged:1",  # step 2 logged, no checkpoint yet: the rerun starts over from step 0
    "checkpoint_saving:2",  # step 4's checkpoint half-saved: resumed from the last whole one
    "metrics_logged:3",  # step 4's validation logged, its checkpoint not: its lines dropped
  ],  # (no checkpoint_saved: PaDIR saves in the background; test_padir_train kills after one)
)
def test_recipe_training_killed_resumes_to_the_uninterrupted_run(recipe_straight, tmp_path, fault):
  config, straight = recipe_straight
  assert_training_resumes(config, tmp_path / "run", straight, fault)
