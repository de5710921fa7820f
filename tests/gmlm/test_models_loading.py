"""Where checkpoints come from and what happens when one is wrong: every error names the fix."""

from __future__ import annotations

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from models_util import batch, tiny_torch_model, torch_logits

from gmlm import nn as gm

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def bert_dir(tiny_checkpoint):
  """(directory, torch model) of conftest's tiny BERT."""
  return tiny_checkpoint("BertForMaskedLM"), tiny_torch_model("BertForMaskedLM")


def _edit_config(src, dst, **changes):
  shutil.copytree(src, dst)
  config = json.loads((dst / "config.json").read_text())
  config.update(changes)
  (dst / "config.json").write_text(json.dumps(config))
  return dst


def _fake_hub_cache(cache, repo_id, files_from):
  """The layout huggingface_hub writes: models--owner--name/{refs/main, snapshots/<sha>/...}."""
  sha = "0123456789abcdef0123456789abcdef01234567"
  repo = cache / ("models--" + repo_id.replace("/", "--"))
  (repo / "refs").mkdir(parents=True)
  (repo / "refs" / "main").write_text(sha)
  shutil.copytree(files_from, repo / "snapshots" / sha)


def test_hub_id_resolves_from_the_local_cache_when_offline(bert_dir, tmp_path, monkeypatch):
  directory, torch_model = bert_dir
  _fake_hub_cache(tmp_path / "hub", "someone/tiny-bert", directory)
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  model, _ = gm.load("someone/tiny-bert", cache_dir=str(tmp_path / "hub"))
  tokens, mask = batch(torch_model.config)
  np.testing.assert_allclose(
    np.asarray(gm.full_logits(model, tokens, mask))[mask == 1],
    torch_logits(torch_model, tokens, mask)[mask == 1],
    atol=1e-4,
  )


def test_hub_id_missing_from_the_offline_cache_says_how_to_get_it(tmp_path, monkeypatch):
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  with pytest.raises(FileNotFoundError, match=r"someone/absent.*HF_HUB_OFFLINE=1.*download"):
    gm.load("someone/absent", cache_dir=str(tmp_path))


def test_missing_directory_is_not_mistaken_for_a_hub_id(tmp_path):
  with pytest.raises(FileNotFoundError, match="neither an existing directory"):
    gm.load(tmp_path / "nope" / "deeper")


def test_unknown_architecture_names_the_value_and_the_supported_ones(bert_dir, tmp_path):
  d = _edit_config(
    bert_dir[0], tmp_path / "t5", architectures=["T5ForConditionalGeneration"], model_type="t5"
  )
  with pytest.raises(ValueError, match=r"T5ForConditionalGeneration.*'t5'.*BertForMaskedLM"):
    gm.load(d)


def test_architecture_falls_back_to_model_type():
  assert gm.architecture({"model_type": "roberta"}) == "RobertaForMaskedLM"
  assert gm.architecture({"architectures": ["BertModel"], "model_type": "bert"}) == "BertModel"


def test_missing_weights_file_names_the_expected_files(bert_dir, tmp_path):
  d = tmp_path / "empty"
  d.mkdir()
  shutil.copy(bert_dir[0] / "config.json", d)
  with pytest.raises(FileNotFoundError, match="model.safetensors"):
    gm.load(d)


def test_missing_config_json_is_reported(tmp_path):
  with pytest.raises(FileNotFoundError, match="config.json"):
    gm.load(tmp_path)


def test_pytorch_bin_is_read_only_when_the_caller_opts_in(bert_dir, tmp_path):
  import torch

  directory, torch_model = bert_dir
  d = tmp_path / "bin"
  d.mkdir()
  shutil.copy(directory / "config.json", d)
  torch.save(torch_model.state_dict(), d / "pytorch_model.bin")
  with pytest.raises(FileNotFoundError, match="allow_pickle=True"):
    gm.load(d)
  model, _ = gm.load(d, allow_pickle=True)
  tokens, mask = batch(torch_model.config)
  np.testing.assert_allclose(
    np.asarray(gm.full_logits(model, tokens, mask))[mask == 1],
    torch_logits(torch_model, tokens, mask)[mask == 1],
    atol=1e-4,
  )


def test_shape_mismatch_names_the_tensor_and_both_shapes(bert_dir, tmp_path):
  d = _edit_config(bert_dir[0], tmp_path / "wide", intermediate_size=80)
  with pytest.raises(
    ValueError,
    match=r"'bert\.encoder\.layer\.0\.intermediate\.dense\.weight'.*"
    r"\(64, 32\).*\(80, 32\)",
  ):
    gm.load(d)


def test_sequence_longer_than_the_position_table_is_refused(bert_dir):
  model, _ = gm.load(bert_dir[0])
  tokens = jnp.zeros((1, 41), jnp.int32)  # the table has 40 rows
  with pytest.raises(ValueError, match=r"length 41 exceeds the position table \(40"):
    gm.masked_logits(model, tokens, jnp.zeros((1, 1), jnp.int32))


def test_roberta_offset_leaves_two_fewer_positions(tiny_checkpoint):
  # 42 rows, positions start at pad_token_id + 1 = 2
  model, _ = gm.load(tiny_checkpoint("RobertaForMaskedLM"))
  gm.full_logits(model, jnp.full((1, 40), 5))
  with pytest.raises(ValueError, match="RoBERTa offsets positions"):
    gm.full_logits(model, jnp.full((1, 41), 5))


def test_encoder_without_head_refuses_logits_but_encodes(bert_dir, tmp_path):
  d = _edit_config(bert_dir[0], tmp_path / "body", architectures=["BertModel"])
  with pytest.warns(UserWarning, match="not used"):  # the head's tensors
    model, _ = gm.load(d)
  assert model.encode(jnp.ones((1, 4), jnp.int32)).shape == (1, 4, 32)
  with pytest.raises(ValueError, match="without an MLM head"):
    gm.masked_logits(model, jnp.ones((1, 4), jnp.int32), jnp.zeros((1, 1), jnp.int32))


def test_from_config_builds_a_trainable_random_model():
  model = gm.from_config(
    {
      "architectures": ["BertForMaskedLM"],
      "vocab_size": 50,
      "hidden_size": 16,
      "num_hidden_layers": 1,
      "num_attention_heads": 2,
      "intermediate_size": 32,
      "max_position_embeddings": 8,
    }
  )
  logits = jax.jit(gm.full_logits)(model, jnp.ones((2, 8), jnp.int32))
  assert logits.shape == (2, 8, 50) and np.isfinite(np.asarray(logits)).all()


@pytest.mark.parametrize("damage", ["truncated", "header bit flip"])
def test_corrupt_safetensors_is_one_user_error_naming_the_file(tiny_checkpoint, tmp_path, damage):
  from gmlm.checks import UserError

  d = tmp_path / "corrupt"
  shutil.copytree(tiny_checkpoint("BertForMaskedLM"), d)
  raw = bytearray((d / "model.safetensors").read_bytes())
  if damage == "truncated":
    raw = raw[: len(raw) // 2]
  else:
    raw[20] ^= 0xFF  # inside the JSON header
  (d / "model.safetensors").write_bytes(bytes(raw))
  with pytest.raises(
    UserError,
    match=r"model\.safetensors is not a readable safetensors file.*"
    r"truncated or corrupt.*download the checkpoint again",
  ):
    gm.load(d)


@pytest.mark.parametrize("typo", ["./models/bert", "models/bert"])
def test_mistyped_relative_path_is_reported_missing_not_looked_up_on_the_hub(
  tmp_path, monkeypatch, typo
):
  import huggingface_hub

  from gmlm.checks import UserError

  (tmp_path / "models" / "bert-tiny").mkdir(parents=True)
  monkeypatch.chdir(tmp_path)
  monkeypatch.setattr(
    huggingface_hub,
    "snapshot_download",
    lambda *a, **k: pytest.fail("a local path was looked up on the Hub"),
  )
  with pytest.raises(
    UserError,
    match=rf"{tmp_path / 'models' / 'bert'} does not exist; "
    rf"did you mean {tmp_path / 'models' / 'bert-tiny'}\?",
  ):
    gm.load(typo)


def test_hub_failure_also_says_the_name_is_not_a_local_path(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  with pytest.raises(
    FileNotFoundError,
    match=r"not a local path \(.*someone/absent does not "
    r"exist.*\) and the Hub lookup failed",
  ):
    gm.load("someone/absent", cache_dir=str(tmp_path / "hub"))


def test_a_missing_model_path_names_no_unrelated_file_of_its_parent(tmp_path):
  (tmp_path / "notes.txt").write_text("unrelated")
  (tmp_path / "data").mkdir()
  with pytest.raises(FileNotFoundError, match="does not exist") as info:
    gm.load(tmp_path / "nosuchmodel")
  assert "notes.txt" not in str(info.value) and "data" not in str(info.value).split("exist")[1]
