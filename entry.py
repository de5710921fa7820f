"""Shared plumbing of the two entry points (`train.py`, `sample.py`).

Each config names its job in `config.job` as "package.module:function"; the function takes
`(config, workdir)` and writes the run directory. Jobs are imported lazily so that running an
Ising experiment never imports the language-model stack.
"""

from __future__ import annotations

import importlib
import os


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
  print(f"Results in {workdir}/ (config.json, results.json, report.md, figures).")
