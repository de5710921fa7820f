"""Words of a Glauber start text that the model's vocabulary lacks start as its unknown token;
the main job's report says which (issue 27)."""

from __future__ import annotations

import numpy as np
import pytest

from glauber import init_states
from glauber.jobs import sample
from glauber.layout import Layout


@pytest.fixture(scope="module")
def tokenizer(splade_dir):
  from transformers import AutoTokenizer

  return AutoTokenizer.from_pretrained(str(splade_dir))


def test_unknown_words_are_those_that_tokenize_to_unk(tokenizer):
  text = "the party 🎉 was fun ǂ indeed"
  got = init_states.unknown_words(tokenizer, text)
  want = [w for w in text.split() if tokenizer.unk_token_id in tokenizer(w)["input_ids"]]
  assert got == want == ["🎉", "ǂ"]
  assert init_states.unknown_words(tokenizer, "a naïve cat") == []  # accents are stripped


def test_the_report_names_them(tokenizer):
  lay = Layout.from_tokenizer(tokenizer, 6, "", max_length=512)
  cuts = init_states.text_cuts(
    tokenizer, lay, ["the party 🎉 was fun ǂ indeed", "a plain one here"]
  )
  assert [c["unknown"] for c in cuts] == [["🎉", "ǂ"], []]
  from configs import glauber

  c = glauber.get_config()
  results = {"init_texts": cuts, "median_stay_probability_at_start": None, "num_steps": 1}
  results["mode"] = "plain"
  text = sample.report(c, results, np.array([0]), np.array([["x"]], object))
  assert "Starting text 0: 2 word(s) are not in the model's vocabulary" in text
  assert "'🎉', 'ǂ'" in text and "Starting text 1:" not in text
