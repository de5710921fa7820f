"""k-pseudolikelihood MLM fine-tuning: masks, loss, a short run that learns, export, resume."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from models_util import save_tiny, torch_logits

from glauber.mlm import training as mlm_training
from gmlm import cli
from gmlm import nn as gm
from gmlm.checks import UserError

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

CORPUS = [
  "the cat sat on the mat and looked at the dog",
  "the dog sat on the rug and looked at the cat",
  "a bird sang in the tree and the cat listened",
] * 40


def test_invalid_utf8_in_the_training_text_names_the_file_and_line(tmp_path):
  """It was read with errors="replace": the bad bytes trained silently as U+FFFD."""
  path = tmp_path / "lines.txt"
  path.write_bytes(b"a long enough first line\r\nshort\nthe second \xc3( line\n")
  with pytest.raises(
    UserError,
    match=r"lines.txt, line 3: not valid UTF-8 \(byte 0xc3 at "
    r"column 12\)",
  ):
    mlm_training.read_lines(str(path), min_chars=6)
  path.write_bytes(b"a long enough first line\r\nshort\n")
  assert mlm_training.read_lines(str(path), min_chars=6) == ["a long enough first line"]


def test_positions_are_distinct_maskable_and_at_most_k():
  ok = jnp.array([[0, 1, 1, 1, 0, 0], [0, 1, 0, 0, 0, 0]], bool)
  for seed in range(5):
    pos, valid = mlm_training.choose_positions(jax.random.key(seed), ok, 2)
    pos, valid = np.asarray(pos), np.asarray(valid)
    assert valid[0].all() and len(set(pos[0])) == 2 and ok[0, pos[0]].all()
    assert valid[1].tolist() == [True, False] and pos[1, 0] == 1


def test_mask_tokens_replaces_exactly_the_valid_positions():
  tokens = jnp.arange(12).reshape(2, 6)
  out = mlm_training.mask_tokens(
    tokens, jnp.array([[1, 3], [2, 0]]), jnp.array([[True, True], [True, False]]), 99
  )
  expected = np.arange(12).reshape(2, 6)
  expected[0, [1, 3]] = 99
  expected[1, 2] = 99
  np.testing.assert_array_equal(np.asarray(out), expected)


def test_kpl_loss_is_the_mean_negative_log_prob_of_the_masked_tokens(tmp_path):
  save_tiny("BertForMaskedLM", tmp_path)
  model, _ = gm.load(tmp_path)
  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(5, 97, (2, 10)), jnp.int32)
  mask = jnp.ones((2, 10), jnp.int32)
  key, special = jax.random.key(3), jnp.array([0, 1, 2], jnp.int32)
  loss, _ = jax.jit(mlm_training.kpl_loss, static_argnums=(4, 5))(
    model, tokens, mask, key, 3, 4, special
  )
  pos, valid = mlm_training.choose_positions(key, mlm_training.maskable(tokens, mask, special), 3)
  masked = mlm_training.mask_tokens(tokens, pos, valid, 4)
  logp = jax.nn.log_softmax(gm.full_logits(model, masked, mask), -1)
  direct = -np.mean([logp[b, p, tokens[b, p]] for b in range(2) for p in np.asarray(pos[b])])
  np.testing.assert_allclose(float(loss), direct, rtol=1e-5)


@pytest.fixture()
def tiny_setup(tmp_path):
  """A tiny BERT body (no head) with a WordPiece tokenizer, and a text file."""
  d = tmp_path / "body"
  d.mkdir()
  wp = tokenizers.BertWordPieceTokenizer()
  wp.train_from_iterator(CORPUS, vocab_size=60, min_frequency=1)
  wp.save_model(str(d))
  tok = transformers.BertTokenizerFast(str(d / "vocab.txt"))
  tok.save_pretrained(str(d))
  save_tiny("BertForMaskedLM", d, vocab_size=len(tok), seed=1)
  config = json.loads((d / "config.json").read_text())
  config["architectures"] = ["BertModel"]  # as all-MiniLM-L6-v2: a body, the head is new
  (d / "config.json").write_text(json.dumps(config))
  text = tmp_path / "text.txt"
  text.write_text("\n".join(CORPUS))
  from configs.mlm_minilm import get_config

  c = get_config()
  c.model, c.data.path = str(d), str(text)
  c.k, c.seq_len, c.batch_size, c.num_steps = 2, 16, 8, 30
  c.learning_rate, c.warmup_steps, c.log_every, c.checkpoint_every = 3e-3, 3, 1, 15
  return c


@pytest.mark.slow  # a short training, exported and resumed
@pytest.mark.filterwarnings("ignore:.*were not used")  # the body ships a head we replace
def test_short_run_learns_exports_and_resumes(tiny_setup, tmp_path, monkeypatch):
  c = tiny_setup
  workdir = tmp_path / "run"
  # A run killed after step 17 (its last checkpoint is step 15; metrics reach step 17) ...
  real_step, calls = mlm_training.train_step, []

  def killed_after_17(*args):
    if len(calls) == 17:
      raise KeyboardInterrupt
    calls.append(1)
    return real_step(*args)

  monkeypatch.setattr(mlm_training, "train_step", killed_after_17)
  with pytest.raises(KeyboardInterrupt):
    cli.run(c, str(workdir), "train.py")
  assert len((workdir / "metrics.jsonl").read_text().splitlines()) == 17
  monkeypatch.setattr(mlm_training, "train_step", real_step)
  # ... resumes from the step-15 checkpoint and drops the metrics written past it.
  results = cli.run(c, str(workdir), "train.py")
  rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  assert [r["step"] for r in rows] == list(range(1, 31))  # no step ran twice
  first, last = np.mean([r["loss"] for r in rows[:5]]), np.mean([r["loss"] for r in rows[-5:]])
  assert last < first - 0.5, (first, last)
  assert results["eval_accuracy"] > 0.1 and (workdir / "report.md").is_file()
  # The exported model loads in both worlds and agrees.
  ours, tok = gm.load(workdir / "model")
  theirs = transformers.BertForMaskedLM.from_pretrained(str(workdir / "model")).eval()
  enc = tok(["the cat sat on the [MASK]"], return_tensors="np")
  np.testing.assert_allclose(
    np.asarray(gm.full_logits(ours, enc["input_ids"], enc["attention_mask"])),
    torch_logits(theirs, enc["input_ids"], enc["attention_mask"]),
    atol=1e-4,
  )
  # A run of another config into the same workdir is refused; its config.json stays.
  config_json = (workdir / "config.json").read_text()
  c.learning_rate = 1e-3
  with pytest.raises(UserError, match="holds a run of a different config"):
    cli.run(c, str(workdir), "train.py")
  assert (workdir / "config.json").read_text() == config_json
