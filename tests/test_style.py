"""The tree is linted (pyflakes, pycodestyle errors, import order) and laid out by ruff, with
the settings in pyproject.toml; CI runs this file with the rest of the suite."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def ruff(*args: str) -> subprocess.CompletedProcess:
  exe = shutil.which("ruff") or pytest.skip("ruff is not installed (pip install -e '.[test]')")
  return subprocess.run([exe, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_ruff_lint_passes():
  r = ruff("check", "--no-cache", ".")
  assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_ruff_format_leaves_every_file_unchanged():
  r = ruff("format", "--no-cache", "--check", ".")
  assert r.returncode == 0, (
    r.stdout[-4000:]
    + r.stderr[-2000:]
    + f"\nrun `ruff format .` ({sys.executable} -m pip install ruff)"
  )
