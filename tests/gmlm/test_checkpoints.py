"""The one checkpoint helper: pytrees and JSON items round-trip, old steps are pruned."""

from __future__ import annotations

import numpy as np
import pytest

from gmlm.checkpoints import Checkpoints, Json
from gmlm.checks import UserError


def test_items_round_trip_and_only_the_newest_are_kept(tmp_path):
  ckpt = Checkpoints(tmp_path / "ckpt", max_to_keep=2)
  assert ckpt.latest_step() is None
  for step in (1, 2, 3):
    tree = {"w": np.full((2, 3), step, np.float32), "t": np.asarray(step, np.int32)}
    assert ckpt.save(step, {"state": tree, "meta": Json({"epoch": step, "name": "x"})})
  assert ckpt.latest_step() == 3 and ckpt.all_steps() == [2, 3]
  like = {"w": np.zeros((2, 3), np.float32), "t": np.asarray(0, np.int32)}
  got = ckpt.restore(2, {"state": like, "meta": Json()})
  np.testing.assert_array_equal(got["state"]["w"], np.full((2, 3), 2, np.float32))
  assert int(got["state"]["t"]) == 2 and got["meta"] == {"epoch": 2, "name": "x"}
  ckpt.close()
  # A new helper over the same directory (a resumed process) finds the same steps.
  assert Checkpoints(tmp_path / "ckpt").latest_step() == 3


def test_the_save_interval_skips_steps_unless_forced(tmp_path):
  ckpt = Checkpoints(tmp_path, max_to_keep=None, save_interval_steps=5)
  tree = {"w": np.zeros(2, np.float32)}
  assert [ckpt.save(s, {"s": tree}) for s in (5, 6)] == [True, False]
  assert ckpt.save(7, {"s": tree}, force=True)
  assert ckpt.all_steps() == [5, 7]


def _damage(step_dir):
  """Truncates every data file of a checkpoint step (as a full disk or a bad copy would)."""
  for f in step_dir.rglob("*"):
    if f.is_file() and f.stat().st_size > 0 and "metadata" not in f.name:
      f.write_bytes(f.read_bytes()[: f.stat().st_size // 3])


def test_restore_latest_falls_back_to_the_newest_intact_checkpoint(tmp_path, capsys):
  ckpt = Checkpoints(tmp_path, max_to_keep=3)
  like = {"w": np.zeros(64, np.float32)}
  for step in (1, 2, 3):
    ckpt.save(step, {"s": {"w": np.full(64, step, np.float32)}})
  ckpt.close()
  _damage(tmp_path / "3")
  step, items = Checkpoints(tmp_path).restore_latest({"s": like})
  assert step == 2 and float(items["s"]["w"][0]) == 2.0
  err = capsys.readouterr().err
  assert f"checkpoint {tmp_path / '3'} is unreadable" in err and "trying the previous one" in err


def test_restore_latest_names_the_directory_when_nothing_is_intact(tmp_path):
  ckpt = Checkpoints(tmp_path, max_to_keep=3)
  ckpt.save(1, {"s": {"w": np.ones(64, np.float32)}})
  ckpt.close()
  _damage(tmp_path / "1")
  with pytest.raises(UserError, match=f"no intact checkpoint in {tmp_path}"):
    Checkpoints(tmp_path).restore_latest({"s": {"w": np.zeros(64, np.float32)}})
  assert Checkpoints(tmp_path / "empty").restore_latest({"s": {}}) is None
