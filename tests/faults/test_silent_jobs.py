"""Every long loop of a job shows progress (issue 41, 8: configs/glauber_unmasking.py printed
nothing for its whole run, glauber_exact nothing for its last ~4.5 minutes). The unit of long
work in a job is a resumable cell (`RunDir.cell`); a function that runs cells in a loop must
draw a progress bar (tqdm, or a helper named `bar` / `progress`) over it. Checked on the source
of every job module and the code they run cells from, with planted violations."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROGRESS = ("tqdm", "bar", "progress")
SOURCES = sorted(
  [p for d in ("glauber", "ising", "padir") for p in (REPO / d / "jobs").glob("*.py")]
  + list((REPO / "glauber" / "stages").glob("*.py"))
  + [REPO / "ising" / "mple.py"]
)


def _calls(node: ast.AST) -> set[str]:
  names = set()
  for n in ast.walk(node):
    if isinstance(n, ast.Call):
      f = n.func
      names.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
  return names


def silent_loops(source: str) -> list[str]:
  """The functions that run cells in a loop without a progress bar."""
  out = []
  for fn in ast.walk(ast.parse(source)):
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
      continue
    loops = [n for n in ast.walk(fn) if isinstance(n, (ast.For, ast.While))]
    if any("cell" in _calls(loop) for loop in loops) and not set(PROGRESS) & _calls(fn):
      out.append(fn.name)
  return out


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_loop_of_cells_shows_progress(path):
  assert silent_loops(path.read_text(encoding="utf-8")) == []


def test_the_rule_catches_a_silent_loop_and_passes_a_drawn_one():
  silent = """
    def measure(config, rd):
      rows = []
      for T in config.temperatures:
        rows.append(rd.cell(f"T{T}", lambda: slow(T)))
      return rows
  """
  drawn = silent.replace("in config.temperatures", "in tqdm(config.temperatures)")
  assert silent_loops(textwrap.dedent(silent)) == ["measure"]
  assert silent_loops(textwrap.dedent(drawn)) == []
