"""MLM fine-tuning and the Ising measurements killed at named points resume to the run an
uninterrupted process writes: parameters bit for bit, metrics.jsonl line by line, results
(timing aside). PaDIR training's kill points run on the recipe's config, a superset of the plain
one (tests/faults/test_recipe_faults.py); `assert_training_resumes` is the check they share."""

from __future__ import annotations

import json

import pytest
from harness import (
  assert_same_metrics,
  assert_same_results,
  assert_same_trees,
  checkpoint_item,
  killed,
)

from gmlm import cli


def padir_config(corpus_dir: str):
  """The tiny PaDIR of tests/padir/test_padir_train.py: 6 steps, a checkpoint every 2."""
  from padir_util import tiny_run_config

  return tiny_run_config(corpus_dir, steps=6)


def assert_training_resumes(config, workdir, straight, fault: str, step: int = 6) -> None:
  """A training run killed at `fault`, then rerun, equals the uninterrupted run `straight`:
  metrics.jsonl line by line, the parameters and optimizer state of checkpoint `step` bitwise."""
  killed(config, workdir, "train.py", fault)
  cli.run(config, str(workdir), "train.py")
  assert_same_metrics(workdir, straight)
  for item in ("params", "optimizer"):
    assert_same_trees(
      checkpoint_item(workdir / "checkpoints", step, item),
      checkpoint_item(straight / "checkpoints", step, item),
      item,
    )


def mlm_config(splade_dir, text_file):
  """Full fine-tuning of SPLADE-tiny for 6 steps, a checkpoint every 3, a log line per step."""
  from configs.mlm_minilm import get_config

  c = get_config()
  c.model, c.data.path, c.data.min_chars = str(splade_dir), str(text_file), 5
  c.k, c.seq_len, c.batch_size, c.num_steps = 2, 16, 4, 6
  c.learning_rate, c.warmup_steps, c.log_every, c.checkpoint_every = 1e-3, 2, 1, 3
  return c


@pytest.mark.slow  # two MLM training compiles and an export
def test_mlm_fine_tuning_killed_between_log_and_checkpoint_resumes_exactly(splade_dir, tmp_path):
  import safetensors.numpy

  text = tmp_path / "text.txt"
  text.write_text(
    "\n".join(f"the cat number {i} sat on the mat and looked at the dog" for i in range(60))
  )
  config = mlm_config(splade_dir, text)
  straight, workdir = tmp_path / "straight", tmp_path / "run"
  cli.run(config, str(straight), "train.py")
  killed(config, workdir, "train.py", "metrics_logged:6")  # step 6 logged, not checkpointed
  cli.run(config, str(workdir), "train.py")
  assert_same_metrics(workdir, straight)
  assert_same_results(workdir, straight)
  weights = lambda d: safetensors.numpy.load_file(str(d / "model" / "model.safetensors"))
  assert_same_trees(weights(workdir), weights(straight), "model.safetensors")


def hitting_config():
  """Two couplings x (k = 1, 2, parallel): six cells, exact check on."""
  from configs import ising_hitting

  c = ising_hitting.get_config()
  c.n, c.clique_size, c.field, c.couplings, c.ks = 4, 2, 1.0, (0.5, 2.0), (1, 2)
  c.variants, c.num_chains, c.budget = ("clique_fields",), 16, 50
  return c


def test_ising_hitting_killed_skips_its_finished_cells_and_equals_the_uninterrupted_run(tmp_path):
  config = hitting_config()
  straight, workdir = tmp_path / "straight", tmp_path / "run"
  cli.run(config, str(straight), "sample.py")
  killed(config, workdir, "sample.py", "cell_done:4")
  cells = sorted(p.name for p in (workdir / "cells").iterdir())
  assert len(cells) == 4 and "hitting_clique_fields_J0.5_k=1.json" in cells
  stored = {c: (workdir / "cells" / c).read_text() for c in cells}
  cli.run(config, str(workdir), "sample.py")
  assert_same_results(workdir, straight)
  assert {c: (workdir / "cells" / c).read_text() for c in cells} == stored  # not recomputed
  assert len(list((workdir / "cells").iterdir())) == 6


@pytest.mark.slow  # k-MPLE fits at two sample sizes
def test_ising_mple_error_killed_skips_its_finished_cells(tmp_path):
  from configs import ising_mple_error

  config = ising_mple_error.get_config()
  config.n_sites, config.couplings, config.ks = 3, (0.3,), (1, 2)
  config.sample_sizes, config.repetitions, config.masks = (50, 100), 2, "sampled"
  straight, workdir = tmp_path / "straight", tmp_path / "run"
  cli.run(config, str(straight), "train.py")
  killed(config, workdir, "train.py", "cell_done:1")
  cli.run(config, str(workdir), "train.py")
  assert json.loads((workdir / "results.json").read_text()) == json.loads(
    (straight / "results.json").read_text()
  )
