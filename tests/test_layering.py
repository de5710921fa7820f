"""The house rule, read from the imports of every module (module-level and inside functions):

- floor 1, `gmlm`, imports no domain;
- a domain (`ising`, `glauber`, `padir`) imports gmlm and itself only, never another domain;
- a job (a module under `<domain>/jobs/`) imports no other job;
- no import circle among the project's modules (package `__init__` re-exports aside);
- inside `glauber`, a layer imports only the layers above it: the engine (its top-level
  modules) imports none of `measures`, `mlm`, `stages`, `jobs`; `measures` and `mlm` import the
  engine only (not each other); `stages` imports no job;
- inside `padir`, floors in the data flow of a translation system: `data` < `model` <
  `decoding` < `evaluation` < `training` < `jobs`; a module imports its own floor and the ones
  below it only (the package's `__init__` re-exports aside).

The checker is also run on a planted tree that breaks each rule, so it is shown to fail.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
FLOOR1 = "gmlm"
DOMAINS = ("ising", "glauber", "padir")
PACKAGES = (FLOOR1, *DOMAINS)
# glauber's inner layers: a module of a layer may import the layers listed for it (and itself).
GLAUBER_LAYERS = {
  "engine": {"engine"},
  "measures": {"engine", "measures"},
  "mlm": {"engine", "mlm"},
  "stages": {"engine", "measures", "mlm", "stages"},
  "jobs": {"engine", "measures", "mlm", "stages", "jobs"},
}


PADIR_FLOORS = ("data", "model", "decoding", "evaluation", "training", "jobs")


def padir_floor(module: str) -> int | None:
  """The inner floor of a padir module (None outside padir's subpackages)."""
  parts = module.split(".")
  if parts[0] != "padir" or len(parts) == 1 or parts[1] not in PADIR_FLOORS:
    return None
  return PADIR_FLOORS.index(parts[1])


def glauber_layer(module: str) -> str | None:
  """The inner layer of a glauber module (None outside glauber and for the package itself)."""
  parts = module.split(".")
  if parts[0] != "glauber" or len(parts) == 1:
    return None
  return parts[1] if parts[1] in GLAUBER_LAYERS and parts[1] != "engine" else "engine"


def modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
  out = {}
  for pkg in PACKAGES:
    for path in sorted((root / pkg).rglob("*.py")):
      parts = path.relative_to(root).with_suffix("").parts
      name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
      out[name] = path
  return out


def imports_of(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
  """The project modules `name` imports (`from pkg import sub` counts as pkg.sub when sub is a
  module)."""
  is_pkg = path.name == "__init__.py"
  out = set()
  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
    if isinstance(node, ast.Import):
      targets = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:  # relative import
        anchor = name.split(".") if is_pkg else name.split(".")[:-1]
        anchor = anchor[: len(anchor) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
      targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    else:
      continue
    out.update(t for t in targets if t.split(".")[0] in PACKAGES)
  return out


def violations(root: pathlib.Path) -> list[str]:
  mods = modules(root)
  known = set(mods)
  graph = {m: imports_of(m, p, known) for m, p in mods.items()}
  found = []
  for m, targets in graph.items():
    floor = m.split(".")[0]
    if floor == "padir" and m != "padir" and padir_floor(m) is None:
      found.append(f"a padir module outside its floors: {m}")
    for t in sorted(targets):
      top = t.split(".")[0]
      if floor == FLOOR1 and top != FLOOR1:
        found.append(f"floor 1 imports a domain: {m} -> {t}")
      elif floor in DOMAINS and top not in (FLOOR1, floor):
        found.append(f"a domain imports another domain: {m} -> {t}")
      if ".jobs." in f"{m}." and ".jobs." in f"{t}." and t != m and not t.endswith(".jobs"):
        found.append(f"a job imports a job: {m} -> {t}")
      src, dst = glauber_layer(m), glauber_layer(t)
      if src and dst and dst not in GLAUBER_LAYERS[src]:
        found.append(f"a glauber layer imports a lower one: {m} ({src}) -> {t} ({dst})")
      src, dst = padir_floor(m), padir_floor(t)
      if src is not None and dst is not None and dst > src:
        found.append(
          f"a padir floor imports a higher one: {m} ({PADIR_FLOORS[src]}) -> {t} "
          f"({PADIR_FLOORS[dst]})"
        )
  found += [f"import circle: {' -> '.join(c)}" for c in circles(graph)]
  return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
  """Cycles among non-package modules (depth-first search)."""
  nodes = {m for m in graph if not m.endswith(tuple(PACKAGES)) and graph.get(m) is not None}
  edges = {m: sorted(t for t in graph[m] if t in nodes and t != m) for m in nodes}
  found, state = [], {}

  def visit(m, stack):
    state[m] = 1
    stack.append(m)
    for t in edges[m]:
      if state.get(t) == 1:
        found.append(stack[stack.index(t) :] + [t])
      elif t not in state:
        visit(t, stack)
    stack.pop()
    state[m] = 2

  for m in sorted(nodes):
    if m not in state:
      visit(m, [])
  return found


def test_the_tree_keeps_its_floors_apart():
  assert violations(ROOT) == []


def test_the_checker_finds_a_planted_violation_of_each_rule(tmp_path):
  files = {
    "gmlm/__init__.py": "",
    "gmlm/runs.py": "from glauber import chains\n",  # floor 1 -> domain
    "gmlm/a.py": "def f():\n  from gmlm import b\n",  # a -> b -> a
    "gmlm/b.py": "from gmlm.a import f\n",
    "glauber/__init__.py": "",
    "glauber/chains.py": "import ising.model\n",  # domain -> domain
    "glauber/oracle.py": "from glauber.measures import exact\n",  # engine -> measures
    "glauber/measures/__init__.py": "",
    "glauber/measures/exact.py": "from glauber import chains\n",
    "glauber/jobs/__init__.py": "",
    "glauber/jobs/sample.py": "from gmlm import runs\n",
    "glauber/jobs/coupling.py": "from glauber.jobs import sample\n",  # job -> job
    "ising/__init__.py": "",
    "ising/model.py": "import numpy\n",
    "padir/__init__.py": "",
    "padir/model/__init__.py": "",
    "padir/model/transformer.py": "from padir.decoding import ctc\n",  # model -> decoding
    "padir/decoding/__init__.py": "",
    "padir/decoding/ctc.py": "from padir.model import transformer\n",
    "padir/speed.py": "",  # outside the floors
  }
  for name, text in files.items():
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(text)
  found = violations(tmp_path)
  assert "floor 1 imports a domain: gmlm.runs -> glauber.chains" in found
  assert "a domain imports another domain: glauber.chains -> ising.model" in found
  assert "a job imports a job: glauber.jobs.coupling -> glauber.jobs.sample" in found
  assert any(v.startswith("import circle: gmlm.a -> gmlm.b -> gmlm.a") for v in found)
  assert (
    "a glauber layer imports a lower one: glauber.oracle (engine) -> glauber.measures.exact "
    "(measures)" in found
  )
  assert (
    "a padir floor imports a higher one: padir.model.transformer (model) -> padir.decoding.ctc "
    "(decoding)" in found
  )
  assert "a padir module outside its floors: padir.speed" in found
  assert len(found) == 8, found
