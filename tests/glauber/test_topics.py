"""Topic scorers: the offline embedding scorer beats chance on gensim's labelled 20-Newsgroups
sample by a margin set by the sample size, and the NLI scorer computes what transformers'
zero-shot-classification pipeline computes (a tiny random NLI classifier)."""

from __future__ import annotations

import io
import pickle
from math import comb

import numpy as np
import pytest

from glauber.measures import topics


def binomial_tail_bound(n: int, p: float, alpha: float) -> int:
  """The least k with P(Bin(n, p) >= k) <= alpha: more hits than chance explains at level alpha."""
  for k in range(n + 1):
    if sum(comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1)) <= alpha:
      return k
  return n + 1


def test_embedding_scorer_beats_chance_on_newsgroups(minilm_dir):
  from gmlm import nn as gm

  try:
    topics.newsgroups_file()
  except FileNotFoundError as e:
    pytest.skip(str(e))
  # First 32 tokens of each post (subject and opening lines): keeps the test cheap on CPU.
  scorer = topics.EmbeddingScorer(*gm.load(minilm_dir), max_length=32)
  res = topics.newsgroups_accuracy(scorer, covered_only=True)
  assert res["num_covered"] == 100  # the sci.space posts (science); alt.atheism is uncovered
  k = binomial_tail_bound(res["num_covered"], res["chance"], 1e-6)  # 26 of 100 at 1/11
  assert res["num_correct"] >= k, res["winners"]
  assert "science" in topics.section(res)


def test_newsgroups_reader_refuses_other_classes(tmp_path):
  import zlib

  evil = tmp_path / "evil"
  evil.write_bytes(zlib.compress(pickle.dumps(io.StringIO, protocol=0)))
  with pytest.raises(pickle.UnpicklingError, match="refusing"):
    topics.load_newsgroups(evil)


def tiny_nli():
  torch = pytest.importorskip("torch")
  import transformers

  words = "the a cat dog sat on mat politics sport food this example is about science art".split()
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words, "."]
  tok = transformers.BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)})
  assert tok.unk_token_id not in tok("this example is about art.")["input_ids"]
  config = transformers.BertConfig(
    vocab_size=len(words) + 6,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
    num_labels=3,
    id2label={0: "contradiction", 1: "neutral", 2: "entailment"},
    label2id={"contradiction": 0, "neutral": 1, "entailment": 2},
  )
  torch.manual_seed(0)
  model = transformers.BertForSequenceClassification(config).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():  # as models_util.tiny_torch_model
      norm = "LayerNorm" in name and name.endswith("weight")
      p.copy_(1.0 + 0.2 * torch.randn_like(p) if norm else 0.2 * torch.randn_like(p))
  return model, tok


def test_nli_scorer_matches_the_zero_shot_pipeline():
  import transformers

  model, tok = tiny_nli()
  labels = ("politics", "sport", "food", "science", "art")
  scorer = topics.NLIScorer(model, tok, labels, batch_size=4)  # batches cut across texts
  texts = ["the cat sat on the mat", "a dog", "the mat . the dog sat on a cat"]
  s = scorer.scores(texts)
  assert s.shape == (3, len(labels))
  pipe = transformers.pipeline("zero-shot-classification", model=model, tokenizer=tok)
  for text, row in zip(texts, s):
    out = pipe(text, candidate_labels=list(labels), hypothesis_template=scorer.template)
    ref = dict(zip(out["labels"], out["scores"]))
    np.testing.assert_allclose(row, [ref[label] for label in labels], rtol=1e-4, atol=1e-6)
  assert np.ptp(s) > 1e-3  # the random classifier does tell labels apart: the check has teeth


def test_nli_scorer_refuses_a_classifier_without_entailment():
  model, tok = tiny_nli()
  model.config.label2id = {"positive": 0, "negative": 1, "neutral": 2}
  with pytest.raises(ValueError, match="entailment"):
    topics.NLIScorer(model, tok)
