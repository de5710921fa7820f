"""Translation quality: SacreBLEU and chrF with their signatures, and the word-level stutter.

BLEU (Papineni et al. 2002) as SacreBLEU computes it (Post 2018): corpus-level, mixed case,
one reference, exponential smoothing, tokenization "13a" (the WMT standard) or "zh" for a
Chinese target (the paper's App. L.3 signatures). chrF (Popovic 2015): character 6-grams,
beta = 2. Both are reported with the signature that lets anyone reproduce the number.

Word-level stutter (paper Sec. 3.3: "how often consecutive words are repeated in the model output
but not in the reference"). Words are whitespace-separated strings compared exactly. For a
hypothesis h_1..h_n and its reference r_1..r_m, a stutter is an index i (2 <= i <= n) with
h_i = h_{i-1} whose word is not repeated in the reference, i.e. no j with r_j = r_{j-1} = h_i.
A run of k equal words counts k - 1 stutters. Over a corpus,

    stutter = sum over sentences of #stutters / sum over sentences of max(n - 1, 0),

the fraction of adjacent hypothesis word pairs that stutter (0 for a corpus of one-word outputs).
`stutter_counts` gives the numerator and denominator of one sentence.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import sacrebleu


def tokenizer_for(target_lang: str) -> str:
  """SacreBLEU's tokenization for a target language: 'zh' for Chinese, else '13a'."""
  return "zh" if target_lang.lower().startswith("zh") else "13a"


@dataclasses.dataclass(frozen=True)
class Score:
  score: float
  signature: str


def bleu(hypotheses: Sequence[str], references: Sequence[str], target_lang: str) -> Score:
  """Corpus SacreBLEU of detokenized hypotheses against one reference each."""
  _check_aligned(hypotheses, references)
  metric = sacrebleu.metrics.BLEU(tokenize=tokenizer_for(target_lang))
  score = metric.corpus_score(list(hypotheses), [list(references)])
  return Score(float(score.score), str(metric.get_signature()))


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> Score:
  """Corpus chrF (character 6-grams, beta = 2, no word n-grams: SacreBLEU's defaults)."""
  _check_aligned(hypotheses, references)
  metric = sacrebleu.metrics.CHRF()
  score = metric.corpus_score(list(hypotheses), [list(references)])
  return Score(float(score.score), str(metric.get_signature()))


def _check_aligned(hypotheses: Sequence[str], references: Sequence[str]) -> None:
  if len(hypotheses) != len(references):
    raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")


def stutter_counts(hypothesis: str, reference: str) -> tuple[int, int]:
  """(stutters, adjacent word pairs) of one hypothesis (the module docstring's definition)."""
  words, ref = hypothesis.split(), reference.split()
  repeated_in_ref = {a for a, b in zip(ref, ref[1:]) if a == b}
  stutters = sum(1 for a, b in zip(words, words[1:]) if a == b and a not in repeated_in_ref)
  return stutters, max(len(words) - 1, 0)


def stutter_rate(hypotheses: Sequence[str], references: Sequence[str]) -> float:
  """The corpus stutter rate (module docstring): stutters / adjacent hypothesis word pairs."""
  _check_aligned(hypotheses, references)
  stutters, pairs = 0, 0
  for hyp, ref in zip(hypotheses, references):
    s, p = stutter_counts(hyp, ref)
    stutters, pairs = stutters + s, pairs + p
  return stutters / pairs if pairs else 0.0
