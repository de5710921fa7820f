"""padir.evaluation.metrics: SacreBLEU and chrF reproduce the published scores of WMT17 EN->DE systems;
the stutter metric gives hand-computed values on hand-written sentences."""

import bz2
import json
from pathlib import Path

import pytest

from padir.evaluation import metrics

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


# ------------------------------------------------------------------ paired bootstrap

SUBSET = 200  # sentences of the WMT17 systems used below (~1 s of statistics each)


@pytest.fixture(scope="module")
def wmt17_subset(wmt17):
  systems, references = wmt17
  b, f = (systems[f"newstest2017.online-{x}.0.en-de"][:SUBSET] for x in "BF")
  return b, f, references[:SUBSET]


def test_resampled_bleu_is_the_corpus_bleu_of_the_resampled_sentences(wmt17_subset):
  """The sufficient-statistics path against SacreBLEU's public corpus_score on the explicitly
  resampled lists (repeated sentences included)."""
  hyps, _, refs = wmt17_subset
  idx_RN = metrics.resample_indices(len(refs), 4, seed=3)
  assert idx_RN.shape == (4, SUBSET) and idx_RN.min() >= 0 and idx_RN.max() < SUBSET
  assert len(set(idx_RN[0])) < SUBSET  # drawn with replacement
  fast = metrics.resampled_bleu(hyps, refs, "de", idx_RN)
  for r, idx in enumerate(idx_RN):
    slow = metrics.bleu([hyps[i] for i in idx], [refs[i] for i in idx], "de").score
    assert fast[r] == pytest.approx(slow, abs=1e-9)


def test_identical_systems_differ_by_nothing(wmt17_subset):
  hyps, _, refs = wmt17_subset
  res = metrics.paired_bootstrap(hyps, list(hyps), refs, "de", resamples=50)
  assert (res.delta, res.low, res.high, res.p_value) == (0.0, 0.0, 0.0, 1.0)


def test_a_far_better_system_gets_the_smallest_p_value_and_swapping_negates(wmt17_subset):
  """online-B (BLEU 26.7 on all 3,004) against online-F (15.5): every resample keeps B ahead,
  so p = 1 / (R + 1); swapping the systems negates the difference and mirrors the interval."""
  b, f, refs = wmt17_subset
  resamples = 200
  ab = metrics.paired_bootstrap(b, f, refs, "de", resamples=resamples, seed=1)
  assert ab.delta == pytest.approx(
    metrics.bleu(b, refs, "de").score - metrics.bleu(f, refs, "de").score
  )
  assert 0 < ab.low < ab.delta < ab.high
  assert ab.p_value == pytest.approx(1 / (resamples + 1))
  ba = metrics.paired_bootstrap(f, b, refs, "de", resamples=resamples, seed=1)
  assert (ba.delta, ba.low, ba.high) == pytest.approx((-ab.delta, -ab.high, -ab.low))
  assert ba.p_value == ab.p_value


def test_systems_that_trade_sentences_are_not_called_different(wmt17_subset):
  """A takes online-B's output on even sentences and online-F's on odd ones, B the other way
  round: sentence by sentence they differ a lot, but neither is the better system, so the
  difference is within the resampling spread: the interval covers 0 and p is large."""
  b, f, refs = wmt17_subset
  a_hyps = [b[i] if i % 2 == 0 else f[i] for i in range(SUBSET)]
  b_hyps = [f[i] if i % 2 == 0 else b[i] for i in range(SUBSET)]
  res = metrics.paired_bootstrap(a_hyps, b_hyps, refs, "de", resamples=200, seed=2)
  assert res.low < 0 < res.high
  assert res.p_value > 0.05
  assert res.high - res.low > 2 * abs(res.delta)


@pytest.mark.parametrize("kwargs", [{"resamples": 0}, {"level": 1.0}])
def test_bad_bootstrap_arguments_are_refused(wmt17_subset, kwargs):
  b, f, refs = wmt17_subset
  with pytest.raises(ValueError, match="paired_bootstrap needs"):
    metrics.paired_bootstrap(b, f, refs, "de", **kwargs)
