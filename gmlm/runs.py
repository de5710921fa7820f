"""Run directories: where every job's results land.

  rd = RunDir(workdir, config)        # refuses a directory holding another config
  rd.log_metrics(step, {"loss": 1.2})  # metrics.jsonl (+ TensorBoard scalars with tensorboard=True)
  rd.write_results(results); rd.savefig(fig, "drift.png"); rd.write_report(markdown)

A run directory holds `config.json` (the resolved config), `results.json` (the figures a run
reports), `metrics.jsonl` (streamed per-step metrics), PNG figures, `report.md` and, for
measurements resumable cell by cell, `cells/*.json` (`RunDir.cell`). Writes are
atomic (temp file + rename, mode from the umask), so a crash never leaves a half-written file.
A directory whose `config.json` differs from the run's config is refused before anything is
written (`check_workdir`), whether or not that run finished: resuming runs the same config,
except for the keys a job declares resumable (RESUMABLE_KEYS, e.g. the step to stop at). A run
begun before an option existed resumes as it began: the job's ADDED_KEYS give each such option
the value that computes as before it, which the resumed leg takes (`as_begun`). A
running job holds an flock on `.lock` in its directory (released by the kernel when the process
ends, however it ends); a second run there is refused, naming the first's process id.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from gmlm.checks import UserError

CONFIG, RESULTS, METRICS, REPORT = "config.json", "results.json", "metrics.jsonl", "report.md"
CELLS = "cells"
# What a job writes besides config.json (RunDir, Checkpoints, recording): a directory holding any
# of them but no config.json is a run whose config is unknown, never taken over.
RUN_FILES = (RESULTS, METRICS, REPORT, CELLS, "checkpoints", "trajectory", "tb")
LOCK = ".lock"  # flock'ed by the process running in the directory; it holds that process's id
_FAULT = os.environ.get("GMLM_FAULT", "")
_fault_counts: dict[str, int] = {}
_locks: dict[str, int] = {}  # run directory (real path) -> the open, locked descriptor of LOCK
last_step: int | None = None  # the latest step logged or checkpointed (the Ctrl-C line names it)


def fault_point(name: str) -> None:
  """A named point where the fault-injection tests (tests/faults) end the process as `kill -9`
  would: with GMLM_FAULT=NAME[:COUNT] set, the COUNT-th time (default the first) NAME is reached
  the process exits at once with status 137, no cleanup and no flush. Unset, it costs one test.

  Points: chunk_written (a trajectory chunk is on disk), checkpoint_saving (a checkpoint save is
  under way), checkpoint_saved (it is on disk), metrics_logged (a metrics line is written),
  cell_done (a finished cell of a resumable measurement is stored)."""
  if not _FAULT:
    return
  want, _, count = _FAULT.partition(":")
  if want == name:
    _fault_counts[name] = _fault_counts.get(name, 0) + 1
    if _fault_counts[name] == int(count or 1):
      os._exit(137)


def _to_jsonable(x: Any) -> Any:
  if isinstance(x, dict):
    return {str(k): _to_jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_to_jsonable(v) for v in x]
  if hasattr(x, "to_dict"):  # ml_collections.ConfigDict
    return _to_jsonable(x.to_dict())
  if isinstance(x, (np.generic,)):
    return _to_jsonable(x.item())
  if isinstance(x, np.ndarray) or type(x).__module__.startswith("jax"):
    return _to_jsonable(np.asarray(x).tolist())
  if isinstance(x, float) and not np.isfinite(x):
    return str(x)
  return x


def _umask() -> int:
  mask = os.umask(0)
  os.umask(mask)
  return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
  """Writes `text` to a temp file beside `path` and renames it over `path` (mode 0666 & ~umask,
  as open() would give; mkstemp's 0600 would hide results from a shared group)."""
  path = Path(path)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
  with os.fdopen(fd, "w", encoding="utf-8") as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
  os.chmod(tmp, 0o666 & ~_umask())
  os.replace(tmp, path)


def dumps(x: Any) -> str:
  return json.dumps(_to_jsonable(x), indent=2, sort_keys=True) + "\n"


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
  if not isinstance(tree, dict):
    return {prefix: tree}
  out = {}
  for k, v in tree.items():
    out.update(_flat(v, f"{prefix}{k}."))
  return out or {prefix: {}}


def differing_keys(old: Any, new: Any) -> list[str]:
  """The dotted keys whose values differ between two JSON-able configs."""
  return sorted(differing_values(old, new))


def differing_values(old: Any, new: Any) -> dict[str, tuple[Any, Any]]:
  """{dotted key: (old value, new value)} where two JSON-able configs differ (a key one of them
  lacks: `MISSING`)."""
  a, b = _flat(json.loads(dumps(old))), _flat(json.loads(dumps(new)))
  return {
    k.rstrip("."): (a.get(k, MISSING), b.get(k, MISSING))
    for k in set(a) | set(b)
    if a.get(k, a) != b.get(k, b)
  }


MISSING = "(absent)"


def _short(value: Any, width: int = 40) -> str:
  text = value if value == MISSING else json.dumps(value)
  return text if len(text) <= width else text[: width - 3] + "..."


def _busy(path: Path) -> UserError:
  try:
    pid = (path / LOCK).read_text(encoding="utf-8").split()[0]
  except (OSError, IndexError):
    pid = "?"
  return UserError(
    f"--workdir {path} is in use by another run (process {pid}); wait for it to end, stop it "
    "(kill " + pid + "), or use another --workdir. Two runs in one directory would overwrite "
    "each other's checkpoints."
  )


def lock(workdir: str | os.PathLike) -> None:
  """Takes the run directory's lock for this process (an flock on workdir/.lock, which the
  kernel releases when the process ends, however it ends); UserError naming the process that
  holds it. Taking it again in the same process is a no-op."""
  path = Path(workdir)
  key = os.path.realpath(path)
  if key in _locks:
    return
  fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    os.close(fd)
    raise _busy(path) from None
  os.ftruncate(fd, 0)
  os.write(fd, f"{os.getpid()}\n".encode())
  _locks[key] = fd


def unlock_all() -> None:
  """Releases the run directories this process locked (a job that returned)."""
  while _locks:
    os.close(_locks.popitem()[1])


def check_unlocked(workdir: str | os.PathLike) -> None:
  """UserError when another process holds the run directory's lock; writes nothing."""
  path = Path(workdir)
  if os.path.realpath(path) in _locks or not (path / LOCK).is_file():
    return
  try:
    fd = os.open(path / LOCK, os.O_RDONLY)
  except OSError:
    return
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    raise _busy(path) from None
  finally:
    os.close(fd)  # releases the probe's lock


def _process_zero() -> bool:
  """Only process 0 of a multi-process run (jax.distributed) writes and locks the directory."""
  return os.environ.get("JAX_PROCESS_ID", "0").strip() in ("", "0")


def check_writable(path: Path) -> None:
  """UserError unless `path` is, or can be made as, a directory this process may write: its
  nearest existing ancestor must be a directory we may write and enter (os.access: permission
  bits, and a read-only file system even for root)."""
  full = Path(os.path.abspath(path))
  here = next(p for p in (full, *full.parents) if p.exists())
  if not here.is_dir():
    raise UserError(
      f"--workdir {path}: {here} is a file, so no directory can be made under it; pick another "
      "path."
    )
  if not os.access(here, os.W_OK | os.X_OK):
    raise UserError(
      f"--workdir {path}: {here} is not writable by this user (permissions or a read-only file "
      "system); pick a path you can write."
    )
  if here != full:  # os.access says yes to root under /proc and /sys: try (and undo) a mkdir
    probe = here / f".gmlm-probe-{os.getpid()}"
    try:
      probe.mkdir()
      probe.rmdir()
    except OSError as e:
      raise UserError(
        f"--workdir {path}: no directory can be made under {here} ({e.strerror}); pick a path "
        "on a writable file system."
      ) from None


def _parent(tree: Any, key: str) -> tuple[Any, str]:
  """(the mapping that holds dotted `key` in `tree`, or None where a level is missing; its last
  part)."""
  *path, last = key.split(".")
  node = tree
  for part in path:
    node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
  return node, last


def _with_added(old: dict, added: dict[str, Any]) -> dict:
  """A run's recorded config read with today's options: each key of `added` it lacks (an option
  added after it began) at the value that computes as before that option."""
  old = json.loads(json.dumps(old))
  for key, value in added.items():
    node, last = _parent(old, key)
    if isinstance(node, dict) and last not in node:
      node[last] = value
  return old


def _without_added(config: dict, recorded: dict, added: dict[str, Any]) -> dict:
  """config (JSON) without the options of `added` that the recorded config.json lacks: the run
  began before them, and its config.json says so for every later leg (`as_begun`)."""
  for key in added:
    (old, last), (new, _) = _parent(recorded, key), _parent(config, key)
    if isinstance(new, dict) and not (isinstance(old, dict) and last in old):
      new.pop(last, None)
  return config


def as_begun(workdir: str | os.PathLike, config: Any, added: dict[str, Any]) -> dict[str, Any]:
  """A run begun before an option existed resumes as it began: for each option of `added`
  (dotted key -> the value that computes as before it) that the workdir's config.json lacks and
  `config` has, `config` takes that value. Returns {key: value} of the options so set."""
  old = Path(workdir) / CONFIG
  if not added or not old.is_file():
    return {}
  try:
    recorded = json.loads(old.read_text(encoding="utf-8"))
  except ValueError:
    return {}  # check_workdir says so
  before, now = _flat(recorded), _flat(json.loads(dumps(config)))
  out = {}
  for key, value in added.items():
    if key + "." in before or key + "." not in now:
      continue
    node, last = _parent(config, key)
    node[last] = value
    out[key] = value
  return out


def check_workdir(
  workdir: str | os.PathLike,
  config: Any,
  resumable: tuple[str, ...] = (),
  added: dict[str, Any] | None = None,
) -> None:
  """Raises UserError if `workdir` cannot hold a run of `config`: it is a file, or it already
  holds a run of a different config (finished or not). Keys in `resumable` (e.g. a step to stop
  at) may differ between the legs of one run; an option of `added` that the run's config.json
  lacks is read there at its value before the option (`as_begun`). Writes nothing."""
  path = Path(workdir)
  if path.exists() and not path.is_dir():
    raise UserError(f"--workdir {path} exists and is not a directory; pick another path.")
  check_writable(path)
  if _process_zero():
    check_unlocked(path)
  old = path / CONFIG
  if not old.is_file():
    found = sorted(name for name in RUN_FILES if (path / name).exists())
    if found:
      raise UserError(
        f"--workdir {path} holds a run's files ({', '.join(found)}) but no {CONFIG}, so it "
        "cannot be told whether that run's config is this one; use a fresh --workdir (or put "
        f"back the {CONFIG} of that run to resume it)."
      )
    return
  try:
    recorded = _with_added(json.loads(old.read_text(encoding="utf-8")), added or {})
    values = differing_values(recorded, config)
    differ = [
      f"{k} differs: {_short(a)} there, {_short(b)} now"
      for k, (a, b) in sorted(values.items())
      if k not in resumable
    ]
  except ValueError:
    differ = ["its config.json is unreadable"]
  if differ:
    shown = "; ".join(differ[:3]) + (f"; {len(differ) - 3} more" if len(differ) > 3 else "")
    raise UserError(
      f"--workdir {path} holds a run of a different config ({shown}; see {old}); "
      "resuming it with this config would mix two runs. Use a fresh --workdir, or rerun with "
      f"the config in {old} to resume that run."
    )


class RunDir:
  """A run directory. `RunDir(workdir, config)` checks it, creates it and records the config.

  tensorboard: also write every logged number as a TensorBoard scalar to `tb/` (tensorboardX,
  no TensorFlow). Only process 0 of a multi-process run writes (`writer`)."""

  def __init__(
    self,
    workdir: str | os.PathLike,
    config: Any = None,
    *,
    tensorboard: bool = False,
    writer: bool = True,
    resumable: tuple[str, ...] = (),
    added: dict[str, Any] | None = None,
  ):
    self.path = Path(workdir)
    self.writer = writer
    if config is not None:
      check_workdir(self.path, config, resumable, added)
    elif self.path.exists() and not self.path.is_dir():
      raise UserError(f"--workdir {self.path} exists and is not a directory; pick another path.")
    self._tb = None
    if not writer:
      return
    self.path.mkdir(parents=True, exist_ok=True)
    lock(self.path)  # held until the job returns or the process ends
    recorded = self.read_json(CONFIG) if (self.path / CONFIG).is_file() else None
    new = config is not None and (
      recorded is None or differing_keys(_with_added(recorded, added or {}), config)
    )
    if new:  # a new run, or a new leg of one that changed only resumable keys
      text = dumps(config)
      if recorded is not None and added:  # a run begun before an option stays without it, so
        text = dumps(_without_added(json.loads(text), recorded, added))  # every leg resumes so
      atomic_write_text(self.path / CONFIG, text)
    if tensorboard:
      from tensorboardX import SummaryWriter

      self._tb = SummaryWriter(str(self.path / "tb"))

  def file(self, name: str) -> Path:
    return self.path / name

  def exists(self, name: str) -> bool:
    return (self.path / name).exists()

  def write_text(self, name: str, text: str) -> Path:
    p = self.path / name
    if self.writer:
      p.parent.mkdir(parents=True, exist_ok=True)
      atomic_write_text(p, text)
    return p

  def write_json(self, name: str, obj: Any) -> Path:
    return self.write_text(name, dumps(obj))

  def read_json(self, name: str) -> Any:
    return json.loads((self.path / name).read_text(encoding="utf-8"))

  def write_results(self, results: dict) -> Path:
    return self.write_json(RESULTS, results)

  def read_results(self) -> dict | None:
    return self.read_json(RESULTS) if self.exists(RESULTS) else None

  def write_report(self, markdown: str) -> Path:
    return self.write_text(REPORT, markdown)

  def log_metrics(self, step: int, metrics: dict, name: str = METRICS) -> None:
    """Appends one JSON line {"step": step, **metrics}; a crash loses at most that line. With
    tensorboard, the numbers also go to the event file."""
    if not self.writer:
      return
    global last_step
    last_step = int(step)
    record = _to_jsonable({"step": int(step), **metrics})
    with open(self.path / name, "a", encoding="utf-8") as f:
      f.write(json.dumps(record) + "\n")
    if self._tb is not None and name == METRICS:
      self._add_scalars(record)
      self._tb.flush()
    fault_point("metrics_logged")

  def _add_scalars(self, record: dict) -> None:
    for k, v in record.items():
      if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
        self._tb.add_scalar(k, v, record["step"])

  def cell(self, name: str, compute: Callable[[], Any]) -> Any:
    """The JSON value of one finished cell of a measurement: read from cells/NAME.json when an
    earlier (killed) leg of this run stored it, else compute() stored there now. A rerun skips
    the finished cells; the value is returned as read back from JSON either way (floats
    round-trip exactly), so a resumed run equals an uninterrupted one."""
    p = self.path / CELLS / f"{name}.json"
    if p.is_file():
      try:
        return json.loads(p.read_text(encoding="utf-8"))
      except ValueError:  # atomic writes make this a damaged disk, not a kill: recompute
        pass
    value = json.loads(dumps(compute()))
    self.write_json(f"{CELLS}/{name}.json", value)
    fault_point("cell_done")
    return value

  def metrics(self, name: str = METRICS) -> list[dict]:
    """The records of metrics.jsonl; a line cut short by a kill is skipped."""
    p = self.path / name
    if not p.is_file():
      return []
    out = []
    for line in p.read_text(encoding="utf-8").splitlines():
      try:
        out.append(json.loads(line))
      except ValueError:
        continue
    return out

  def truncate_metrics(self, step: int, name: str = METRICS) -> int:
    """Drops the records past `step` (written after the checkpoint a resumed run restarts
    from) and any line cut short, so the file holds one curve however often the run was
    killed; with tensorboard the event files are rewritten from what is kept. Returns how many
    records were dropped."""
    p = self.path / name
    if not self.writer or not p.is_file():
      return 0
    lines = p.read_text(encoding="utf-8").splitlines()
    keep = [r for r in self.metrics(name) if r.get("step", 0) <= step]
    dropped = len(lines) - len(keep)
    if dropped:
      atomic_write_text(p, "".join(json.dumps(r) + "\n" for r in keep))
    if self._tb is not None and name == METRICS:
      self._rewrite_tensorboard(keep)
    return dropped

  def _rewrite_tensorboard(self, records: list[dict]) -> None:
    import shutil

    from tensorboardX import SummaryWriter

    self._tb.close()
    shutil.rmtree(self.path / "tb", ignore_errors=True)
    self._tb = SummaryWriter(str(self.path / "tb"))
    for r in records:
      self._add_scalars(r)
    self._tb.flush()

  def savefig(self, fig, name: str) -> Path:
    """Saves a matplotlib figure atomically and closes it."""
    p = self.path / name
    if self.writer:
      fd, tmp = tempfile.mkstemp(dir=self.path, prefix=f".{name}.", suffix=p.suffix)
      os.close(fd)
      fig.savefig(tmp, dpi=120, bbox_inches="tight")
      os.chmod(tmp, 0o666 & ~_umask())
      os.replace(tmp, p)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return p

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()
      self._tb = None


def markdown_table(header: list[str], rows: list[list[Any]], digits: int = 4) -> str:
  """A Markdown table; floats to `digits` significant digits, values within 1e-12 of 0 as 0."""

  def fmt(v: Any) -> str:
    if isinstance(v, (float, np.floating)):
      v = float(v)
      if abs(v) < 1e-12:
        v = 0.0
      return f"{v:.{digits}g}"
    return str(v)

  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
  return "\n".join(lines) + "\n"
