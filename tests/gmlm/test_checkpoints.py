"""The one checkpoint helper: pytrees and JSON items round-trip, old steps are pruned."""

from __future__ import annotations

import numpy as np

from gmlm.checkpoints import Checkpoints, Json


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
