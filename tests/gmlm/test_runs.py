"""The run directory: the config guard, atomic writes, metrics and their resume truncation."""

from __future__ import annotations

import json
import os
import shutil
import struct

import numpy as np
import pytest

from gmlm import runs
from gmlm.checks import UserError
from gmlm.runs import RunDir, as_begun, check_workdir, markdown_table


def test_a_workdir_holding_another_config_is_refused_before_anything_is_written(tmp_path):
  rd = RunDir(tmp_path / "run", {"a": 1, "b": [1, 2]})
  rd.log_metrics(0, {"x": 1.0})  # a killed run: no results.json
  before = {p.name: p.read_bytes() for p in rd.path.iterdir()}
  with pytest.raises(UserError, match="different config"):
    RunDir(tmp_path / "run", {"a": 2, "b": [1, 2]})
  assert {p.name: p.read_bytes() for p in rd.path.iterdir()} == before
  # The same config (keys in another order) resumes; config.json is not rewritten.
  mtime = (rd.path / "config.json").stat().st_mtime_ns
  RunDir(tmp_path / "run", {"b": [1, 2], "a": 1})
  assert (rd.path / "config.json").stat().st_mtime_ns == mtime


@pytest.mark.parametrize("left", ["results.json", "metrics.jsonl", "checkpoints", "cells"])
def test_a_run_without_its_config_is_refused_not_taken_over(tmp_path, left):
  """A directory holding a run's files but no config.json (deleted, or copied without it) has an
  unknown config: taking it over would overwrite or mix results, so it is refused untouched."""
  rd = RunDir(tmp_path / "run", {"a": 1})
  rd.write_results({"x": 1.0})
  rd.log_metrics(0, {"x": 1.0})
  (rd.path / "checkpoints").mkdir()
  rd.cell("c", lambda: 1)
  for name in {"results.json", "metrics.jsonl", "checkpoints", "cells"} - {left}:
    path = rd.path / name
    path.unlink() if path.is_file() else shutil.rmtree(path)
  (rd.path / "config.json").unlink()
  before = sorted(p.name for p in rd.path.iterdir())
  with pytest.raises(UserError, match=f"holds a run's files \\({left}\\) but no config.json"):
    RunDir(tmp_path / "run", {"a": 1})
  assert sorted(p.name for p in rd.path.iterdir()) == before
  # Unrelated files do not make a run: a directory of the user's notes is used.
  (tmp_path / "notes").mkdir()
  (tmp_path / "notes" / "todo.txt").write_text("x")
  RunDir(tmp_path / "notes", {"a": 1})


def test_check_workdir_writes_nothing_and_refuses_a_file(tmp_path):
  check_workdir(tmp_path / "new", {"a": 1})
  assert not (tmp_path / "new").exists()
  (tmp_path / "file").write_text("x")
  with pytest.raises(UserError, match="not a directory"):
    check_workdir(tmp_path / "file", {"a": 1})


def test_writes_are_atomic_and_follow_the_umask(tmp_path):
  old = os.umask(0o022)
  try:
    rd = RunDir(tmp_path, {"a": 1})
    p = rd.write_results({"x": np.float32(0.5), "y": np.arange(3), "z": float("inf")})
  finally:
    os.umask(old)
  assert oct(p.stat().st_mode & 0o777) == oct(0o644)
  assert json.loads(p.read_text()) == {"x": 0.5, "y": [0, 1, 2], "z": "inf"}
  hidden = [q.name for q in tmp_path.iterdir() if q.name.startswith(".")]
  assert hidden == [runs.LOCK]  # no temp files; the run's lock
  runs.unlock_all()
  assert rd.read_results()["y"] == [0, 1, 2]


def _tensorboard_scalars(directory) -> list[tuple[int, str, float]]:
  """(step, tag, value) of every scalar in the event files, read from the TFRecord framing
  (uint64 length, uint32 crc, data, uint32 crc) with the Event protobuf."""
  from tensorboardX.proto import event_pb2

  out = []
  for path in sorted(directory.glob("events.*")):
    data, i = path.read_bytes(), 0
    while i < len(data):
      (n,) = struct.unpack("<Q", data[i : i + 8])
      event = event_pb2.Event.FromString(data[i + 12 : i + 12 + n])
      i += 12 + n + 4
      out += [(event.step, v.tag, round(v.simple_value, 6)) for v in event.summary.value]
  return out


def test_metrics_resume_keeps_one_curve_in_jsonl_and_tensorboard(tmp_path):
  rd = RunDir(tmp_path, {"a": 1}, tensorboard=True)
  for step in range(1, 6):
    rd.log_metrics(step, {"loss": 1.0 / step, "note": "text is not a scalar"})
  with open(tmp_path / "metrics.jsonl", "a") as f:
    f.write('{"step": 6, "loss": 0.1')  # a line cut short by a kill
  rd.close()
  # The run resumes from its checkpoint at step 3: records past it go, in both sinks.
  rd = RunDir(tmp_path, {"a": 1}, tensorboard=True)
  assert rd.truncate_metrics(3) == 3
  rd.log_metrics(4, {"loss": 0.2})
  rd.close()
  assert [(r["step"], r["loss"]) for r in rd.metrics()] == [
    (1, 1.0),
    (2, 0.5),
    (3, 1 / 3),
    (4, 0.2),
  ]
  assert _tensorboard_scalars(tmp_path / "tb") == [
    (1, "loss", 1.0),
    (2, "loss", 0.5),
    (3, "loss", round(1 / 3, 6)),
    (4, "loss", 0.2),
  ]


def test_markdown_table_rounds_and_shows_float_noise_as_zero():
  table = markdown_table(["a", "b"], [[0.1484558880329132, -2.220446049250313e-16], [3, "x"]])
  assert table.splitlines()[2] == "| 0.1485 | 0 |"
  assert table.splitlines()[3] == "| 3 | x |"


def test_savefig_writes_atomically_and_closes_the_figure(tmp_path):
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots()
  ax.plot([0, 1], [0, 1])
  p = RunDir(tmp_path).savefig(fig, "f.png")
  # this figure is closed (another test's open figure is not ours to judge)
  assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not plt.fignum_exists(fig.number)


def test_resumable_keys_may_change_between_the_legs_of_one_run(tmp_path):
  first = {"train": {"steps": 100, "stop_at_step": 40}, "seed": 0}
  RunDir(tmp_path, first, resumable=("train.stop_at_step",))
  later = {"train": {"steps": 100, "stop_at_step": 80}, "seed": 0}
  with pytest.raises(UserError, match=r"\(train.stop_at_step differ"):
    check_workdir(tmp_path, later)  # not declared resumable: refused
  RunDir(tmp_path, later, resumable=("train.stop_at_step",))
  assert json.loads((tmp_path / "config.json").read_text()) == later  # records the last leg
  with pytest.raises(UserError, match=r"\(seed differ"):
    RunDir(tmp_path, {**later, "seed": 1}, resumable=("train.stop_at_step",))


def test_a_run_begun_before_an_option_resumes_as_it_began(tmp_path):
  # "draw" was added later; "site" computes as the code did before it, "layer" is the new default
  added = {"model.draw": "site"}
  RunDir(tmp_path / "old", {"model": {"rate": 0.1}})  # begun before the option
  config = {"model": {"rate": 0.1, "draw": "layer"}}
  assert as_begun(tmp_path / "old", config, added) == {"model.draw": "site"}
  assert config == {"model": {"rate": 0.1, "draw": "site"}}  # the resumed leg draws as it began
  RunDir(tmp_path / "old", config, added=added)
  # every later leg resumes as it began: config.json still lacks the option, also when a
  # resumable key changed and the config was written again
  RunDir(tmp_path / "legs", {"model": {"rate": 0.1}, "stop": 5})  # begun before the option
  for stop in (10, 20):
    config = {"model": {"rate": 0.1, "draw": "layer"}, "stop": stop}
    assert as_begun(tmp_path / "legs", config, added) == {"model.draw": "site"}
    RunDir(tmp_path / "legs", config, resumable=("stop",), added=added)
    assert json.loads((tmp_path / "legs" / "config.json").read_text()) == {
      "model": {"rate": 0.1},
      "stop": stop,
    }
  # the option given explicitly against how the run began: refused
  with pytest.raises(UserError, match=r"\(model.draw differs: \"site\" there, \"layer\" now"):
    check_workdir(
      tmp_path / "legs", {"model": {"rate": 0.1, "draw": "layer"}, "stop": 20}, ("stop",), added
    )
  # without the map the absent key is a difference, as any other
  RunDir(tmp_path / "old2", {"model": {"rate": 0.1}})
  with pytest.raises(UserError, match=r"\(model.draw differs: \(absent\) there"):
    check_workdir(tmp_path / "old2", {"model": {"rate": 0.1, "draw": "site"}})
  # a run that began with the option, and a new run, keep the config's value
  for workdir in (tmp_path / "new", tmp_path / "fresh"):
    if workdir.name == "new":
      RunDir(workdir, {"model": {"rate": 0.1, "draw": "layer"}})
    config = {"model": {"rate": 0.1, "draw": "layer"}}
    assert as_begun(workdir, config, added) == {} and config["model"]["draw"] == "layer"
