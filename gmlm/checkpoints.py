"""Checkpoints: one orbax helper for every job.

  ckpt = Checkpoints(rd.file("checkpoints"), max_to_keep=2)
  ckpt.save(step, {"params": params_tree, "data": Json({"epoch": 3})})
  step = ckpt.latest_step()
  items = ckpt.restore(step, {"params": like_tree, "data": Json()})

Each item is a pytree (orbax StandardSave / StandardRestore against `like`'s shapes, dtypes
and shardings) or a `Json` wrapper (a small JSON-able dict). A save is complete when its
step directory exists (orbax writes to a temp directory and renames it), so a kill during a
save leaves the previous checkpoint as the latest. Every save also stores a SHA-256 digest of
each pytree item (item `digest`; arrays held whole by this process), checked on restore: orbax
itself reads a bit-flipped array back without complaint. `restore_latest` falls back to the
newest checkpoint that reads back whole and matches its digest (saying which one it skipped and
why, and removing it so the step can be saved again) and raises a one-line UserError naming the
directory when none does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from gmlm import runs
from gmlm.checks import UserError
from gmlm.runs import fault_point

DIGEST = "digest"


@dataclasses.dataclass
class Json:
  """A JSON item of a checkpoint (value: what to save; empty when restoring)."""

  value: Any = None


def digest(tree: Any) -> str | None:
  """SHA-256 over the paths, dtypes, shapes and bytes of a pytree's leaves, or None when a leaf
  is not held whole by this process (a multi-process sharded array)."""
  import jax

  h = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    if not getattr(leaf, "is_fully_addressable", True):
      return None
    x = np.asarray(leaf)
    h.update(f"{jax.tree_util.keystr(path)}|{x.dtype.str}|{x.shape}|".encode())
    h.update(np.ascontiguousarray(x).tobytes())
  return h.hexdigest()


def _close_loops_after_their_tasks() -> None:
  """orbax runs each restore on a fresh event loop and closes it as soon as the restore raises;
  when one array of a damaged checkpoint fails, the reads of the others are still in flight and
  TensorStore calls back into the closed loop, each callback printing an "Event loop is closed"
  traceback. Here, when the coroutine raises, the loop runs its remaining tasks to their end
  before it is closed."""
  import asyncio

  from orbax.checkpoint._src import asyncio_utils

  if getattr(asyncio_utils, "_gmlm_drained", False):
    return
  if not hasattr(asyncio_utils, "_run_sync_via_new_loop"):
    return  # another orbax version: its own loop handling applies

  def run(coro):
    loop = asyncio.new_event_loop()
    try:
      asyncio.set_event_loop(loop)
      return loop.run_until_complete(coro)
    except Exception:  # (Ctrl-C: the process ends at once anyway)
      pending = asyncio.all_tasks(loop)
      if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
      raise
    finally:
      asyncio.set_event_loop(None)
      loop.close()

  asyncio_utils._run_sync_via_new_loop = run
  asyncio_utils._gmlm_drained = True


class Checkpoints:
  """Numbered checkpoints in one directory (orbax CheckpointManager)."""

  def __init__(
    self, directory: str | os.PathLike, *, max_to_keep: int | None = 2, save_interval_steps: int = 1
  ):
    import orbax.checkpoint as ocp

    _close_loops_after_their_tasks()
    self.directory = Path(directory).absolute()
    self._ocp = ocp
    self._manager = ocp.CheckpointManager(
      self.directory,
      options=ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep, save_interval_steps=save_interval_steps
      ),
    )

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  def should_save(self, step: int) -> bool:
    return self._manager.should_save(step)

  def save(
    self, step: int, items: dict[str, Any], *, force: bool = False, wait: bool = True
  ) -> bool:
    """Saves the items at `step`; returns whether a checkpoint was written (the manager skips
    steps off its save interval unless force). wait: block until it is on disk."""
    ocp = self._ocp
    args = {
      name: ocp.args.JsonSave(v.value) if isinstance(v, Json) else ocp.args.StandardSave(v)
      for name, v in items.items()
    }
    args[DIGEST] = ocp.args.JsonSave(
      {name: digest(v) for name, v in items.items() if not isinstance(v, Json)}
    )
    saved = self._manager.save(step, args=ocp.args.Composite(**args), force=force)
    runs.last_step = max(step, runs.last_step or 0)
    fault_point("checkpoint_saving")
    if wait:
      self._manager.wait_until_finished()
      fault_point("checkpoint_saved")
    return saved

  def restore(self, step: int, like: dict[str, Any]) -> dict[str, Any]:
    """The items of checkpoint `step`, each restored against its `like` (a pytree of arrays or
    of jax.ShapeDtypeStruct, or Json())."""
    ocp = self._ocp
    args = {
      name: ocp.args.JsonRestore() if isinstance(v, Json) else ocp.args.StandardRestore(v)
      for name, v in like.items()
    }
    has_digest = (self.directory / str(step) / DIGEST).is_dir()  # absent before digests
    if has_digest:
      args[DIGEST] = ocp.args.JsonRestore()
    restored = self._manager.restore(step, args=ocp.args.Composite(**args))
    for name in like:
      want = restored[DIGEST].get(name) if has_digest else None
      if want is not None and digest(restored[name]) != want:
        raise ValueError(
          f"item {name!r} does not match its SHA-256 digest (bit rot or a damaged copy)"
        )
    return {name: restored[name] for name in like}

  def restore_latest(self, like: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """(step, items) of the newest checkpoint that restores whole, or None when there is none.
    A corrupt or truncated checkpoint is skipped with a message on stderr; if every one is
    unreadable, a UserError names the directory and the fix."""
    steps = sorted(self.all_steps(), reverse=True)
    errors = []
    for step in steps:
      try:
        items = self.restore(step, like)
      except Exception as e:  # orbax / tensorstore raise many types for damaged files
        reason = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        errors.append(f"step {step} ({reason})")
        print(
          f"warning: checkpoint {self.directory / str(step)} is unreadable ({reason}); "
          "trying the previous one",
          file=sys.stderr,
        )
        continue
      if errors:
        self.delete_after(step, "unreadable")
      return step, items
    if steps:
      raise UserError(
        f"no intact checkpoint in {self.directory}: {'; '.join(errors)}. Delete "
        f"{self.directory} to start the run over (results written so far stay), or restore "
        "it from a copy."
      )
    return None

  def delete_after(self, step: int, why: str = "past the step the run restarts from") -> None:
    """Removes the checkpoints after `step` (a run restarting from `step` saves those steps
    again; orbax would skip a step at or below its latest one)."""
    for s in self.all_steps():
      if s > step:
        print(f"warning: removing checkpoint {self.directory / str(s)} ({why})", file=sys.stderr)
        self._manager.delete(s)

  def wait(self) -> None:
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()
