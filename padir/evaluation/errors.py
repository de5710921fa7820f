"""What a model's translations get wrong, word by word, against the references: the error
analysis of the family of reordering tasks (benchmarks/padir_family.py).

Each hypothesis falls in one class, the first that applies:
- exact: the reference;
- reordered: the reference's words, each as often, in another order (a reordering error only);
- lexical: a different multiset of words (words dropped, inserted or replaced).
Counted beside the class, over all sentences: words dropped (in the reference and not the
hypothesis, as a multiset) and inserted, per sentence; the share of hypotheses with a non-word
(a word outside the target lexicon: word pieces fused or split; on real text a word is its
letters and digits, lowercased, so "Luz," and "luz" are one and a bare punctuation mark none,
and a lexicon of the training targets leaves the references' own rare words and names out:
`analyse(references, references, lexicon)` is the floor); the share shorter and longer
than the reference in words; and, for a language with agreement markers (the grammar's particle
closing each clause), the share whose sequence of markers differs from the reference's.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Sequence


@dataclasses.dataclass(frozen=True)
class Breakdown:
  sentences: int
  exact: float  # shares of the sentences, in [0, 1]
  reordered: float
  lexical: float
  nonword: float
  shorter: float
  longer: float
  dropped: float  # words per sentence
  inserted: float
  agreement: float | None  # share with the wrong marker sequence; None without markers

  def row(self) -> list[str]:
    pct = lambda x: f"{100 * x:.1f}"
    agreement = "-" if self.agreement is None else pct(self.agreement)
    return [
      pct(self.exact),
      pct(self.reordered),
      pct(self.lexical),
      pct(self.nonword),
      f"{pct(self.shorter)} / {pct(self.longer)}",
      f"{self.dropped:.2f} / {self.inserted:.2f}",
      agreement,
    ]


HEADER = [
  "exact %",
  "reordered %",
  "lexical %",
  "non-word %",
  "shorter / longer %",
  "dropped / inserted words",
  "agreement wrong %",
]


def word_form(word: str) -> str:
  """A word as the lexicon knows it: lowercased, the punctuation at either end stripped ("" for
  punctuation alone); the reordering family's words are their own forms."""
  lo, hi = 0, len(word)
  while lo < hi and not word[lo].isalnum():
    lo += 1
  while hi > lo and not word[hi - 1].isalnum():
    hi -= 1
  return word[lo:hi].lower()


def analyse(
  hypotheses: Sequence[str],
  references: Sequence[str],
  lexicon: Iterable[str] | None = None,
  markers: Iterable[str] | None = None,
) -> Breakdown:
  """The breakdown (module docstring) of hypotheses against references, one each; lexicon: the
  target language's words (None: no non-word count); markers: its agreement markers."""
  if len(hypotheses) != len(references):
    raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
  n = len(references)
  if n == 0:
    raise ValueError("no sentences to analyse")
  lexicon = None if lexicon is None else {word_form(w) for w in lexicon}
  markers = None if markers is None else set(markers)
  count = collections.Counter()
  dropped = inserted = 0
  for hyp, ref in zip(hypotheses, references):
    h, r = hyp.split(), ref.split()
    hc, rc = collections.Counter(h), collections.Counter(r)
    if h == r:
      count["exact"] += 1
    elif hc == rc:
      count["reordered"] += 1
    else:
      count["lexical"] += 1
    dropped += sum((rc - hc).values())
    inserted += sum((hc - rc).values())
    count["nonword"] += lexicon is not None and any(
      (f := word_form(w)) and f not in lexicon for w in h
    )
    count["shorter"] += len(h) < len(r)
    count["longer"] += len(h) > len(r)
    if markers:
      count["agreement"] += [w for w in h if w in markers] != [w for w in r if w in markers]
  share = lambda k: count[k] / n
  return Breakdown(
    sentences=n,
    exact=share("exact"),
    reordered=share("reordered"),
    lexical=share("lexical"),
    nonword=share("nonword") if lexicon is not None else 0.0,
    shorter=share("shorter"),
    longer=share("longer"),
    dropped=dropped / n,
    inserted=inserted / n,
    agreement=share("agreement") if markers else None,
  )
