"""padir.metrics: SacreBLEU and chrF reproduce the published scores of WMT17 EN->DE systems;
the stutter metric gives hand-computed values on hand-written sentences."""

import bz2
import json
from pathlib import Path

import pytest

from padir import metrics

# From sacrebleu 2.6.0's sdist, test/wmt17_en_de_systems.pkl.bz2 (Apache-2.0, LICENSE.txt beside
# it; the installed wheel does not ship it, `pip download sacrebleu==2.6.0 --no-binary :all:
# --no-deps` does): newstest2017 EN->DE, the reference and the two systems tested here, as JSON.
SYSTEMS = Path(__file__).parents[1] / "fixtures" / "sacrebleu" / "wmt17_en_de.json.bz2"

# Published scores: sacrebleu's README ("Multi-system Evaluation" and "--paired-bs" examples,
# `sacrebleu -t wmt17 -l en-de -i ... -m bleu chrf`), one decimal: (BLEU, chrF2).
KNOWN = {
  "newstest2017.online-B.0.en-de": (26.7, 56.3),
  "newstest2017.online-F.0.en-de": (15.5, 49.3),
}


@pytest.fixture(scope="module")
def wmt17():
  with bz2.open(SYSTEMS, "rt", encoding="utf-8") as f:
    systems = json.load(f)
  references = systems.pop("reference")
  return systems, references


@pytest.mark.parametrize(
  "name,metric",
  [("newstest2017.online-B.0.en-de", "bleu"), ("newstest2017.online-F.0.en-de", "chrf")],
)
def test_bleu_and_chrf_reproduce_the_published_wmt17_scores(wmt17, name, metric):
  """Two of the published cases (3,004 segments each: ~10 s a metric on a busy CPU)."""
  systems, references = wmt17
  if metric == "bleu":
    score = metrics.bleu(systems[name], references, "de")
    assert round(score.score, 1) == KNOWN[name][0]
    assert score.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
  else:
    score = metrics.chrf(systems[name], references)
    assert round(score.score, 1) == KNOWN[name][1]
    assert score.signature.startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:")


def test_chinese_targets_use_the_zh_tokenizer():
  """13a leaves a run of Chinese characters as one token; zh splits it into characters, so a
  hypothesis with one wrong character still shares unigrams with the reference."""
  hyp, ref = ["我喜欢猫和狗"], ["我喜欢猫和鸟"]
  assert "tok:zh" in metrics.bleu(hyp, ref, "zh").signature
  assert metrics.bleu(hyp, ref, "zh").score > 0
  assert metrics.bleu(hyp, ref, "en").score == 0


def test_mismatched_lists_are_refused():
  with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
    metrics.bleu(["a", "b"], ["a"], "en")


@pytest.mark.parametrize(
  "hyp,ref,counts",
  [
    ("the the cat sat", "the cat sat", (1, 3)),  # one repeat, 3 adjacent pairs
    ("the the the cat", "the cat", (2, 3)),  # a run of 3: 2 stutters
    ("very very good", "it is very very good", (0, 2)),  # the reference repeats "very" too
    ("very very good good", "very very good", (1, 3)),  # "good good" is not in the reference
    ("cat", "cat", (0, 0)),
    ("", "cat", (0, 0)),
    ("a b a b", "a b", (0, 3)),  # not consecutive
    ("Cat cat", "cat", (0, 1)),  # compared exactly: case differs
  ],
)
def test_stutter_counts_by_hand(hyp, ref, counts):
  assert metrics.stutter_counts(hyp, ref) == counts


def test_stutter_rate_pools_the_pairs_of_all_sentences():
  hyps = ["the the cat sat", "very very good", "dog dog dog dog dog"]
  refs = ["the cat sat", "very very good", "a dog"]
  # stutters 1 + 0 + 4 over pairs 3 + 2 + 4
  assert metrics.stutter_rate(hyps, refs) == pytest.approx(5 / 9)
  assert metrics.stutter_rate(["x"], ["x"]) == 0.0
