"""README.md and docs/*.md stay a guide a newcomer can follow: short, and naming only what exists.

The checks: README is at most README_LIMIT lines and each docs page at most PAGE_LIMIT; every
`configs/NAME.py` they name exists; every `python X.py` command's script and every
`python -m MODULE`'s module exists; every `runs/NAME` they name is one a command in them creates
(`--workdir runs/NAME`, `--out runs/NAME`), not a directory that lives on one machine only; every
relative link and image (markdown-it-py's tokens) points at a file in the tree. Each check is
shown to fail on a planted case in a small tree under tmp_path, and to pass on that tree clean.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parents[1]
README_LIMIT = 300
PAGE_LIMIT = 400
OWN_PACKAGES = ("gmlm", "glauber", "ising", "padir", "configs", "benchmarks", "tools", "tests")

CONFIG = re.compile(r"\bconfigs/(\w+)\.py\b")
SCRIPT = re.compile(r"\bpython3?\s+(?!-)([\w./-]+\.py)\b")
MODULE = re.compile(r"\bpython3?\s+-m\s+([\w.]+)")
RUN = re.compile(r"(?<![\w/.])runs/([\w.-]+)")
CREATES_RUN = re.compile(r"--(?:workdir|out)[= ]runs/([\w.-]+)")


def placeholder(name: str) -> bool:
  """NAME, X, DIR: a name that stands for any (`configs/NAME.py`), not one that must exist."""
  stem = Path(name).stem
  return stem.isupper()


def documents(root: Path) -> list[Path]:
  """README.md and every docs page."""
  return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def too_long(path: Path, root: Path) -> list[str]:
  limit = README_LIMIT if path == root / "README.md" else PAGE_LIMIT
  n = len(path.read_text(encoding="utf-8").splitlines())
  return [f"{path.name}: {n} lines, over the limit of {limit}"] if n > limit else []


def missing_configs(path: Path, root: Path) -> list[str]:
  text = path.read_text(encoding="utf-8")
  names = sorted(set(CONFIG.findall(text)))
  return [
    f"{path.name}: configs/{n}.py does not exist"
    for n in names
    if not placeholder(n) and not (root / "configs" / f"{n}.py").is_file()
  ]


def missing_scripts(path: Path, root: Path) -> list[str]:
  text = path.read_text(encoding="utf-8")
  names = sorted(set(SCRIPT.findall(text)))
  return [
    f"{path.name}: `python {n}`: no such script"
    for n in names
    if not placeholder(n) and not (root / n).is_file()
  ]


def module_exists(name: str, root: Path) -> bool:
  """A module of the tree (as a file or a package), or an installed one (found, not imported)."""
  parts = name.split(".")
  if parts[0] in OWN_PACKAGES:
    base = root.joinpath(*parts)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()
  return importlib.util.find_spec(parts[0]) is not None


def missing_modules(path: Path, root: Path) -> list[str]:
  text = path.read_text(encoding="utf-8")
  names = sorted(set(MODULE.findall(text)))
  return [
    f"{path.name}: `python -m {n}`: no such module" for n in names if not module_exists(n, root)
  ]


def stray_runs(paths: list[Path]) -> list[str]:
  """`runs/NAME` named anywhere in the docs that no command in them creates."""
  texts = {p: p.read_text(encoding="utf-8") for p in paths}
  created = {name for text in texts.values() for name in CREATES_RUN.findall(text)}
  out = []
  for p, text in texts.items():
    for name in sorted(n for n in set(RUN.findall(text)) - created if not placeholder(n)):
      out.append(f"{p.name}: runs/{name} is created by no command in README or docs/")
  return out


def link_targets(path: Path) -> list[str]:
  """Every link and image target of a markdown file, inline ones included."""
  out = []
  stack = list(MarkdownIt("commonmark").parse(path.read_text(encoding="utf-8")))
  while stack:
    tok = stack.pop()
    stack.extend(tok.children or [])
    if tok.type == "link_open":
      out.append(str(tok.attrs.get("href", "")))
    elif tok.type == "image":
      out.append(str(tok.attrs.get("src", "")))
  return out


def broken_links(path: Path, root: Path) -> list[str]:
  out = []
  for target in link_targets(path):
    if not target or target.startswith("#") or re.match(r"^[a-z][a-z0-9+.-]*:", target):
      continue  # an anchor on the page, or an address with a scheme (https:, mailto:)
    file = target.split("#", 1)[0]
    if not (path.parent / file).exists():
      out.append(f"{path.name}: broken link {target}")
  return out


def problems(root: Path) -> list[str]:
  paths = documents(root)
  out = []
  for path in paths:
    for check in (too_long, missing_configs, missing_scripts, missing_modules, broken_links):
      out += check(path, root)
  return out + stray_runs(paths)


def test_readme_and_docs_name_only_what_exists() -> None:
  assert (REPO / "README.md").is_file() and list((REPO / "docs").glob("*.md"))
  assert problems(REPO) == []


# A small tree that passes every check, and one defect planted at a time.
CLEAN_README = """# a project

```bash
python train.py --config configs/a.py --workdir runs/a
python -m gmlm.tool --in runs/a
```

Any config: `python sample.py --config configs/NAME.py --workdir runs/NAME`; results in
`runs/DIR`. See [the page](docs/page.md) and ![a figure](docs/fig.png).
"""
CLEAN_PAGE = "# page\n\nBack to [README](../README.md#top); [elsewhere](https://example.org).\n"

PLANTED = {
  "README over its limit": ("README.md", "line\n" * README_LIMIT, "over the limit"),
  "a page over its limit": ("docs/page.md", "line\n" * PAGE_LIMIT, "over the limit"),
  "a missing config": ("README.md", "`configs/nonexistent.py`\n", "configs/nonexistent.py"),
  "a missing script": ("docs/page.md", "python benchmarks/gone.py --fast\n", "benchmarks/gone.py"),
  "a missing top script": ("README.md", "python sampel.py --config x\n", "sampel.py"),
  "a missing module": ("docs/page.md", "python -m padir.data.gone --out x\n", "padir.data.gone"),
  "a missing installed module": ("README.md", "python -m no_such_mod_xyz\n", "no_such_mod_xyz"),
  "a run dir from nowhere": (
    "docs/page.md",
    "look in `runs/frontier_2x1_b`\n",
    "runs/frontier_2x1_b",
  ),
  "a broken link": ("docs/page.md", "[gone](other.md)\n", "broken link other.md"),
  "a broken link with an anchor": ("README.md", "[x](docs/nope.md#a)\n", "docs/nope.md#a"),
  "a broken image": ("docs/page.md", "![plot](missing.png)\n", "broken link missing.png"),
}


def make_tree(root: Path) -> None:
  for d in ("configs", "docs", "gmlm", "benchmarks"):
    (root / d).mkdir()
  (root / "configs" / "a.py").write_text("")
  (root / "train.py").write_text("")
  (root / "sample.py").write_text("")
  (root / "gmlm" / "__init__.py").write_text("")
  (root / "gmlm" / "tool.py").write_text("")
  (root / "docs" / "fig.png").write_bytes(b"")
  (root / "README.md").write_text(CLEAN_README)
  (root / "docs" / "page.md").write_text(CLEAN_PAGE)


def test_the_clean_tree_passes(tmp_path: Path) -> None:
  make_tree(tmp_path)
  assert problems(tmp_path) == []


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_a_planted_defect_is_caught(tmp_path: Path, case: str) -> None:
  make_tree(tmp_path)
  name, text, expected = PLANTED[case]
  with (tmp_path / name).open("a") as f:
    f.write(text)
  found = problems(tmp_path)
  assert len(found) == 1 and expected in found[0], found
