"""Run directories: where every experiment's results land.

A run directory holds `config.json` (the resolved config), `results.json` (the figures a
run reports), `metrics.jsonl` (streamed per-step metrics), PNG figures and `report.md`.
Writes are atomic (temp file + rename), so a crash never leaves a half-written file, and a
directory that already holds results of a *different* config is never overwritten.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def _to_jsonable(x: Any) -> Any:
  if isinstance(x, dict):
    return {str(k): _to_jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_to_jsonable(v) for v in x]
  if hasattr(x, "to_dict"):  # ml_collections.ConfigDict
    return _to_jsonable(x.to_dict())
  if isinstance(x, (np.generic,)):
    return x.item()
  if isinstance(x, np.ndarray) or type(x).__module__.startswith("jax"):
    return np.asarray(x).tolist()
  if isinstance(x, float) and not np.isfinite(x):
    return str(x)
  return x


def atomic_write_text(path: Path, text: str) -> None:
  path = Path(path)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
  with os.fdopen(fd, "w") as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def dumps(x: Any) -> str:
  return json.dumps(_to_jsonable(x), indent=2, sort_keys=True) + "\n"


class RunDir:
  """A run directory. `RunDir(workdir, config)` creates it and records the config."""

  def __init__(self, workdir: str | os.PathLike, config: Any = None):
    self.path = Path(workdir)
    if self.path.exists() and not self.path.is_dir():
      raise ValueError(f"--workdir {self.path} exists and is not a directory; pick another path.")
    self.path.mkdir(parents=True, exist_ok=True)
    if config is not None:
      self._record_config(config)

  def _record_config(self, config: Any) -> None:
    new = dumps(config)
    old_path = self.path / "config.json"
    if old_path.exists() and old_path.read_text() != new and (self.path / "results.json").exists():
      raise ValueError(
          f"{self.path} already holds results of a different config (see {old_path}). "
          "Use a fresh --workdir; existing results are never overwritten.")
    atomic_write_text(old_path, new)

  def file(self, name: str) -> Path:
    return self.path / name

  def write_json(self, name: str, obj: Any) -> Path:
    p = self.path / name
    atomic_write_text(p, dumps(obj))
    return p

  def write_results(self, results: dict) -> Path:
    return self.write_json("results.json", results)

  def write_report(self, markdown: str) -> Path:
    p = self.path / "report.md"
    atomic_write_text(p, markdown)
    return p

  def log_metrics(self, step: int, metrics: dict, name: str = "metrics.jsonl") -> None:
    """Appends one line per call; a crash loses at most the line being written."""
    with open(self.path / name, "a") as f:
      f.write(json.dumps(_to_jsonable({"step": int(step), **metrics})) + "\n")

  def savefig(self, fig, name: str) -> Path:
    p = self.path / name
    fig.savefig(p, dpi=120, bbox_inches="tight")
    return p


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
  def fmt(v: Any) -> str:
    if isinstance(v, float):
      return f"{v:.4g}"
    return str(v)
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
  return "\n".join(lines) + "\n"
