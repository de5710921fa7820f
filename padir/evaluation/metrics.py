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

Paired bootstrap (Koehn 2004, "Statistical significance tests for machine translation
evaluation"): is system A's BLEU above system B's beyond what the choice of test sentences
explains? Both systems' hypotheses of the same N sentences are resampled together: R times,
N sentence indices drawn with replacement (from a jax.random key), and corpus BLEU recomputed
on each resample from the per-sentence sufficient statistics (hypothesis and reference lengths,
matched and total n-grams), which is exactly SacreBLEU's corpus BLEU of the resampled lists.
With d = BLEU(A) - BLEU(B) on the whole set and d_r on resample r, `paired_bootstrap` reports
d, the percentile interval of the d_r at the given level, and the two-sided p-value of
"no difference": the resampled differences centred on their mean stand in for the null
distribution, and p = (1 + #{r : |d_r - mean(d)| >= |d|}) / (R + 1), so identical systems get
p = 1 and p is never below 1 / (R + 1).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import numpy as np
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


@dataclasses.dataclass(frozen=True)
class PairedBootstrap:
  """BLEU(A) - BLEU(B), its bootstrap interval and two-sided p-value (module docstring)."""

  bleu_a: float
  bleu_b: float
  delta: float  # bleu_a - bleu_b on the whole set
  low: float  # percentile interval of the resampled deltas at `level`
  high: float
  p_value: float
  resamples: int
  level: float


def resample_indices(n: int, resamples: int, seed: int) -> np.ndarray:
  """[resamples, n] sentence indices drawn with replacement from jax.random.key(seed)."""
  return np.asarray(jax.random.randint(jax.random.key(seed), (resamples, n), 0, n))


def resampled_bleu(
  hypotheses: Sequence[str],
  references: Sequence[str],
  target_lang: str,
  indices_RN: np.ndarray,
) -> np.ndarray:
  """[R] corpus BLEU of each row's resampled sentences, from per-sentence statistics."""
  _check_aligned(hypotheses, references)
  metric = sacrebleu.metrics.BLEU(tokenize=tokenizer_for(target_lang))
  # SacreBLEU's own per-sentence sufficient statistics (pinned 2.6.0; its significance module
  # uses the same two methods): [N, 2 + 2 * 4] integer counts that add up over sentences.
  stats_NK = np.asarray(
    metric._extract_corpus_statistics(list(hypotheses), [list(references)]), np.int64
  )
  return np.array(
    [metric._compute_score_from_stats(list(stats_NK[idx].sum(0))).score for idx in indices_RN]
  )


def paired_bootstrap(
  hypotheses_a: Sequence[str],
  hypotheses_b: Sequence[str],
  references: Sequence[str],
  target_lang: str,
  resamples: int = 1000,
  seed: int = 0,
  level: float = 0.95,
) -> PairedBootstrap:
  """Paired bootstrap of BLEU(A) - BLEU(B) on the same sentences (module docstring)."""
  _check_aligned(hypotheses_a, references)
  _check_aligned(hypotheses_b, references)
  if resamples < 1 or not 0 < level < 1 or not references:
    raise ValueError(
      f"paired_bootstrap needs resamples >= 1 (got {resamples}), 0 < level < 1 (got {level}) "
      f"and at least one sentence (got {len(references)})"
    )
  # Row 0 is the whole set in order (the corpus BLEU), rows 1..R the resamples: one extraction
  # of each system's statistics serves both.
  n = len(references)
  idx_RN = np.concatenate([np.arange(n)[None], resample_indices(n, resamples, seed)])
  scores_a = resampled_bleu(hypotheses_a, references, target_lang, idx_RN)
  scores_b = resampled_bleu(hypotheses_b, references, target_lang, idx_RN)
  a, b = float(scores_a[0]), float(scores_b[0])
  d_R = scores_a[1:] - scores_b[1:]
  delta = a - b
  # A tolerance for float noise in the BLEU arithmetic: identical systems give d_r = 0 = |d|.
  extreme = np.abs(d_R - d_R.mean()) >= abs(delta) - 1e-9
  low, high = np.quantile(d_R, [(1 - level) / 2, (1 + level) / 2])
  return PairedBootstrap(
    bleu_a=a,
    bleu_b=b,
    delta=delta,
    low=float(low),
    high=float(high),
    p_value=float((1 + extreme.sum()) / (resamples + 1)),
    resamples=resamples,
    level=level,
  )
