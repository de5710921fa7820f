"""`load` returns each family's tokenizer with its special tokens, and text runs end to end.

No RoBERTa/GPT-2 vocabulary is available offline, so a small byte-level BPE is trained here
with `tokenizers` and saved next to a tiny checkpoint the way the hub stores them.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from models_util import save_tiny, torch_logits

from gmlm import nn as gm

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

CORPUS = [
  "Glauber dynamics resamples one site at a time.",
  "A masked language model predicts the missing words of a sentence.",
  "The quick brown fox jumps over the lazy dog.",
] * 20
TEXT = "The fox resamples  a sentence: naïve café!"


def _byte_bpe(directory, special):
  bpe = tokenizers.ByteLevelBPETokenizer()
  bpe.train_from_iterator(CORPUS, vocab_size=300, min_frequency=1, special_tokens=special)
  bpe.save_model(str(directory))
  return bpe.get_vocab_size()


@pytest.fixture(scope="module")
def roberta(tmp_path_factory):
  d = tmp_path_factory.mktemp("roberta")
  V = _byte_bpe(d, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
  transformers.RobertaTokenizerFast(str(d / "vocab.json"), str(d / "merges.txt")).save_pretrained(
    str(d)
  )
  return d, save_tiny("RobertaForMaskedLM", d, vocab_size=V)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
  d = tmp_path_factory.mktemp("gpt2")
  V = _byte_bpe(d, ["<|endoftext|>"])
  transformers.GPT2TokenizerFast(str(d / "vocab.json"), str(d / "merges.txt")).save_pretrained(
    str(d)
  )
  return d, save_tiny("GPT2LMHeadModel", d, vocab_size=V, bos_token_id=0, eos_token_id=0)


@pytest.fixture(scope="module")
def modernbert(tmp_path_factory):
  """ModernBERT's hub tokenizer is a byte-level BPE wrapped as [CLS] ... [SEP]; built alike."""
  d = tmp_path_factory.mktemp("modernbert")
  special = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
  bpe = tokenizers.ByteLevelBPETokenizer()
  bpe.train_from_iterator(CORPUS, vocab_size=300, min_frequency=1, special_tokens=special)
  bpe.post_processor = tokenizers.processors.TemplateProcessing(
    single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
  )
  tok = transformers.PreTrainedTokenizerFast(
    tokenizer_object=bpe._tokenizer,
    unk_token="[UNK]",
    cls_token="[CLS]",
    sep_token="[SEP]",
    pad_token="[PAD]",
    mask_token="[MASK]",
  )
  tok.save_pretrained(str(d))
  model = save_tiny(
    "ModernBertForMaskedLM",
    d,
    vocab_size=bpe.get_vocab_size(),
    pad_token_id=3,
    cls_token_id=1,
    sep_token_id=2,
    bos_token_id=1,
    eos_token_id=2,
  )
  return d, model


def test_modernbert_tokenizer_wraps_in_cls_sep_and_text_matches_pytorch(modernbert):
  directory, torch_model = modernbert
  model, tok = gm.load(directory)
  ids = tok(TEXT)["input_ids"]
  assert ids[0] == tok.cls_token_id == 1 and ids[-1] == tok.sep_token_id == 2
  assert tok.mask_token_id == 4 and tok.pad_token_id == 3 == model.config.pad_token_id
  assert tok.decode(ids, skip_special_tokens=True) == TEXT
  enc = tok([TEXT, "A [MASK] model."], padding=True, return_tensors="np")
  tokens, mask = enc["input_ids"], enc["attention_mask"]
  assert tokens.shape[1] > 9  # longer than the local window (+-4): both attention kinds matter
  ours = np.asarray(gm.full_logits(model, jnp.asarray(tokens), jnp.asarray(mask)))
  ref = torch_logits(torch_model, tokens, mask)
  np.testing.assert_allclose(ours[mask == 1], ref[mask == 1], atol=1e-4, rtol=0)


def test_roberta_tokenizer_wraps_in_s_tags_and_round_trips(roberta):
  _, tok = gm.load(roberta[0])
  ids = tok(TEXT)["input_ids"]
  assert ids[0] == tok.bos_token_id == 0 and ids[-1] == tok.eos_token_id == 2
  assert tok.pad_token_id == 1 and tok.mask_token_id == 4
  assert tok.decode(ids, skip_special_tokens=True) == TEXT


def test_roberta_text_end_to_end_matches_pytorch(roberta):
  directory, torch_model = roberta
  model, tok = gm.load(directory)
  enc = tok([TEXT, "A <mask> model."], padding=True, return_tensors="np")
  tokens, mask = enc["input_ids"], enc["attention_mask"]
  assert (tokens == tok.pad_token_id).any()  # padding exercises RoBERTa's position ids
  ours = np.asarray(gm.full_logits(model, jnp.asarray(tokens), jnp.asarray(mask)))
  ref = torch_logits(torch_model, tokens, mask)
  np.testing.assert_allclose(ours[mask == 1], ref[mask == 1], atol=1e-4, rtol=0)


def test_gpt2_tokenizer_round_trips_bytes_exactly(gpt2):
  _, tok = gm.load(gpt2[0])
  text = TEXT + "\n\t 😀"
  assert tok.decode(tok(text)["input_ids"]) == text
  assert tok.eos_token == "<|endoftext|>" and tok.eos_token_id == 0


def test_gpt2_text_sequence_logprob_matches_pytorch(gpt2):
  import torch

  directory, torch_model = gpt2
  model, tok = gm.load(directory)
  tok.pad_token = tok.eos_token
  enc = tok([TEXT, "The fox."], padding=True, return_tensors="np")
  tokens, mask = enc["input_ids"], enc["attention_mask"]
  logp = torch.log_softmax(torch.tensor(torch_logits(torch_model, tokens, mask)), -1).numpy()
  ref = (np.take_along_axis(logp[:, :-1], tokens[:, 1:, None], -1)[..., 0] * mask[:, 1:]).sum(-1)
  np.testing.assert_allclose(np.asarray(gm.sequence_logprob(model, tokens, mask)), ref, atol=1e-3)
