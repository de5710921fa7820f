"""Checks that every module of the project imports with a GPU image's packages plus the wheels
of tools/gpu_wheels.sh, and nothing else.

  python tools/check_gpu_imports.py --python PY --wheels DIR [--collect]

PY is an interpreter whose environment holds only what the GPU image has (jax, flax, optax,
orbax-checkpoint, chex, absl-py, numpy, scipy, matplotlib, tqdm, safetensors, transformers,
huggingface-hub, sentencepiece, sacrebleu, torch, pytest and their dependencies); the GPU image's
is Python 3.12, so on a 3.11 machine build a proxy (docs/accelerators.md):

  python3 -m venv /tmp/gpu-proxy && /tmp/gpu-proxy/bin/pip install "jax[cpu]==0.10.2" \
      flax==0.12.8 optax==0.2.8 orbax-checkpoint==0.12.8 chex absl-py numpy scipy matplotlib \
      tqdm safetensors "transformers>=5,<6" huggingface-hub sentencepiece==0.2.3 \
      sacrebleu==2.6.0 torch==2.13.0 pytest
  PY_VERSION=3.11 tools/gpu_wheels.sh /tmp/w311
  python tools/check_gpu_imports.py --python /tmp/gpu-proxy/bin/python --wheels /tmp/w311 --collect

The wheels are installed the way the GPU machine installs them (pip --no-index --no-deps
--target) into a temporary directory put first on PYTHONPATH; then every module under gmlm/,
glauber/, ising/ and padir/ is imported in a fresh interpreter, and with --collect the test
suite is collected (which imports every test module). Exit status 1 lists what failed, with the
missing top-level module of each ImportError.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("gmlm", "glauber", "ising", "padir")

CHILD = r"""
import importlib, json, pathlib, sys, traceback
failed = {}
names = []
for pkg in sys.argv[1:]:
  for path in sorted(pathlib.Path(pkg).rglob("*.py")):
    parts = path.with_suffix("").parts
    names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
for name in names:
  try:
    importlib.import_module(name)
  except BaseException as e:  # noqa: BLE001 - every failure is reported
    missing = getattr(e, "name", None) if isinstance(e, ImportError) else None
    failed[name] = {"error": f"{type(e).__name__}: {e}", "missing": missing}
print("RESULT " + json.dumps({"modules": len(names), "failed": failed}))
"""


def install(python: str, wheels: pathlib.Path, target: pathlib.Path) -> None:
  files = sorted(str(w) for w in wheels.glob("*.whl"))
  if not files:
    raise SystemExit(f"no wheels in {wheels}")
  subprocess.run(
    [
      python,
      "-m",
      "pip",
      "install",
      "--quiet",
      "--no-index",
      "--no-deps",
      "--target",
      str(target),
      *files,
    ],
    check=True,
  )


def main() -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--python", required=True, help="interpreter with only the image's packages")
  p.add_argument("--wheels", required=True, type=pathlib.Path)
  p.add_argument("--collect", action="store_true", help="also collect the test suite")
  a = p.parse_args()
  with tempfile.TemporaryDirectory() as target:
    install(a.python, a.wheels, pathlib.Path(target))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([target, str(REPO)]), "JAX_PLATFORMS": "cpu"}
    env.pop("PYTHONHOME", None)
    r = subprocess.run(
      [a.python, "-c", CHILD, *PACKAGES], cwd=REPO, env=env, capture_output=True, text=True
    )
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
      print(r.stderr[-3000:])
      return 1
    result = json.loads(lines[-1][len("RESULT ") :])
    print(f"{result['modules']} modules imported, {len(result['failed'])} failed")
    for name, f in result["failed"].items():
      print(f"  FAILED {name}: {f['error']}")
    missing = sorted({f["missing"] for f in result["failed"].values() if f["missing"]})
    if missing:
      print(f"missing modules: {missing}")
    ok = not result["failed"]
    if a.collect:
      c = subprocess.run(
        [a.python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
      )
      tail = c.stdout.strip().splitlines()[-1:] or c.stderr.strip().splitlines()[-1:]
      print(f"pytest --collect-only: exit {c.returncode}: {tail[0] if tail else ''}")
      if c.returncode:
        print("\n".join(ln for ln in c.stdout.splitlines() if "Error" in ln or "ERROR" in ln))
        ok = False
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
