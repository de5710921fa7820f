"""Checkpoints: one orbax helper for every job.

  ckpt = Checkpoints(rd.file("checkpoints"), max_to_keep=2)
  ckpt.save(step, {"params": params_tree, "data": Json({"epoch": 3})})
  step = ckpt.latest_step()
  items = ckpt.restore(step, {"params": like_tree, "data": Json()})

Each item is a pytree (orbax StandardSave / StandardRestore against `like`'s shapes, dtypes
and shardings) or a `Json` wrapper (a small JSON-able dict). A save is complete when its
step directory exists (orbax writes to a temp directory and renames it), so a kill during a
save leaves the previous checkpoint as the latest. `restore_latest` falls back to the newest
checkpoint that reads back whole (saying which one it skipped and why) and raises a one-line
UserError naming the directory when none does.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from gmlm.checks import UserError


@dataclasses.dataclass
class Json:
  """A JSON item of a checkpoint (value: what to save; empty when restoring)."""
  value: Any = None


class Checkpoints:
  """Numbered checkpoints in one directory (orbax CheckpointManager)."""

  def __init__(self, directory: str | os.PathLike, *, max_to_keep: int | None = 2,
               save_interval_steps: int = 1):
    import orbax.checkpoint as ocp
    self.directory = Path(directory).absolute()
    self._ocp = ocp
    self._manager = ocp.CheckpointManager(
        self.directory, options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, save_interval_steps=save_interval_steps))

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  def should_save(self, step: int) -> bool:
    return self._manager.should_save(step)

  def save(self, step: int, items: dict[str, Any], *, force: bool = False,
           wait: bool = True) -> bool:
    """Saves the items at `step`; returns whether a checkpoint was written (the manager skips
    steps off its save interval unless force). wait: block until it is on disk."""
    ocp = self._ocp
    args = {name: ocp.args.JsonSave(v.value) if isinstance(v, Json) else ocp.args.StandardSave(v)
            for name, v in items.items()}
    saved = self._manager.save(step, args=ocp.args.Composite(**args), force=force)
    if wait:
      self._manager.wait_until_finished()
    return saved

  def restore(self, step: int, like: dict[str, Any]) -> dict[str, Any]:
    """The items of checkpoint `step`, each restored against its `like` (a pytree of arrays or
    of jax.ShapeDtypeStruct, or Json())."""
    ocp = self._ocp
    args = {name: ocp.args.JsonRestore() if isinstance(v, Json) else ocp.args.StandardRestore(v)
            for name, v in like.items()}
    restored = self._manager.restore(step, args=ocp.args.Composite(**args))
    return {name: restored[name] for name in like}

  def restore_latest(self, like: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """(step, items) of the newest checkpoint that restores whole, or None when there is none.
    A corrupt or truncated checkpoint is skipped with a message on stderr; if every one is
    unreadable, a UserError names the directory and the fix."""
    steps = sorted(self.all_steps(), reverse=True)
    errors = []
    for step in steps:
      try:
        return step, self.restore(step, like)
      except Exception as e:  # orbax / tensorstore raise many types for damaged files
        reason = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        errors.append(f"step {step} ({reason})")
        print(f"warning: checkpoint {self.directory / str(step)} is unreadable ({reason}); "
              "trying the previous one", file=sys.stderr)
    if steps:
      raise UserError(
          f"no intact checkpoint in {self.directory}: {'; '.join(errors)}. Delete "
          f"{self.directory} to start the run over (results written so far stay), or restore "
          "it from a copy.")
    return None

  def wait(self) -> None:
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()
