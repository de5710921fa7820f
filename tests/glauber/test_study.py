"""The one-command study (glauber.jobs.study): every protocol's section from one run at tiny
sizes, each section heading a CommonMark heading, each figure showing its data (issue 27), the
report's command reproducing the run, a progress bar over stages, a killed study resumed
(saying so) equals an uninterrupted one, and scale="paper" sets the paper's sizes only where
the config kept the default ones."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import subprocess
import sys

import figure_checks
import pytest

from glauber import recording
from glauber.jobs import study
from gmlm import cli
from gmlm.checks import ConfigError

SECTIONS = (
  "## Rectangle test",
  "## Influence",
  "## Score margins",
  "## Drift certificate",
  "## Trap states",
  "## Semantic drift",
  "## Coupling",
  "## Semantic basins",
  "## Prefix attractors",
  "## Metropolis-Hastings in the traps",
)
FIGURES = ("rectangle_hist.png", "traps.png", "basins_pca.png", "margins.png", "phase_diagram.png")


def tiny_config(model_dir, text):
  from configs.glauber_study import get_config

  c = get_config()
  c.model, c.text, c.controls = str(model_dir), str(text), ""
  c.embedding_model = str(model_dir)  # a tiny random encoder stands in for MiniLM
  c.num_rectangles, c.replacement_top_k, c.batch_size, c.max_tokens = 4, 5, 4, 24
  c.influence.seed_text, c.influence.temperatures = "the river runs past the mill", (1.0,)
  c.influence.num_contexts, c.influence.num_values, c.influence.num_rectangles = 2, 3, 3
  c.margins.texts, c.margins.temperatures = ("the river runs",), (1.0,)
  c.drift.num_sites, c.drift.k, c.drift.num_states, c.drift.temperatures = 4, 2, 3, (1.0,)
  t = c.traps
  t.num_chains, t.num_sites, t.num_steps, t.record_every, t.chunk_records = 3, 6, 60, 1, 10
  t.window, t.threshold, t.temperature = 10, 0.5, 0.3
  t.mode = "rejection_free"  # both detectors (the basin chains run the plain mode)
  d = c.semantic_drift
  d.temperatures, d.num_sites, d.num_chains, d.num_steps, d.record_every = (
    (1.0, 4.0),
    (4, 6),
    2,
    20,
    5,
  )
  d.t_fixed = 10
  p = c.coupling
  p.temperatures, p.num_sites, p.num_pairs, p.num_steps, p.record_every = (1.0,), (3, 4), 2, 10, 5
  b = c.basins
  b.seeds_per_topic, b.num_sites, b.num_steps, b.record_every, b.chunk_records = 1, 6, 20, 5, 2
  b.scorer_check = False
  a = c.attractors
  a.prefixes, a.num_chains, a.num_sites, a.num_steps = ("the kid said that",), 2, 4, 10
  m = c.mh_traps
  m.num_traps, m.chains_per_trap, m.num_steps, m.record_every = 2, 2, 10, 5
  return c


PASSAGES = (
  "the river runs past the old mill and into the sea before the night\n"
  "she bought bread, cheese and apples at the market on saturday morning\n"
  "the children played in the park until their parents called them home\n"
  "a storm moved across the valley and the farmers brought in the hay\n"
)


@pytest.fixture(scope="module")
def setup(tiny_english_bert, tmp_path_factory):
  text = tmp_path_factory.mktemp("study_text") / "passages.txt"
  text.write_text(PASSAGES)
  return tiny_english_bert, text


@pytest.fixture(scope="module")
def whole(setup, tmp_path_factory):
  """One uninterrupted tiny study: (config, workdir, results, {figure: what a reader would
  miss on it}, stderr)."""
  c = tiny_config(*setup)
  workdir = tmp_path_factory.mktemp("study") / "whole"
  err = io.StringIO()
  with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
    seen = figure_checks.capture(mp)
    results = study.run(c, str(workdir))
  return c, workdir, results, seen, err.getvalue()


def comparable(results: dict) -> dict:
  """Results without the wall times (the only thing a resumed run may change)."""
  return {
    k: {kk: vv for kk, vv in v.items() if not kk.startswith("seconds")}
    if isinstance(v, dict)
    else v
    for k, v in json.loads(json.dumps(results)).items()
  }


@pytest.mark.slow  # the whole study job, end to end (~1 CPU-min)
def test_study_writes_every_section(whole):
  c, workdir, results, _, _ = whole
  report = (workdir / "report.md").read_text()
  for heading in SECTIONS:
    assert heading in report, heading
  for figure in FIGURES:
    assert (workdir / figure).is_file(), figure
  assert "Wall time per stage" in report and "python sample.py" in report
  assert set(results) == {"model", *study.stages.stage_names(c)}
  traps = results["traps"]
  assert traps["num_chains"] == 3 and traps["last_step"] == 60
  assert traps["traps"], "T = 0.3 on the tiny model should trap its chains"
  assert "holding_traps" in traps and 0 <= traps["agreement"] <= 1
  for t in traps["traps"]:  # the catalogue's margin slots come from glauber.measures.margins
    assert t["delta_min"] is not None and t["kind"] in ("perfect", "approximate")
  mh = results["mh_traps"]["traps"]
  assert 1 <= len(mh) <= 2 and {r["text"] for r in mh} <= {t["text"] for t in traps["traps"]}
  for r in mh:
    assert 0 <= r["glauber"]["escaped"] <= 2 and 0 <= r["mh"]["acceptance"] <= 1


@pytest.mark.slow  # the whole study job, end to end (~1 CPU-min)
def test_every_section_heading_renders_as_a_heading(whole):
  """Rendered by a CommonMark parser (markdown-it-py), every `#` line of report.md outside a
  code block is a heading (a heading glued to `</details>` or to a table is not)."""
  from markdown_it import MarkdownIt

  text = (whole[1] / "report.md").read_text()
  tokens = MarkdownIt("commonmark").enable("table").parse(text)
  rendered = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
  written, fenced = [], False
  for line in text.splitlines():
    fenced ^= line.startswith("```")
    if not fenced and re.match(r"#{1,6} ", line):
      written.append(line.lstrip("#").strip())
  assert len(written) >= len(SECTIONS) + 1
  assert rendered == written


@pytest.mark.slow  # the whole study job, end to end (~1 CPU-min)
def test_every_figure_shows_its_data_and_the_header_names_them(whole):
  """Each figure of the tiny study has a visible mark inside every data panel, a legend where
  it draws several series, labelled colour bars (tests/figure_checks.py), and the config's
  header names exactly the figures the study writes."""
  _, workdir, _, seen, _ = whole
  assert {name: p for name, p in seen.items() if p} == {}
  written = {p.name for p in workdir.glob("*.png")}
  assert written == set(seen) and "rectangle_influence.png" in written
  import configs.glauber_study

  header = configs.glauber_study.__doc__
  assert set(re.findall(r"[A-Za-z_]+\.png", header)) == written


@pytest.mark.slow  # the whole study job, end to end (~1 CPU-min)
def test_report_command_reproduces_the_run(whole):
  """The report's Command, parsed by ml_collections' own flag parser, gives the run's config
  (each of the tiny config's many overrides); a config no command line from the file can give
  is not called a command."""
  c, workdir, _, _, _ = whole
  report = (workdir / "report.md").read_text()
  block = re.search(r"```sh\n(.*?)\n```", report, re.S).group(1)
  args = shlex.split(block.replace("\\\n", " "))
  assert args[:6] == [
    "python",
    "sample.py",
    "--config",
    study.CONFIG_FILE,
    "--workdir",
    str(workdir),
  ]
  parse = (
    "import sys; from absl import flags; from ml_collections import config_flags; "
    "config_flags.DEFINE_config_file('config'); flags.DEFINE_string('workdir', None, ''); "
    "flags.FLAGS(sys.argv); print(flags.FLAGS.config.to_json())"
  )
  out = subprocess.run(
    [sys.executable, "-c", parse, *args[2:]], capture_output=True, text=True, check=True
  ).stdout
  assert json.loads(out) == json.loads(c.to_json())
  assert len([a for a in args if a.startswith("--config.")]) >= 20
  other = c.copy_and_resolve_references()
  with other.unlocked():
    other.extra_key = 1
  line = study.command(other, workdir)
  assert "no command line" in line and "extra_key" in line and "```sh" not in line


@pytest.mark.slow  # the whole study job, end to end (~1 CPU-min)
def test_the_progress_bar_counts_stages(whole):
  err = whole[4]
  assert re.search(r"study: 100%.*\b10/10 \[", err), err[-2000:]
  assert "resuming" not in err


@pytest.mark.slow  # the whole study job, end to end (~1 CPU-min)
def test_a_killed_study_resumes_to_the_same_results_and_says_so(
  whole, setup, tmp_path, monkeypatch, capsys
):
  c = tiny_config(*setup)
  # Killed while writing the basin chains' 2nd chunk: traps and the earlier stages are stored.
  original = recording.Trajectory.write

  def dying_write(self, index, *args, **kwargs):
    if self.path.parent.name == "basins" and index == 1:
      raise KeyboardInterrupt("killed")
    return original(self, index, *args, **kwargs)

  monkeypatch.setattr(recording.Trajectory, "write", dying_write)
  with pytest.raises(KeyboardInterrupt):
    study.run(c, str(tmp_path / "resumed"))
  monkeypatch.setattr(recording.Trajectory, "write", original)
  assert (tmp_path / "resumed" / "basins" / "trajectory" / "chunk_000000.npz").is_file()

  def refuse(*args, **kwargs):
    raise AssertionError("a finished stage was recomputed")

  from glauber.measures import rectangle
  from glauber.measures import traps as traps_lib

  monkeypatch.setattr(rectangle, "measure", refuse)
  monkeypatch.setattr(traps_lib, "measure", refuse)
  capsys.readouterr()
  resumed = study.run(c, str(tmp_path / "resumed"))
  assert comparable(resumed) == comparable(whole[2])
  err = capsys.readouterr().err
  assert "resuming: 7 of 10 stages done" in err
  assert re.search(r"study: 100%.*\b10/10 \[", err)


def test_paper_scale_keeps_given_sizes(tmp_path):
  from configs.glauber_study import get_config

  c = get_config()
  for key, value in study.DEFAULT_SIZES.items():  # the table mirrors the config file
    assert study._get(c, key) == value, key
  c.scale = "paper"
  c.traps.num_chains = 12  # given on the command line: kept
  p = study.scaled(c)
  assert p.traps.num_chains == 12 and p.traps.num_steps == 10_000
  assert p.basins.seeds_per_topic == 10 and p.num_rectangles == 300
  c.scale = "huge"
  with pytest.raises(ConfigError, match=r"config.scale='huge'"):
    cli.prepare(c, str(tmp_path / "run"), "sample.py")
  assert not (tmp_path / "run").exists()
