"""The command line as a newcomer meets it (issue 27, item 5): a config's fields with their
defaults and comments (--help with --config, --print_config), each config's purpose as a whole
sentence, a misspelt key in one line with the nearest field, an unwritable --workdir and too
many free sites refused in one line before anything loads, the hub's error on one line."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest

from gmlm import cli
from gmlm.checks import UserError

REPO = cli.Path(__file__).resolve().parents[2]


def entry(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=120
  )


def load(name: str):
  sys.path.insert(0, str(REPO))
  try:
    return __import__(f"configs.{name}", fromlist=["get_config"]).get_config()
  finally:
    sys.path.remove(str(REPO))


def test_help_with_a_config_lists_every_field_its_default_and_its_comment():
  out = entry("sample.py", "--config", "configs/glauber_exact.py", "--help")
  assert out.returncode == 0, out.stderr
  lines = out.stdout.splitlines()
  config = load("glauber_exact")
  for key in config.keys():  # every field, with the file's default
    assert any(line.strip().startswith(f"{key} = {config[key]!r}") for line in lines), key
  (line,) = [x for x in lines if x.strip().startswith("refine_bits = 6")]
  assert line.endswith("# t_mix exact up to 2^(refine_bits + 1) steps, else bracketed")
  # a config that extends another takes the comments of both files, nested fields included
  out = entry("sample.py", "--config", "configs/glauber_study.py", "--help")
  assert out.returncode == 0
  assert re.search(r"^  controls = 'gpt2-random,smollm2' +# causal controls", out.stdout, re.M)
  assert re.search(r"^  traps\.num_chains = \d+", out.stdout, re.M)


def test_print_config_shows_the_overrides_and_runs_nothing(tmp_path):
  out = entry(
    "sample.py",
    "--config",
    "configs/glauber_exact.py",
    "--config.num_sites=3",
    "--workdir",
    str(tmp_path / "w"),
    "--print_config",
  )
  assert out.returncode == 0, out.stderr
  assert (
    re.search(r"^  num_sites = 3 \(set\)( +#.*)?$", out.stdout, re.M)
    and not (tmp_path / "w").exists()
  )


def header(path) -> str:
  """A config file's header, whitespace normalised: its docstring, else its leading comments."""
  text = path.read_text(encoding="utf-8")
  doc = ast.get_docstring(ast.parse(text))
  if doc is None:
    doc = " ".join(line.lstrip("# ") for line in text.split("\n\n")[0].splitlines())
  return " ".join(doc.split())


@pytest.mark.parametrize("script", ["sample.py", "train.py"])
def test_help_gives_each_configs_purpose_as_a_whole_sentence(script):
  out = entry(script, "--help").stdout
  block = out.split(f"configs for {script}:\n")[1].split("\n\n")[0]
  entries = re.split(r"\n(?=  configs/)", block)
  assert len(entries) >= 5
  for text in entries:
    name, purpose = text.split(None, 1)
    purpose = " ".join(purpose.split())
    assert purpose[-1] in ".!?", (name, purpose)  # not cut mid-sentence
    assert header(REPO / name).startswith(purpose), name
    assert purpose.count("(") == purpose.count(")"), name


def test_a_misspelt_key_is_one_line_with_the_nearest_field(tmp_path):
  out = entry(
    "sample.py", "--config", "configs/glauber.py", "--workdir", str(tmp_path / "w"),
    "--config.temprature=1",
  )  # fmt: skip
  assert out.returncode == 2
  assert out.stderr == "error: the config has no field 'temprature'; did you mean 'temperature'?\n"
  out = entry(
    "sample.py", "--config", "configs/glauber_study.py", "--workdir", str(tmp_path / "w"),
    "--config.traps.num_chian=2",
  )  # fmt: skip
  assert out.stderr == (
    "error: the config has no field 'traps.num_chian'; did you mean 'traps.num_chains'?\n"
  )
  assert not (tmp_path / "w").exists()


def test_a_workdir_under_a_file_is_one_line_and_exit_2(tmp_path):
  (tmp_path / "file").write_text("x")
  out = entry(
    "sample.py", "--config", "configs/glauber.py", "--workdir", str(tmp_path / "file" / "run")
  )
  assert out.returncode == 2
  assert out.stderr.count("\n") == 1 and "is a file, so no directory can be made" in out.stderr


def test_an_unwritable_workdir_is_refused_before_anything(tmp_path, monkeypatch):
  """Tests run as root, whom permission bits do not stop (and /root's mode keeps an unprivileged
  child from running this venv's python), so no permission is denied here: os.access is made to
  answer as it does for a user without write permission, or on a read-only mount."""
  import os

  (tmp_path / "ro").mkdir()
  real = os.access
  monkeypatch.setattr(
    os, "access", lambda p, mode, **kw: False if "ro" in str(p) else real(p, mode, **kw)
  )
  config = load("glauber")
  for workdir in (tmp_path / "ro", tmp_path / "ro" / "new" / "run"):
    with pytest.raises(UserError, match=r"ro is not writable by this user") as e:
      cli.prepare(config, str(workdir), "sample.py")
    assert "\n" not in str(e.value)
  assert list((tmp_path / "ro").iterdir()) == []


def test_too_many_free_sites_are_refused_from_the_models_config_json(tiny_checkpoint, tmp_path):
  """The limit comes from config.json (max_position_embeddings; RoBERTa's counts from the pad
  id + 1), before any weight is read."""
  from gmlm.nn import loading

  bert = tiny_checkpoint("BertForMaskedLM")
  limit = loading.read_config(bert)["max_position_embeddings"]
  assert loading.position_limit(bert) == limit
  roberta = loading.read_config(tiny_checkpoint("RobertaForMaskedLM"))
  want = roberta["max_position_embeddings"] - roberta["pad_token_id"] - 1
  assert loading.position_limit(tiny_checkpoint("RobertaForMaskedLM")) == want
  config = load("glauber")
  config.model = str(bert)
  config.num_sites = limit - 1
  with pytest.raises(UserError, match=rf"num_sites={limit - 1}: the model takes {limit} positions"):
    cli.prepare(config, str(tmp_path / "w"), "sample.py")
  config.num_sites = limit - 2
  cli.prepare(config, str(tmp_path / "w"), "sample.py")  # fits


def test_600_sites_on_the_default_mlm_is_one_line_before_any_load(tmp_path):
  out = entry(
    "sample.py", "--config", "configs/glauber.py", "--workdir", str(tmp_path / "w"),
    "--config.num_sites=600",
  )  # fmt: skip
  if "not installed" in out.stderr or "all-MiniLM" in out.stderr:
    pytest.skip("the default MLM's base is not installed")
  assert out.returncode == 2 and out.stderr.count("\n") == 1
  assert out.stderr.startswith("error: config.num_sites=600: the model takes 512 positions")
  assert not (tmp_path / "w").exists()


def test_the_hubs_multi_line_error_is_one_line(tmp_path, monkeypatch):
  import huggingface_hub

  from gmlm import nn as gm

  def fail(*args, **kwargs):
    raise huggingface_hub.errors.LocalEntryNotFoundError(
      "An error happened while trying to locate the files on the Hub.\n\nPlease check your "
      "internet connection and try again."
    )

  monkeypatch.chdir(tmp_path)
  monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
  with pytest.raises(FileNotFoundError) as e:
    gm.load("someone/absent", cache_dir=str(tmp_path / "hub"))
  assert "\n" not in str(e.value) and "locate the files on the Hub. Please check" in str(e.value)
