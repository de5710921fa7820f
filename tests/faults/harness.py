"""The fault-injection harness: run a job in a child process that ends itself as `kill -9` would
at a named point (gmlm.runs.fault_point, armed by GMLM_FAULT=NAME[:COUNT]), then compare the
resumed run directory with an uninterrupted one.

  killed(config, workdir, "sample.py", "chunk_written:2")   # exits 137 at the 2nd chunk
  cli.run(config, workdir, "sample.py")                     # the rerun resumes
  same_metrics(workdir, reference)                          # metrics.jsonl line by line
"""

from __future__ import annotations

import json
import os
import pathlib
import pickle
import subprocess
import sys

import numpy as np
from conftest import xla_flags

REPO = pathlib.Path(__file__).resolve().parents[2]
# Wall-clock measurements: the only fields of a resumed run allowed to differ.
TIMING = (
  "seconds", "steps_per_second", "simulated_steps_per_second", "train_seconds",
  "step_seconds", "target_tokens_per_s", "mfu", "peak_flops",  # padir.training.throughput
  "wall_seconds", "cpu_seconds",  # the run's clock (throughput.RunClock)
  # the processes' FLOPs: work each process repeats (positional-attention scores) counts once
  # per process, so a 2-process step has more FLOPs than the same step in one process
  "flops_per_step",
)  # fmt: skip

_CHILD = """
import pickle, sys
from gmlm import cli
with open(sys.argv[1], "rb") as f:
  config = pickle.load(f)
cli.run(config, sys.argv[2], sys.argv[3])
"""


def killed(
  config, workdir: str | os.PathLike, entry: str, fault: str, timeout: float = 300
) -> subprocess.CompletedProcess:
  """Runs config's job (as `entry` would) in a child that GMLM_FAULT=fault ends with status
  137; fails if the child ends any other way (the point was never reached, or it crashed)."""
  workdir = pathlib.Path(workdir)
  spec = workdir.parent / f".{workdir.name}.config.pkl"
  spec.write_bytes(pickle.dumps(config))
  env = {
    **os.environ,
    "GMLM_FAULT": fault,
    "JAX_PLATFORMS": "cpu",
    "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
  }
  env["XLA_FLAGS"] = xla_flags()  # one device, compiled as the suite compiles
  result = subprocess.run(
    [sys.executable, "-c", _CHILD, str(spec), str(workdir), entry],
    env=env,
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=timeout,
  )
  assert result.returncode == 137, (
    f"GMLM_FAULT={fault}: exit {result.returncode}, expected 137\n{result.stderr[-4000:]}"
  )
  return result


def without_timing(record: dict) -> dict:
  return {k: v for k, v in record.items() if k not in TIMING}


def metrics_lines(workdir: str | os.PathLike) -> list[dict]:
  """metrics.jsonl, one dict per line (every line must parse), timing fields left out."""
  text = (pathlib.Path(workdir) / "metrics.jsonl").read_text(encoding="utf-8")
  return [without_timing(json.loads(line)) for line in text.splitlines()]


def assert_same_metrics(workdir, reference) -> None:
  got, want = metrics_lines(workdir), metrics_lines(reference)
  assert got == want, f"metrics.jsonl differs:\n{got}\n!=\n{want}"


def assert_same_results(workdir, reference) -> None:
  read = lambda d: without_timing(json.loads((pathlib.Path(d) / "results.json").read_text()))
  assert read(workdir) == read(reference)


def assert_same_trees(a: dict, b: dict, what: str) -> None:
  """Nested dicts of arrays, equal bit for bit."""
  fa, fb = _flat(a), _flat(b)
  assert fa.keys() == fb.keys(), (what, sorted(set(fa) ^ set(fb)))
  for k in fa:
    np.testing.assert_array_equal(np.asarray(fa[k]), np.asarray(fb[k]), err_msg=f"{what}: {k}")


def _flat(tree, prefix: str = "") -> dict:
  if isinstance(tree, dict):
    out = {}
    for k, v in tree.items():
      out.update(_flat(v, f"{prefix}/{k}"))
    return out
  return {prefix: tree}


def checkpoint_item(directory: str | os.PathLike, step: int, item: str) -> dict:
  """One pytree item of an orbax checkpoint as nested dicts of numpy arrays (no target tree)."""
  import orbax.checkpoint as ocp

  path = pathlib.Path(directory).absolute() / str(step) / item
  return ocp.PyTreeCheckpointer().restore(path)


def damage(path: pathlib.Path, how: str) -> None:
  """Truncates a file to a third, or flips one bit in its middle."""
  data = bytearray(path.read_bytes())
  if how == "truncated":
    data = data[: len(data) // 3]
  else:
    data[len(data) // 2] ^= 0x10
  path.write_bytes(bytes(data))


def largest_file(directory: pathlib.Path) -> pathlib.Path:
  return max((f for f in directory.rglob("*") if f.is_file()), key=lambda f: f.stat().st_size)
