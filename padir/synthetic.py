"""A deterministic synthetic translation task: English-like sentences -> a cipher language.

    python -m padir.synthetic --out data/synthetic [--train 60000 --valid 512 --test 1024]

writes DIR/train.tsv, DIR/valid.tsv, DIR/test.tsv (`source<TAB>target`, the format padir.data
reads) and DIR/manifest.json (counts, the lexicon, the rules). configs/padir_synthetic*.py train
PaDIR, the AR baseline and the distilled PaDIR on it: a task both must solve on a CPU, so that a
gap between them points at the implementation, not at the data.

Source grammar (each choice uniform over its options, from numpy's PCG64 seeded by `seed`):
    S  -> NP VP | NP VP PP          (PP with probability 1/2)
    NP -> DET NOUN | DET ADJ NOUN   (ADJ with probability 1/2)
    VP -> VERB NP
    PP -> PREP NP
so a source has 5 to 11 words. The target is a function of the source:
- vocabulary map: every source word w becomes its cipher word c(w) (made of 2 syllables drawn
  without replacement from a fixed syllable grid: no two words share a cipher);
- local reordering: every `ADJ NOUN` becomes `c(NOUN) c(ADJ)` (adjective after its noun);
- fertility 2: the words in FERTILE (a few verbs and prepositions) become two cipher words,
  c(w) followed by the particle c2(w).
A target therefore has between |source| and |source| + 2 words, and PaDIR's length predictor
must learn the fertility rule. The split of a sentence is its position in the stream (train
first), and test / valid sentences that also occur in train are kept (with ~10^9 possible
sentences the overlap is negligible; manifest.json counts it).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import sys
from typing import Sequence

import numpy as np

DET = ("the", "a", "this", "that", "my", "your", "every", "no")
ADJ = (
  "red",
  "old",
  "small",
  "happy",
  "green",
  "quiet",
  "strong",
  "young",
  "dark",
  "bright",
  "cold",
  "tall",
  "brave",
  "lazy",
  "clever",
  "gentle",
)
NOUN = (
  "man",
  "woman",
  "child",
  "dog",
  "cat",
  "horse",
  "king",
  "queen",
  "farmer",
  "teacher",
  "bird",
  "house",
  "river",
  "tree",
  "garden",
  "city",
  "boat",
  "book",
  "stone",
  "road",
  "friend",
  "doctor",
  "soldier",
  "baker",
)
VERB = (
  "sees",
  "likes",
  "finds",
  "helps",
  "follows",
  "watches",
  "carries",
  "paints",
  "calls",
  "meets",
  "builds",
  "leaves",
)
PREP = ("near", "behind", "under", "with", "beside", "after")
# Words translated by two cipher words: c(w) then the particle c2(w).
FERTILE = ("likes", "carries", "meets", "behind", "beside")

CATEGORIES = {"DET": DET, "ADJ": ADJ, "NOUN": NOUN, "VERB": VERB, "PREP": PREP}
_ONSETS = "b d f g k l m n p r s t v z".split()
_VOWELS = "a e i o u".split()
_CODAS = ("", "n", "r")


@dataclasses.dataclass(frozen=True)
class Lexicon:
  """The cipher of every source word, and the second word of the fertile ones."""

  cipher: dict[str, str]
  particle: dict[str, str]  # FERTILE word -> its second cipher word

  def translate(self, words: Sequence[str]) -> list[str]:
    """The target words of a source sentence (the rules of the module docstring)."""
    out, i = [], 0
    while i < len(words):
      w = words[i]
      if w in ADJ and i + 1 < len(words) and words[i + 1] in NOUN:
        out += [self.cipher[words[i + 1]], self.cipher[w]]
        i += 2
        continue
      out.append(self.cipher[w])
      if w in self.particle:
        out.append(self.particle[w])
      i += 1
    return out


def make_lexicon(seed: int = 0) -> Lexicon:
  """Distinct two-syllable cipher words for every source word and particle (seeded)."""
  rng = np.random.default_rng([seed, 1])
  syllables = [o + v + c for o, v, c in itertools.product(_ONSETS, _VOWELS, _CODAS)]
  words = [w for category in CATEGORIES.values() for w in category]
  keys = words + [f"{w}#2" for w in FERTILE]
  picks = rng.choice(len(syllables) ** 2, size=len(keys), replace=False)
  ciphers = [syllables[p // len(syllables)] + syllables[p % len(syllables)] for p in picks]
  table = dict(zip(keys, ciphers))
  return Lexicon(
    cipher={w: table[w] for w in words}, particle={w: table[f"{w}#2"] for w in FERTILE}
  )


def _noun_phrase(rng: np.random.Generator) -> list[str]:
  words = [DET[rng.integers(len(DET))]]
  if rng.random() < 0.5:
    words.append(ADJ[rng.integers(len(ADJ))])
  return words + [NOUN[rng.integers(len(NOUN))]]


def sample_source(rng: np.random.Generator) -> list[str]:
  """One source sentence from the grammar of the module docstring."""
  words = _noun_phrase(rng) + [VERB[rng.integers(len(VERB))]] + _noun_phrase(rng)
  if rng.random() < 0.5:
    words += [PREP[rng.integers(len(PREP))]] + _noun_phrase(rng)
  return words


def make_pairs(n: int, seed: int, lexicon: Lexicon) -> list[tuple[str, str]]:
  """n (source, target) sentence pairs, a pure function of (n, seed, lexicon)."""
  rng = np.random.default_rng([seed, 2])
  pairs = []
  for _ in range(n):
    words = sample_source(rng)
    pairs.append((" ".join(words), " ".join(lexicon.translate(words))))
  return pairs


def write_corpus(out_dir: str, sizes: dict[str, int], seed: int = 0) -> dict:
  """Writes {split}.tsv for each split (train first in the stream) and manifest.json."""
  lexicon = make_lexicon(seed)
  pairs = make_pairs(sum(sizes.values()), seed, lexicon)
  os.makedirs(out_dir, exist_ok=True)
  start, splits = 0, {}
  for split, n in sizes.items():
    splits[split] = pairs[start : start + n]
    start += n
    with open(os.path.join(out_dir, f"{split}.tsv"), "w", encoding="utf-8") as f:
      f.writelines(f"{s}\t{t}\n" for s, t in splits[split])
  train_sources = {s for s, _ in splits.get("train", [])}
  manifest = {
    "source_language": "en",
    "target_language": "cx",
    "seed": seed,
    "counts": {split: len(p) for split, p in splits.items()},
    "in_train": {
      split: sum(s in train_sources for s, _ in p)
      for split, p in splits.items()
      if split != "train"
    },
    "cipher": lexicon.cipher,
    "particle": lexicon.particle,
    "rules": "word -> cipher; ADJ NOUN -> c(NOUN) c(ADJ); FERTILE word w -> c(w) c2(w)",
  }
  with open(os.path.join(out_dir, "manifest.json"), "w", encoding="utf-8") as f:
    json.dump(manifest, f, indent=2)
  return manifest


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", required=True, help="directory for train/valid/test.tsv")
  parser.add_argument("--train", type=int, default=60_000)
  parser.add_argument("--valid", type=int, default=512)
  parser.add_argument("--test", type=int, default=1024)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)
  sizes = {"train": args.train, "valid": args.valid, "test": args.test}
  manifest = write_corpus(args.out, sizes, args.seed)
  print(f"wrote {manifest['counts']} pairs to {args.out}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
