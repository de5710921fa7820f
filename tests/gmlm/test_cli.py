"""The entry points: help lists each one's configs, user errors are one line before anything is
loaded or written, and each entry point refuses the other's configs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import ml_collections
import pytest

from gmlm import cli
from gmlm.checks import ConfigError, UserError

REPO = cli.Path(__file__).resolve().parents[2]


def entry(*args: str, cwd=REPO) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120
  )


@pytest.fixture()
def toy_job(tmp_path, monkeypatch):
  """A job package `toyjobs` with a sampling job that validates `x >= 0` and records calls."""
  pkg = tmp_path / "toyjobs"
  pkg.mkdir()
  (pkg / "__init__.py").write_text("")
  (pkg / "sample.py").write_text(
    textwrap.dedent('''
      from gmlm import checks
      from gmlm.runs import RunDir
      ENTRY_POINT = "sample.py"
      CALLS = []
      def validate(config):
        checks.check_int(config, "x", lo=0)
      def run(config, workdir):
        CALLS.append(config.x)
        RunDir(workdir, config).write_results({"x": config.x})
      ''')
  )
  monkeypatch.syspath_prepend(str(tmp_path))
  yield lambda **kw: ml_collections.ConfigDict({"job": "toyjobs.sample", "x": 1, **kw})
  sys.modules.pop("toyjobs.sample", None)
  sys.modules.pop("toyjobs", None)


def test_a_bad_value_is_refused_before_the_job_runs_or_the_workdir_exists(toy_job, tmp_path):
  with pytest.raises(ConfigError, match=r"config.x=-1: must be an integer >= 0"):
    cli.run(toy_job(x=-1), str(tmp_path / "w"), "sample.py")
  assert not (tmp_path / "w").exists()
  import toyjobs.sample

  assert toyjobs.sample.CALLS == []
  cli.run(toy_job(x=2), str(tmp_path / "w"), "sample.py")
  assert toyjobs.sample.CALLS == [2]


def test_a_workdir_of_another_config_is_refused_before_the_job_runs(toy_job, tmp_path):
  cli.run(toy_job(x=2), str(tmp_path / "w"), "sample.py")
  with pytest.raises(UserError, match="different config"):
    cli.run(toy_job(x=3), str(tmp_path / "w"), "sample.py")
  import toyjobs.sample

  assert toyjobs.sample.CALLS == [2]


def test_each_entry_point_refuses_the_other_ones_jobs(toy_job, tmp_path):
  with pytest.raises(UserError, match=r"run it with `python sample.py"):
    cli.run(toy_job(), str(tmp_path / "w"), "train.py")
  with pytest.raises(UserError, match="name the job module only"):
    cli.run(toy_job(job="toyjobs.sample:run"), str(tmp_path / "w"), "sample.py")
  with pytest.raises(UserError, match="is not a job module"):
    cli.run(toy_job(job="toyjobs.nothing"), str(tmp_path / "w"), "sample.py")
  assert not (tmp_path / "w").exists()


def test_every_shipped_config_names_a_job_of_the_entry_point_its_header_gives():
  sample = dict(cli.config_docs(REPO / "configs", "sample.py"))
  train = dict(cli.config_docs(REPO / "configs", "train.py"))
  shipped = sorted(p.name for p in (REPO / "configs").glob("*.py") if not p.name.startswith("_"))
  assert sorted(n.split("/")[1] for n in [*sample, *train]) == shipped
  for name in [*sample, *train]:
    header = (REPO / name).read_text()
    assert ("python sample.py" if name in sample else "python train.py") in header, name
  assert all(doc for doc in [*sample.values(), *train.values()])  # a one-line purpose each


def test_help_exits_0_and_lists_this_entry_points_configs():
  r = entry("sample.py", "--help")
  assert r.returncode == 0, r.stderr
  assert "configs/glauber.py" in r.stdout and "configs/ising_hitting.py" in r.stdout
  assert "configs/padir_bible_en_es.py" not in r.stdout and "--workdir" in r.stdout
  r = entry("train.py", "--help")
  assert r.returncode == 0 and "configs/padir_bible_en_es.py" in r.stdout
  assert "configs/glauber.py" not in r.stdout


@pytest.mark.parametrize(
  "args,says",
  [
    (["--config", "configs/nope.py", "--workdir", "W"], "--config=configs/nope.py: no such file"),
    (
      ["--config", "configs/padir_bible_en_es.py", "--workdir", "W"],
      "run it with `python train.py",
    ),
    (["--config", "configs/ising_hitting.py", "--workdir", "W", "--config.nope=1"], "nope"),
    (["--workdir", "W"], "--config is required"),
  ],
)
def test_user_errors_are_one_line_and_touch_nothing(args, says, tmp_path):
  workdir = tmp_path / "W"
  r = entry("sample.py", *[str(workdir) if a == "W" else a for a in args])
  assert r.returncode == 2, (r.stdout, r.stderr)
  lines = [line for line in r.stderr.splitlines() if line.strip()]
  assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], r.stderr
  assert "Traceback" not in r.stderr and not workdir.exists()
