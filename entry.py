"""Shared plumbing of the two entry points (`train.py`, `sample.py`).

Each config names its job in `config.job` as "package.module:function"; the function takes
`(config, workdir)` and writes the run directory. Jobs are imported lazily so that running an
Ising experiment never imports the language-model stack.
"""

from __future__ import annotations

import importlib
import os

from absl import app, flags, logging
from ml_collections import config_flags


def resolve_job(job: str, allowed_prefixes: tuple[str, ...]):
  if ":" not in job:
    raise ValueError(f"config.job={job!r} must look like 'package.module:function'.")
  module_name, fn_name = job.split(":", 1)
  if not module_name.startswith(allowed_prefixes):
    raise ValueError(f"config.job={job!r} is not a job of this entry point; "
                     f"expected one under {', '.join(allowed_prefixes)}.")
  module = importlib.import_module(module_name)
  try:
    return getattr(module, fn_name)
  except AttributeError:
    raise ValueError(f"config.job={job!r}: {module_name} has no function {fn_name!r}.") from None


def main(config, workdir: str, allowed_prefixes: tuple[str, ...]) -> None:
  if not workdir:
    raise SystemExit("--workdir is required: the directory where config.json, results.json, "
                     "figures and report.md are written.")
  if "job" not in config:
    raise SystemExit("The config has no `job` field naming the function to run.")
  fn = resolve_job(config.job, allowed_prefixes)
  os.makedirs(workdir, exist_ok=True)
  fn(config, workdir)
  written = ", ".join(sorted(p for p in os.listdir(workdir) if not p.startswith(".")))
  print(f"Run directory {workdir}/: {written}")


JOB_PACKAGES = ("ising.", "glauber.", "padir.")


def cli() -> None:
  """`python {train,sample}.py --config configs/NAME.py --workdir DIR [--config.key=value ...]`."""
  config = config_flags.DEFINE_config_file("config", None, "Path to a configs/*.py file.")
  workdir = flags.DEFINE_string("workdir", None, "Run directory for config, results, figures, report.")
  flags.mark_flags_as_required(["config", "workdir"])

  def _main(argv):
    logging.set_verbosity(logging.WARNING)  # orbax and tfds log every file operation at INFO
    if len(argv) > 1:
      raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    main(config.value, workdir.value, JOB_PACKAGES)

  app.run(_main)
