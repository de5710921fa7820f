"""Glauber chains (glauber.jobs.sample) killed at every named point, or with a damaged checkpoint
or trajectory chunk, resume to the run an uninterrupted process writes: the same trajectory,
samples, metrics.jsonl line by line and results (timing aside)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from harness import assert_same_metrics, assert_same_results, damage, killed, largest_file

from glauber import recording
from gmlm import cli
from gmlm.checks import UserError


def small_config(splade_dir):
  """4 chains x 40 steps, a record every 5 steps, 2 records per chunk: chunks 0..3."""
  from configs.glauber import get_config

  c = get_config()
  c.model = str(splade_dir)
  c.num_sites, c.num_chains, c.num_steps, c.record_every, c.chunk_records = 6, 4, 40, 5, 2
  c.embedding_model, c.record_logprobs = "", True
  return c


@pytest.fixture(scope="module")
def reference(splade_dir, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("glauber") / "straight"
  cli.run(small_config(splade_dir), str(workdir), "sample.py")
  return workdir


@pytest.fixture(scope="module")
def killed_after_chunk_2(splade_dir, tmp_path_factory):
  """A run killed right after checkpoint 3: chunks 0-2 on disk, checkpoints 2 and 3 kept."""
  workdir = tmp_path_factory.mktemp("glauber") / "killed"
  killed(small_config(splade_dir), workdir, "sample.py", "checkpoint_saved:3")
  return workdir


def assert_same_run(workdir, reference) -> None:
  got, want = recording.Trajectory(workdir).load(), recording.Trajectory(reference).load()
  assert got.keys() == want.keys() == {"steps_R", "tokens_RBN", "logp_RBN"}
  for k in want:
    np.testing.assert_array_equal(got[k], want[k], err_msg=k)
  assert (workdir / "samples.jsonl").read_text() == (reference / "samples.jsonl").read_text()
  assert_same_metrics(workdir, reference)
  assert_same_results(workdir, reference)


@pytest.mark.slow  # the uninterrupted run, then a killed child and its rerun per case
@pytest.mark.parametrize(
  "fault",
  [
    "chunk_written:2",  # a chunk on disk, its metrics line and checkpoint not
    "metrics_logged:2",  # chunk + line, no checkpoint
    "checkpoint_saving:2",  # killed mid-save
    "checkpoint_saved:2",  # checkpoint on disk: its metrics line was once lost here (issue 6)
  ],
)
def test_a_killed_run_resumes_to_the_uninterrupted_run(splade_dir, reference, tmp_path, fault):
  workdir = tmp_path / "run"
  killed(small_config(splade_dir), workdir, "sample.py", fault)
  cli.run(small_config(splade_dir), str(workdir), "sample.py")
  assert_same_run(workdir, reference)


@pytest.mark.slow  # the uninterrupted and the killed runs, and a rerun per case
@pytest.mark.parametrize("how", ["truncated", "bit flip"])
def test_a_damaged_checkpoint_falls_back_to_the_older_one_saying_so(
  splade_dir, reference, killed_after_chunk_2, tmp_path, capsys, how
):
  workdir = tmp_path / "run"
  shutil.copytree(killed_after_chunk_2, workdir)
  damage(largest_file(workdir / "checkpoints" / "3" / "state"), how)
  cli.run(small_config(splade_dir), str(workdir), "sample.py")
  err = capsys.readouterr().err
  assert f"checkpoint {workdir / 'checkpoints' / '3'} is unreadable" in err
  assert "trying the previous one" in err
  assert_same_run(workdir, reference)


@pytest.mark.slow  # the uninterrupted and the killed runs, and a rerun per case
@pytest.mark.parametrize(
  "how, chunk, restart",
  [
    ("truncated", 1, "the start"),  # no checkpoint at or before chunk 1 is kept
    ("deleted", 2, "its checkpoint"),  # checkpoint 2 (chunks 0-1 done) is kept
  ],
)
def test_a_damaged_or_missing_chunk_is_found_at_resume_and_recomputed(
  splade_dir, reference, killed_after_chunk_2, tmp_path, capsys, how, chunk, restart
):
  workdir = tmp_path / "run"
  shutil.copytree(killed_after_chunk_2, workdir)
  f = recording.Trajectory(workdir).chunk_file(chunk)
  if how == "deleted":
    f.unlink()
  else:
    damage(f, how)
  cli.run(small_config(splade_dir), str(workdir), "sample.py")
  err = capsys.readouterr().err
  why = "missing" if how == "deleted" else "damaged"
  assert f"trajectory chunk {f} is {why}" in err and f"({restart})" in err
  assert_same_run(workdir, reference)


def test_loading_a_trajectory_with_a_gap_or_a_damaged_chunk_names_the_chunk(tmp_path):
  traj = recording.Trajectory(tmp_path)
  for i in range(3):
    traj.write(i, [2 * i + 1, 2 * i + 2], np.full((2, 4, 3), i))
  traj.chunk_file(1).unlink()
  with pytest.raises(UserError, match=r"chunk_000001\.npz is missing; rerun the job"):
    traj.load()
  traj.write(1, [3, 4], np.full((2, 4, 3), 1))
  damage(traj.chunk_file(2), "truncated")
  with pytest.raises(UserError, match=r"chunk_000002\.npz is damaged") as e:
    traj.load()
  assert "\n" not in str(e.value)
  assert json.dumps(traj.first_problem(2)) == "null"
