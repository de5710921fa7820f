"""The one-command study (glauber.jobs.study): every protocol's section from one run at tiny
sizes, a killed study resumed equals an uninterrupted one, and scale="paper" sets the paper's
sizes only where the config kept the default ones."""

from __future__ import annotations

import json

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
FIGURES = ("rectangle_hist.png", "traps.png", "basins_pca.png", "margins.png")


def tiny_config(model_dir, text):
  from configs.glauber_study import get_config

  c = get_config()
  c.model, c.text, c.controls = str(model_dir), str(text), ""
  c.embedding_model = str(model_dir)  # a tiny random encoder stands in for MiniLM
  c.num_rectangles, c.replacement_top_k, c.batch_size, c.max_tokens = 4, 5, 4, 24
  c.influence.seed_text, c.influence.temperatures = "the river runs past the mill", (1.0,)
  c.influence.num_contexts, c.influence.num_values, c.influence.num_rectangles = 2, 3, 0
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


@pytest.fixture
def setup(tiny_english_bert, tmp_path):
  model_dir = tiny_english_bert
  text = tmp_path / "passages.txt"
  text.write_text(
    "the river runs past the old mill and into the sea before the night\n"
    "she bought bread, cheese and apples at the market on saturday morning\n"
    "the children played in the park until their parents called them home\n"
    "a storm moved across the valley and the farmers brought in the hay\n"
  )
  return model_dir, text


def comparable(results: dict) -> dict:
  """Results without the wall times (the only thing a resumed run may change)."""
  return {
    k: {kk: vv for kk, vv in v.items() if not kk.startswith("seconds")}
    if isinstance(v, dict)
    else v
    for k, v in json.loads(json.dumps(results)).items()
  }


def test_study_writes_every_section_and_a_killed_study_resumes_to_the_same_results(
  setup, tmp_path, monkeypatch
):
  c = tiny_config(*setup)
  whole = study.run(c, str(tmp_path / "whole"))
  report = (tmp_path / "whole" / "report.md").read_text()
  for heading in SECTIONS:
    assert heading in report, heading
  for figure in FIGURES:
    assert (tmp_path / "whole" / figure).is_file(), figure
  assert "Wall time per stage" in report and "Command: `python sample.py" in report
  assert set(whole) == {"model", *study.stages.stage_names(c)}
  traps = whole["traps"]
  assert traps["num_chains"] == 3 and traps["last_step"] == 60
  assert traps["traps"], "T = 0.3 on the tiny model should trap its chains"
  assert "holding_traps" in traps and 0 <= traps["agreement"] <= 1
  for t in traps["traps"]:  # the catalogue's margin slots come from glauber.measures.margins
    assert t["delta_min"] is not None and t["kind"] in ("perfect", "approximate")
  mh = whole["mh_traps"]["traps"]
  assert 1 <= len(mh) <= 2 and {r["text"] for r in mh} <= {t["text"] for t in traps["traps"]}
  for r in mh:
    assert 0 <= r["glauber"]["escaped"] <= 2 and 0 <= r["mh"]["acceptance"] <= 1

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
  resumed = study.run(c, str(tmp_path / "resumed"))
  assert comparable(resumed) == comparable(whole)


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
