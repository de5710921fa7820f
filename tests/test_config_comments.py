"""Every field of every shipped config carries a comment, and the times they quote are true.

- Every assignment of a field in `configs/*.py` has a comment on its lines or on the comment
  lines right above it (`gmlm.cli.assignment_comments`, what `--config X.py --help` shows), so a
  field is commented where it is first set and again wherever a config sets it anew. Groups
  (`c.model = ConfigDict()`) are not fields.
- A time that a field's comment quotes, as `--help` shows it for a config (the comment of the
  assignment that set the field last, perhaps in a config it extends), agrees within a factor of
  2 with a time the config's header quotes, wherever the header quotes one: a header saying
  "7m56s for the 3,000 steps" over an inherited "an hour's budget on 2 CPU cores" fails.

Both checks are shown to fail on planted configs under tmp_path.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gmlm import cli

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted(p for p in (REPO / "configs").glob("*.py") if p.name != "__init__.py")

# Durations as prose writes them: 7m56s, 1h13m47s, ~12 min, 14.2 minutes, 2 hours, an hour.
DURATION = re.compile(
  r"\b(?:(?P<h>\d+)h)?(?P<m>\d+)m(?P<s>\d+)s\b"
  r"|(?P<min>\d+(?:\.\d+)?)\s*(?:min|minutes)\b"
  r"|(?P<hours>\d+(?:\.\d+)?)\s*hours?\b"
  r"|\b(?P<half>half an hour)\b"
  r"|\b(?:an|one)\s+hour\b"
)


def durations(text: str) -> list[float]:
  """Every duration a text quotes, in seconds."""
  out = []
  for m in DURATION.finditer(text):
    if m["m"] is not None:
      out.append(int(m["h"] or 0) * 3600 + int(m["m"]) * 60 + int(m["s"]))
    elif m["min"] is not None:
      out.append(float(m["min"]) * 60)
    elif m["hours"] is not None:
      out.append(float(m["hours"]) * 3600)
    else:
      out.append(1800.0 if m["half"] else 3600.0)
  return out


def header(path: Path) -> str:
  return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def uncommented_fields(path: Path) -> list[str]:
  """`LINE: KEY` of each field assignment in a config file that carries no comment."""
  comments = cli.assignment_comments(path)
  out = []
  for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
    if not isinstance(node, ast.Assign) or node.lineno not in comments:
      continue
    value = node.value
    name = getattr(value, "func", None)
    group = isinstance(value, ast.Call) and not value.args and not value.keywords
    if group and getattr(name, "attr", getattr(name, "id", "")) == "ConfigDict":
      continue
    key, comment = comments[node.lineno]
    if not comment:
      out.append(f"{path.name}:{node.lineno}: {key}")
  return out


def untrue_times(path: Path) -> list[str]:
  """Fields whose comment (as --help shows it) quotes a time more than 2x off every time the
  config's header quotes."""
  quoted = durations(header(path))
  if not quoted:
    return []
  out = []
  for key, comment in cli.field_comments(path).items():
    for t in durations(comment):
      if not any(0.5 <= t / h <= 2.0 for h in quoted):
        out.append(f"{path.name}: {key} says {comment!r}; the header quotes {quoted} s")
  return out


def test_durations_reads_the_forms_prose_uses() -> None:
  text = "7m56s; 1h13m47s; ~12 min; 14.2 minutes; 2 hours; an hour's budget; half an hour; 5e-3"
  assert durations(text) == [476, 4427, 720, 852, 7200, 3600, 1800]
  assert durations("0.43 s a step, 3,000 steps, lr 5e-3, 2 CPU cores") == []


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_every_field_carries_a_comment(path: Path) -> None:
  assert uncommented_fields(path) == []


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_the_times_field_comments_quote_agree_with_the_header(path: Path) -> None:
  assert untrue_times(path) == []


BASE = '''"""A base config. Time: about 55 min for its 1,000 steps."""
import ml_collections


def get_config():
  c = ml_collections.ConfigDict()
  c.train = ml_collections.ConfigDict()
  c.train.num_train_steps = 1_000  # an hour's budget on 2 CPU cores
  # the peak of the schedule
  c.train.peak_lr = 3e-3
  c.seed = 0  # any integer >= 0
  return c
'''
CHILD = '''"""A shorter run. Time and result: 7m56s for the 3,000 steps."""
import ml_collections

from {package} import base


def get_config():
  config = base.get_config()
  t = config.train
  t.peak_lr = 5e-3  # higher: a short schedule
  {override}
  return config
'''


def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, override: str) -> Path:
  """A package of two configs, `base` and `child` (which extends it), under tmp_path."""
  package = "toycfg_" + re.sub(r"\W", "_", tmp_path.name)
  (tmp_path / package).mkdir()
  (tmp_path / package / "__init__.py").write_text("")
  (tmp_path / package / "base.py").write_text(BASE)
  (tmp_path / package / "child.py").write_text(CHILD.format(package=package, override=override))
  monkeypatch.syspath_prepend(str(tmp_path))
  return tmp_path / package


def test_a_field_without_a_comment_is_caught(tmp_path, monkeypatch) -> None:
  folder = toy(tmp_path, monkeypatch, "t.num_train_steps = 3_000")
  assert uncommented_fields(folder / "base.py") == []  # same line, line above, group: all fine
  assert uncommented_fields(folder / "child.py") == ["child.py:11: train.num_train_steps"]
  # and --help shows no comment for it rather than the base's, which was about 1,000 steps
  assert "train.num_train_steps" not in cli.field_comments(folder / "child.py")


def test_an_inherited_time_the_header_contradicts_is_caught(tmp_path, monkeypatch) -> None:
  folder = toy(tmp_path, monkeypatch, "config.seed = 1  # another seed")
  assert uncommented_fields(folder / "child.py") == []
  assert cli.field_comments(folder / "child.py")["train.peak_lr"] == "higher: a short schedule"
  (found,) = untrue_times(folder / "child.py")
  assert "train.num_train_steps" in found and "an hour's budget" in found
  assert untrue_times(folder / "base.py") == []  # 55 min against an hour: within 2x


def test_a_time_comment_set_anew_passes(tmp_path, monkeypatch) -> None:
  override = "t.num_train_steps = 3_000  # about 8 min on 2 quiet cores (header)"
  folder = toy(tmp_path, monkeypatch, override)
  assert uncommented_fields(folder / "child.py") == []
  assert untrue_times(folder / "child.py") == []
