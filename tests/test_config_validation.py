"""Every key of every shipped config, set to a natural bad value, is refused up front.

The table is built by walking each config (configs/*.py, the ones `gmlm.cli.config_docs` lists
for sample.py and train.py): an int key gets 0, -1, True and None; a float key -1.0, nan and None
(and 1.5 where it is a probability); a string key "nonsense" and None; a bool key None; a tuple
key (), None and one bad element. These are the values `ml_collections.ConfigDict` (and so a
--config.KEY=VALUE override) accepts for the key's type. Each case runs `gmlm.cli.prepare` and
must raise a `ConfigError` whose one line names the key, the value and what is allowed, before
any model is loaded and without creating the run directory. Configs of one job share its
validator, so each (job, key, bad value) runs once, on the first config holding the key.

`VALID` lists the (key, value) pairs that are legitimately valid, with the reason; those must
pass `prepare`. A new config key that gets no check fails here until it is checked or listed.
"""

from __future__ import annotations

import importlib
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import ml_collections
import pytest

from gmlm import cli
from gmlm.checks import ConfigError

REPO = Path(__file__).resolve().parents[1]
NONSENSE = "nonsense"
NAN = float("nan")

# Floats that are probabilities or fractions: 1.5 is out of range too.
PROBABILITIES = (
  "top_p",
  "auto_threshold",
  "data.eval_fraction",
  "model.dropout_rate",
  "loss.keep_rate",
  "loss.mask_rate",
  "loss.glancing_ratio",
  "loss.glancing_ratio_end",
)

# (key, repr(value)) -> why the value is valid (prepare must accept it); "CONFIG:key" for one
# config only.
VALID = {
  ("seed", "0"): "the first seed",
  ("top_k", "0"): "0 = no top-k truncation",
  ("max_sentences", "0"): "0 = every held-out sentence",
  ("trim", "0"): "0 = PaDIR decodes at max_target_length (no trimming)",
  ("dag_lm_order", "0"): "0 = a DAG model's beam without an n-gram model",
  ("dag_lm_weight", "0.0"): "0 = the n-gram model's term off",
  ("dag_length_norm", "0.0"): "0 = the DAG beam ranks by its score itself, not per length",
  ("bootstrap_resamples", "0"): "0 = no paired-bootstrap comparisons in the report",
  ("max_passages", "0"): "0 = every passage",
  ("warmup_steps", "0"): "no warmup",
  ("train.warmup_steps", "0"): "no warmup",
  ("weight_decay", "0"): "no weight decay",
  ("eval_every", "0"): "0 = validation at the end only",
  ("lora_rank", "0"): "0 = full fine-tuning",
  ("data.min_chars", "0"): "keep every non-empty line",
  ("data.max_lines", "0"): "0 = all lines",
  ("train.stop_at_step", "0"): "0 = run to num_train_steps",
  ("train.early_stopping_patience", "0"): "0 = no early stopping",
  ("data.grammar_seed", "0"): "the family task itself (other seeds: held-aside draws)",
  ("distill.teacher_step", "0"): "0 = the teacher's latest checkpoint",
  ("decode.num_examples", "0"): "0 = no translation during training (BLEU off)",
  ("mesh.data", "0"): "0 = one device",
  ("mesh.data", "-1"): "-1 = every device the model axis leaves",
  ("random_models", "0"): "no random-model check",
  ("drift.seed", "0"): "the first seed",
  ("influence.seed", "0"): "the first seed",
  ("traps.seed", "0"): "the first seed",
  ("semantic_drift.seed", "0"): "the first seed",
  ("coupling.seed", "0"): "the first seed",
  ("basins.seed", "0"): "the first seed",
  ("attractors.seed", "0"): "the first seed",
  ("mh_traps.seed", "0"): "the first seed",
  ("traps.min_hold", "0"): "0 = the window's length",
  ("traps.max_gap", "0"): "no excursion: a trap is a state held",
  ("traps.max_sites", "0"): "an excursion may change no site (no excursion)",
  ("drift.k", "0"): "no copy of the token: the drift into the basin from outside",
  ("influence.num_changed", "0"): "base contexts all equal to the seed",
  ("influence.num_changed", "-1"): "-1 = max(1, n // 4) sites changed per base context",
  ("influence.num_rectangles", "0"): "0 = no rectangles on the seed sentence",
  ("model.num_encoder_layers", "0"): "an encoder of embeddings only (an ablation)",
  ("model.num_decoder_layers", "0"): "a decoder of embeddings only (an ablation)",
  ("model.max_length_offset", "0"): "0 = absolute length classes (the paper's)",
  ("model.ctc_upsample", "0"): "0 = no CTC: the length head and refinement (the paper's)",
  ("loss.logits_chunk", "0"): "0 = the whole logits (no chunked cross-entropy)",
  ("loss.glancing_anneal_steps", "0"): "0 = a constant glancing ratio",
  (
    "init_from",
    repr(NONSENSE),
  ): "an AR run directory, checked (padir.training.warm_start) before writing",
  # Real numbers without a sign constraint.
  ("field", "-1.0"): "h_i < 0 favours spin -1",
  ("ising_mple_error:couplings", "(-1.0,)"): "k-MPLE accepts antiferromagnetic J < 0",
  ("ising_mple_asymptotics:couplings", "(-1.0,)"): "k-MPLE accepts antiferromagnetic J < 0",
  ("decode.length_penalty", "-1.0"): "a penalty < 0 favours short hypotheses",
  ("length_penalty", "-1.0"): "a penalty < 0 favours short hypotheses",
  ("step", "0"): "0 = the run's latest checkpoint",
  ("output", repr(NONSENSE)): "a file the translations are written to",
  ("distill.length_penalty", "-1.0"): "a penalty < 0 favours short hypotheses",
  # Free text and names resolved when used (a typo there is reported with the name).
  ("model", repr(NONSENSE)): "a Hugging Face id, looked up when the run loads it",
  ("embedding_model", repr(NONSENSE)): "a Hugging Face id, looked up at the end of the run",
  ("topic_scorer", repr(NONSENSE)): "an NLI model id, looked up when the basins stage runs",
  ("attractors.prefixes", "('nonsense',)"): "any prefixes",
  ("prefix", repr(NONSENSE)): "any text",
  ("prompt", repr(NONSENSE)): "any text (the unmasking job's prompt)",
  ("exclude_pattern", repr(NONSENSE)): "a regular expression",
  ("init_text", repr(NONSENSE)): "a starting text",
  ("init_text", "('nonsense',)"): "a list of starting texts",
  ("text_x", repr(NONSENSE)): "a passage",
  ("text_y", repr(NONSENSE)): "a passage",
  ("drift.base_text", repr(NONSENSE)): "any text (the sites the basin token leaves)",
  ("drift.token", repr(NONSENSE)): "checked against the tokenizer (one token) when it loads",
  ("margins.texts", "('nonsense',)"): "any texts",
  ("data.corpus_dir", repr(NONSENSE)): "a directory (padir.data.bible fills it when prepare_bible)",
  ("data.source_lang", repr(NONSENSE)): "a language code naming the files SPLIT.LANG",
  ("data.target_lang", repr(NONSENSE)): "a language code naming the files SPLIT.LANG",
  ("data.vocab_path", repr(NONSENSE)): "where the vocabulary is (or is trained to)",
  ("data.tfds_data_dir", repr(NONSENSE)): "where the tfds files are written",
  ("data.bucket_boundaries", "()"): "() = pad every batch to the maximum lengths",
  (
    "ctc_blank_penalty_grid",
    "()",
  ): "() = decode CTC models at ctc_blank_penalty (no sweep on valid)",
  ("ctc_blank_penalty_grid", "(0,)"): "a grid of one penalty, 0 = the model's argmax",
  ("distill.teacher_workdir", repr(NONSENSE)): "a run directory, checked when distilling",
  ("distill.corpus_dir", repr(NONSENSE)): "where the distilled corpus is written",
  ("checkpoints", repr(NONSENSE)): "run directories, checked before the first model loads",
}

# Keys left out: resolved by gmlm.cli.resolve_job (a UserError, tested in tests/gmlm/test_cli).
SKIP = ("job",)


def shipped_configs() -> list[tuple[str, str]]:
  """(configs module name, entry point) of every shipped config."""
  return [
    (Path(name).stem, entry)
    for entry in cli.ENTRY_POINTS
    for name, _ in cli.config_docs(REPO / "configs", entry)
  ]


def base_config(name: str, tmp_path: Path) -> ml_collections.ConfigDict:
  """The shipped config; a data file that is only on a set-up machine is replaced by a temp
  file so that the other keys can be checked."""
  config = importlib.import_module(f"configs.{name}").get_config()
  if "checkpoint" in config:  # a translation config: a run directory as train.py leaves it
    run = tmp_path / "trained"
    (run / "checkpoints" / "1").mkdir(parents=True, exist_ok=True)
    trained = importlib.import_module("configs.padir_bible_en_es").get_config()
    trained.data.vocab_path = str(run / "spm.model")  # the vocabulary it names is there too
    (run / "spm.model").write_bytes(b"")
    (run / "config.json").write_text(trained.to_json(), encoding="utf-8")
    config.checkpoint = str(run)
  if "data" in config and "path" in config.data and config.data.path != "english":
    text = tmp_path / "lines.txt"
    text.write_text("a first line of text for the test\n", encoding="utf-8")
    config.data.path = str(text)
  return config


def leaves(config: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict):
      yield from leaves(value, f"{prefix}{key}.")
    else:
      yield f"{prefix}{key}", value


def bad_values(key: str, value: Any) -> list[Any]:
  if isinstance(value, bool):
    return [None]
  if isinstance(value, int):
    return [0, -1, True, None]
  if isinstance(value, float):
    return [-1.0, NAN, None] + ([1.5] if key in PROBABILITIES else [])
  if isinstance(value, str):
    return [NONSENSE, None]
  if isinstance(value, (tuple, list)):
    first = value[0] if len(value) else 1
    element = {bool: [None], int: [0, -1], float: [-1.0, NAN], str: [NONSENSE]}[type(first)]
    return [(), None] + [(x,) for x in element]
  raise AssertionError(f"{key}={value!r}: no bad values for type {type(value).__name__}")


def cases() -> Iterator[Any]:
  """Each (job, key, bad value) once: the configs of one job share its validator (all the PaDIR
  training configs share padir.jobs.train's), so the first config holding a key stands for the
  others. Every key of every config is still checked (5,675 cases were 1,385 on 2026-11-27)."""
  seen = set()
  for name, entry in shipped_configs():
    config = importlib.import_module(f"configs.{name}").get_config()
    for key, value in leaves(config):
      if key in SKIP:
        continue
      for bad in bad_values(key, value):
        if (config.job, key, repr(bad)) not in seen:
          seen.add((config.job, key, repr(bad)))
          yield pytest.param(name, entry, key, bad, id=f"{name}:{key}={bad!r}")


def with_value(config: ml_collections.ConfigDict, key: str, value: Any) -> None:
  *parents, last = key.split(".")
  node = config
  for part in parents:
    node = node[part]
  node[last] = value  # raises TypeError where ConfigDict itself refuses the value


def same(stored: Any, bad: Any) -> bool:
  """stored is the value set (ConfigDict may hold a list field's tuple as a list)."""
  if isinstance(bad, tuple) and isinstance(stored, (list, tuple)):
    return len(stored) == len(bad) and all(same(a, b) for a, b in zip(stored, bad))
  if isinstance(bad, float) and math.isnan(bad):
    return isinstance(stored, float) and math.isnan(stored)
  return stored is bad or (type(stored) is type(bad) and stored == bad)


@pytest.fixture(autouse=True)
def no_model_loads(monkeypatch):
  from gmlm import nn as gm

  def refuse(*args, **kwargs):
    raise AssertionError("validation loaded a model")

  for name in ("load", "load_model", "load_tokenizer"):
    monkeypatch.setattr(gm, name, refuse)


@pytest.mark.parametrize("name,entry", shipped_configs())
def test_every_shipped_config_passes_validation(name, entry, tmp_path):
  cli.prepare(base_config(name, tmp_path), str(tmp_path / "run"), entry)
  assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name,entry", shipped_configs())
def test_every_job_refuses_a_workdir_holding_another_config(name, entry, tmp_path):
  """The guard every entry point applies before a job runs: the workdir of a run (finished or
  killed: only config.json matters) with one key changed is refused, and nothing is written."""
  from gmlm import runs
  from gmlm.checks import UserError

  config = base_config(name, tmp_path)
  workdir = tmp_path / "run"
  workdir.mkdir()
  other = ml_collections.ConfigDict(config.to_dict())
  other.seed = int(other.get("seed", 0)) + 1
  (workdir / "config.json").write_text(runs.dumps(other))
  before = (workdir / "config.json").read_bytes()
  seed = int(config.get("seed", 0))
  with pytest.raises(
    UserError, match=rf"different config \(seed differs: {seed + 1} there, {seed} now"
  ):
    cli.prepare(config, str(workdir), entry)
  assert [f.name for f in workdir.iterdir()] == ["config.json"]
  assert (workdir / "config.json").read_bytes() == before


@pytest.mark.parametrize("name,entry,key,bad", list(cases()))
def test_a_bad_value_is_refused_in_one_line_naming_key_value_and_range(
  name, entry, key, bad, tmp_path
):
  config = base_config(name, tmp_path)
  try:
    with_value(config, key, bad)
  except TypeError:
    pytest.skip("ConfigDict refuses the value itself")
  workdir = tmp_path / "run"
  if (key, repr(bad)) in VALID or (f"{name}:{key}", repr(bad)) in VALID:
    cli.prepare(config, str(workdir), entry)
  else:
    with pytest.raises(ConfigError) as info:
      cli.prepare(config, str(workdir), entry)
    message = str(info.value)
    assert "\n" not in message
    assert info.value.key == key, message
    assert same(info.value.value, bad), message
    assert message.startswith(f"config.{key}={info.value.value!r}: "), message
    assert len(info.value.allowed) > 10, message  # says what is allowed
  assert not workdir.exists()


@pytest.mark.parametrize(
  "name,overrides,key,match",
  [
    (
      "glauber",
      {"num_steps": 410},
      "num_steps",
      r"must be a multiple of record_every=20 .*num_steps=400 or 420",
    ),
    (
      "glauber_coupling",
      {"num_steps": 30},
      "num_steps",
      r"must be a multiple of record_every=20 .*num_steps=20 or 40",
    ),
    ("glauber", {"method": "parallel", "block_size": 2}, "block_size", "'block' and 'sweep' only"),
    ("glauber", {"exclude_pattern": "("}, "exclude_pattern", "not a regular expression"),
    ("padir_bible_en_es", {"mesh.data": -2}, "mesh.data", ">= -1"),
    ("glauber", {"init_text": "texts/start"}, "init_text", "'texts/start' does not exist"),
    ("glauber", {"init_text": "start.txt"}, "init_text", "'start.txt' does not exist"),
    (
      "glauber_exact",
      {"num_sites": 6},
      "num_sites",
      r"7\^6 = 117649 states, over max_states = 20000",
    ),
  ],
)
def test_a_bad_combination_is_refused_naming_the_key_and_the_fix(
  name, overrides, key, match, tmp_path
):
  config = base_config(name, tmp_path)
  for k, v in overrides.items():
    with_value(config, k, v)
  with pytest.raises(ConfigError, match=match) as info:
    cli.prepare(config, str(tmp_path / "run"), "sample.py" if "glauber" in name else "train.py")
  assert info.value.key == key
  assert not (tmp_path / "run").exists()


def test_every_key_can_be_set_from_the_command_line(tmp_path):
  """absl overrides (--config.KEY=VALUE) support these types only (not lists): a list field
  such as init_text could not be set from sample.py."""
  supported = (bool, int, float, str, tuple, type(None))
  for name, _ in shipped_configs():
    config = importlib.import_module(f"configs.{name}").get_config()
    bad = [key for key, value in leaves(config) if not isinstance(value, supported)]
    assert not bad, f"configs/{name}.py: {bad} cannot be overridden from the command line"

  # Through sample.py's parser: the overrides are accepted, validation then names num_pairs.
  for name, overrides in (
    (
      "glauber",
      [
        "--config.init_text=first text|second text",
        "--config.allow_pickle=True",
        "--config.top_k=3",
        "--config.num_chains=0",
      ],
    ),
    (
      "glauber_coupling",
      ["--config.num_sites=(3, 5)", "--config.temperatures=(1.0,)", "--config.num_pairs=0"],
    ),
  ):
    key = overrides[-1].split("=")[0][len("--config.") :]
    result = subprocess.run(
      [
        sys.executable,
        "sample.py",
        f"--config=configs/{name}.py",
        f"--workdir={tmp_path / 'run'}",
        *overrides,
      ],
      cwd=REPO,
      capture_output=True,
      text=True,
      timeout=120,
    )
    assert result.returncode == 2 and result.stderr.startswith(f"error: config.{key}=0:"), (
      result.stderr[-2000:]
    )
  assert not (tmp_path / "run").exists()


class _Loaded(Exception):
  """Stops a job at its model load, with the arguments it passed."""


@pytest.mark.parametrize(
  "name,job",
  [
    ("glauber", "glauber.jobs.sample"),
    ("glauber_coupling", "glauber.jobs.coupling"),
    ("glauber_exact", "glauber.jobs.exact"),
    ("mlm_eval", "glauber.jobs.mlm_eval"),
    ("mlm_minilm", "glauber.jobs.mlm_train"),
  ],
)
def test_allow_pickle_reaches_the_model_loader(name, job, tmp_path, monkeypatch):
  from gmlm import nn as gm

  def load(*args, **kwargs):
    raise _Loaded(kwargs)

  monkeypatch.setattr(gm, "load", load)
  config = base_config(name, tmp_path)
  assert config.allow_pickle is False  # no pickle is read without the opt-in
  config.allow_pickle = True
  with pytest.raises(_Loaded) as info:
    importlib.import_module(job).run(config, str(tmp_path / "run"))
  assert info.value.args[0]["allow_pickle"] is True


@pytest.mark.parametrize(
  "name,key",
  [
    ("glauber", "embedding_model"),  # was refused only after the whole run (issue 41, 3)
    ("glauber", "model"),
    ("glauber_unmasking", "embedding_model"),
    ("glauber_study", "topic_scorer"),
    ("mlm_minilm", "model"),
  ],
)
def test_a_model_path_that_names_nothing_is_refused_before_any_work(name, key, tmp_path):
  config = base_config(name, tmp_path)
  with_value(config, key, str(tmp_path / "no" / "such" / "dir"))
  (tmp_path / "notes.txt").write_text("unrelated")
  with pytest.raises(ConfigError, match=r"does not exist; give a directory") as info:
    cli.prepare(config, str(tmp_path / "run"), "train.py" if name == "mlm_minilm" else "sample.py")
  assert info.value.key == key and "notes.txt" not in str(info.value)
  assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["mlm_eval", "mlm_default"])
def test_missing_offline_english_text_is_one_line_before_anything_is_written(
  name, tmp_path, monkeypatch
):
  """gensim's data not installed (GLAUBER_GENSIM_DATA pointing at an empty directory): refused
  with the pip command, not a FileNotFoundError after config.json is written (issue 41, 1)."""
  from gmlm.checks import UserError

  monkeypatch.setenv("GLAUBER_GENSIM_DATA", str(tmp_path / "empty"))
  entry = "sample.py" if name == "mlm_eval" else "train.py"
  with pytest.raises(UserError, match=r"not installed: gensim==4\.3\.3 .*pip install") as info:
    cli.prepare(base_config(name, tmp_path), str(tmp_path / "run"), entry)
  assert "\n" not in str(info.value)
  assert not (tmp_path / "run").exists()


def test_too_many_chains_for_the_memory_is_refused_with_the_estimate(tmp_path):
  """num_chains=10**12 was accepted and the run grew until the machine ran out (issue 41, 5)."""
  config = base_config("glauber", tmp_path)
  config.num_chains = 10**12
  with pytest.raises(ConfigError, match=r"needs at least [\d,.]+ TiB of memory") as info:
    cli.prepare(config, str(tmp_path / "run"), "sample.py")
  assert info.value.key == "num_chains" and "this machine's" in str(info.value)
  assert not (tmp_path / "run").exists()


def test_a_prefix_too_long_for_the_model_is_echoed_cut_short_with_its_length():
  from glauber.layout import Layout
  from gmlm.checks import UserError

  class Tokenizer:
    cls_token_id, sep_token_id, mask_token_id = 1, 2, 3

    def __call__(self, text, add_special_tokens=False):
      return {"input_ids": [5] * len(text.split())}

  prefix = "word " * 700
  with pytest.raises(UserError, match=r"the prefix 'word word .*\.\.\. \(3500 characters\)") as e:
    Layout.from_tokenizer(Tokenizer(), 4, prefix, 512)
  assert len(str(e.value)) < 250
