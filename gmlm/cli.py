"""The command line shared by the two entry points.

  python sample.py --config configs/NAME.py --workdir DIR [--config.key=value ...]  # measure
  python train.py  --config configs/NAME.py --workdir DIR [--config.key=value ...]  # fit, train

A config names its job by module (`config.job = "glauber.jobs.sample"`); the module defines
`ENTRY_POINT` ("sample.py" or "train.py"), `run(config, workdir)` and optionally
`validate(config)` (and `RESUMABLE_KEYS`, the config keys that may change between the legs of
one run). Before anything is loaded or written, the entry point checks that the job
is one of its own, validates the whole config and checks the run directory
(`gmlm.runs.check_workdir`); a user error is printed as one line and exits 2.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from gmlm.checks import UserError

ENTRY_POINTS = ("sample.py", "train.py")
_HELP = ("-h", "--help", "-help", "--helpshort", "--helpfull", "-?")


def _fail(message: str) -> None:
  print(f"error: {message}", file=sys.stderr)
  raise SystemExit(2)


def job_entry_point(job: str) -> str | None:
  """ENTRY_POINT of a job module, read from its source (the module is not imported)."""
  try:
    spec = importlib.util.find_spec(job)
  except (ImportError, ValueError):
    return None
  if spec is None or not spec.origin or not spec.origin.endswith(".py"):
    return None
  tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
  for node in tree.body:
    if isinstance(node, ast.Assign) and any(
      getattr(t, "id", None) == "ENTRY_POINT" for t in node.targets
    ):
      return ast.literal_eval(node.value)
  return None


def resolve_job(config: Any, entry: str):
  """The job module of `config`, checked to belong to `entry`."""
  job = config.get("job") if hasattr(config, "get") else None
  if not job or not isinstance(job, str):
    raise UserError(
      "config.job is missing: a config names its job module, e.g. "
      "config.job = 'glauber.jobs.sample'."
    )
  if ":" in job:
    raise UserError(
      f"config.job={job!r}: name the job module only (e.g. "
      f"{job.split(':')[0]!r}); its function is always run(config, workdir)."
    )
  owner = job_entry_point(job)
  if owner is None:
    raise UserError(
      f"config.job={job!r} is not a job module (a module with ENTRY_POINT and "
      "run(config, workdir)); see the shipped configs/."
    )
  if owner != entry:
    raise UserError(
      f"config.job={job!r} is a {_kind(owner)} job: run it with "
      f"`python {owner} --config ... --workdir ...`, not {entry}."
    )
  return importlib.import_module(job)


def _kind(entry: str) -> str:
  return "training/fitting" if entry == "train.py" else "sampling/measurement"


def prepare(config: Any, workdir: str, entry: str):
  """Resolves and validates the job and checks the run directory; writes nothing."""
  from gmlm import runs

  if not workdir:
    raise UserError(
      "--workdir is required: the directory where config.json, results.json, "
      "figures and report.md are written."
    )
  module = resolve_job(config, entry)
  validate = getattr(module, "validate", None)
  if validate is not None:
    validate(config)
  runs.check_workdir(workdir, config, getattr(module, "RESUMABLE_KEYS", ()))
  return module


def run(config: Any, workdir: str, entry: str) -> Any:
  """Runs config's job in workdir as `entry` would (the entry points' body, for tests)."""
  module = prepare(config, workdir, entry)
  return module.run(config, workdir)


def config_docs(configs_dir: Path, entry: str) -> list[tuple[str, str]]:
  """(config file, first line of its header) for the configs whose job belongs to `entry`."""
  out = []
  for path in sorted(configs_dir.glob("*.py")):
    if path.name.startswith("_"):
      continue
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    doc = (ast.get_docstring(tree) or "").strip().splitlines() or [
      line.lstrip("# ").strip() for line in text.splitlines()[:1] if line.startswith("#")
    ]
    job = _config_job(path)
    if job and job_entry_point(job) == entry:
      out.append((f"configs/{path.name}", doc[0] if doc else ""))
  return out


def _config_job(path: Path, depth: int = 0) -> str | None:
  """The job module a config file names (`c.job = "..."`), read without importing it; a config
  that extends another (`from configs import base`) asks that one, through any chain."""
  if not path.is_file() or depth > 8:
    return None
  tree = ast.parse(path.read_text(encoding="utf-8"))
  for node in ast.walk(tree):
    if (
      isinstance(node, ast.Assign)
      and isinstance(node.value, ast.Constant)
      and any(isinstance(t, ast.Attribute) and t.attr == "job" for t in node.targets)
    ):
      return node.value.value
  for node in tree.body:
    if isinstance(node, ast.ImportFrom) and node.module == "configs":
      return _config_job(path.parent / f"{node.names[0].name}.py", depth + 1)
  return None


def help_text(entry: str, configs_dir: Path) -> str:
  other = "train.py" if entry == "sample.py" else "sample.py"
  lines = [
    f"usage: python {entry} --config configs/NAME.py --workdir DIR [--config.KEY=VALUE ...]",
    "",
    f"Runs a {_kind(entry)} config; every run writes DIR/config.json, results.json, "
    "figures and report.md.",
    "",
    "flags:",
    "  --config PATH          a config file (its header gives the command and the result)",
    "  --workdir DIR          the run directory (a killed run resumes there)",
    "  --config.KEY=VALUE     override a config field (e.g. --config.temperature=0.5)",
    "",
    f"configs for {entry}:",
  ]
  docs = config_docs(configs_dir, entry)
  width = max((len(name) for name, _ in docs), default=0)
  lines += [f"  {name.ljust(width)}  {doc}" for name, doc in docs] or ["  (none)"]
  lines += ["", f"({_kind(other)} configs run with {other}; see its --help)"]
  return "\n".join(lines)


def _config_path(argv: list[str]) -> str | None:
  for i, a in enumerate(argv):
    if a.startswith("--config="):
      return a.split("=", 1)[1]
    if a == "--config" and i + 1 < len(argv):
      return argv[i + 1]
  return None


def main(entry: str, argv: list[str] | None = None) -> None:
  """The entry point `entry` ("sample.py" or "train.py")."""
  argv = list(sys.argv if argv is None else argv)
  configs_dir = Path(argv[0]).resolve().parent / "configs"
  if any(a in _HELP for a in argv[1:]) or len(argv) == 1:
    print(help_text(entry, configs_dir))
    raise SystemExit(0 if len(argv) > 1 else 2)
  path = _config_path(argv)
  if path is None:
    _fail(
      f"--config is required: python {entry} --config configs/NAME.py --workdir DIR "
      f"(python {entry} --help lists the configs)."
    )
  if not os.path.isfile(path.split(":")[0]):
    _fail(f"--config={path}: no such file (python {entry} --help lists the configs).")
  os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found" line
  from absl import app, flags, logging
  from ml_collections import config_flags

  config_flag = config_flags.DEFINE_config_file("config", None, "Path to a configs/*.py file.")
  workdir_flag = flags.DEFINE_string("workdir", None, "The run directory.")

  def _main(rest):
    logging.set_verbosity(logging.WARNING)  # orbax and tfds log every file operation at INFO
    if len(rest) > 1:
      _fail(f"unexpected arguments {rest[1:]}; flags look like --config.KEY=VALUE.")
    config, workdir = config_flag.value, workdir_flag.value
    try:
      module = prepare(config, workdir, entry)
      module.run(config, workdir)
    except UserError as e:
      _fail(str(e))
    written = ", ".join(sorted(p for p in os.listdir(workdir) if not p.startswith(".")))
    # stderr: a job may write its product to stdout (translations), and this line is a note
    print(f"Run directory {workdir}/: {written}", file=sys.stderr)

  try:
    app.run(_main, argv=argv, flags_parser=_parse_flags)
  except UserError as e:
    _fail(str(e))


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's parser, with a bad flag or config override reported as one line."""
  from absl import flags

  entry = Path(argv[0]).name
  try:
    return flags.FLAGS(argv)
  except (AttributeError, KeyError) as e:  # an override of a key the config does not have
    key = str(e).strip("\"'")
    _fail(
      f"--config.{key}: the config has no field {key!r} (see its file for the fields; "
      f"python {entry} --help lists the configs)."
    )
  except (flags.Error, ValueError, TypeError) as e:
    _fail(f"{e} (python {entry} --help lists the flags and configs).")
  return []
