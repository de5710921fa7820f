"""LoRA adapters, the shipped delta format, the offline English corpus, the fill-mask evaluation,
and the embedded default MLM's held-out quality bar (>= 25% top-1)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_at_xla_defaults
from models_util import save_tiny

from glauber import chains
from glauber.mlm import english
from glauber.mlm import evaluation as mlm_eval
from glauber.mlm import training as mlm_training
from gmlm import nn as gm
from gmlm.nn import bert, delta

transformers = pytest.importorskip("transformers")


def _tiny(tmp_path, seed=0):
  save_tiny("BertForMaskedLM", tmp_path / "base", seed=seed)
  return gm.load_model(tmp_path / "base")


def _randomise_lora(model, seed=1):
  keys = iter(jax.random.split(jax.random.key(seed), 100))
  for layer in model.layers:
    for ab in layer.lora.values():
      ab["b"][...] = 0.3 * jax.random.normal(next(keys), ab["b"].shape)


@pytest.mark.slow  # a LoRA model and its merged twin, each compiled
def test_lora_forward_equals_merged_weights_computed_independently(tmp_path):
  model = _tiny(tmp_path)
  rng = np.random.default_rng(0)
  tokens = rng.integers(3, 97, (2, 9)).astype(np.int32)
  base = np.asarray(gm.full_logits(model, tokens))
  model.add_lora(4, alpha=8.0, seed=3)
  # B starts at zero: adding adapters does not change the function.
  np.testing.assert_allclose(np.asarray(gm.full_logits(model, tokens)), base, atol=1e-5)
  _randomise_lora(model)
  adapted = np.asarray(gm.full_logits(model, tokens))
  assert np.abs(adapted - base).max() > 1e-2
  # Independent merge in numpy: W + (alpha / r) A B, reshaped to the kernel's shape.
  other = _tiny(tmp_path)
  for la, lb in zip(model.layers, other.layers):
    for name, (attr, _) in bert.LORA_TARGETS.items():
      w = getattr(lb, attr)
      a, b = np.asarray(la.lora[name]["a"][...]), np.asarray(la.lora[name]["b"][...])
      w[...] = jnp.asarray(np.asarray(w[...]) + (8.0 / 4) * (a @ b).reshape(w.shape))
  np.testing.assert_allclose(np.asarray(gm.full_logits(other, tokens)), adapted, atol=1e-4)
  model.merge_lora()
  np.testing.assert_allclose(np.asarray(gm.full_logits(model, tokens)), adapted, atol=1e-4)
  with pytest.raises(ValueError, match="targets among"):
    other.add_lora(4, targets=("query",))


def test_delta_round_trip_and_clear_errors(tmp_path):
  model = _tiny(tmp_path)
  model.add_lora(3, seed=2)
  _randomise_lora(model, seed=5)
  model.head.bias_V[...] = jnp.linspace(-1, 1, model.config.vocab_size)
  wrt = mlm_training.trainable({"lora_rank": 3})
  delta.save_delta(
    model, tmp_path / "delta", base=str(tmp_path / "base"), trainable=wrt, dtype=np.float32
  )
  meta = json.loads((tmp_path / "delta" / "delta.json").read_text())
  assert meta["rank"] == 3 and meta["num_parameters"] > 0
  tokens = np.random.default_rng(1).integers(3, 97, (2, 7)).astype(np.int32)
  expected = np.asarray(gm.full_logits(model, tokens))
  again, _ = delta.load_with_delta(tmp_path / "delta")
  assert again.layers[0].lora is None  # merged into a plain Bert
  np.testing.assert_allclose(np.asarray(gm.full_logits(again, tokens)), expected, atol=1e-4)
  # The frozen base weights are not part of the delta.
  names = set(
    __import__("safetensors.numpy").numpy.load_file(str(tmp_path / "delta" / "delta.safetensors"))
  )
  assert not any("word_VD" in n or "q_DNH" in n for n in names)
  # A flipped byte is caught by the recorded digest.
  f = tmp_path / "delta" / "delta.safetensors"
  raw = bytearray(f.read_bytes())
  raw[-3] ^= 0xFF
  f.write_bytes(bytes(raw))
  with pytest.raises(ValueError, match="corrupt"):
    delta.load_with_delta(tmp_path / "delta")
  with pytest.raises(FileNotFoundError, match="not a model delta"):
    delta.load_with_delta(tmp_path / "base")


def test_a_delta_without_its_sha256_is_refused(tmp_path):
  model = _tiny(tmp_path)
  model.add_lora(2, seed=0)
  delta.save_delta(
    model,
    tmp_path / "delta",
    base=str(tmp_path / "base"),
    trainable=mlm_training.trainable({"lora_rank": 2}),
  )
  meta_path = tmp_path / "delta" / "delta.json"
  meta = json.loads(meta_path.read_text())
  del meta["sha256"]
  meta_path.write_text(json.dumps(meta))
  with pytest.raises(ValueError, match=r"delta.json has no 'sha256'.*save_delta"):
    delta.load_with_delta(tmp_path / "delta")


def test_strip_wiki_and_sentences():
  raw = (
    "{{Infobox|name={{nested|x}}}}'''Anarchism''' is a [[political philosophy]] that "
    "rejects [[State (polity)|states]].<ref>Some book, p. 3</ref> It was named in "
    "[http://example.org 1840] by [[Pierre-Joseph Proudhon]].\n"
    "== History ==\n{| class=wikitable\n| a || b\n|}\n[[Category:Politics]]\n"
    "[[File:Flag.svg|thumb|A [[flag]] here]]\n* A list item that is long enough to keep."
  )
  text = english.strip_wiki(raw)
  assert text.split("\n")[0] == (
    "Anarchism is a political philosophy that rejects states. "
    "It was named in 1840 by Pierre-Joseph Proudhon."
  )
  assert "History" not in text and "Category" not in text and "flag" not in text
  assert english.sentences(text.split("\n")[0]) == [
    "Anarchism is a political philosophy that rejects states.",
    "It was named in 1840 by Pierre-Joseph Proudhon.",
  ]


def test_held_out_documents_are_the_last_tenth():
  docs = [f"d{i}" for i in range(106)]
  train, held = english.split_documents(docs)
  assert held == docs[-11:] and train == docs[:-11]
  train, held = english.split_documents([f"n{i}" for i in range(300)])
  assert len(held) == 30 and held[0] == "n270"


def test_fill_mask_matches_a_direct_computation(tmp_path, minilm_dir):
  tok = transformers.AutoTokenizer.from_pretrained(str(minilm_dir))
  cfg = dict(
    vocab_size=len(tok),
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
  )
  save_tiny("BertForMaskedLM", tmp_path / "m", **cfg)
  model = gm.load_model(tmp_path / "m")
  sentences = [
    "The cat sat on the mat.",
    "Paris is in France and it is big.",
    "A very long sentence about nothing in particular goes here.",
    "Hi there.",
  ]
  r = mlm_eval.fill_mask(model, tok, sentences, seed=7, batch_size=3)
  cand = chains.candidate_ids(tok, len(tok))
  top1 = top5 = 0
  logps = []
  order = np.argsort([len(s) for s in sentences], kind="stable")
  for i in range(0, 4, 3):  # the same batches and masks, scored one sentence at a time
    batch = [sentences[j] for j in order[i : i + 3]]
    tokens, attn, pos, tgt = mlm_eval.masked_examples(tok, batch, 128, 7 * 1_000_003 + i)
    assert (tokens == tok.mask_token_id).sum() == len(batch)
    for b in range(len(batch)):
      n = int(attn[b].sum())
      assert 0 < pos[b] < n - 1  # never [CLS] or [SEP]
      logits = np.asarray(gm.full_logits(model, tokens[b : b + 1, :n]))[0, pos[b]]
      best = cand[np.argsort(-logits[cand])[:5]]
      top1 += best[0] == tgt[b]
      top5 += tgt[b] in best
      logps.append(jax.nn.log_softmax(logits)[tgt[b]])
  assert r["count"] == 4 and r["top1"] == top1 / 4 and r["top5"] == top5 / 4
  np.testing.assert_allclose(r["mean_logp"], np.mean(logps), rtol=1e-4)


def _gensim():
  try:
    return english.data_dir()
  except FileNotFoundError as e:
    pytest.skip(str(e))


def test_held_out_sentences_never_occur_in_training_text():
  _gensim()
  train = {s for d in english.corpus("train") for s in d}
  held = [s for d in english.corpus("held_out") for s in d]
  assert len(held) > 2700 and len(train) > 19000
  assert not train & set(held)


@pytest.mark.slow
def test_default_mlm_reaches_the_quality_bar_on_held_out_text(minilm_dir):
  """>= 25% top-1 fill-mask accuracy on the held-out Wikipedia/news sentences (issue 3).
  Its time is running the model, not compiling: at XLA's defaults in its own process."""
  run_at_xla_defaults(__file__, "default_mlm_quality_bar")


def default_mlm_quality_bar():
  _gensim()
  model, tok = gm.load("default")
  held = [s for d in english.corpus("held_out") for s in d]
  r = mlm_eval.fill_mask(model, tok, held, seed=0)
  assert r["top1"] >= 0.25, r
  # Sanity: a probe with one obvious answer.
  ((_, best),) = mlm_eval.probes(model, tok, ["Paris is the capital of [MASK]."], k=3)
  assert "france" in best
