"""A deterministic synthetic translation task: English-like sentences -> a cipher language.

    python -m padir.data.synthetic --out data/synthetic [--train 60000 --valid 512 --test 1024]
    python -m padir.data.synthetic --out data/synthetic_reorder --grammar reorder [--lexicon-scale 4]

writes DIR/train.tsv, DIR/valid.tsv, DIR/test.tsv (`source<TAB>target`, the format padir.data.corpus
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

The reordering grammar (`--grammar reorder`, issue 26: real language pairs move words far):
    S  -> NP_subj VERB NP_obj | NP_subj VERB NP_obj PP      (PP with probability 1/2)
with NP and PP as above and every noun of a fixed noun class k(NOUN) in 0..3 (seeded). Target:
    [c(NP_pp) c(PREP)]  c(NP_a) c(NP_b)  c(VERB) [c2(VERB)]  agr(k(NOUN_subj))
- non-local movement: the PP moves from the end of the sentence to its front, its preposition
  after its noun phrase (a postposition); the verb moves to the end (verb-final);
- argument swap: (NP_a, NP_b) = (object, subject) when the verb is one of SWAP_VERBS (half of
  them), else (subject, object): the order of the first words depends on the source's verb;
- long-range agreement: the verb's last word is the marker agr(k) of its subject's noun class
  (up to ~10 target words away), and each determiner's cipher depends on its noun's class:
  c(DET, k(NOUN));
- inside each NP the adjective follows its noun; fertile words (FERTILE) add c2(w).
A target has |source| + 1 to |source| + 3 words. `--lexicon-scale K` multiplies the open
classes (ADJ, NOUN, VERB) by K with generated pseudo-English words (K=1: the 66 words of the
cipher grammar; K=4: 222 words).
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


# ----------------------------------------------------------------------------- reordering grammar

GRAMMARS = ("cipher", "reorder")
NUM_NOUN_CLASSES = 4
_SOURCE_ONSETS = "bl br cl cr dr fl fr gl gr pl pr sl sp st tr".split()
_SOURCE_CODAS = ("n", "m", "p", "t", "sk", "nd")


@dataclasses.dataclass(frozen=True)
class ReorderLexicon:
  """The words of the reordering grammar and their ciphers (module docstring)."""

  words: dict[str, tuple[str, ...]]  # category -> source words
  noun_class: dict[str, int]
  swap_verbs: frozenset[str]
  fertile: frozenset[str]
  cipher: dict[str, str]  # source word (DET: "det#k" per noun class) -> cipher word
  particle: dict[str, str]  # fertile word -> its second cipher word
  agreement: tuple[str, ...]  # the marker of each noun class

  def noun_phrase(self, words: Sequence[str]) -> list[str]:
    """DET [ADJ] NOUN -> c(DET, k(NOUN)) c(NOUN) [c(ADJ)]."""
    noun = words[-1]
    out = [self.cipher[f"{words[0]}#{self.noun_class[noun]}"], self.cipher[noun]]
    return out + [self.cipher[w] for w in words[1:-1]]

  def word(self, w: str) -> list[str]:
    return [self.cipher[w]] + ([self.particle[w]] if w in self.particle else [])

  def translate(self, subj: Sequence[str], verb: str, obj: Sequence[str], pp: Sequence[str]):
    """The target words of a source sentence subj + [verb] + obj + pp (pp: PREP + NP or [])."""
    out = (self.noun_phrase(pp[1:]) + self.word(pp[0])) if pp else []
    first, second = (obj, subj) if verb in self.swap_verbs else (subj, obj)
    out += self.noun_phrase(first) + self.noun_phrase(second) + self.word(verb)
    return out + [self.agreement[self.noun_class[subj[-1]]]]


def _pseudo_words(n: int, rng: np.random.Generator, taken: set[str]) -> list[str]:
  """n distinct two-syllable pseudo-English words (e.g. "brantosk"), none in `taken`."""
  syllables = [o + v + c for o in _SOURCE_ONSETS for v in _VOWELS for c in _SOURCE_CODAS]
  out: list[str] = []
  while len(out) < n:
    a, b = rng.integers(len(syllables), size=2)
    w = syllables[a] + syllables[b]
    if w not in taken:
      taken.add(w)
      out.append(w)
  return out


def make_reorder_lexicon(seed: int = 0, scale: int = 1) -> ReorderLexicon:
  """The reordering grammar's words (open classes x scale), noun classes, swap verbs and
  distinct ciphers (seeded)."""
  if scale < 1:
    raise ValueError(f"the lexicon scale must be >= 1, got {scale}")
  rng = np.random.default_rng([seed, 3])
  taken = {w for category in CATEGORIES.values() for w in category}
  words = {}
  for name, base in CATEGORIES.items():
    extra = (scale - 1) * len(base) if name in ("ADJ", "NOUN", "VERB") else 0
    words[name] = tuple(base) + tuple(_pseudo_words(extra, rng, taken))
  noun_class = {w: int(rng.integers(NUM_NOUN_CLASSES)) for w in words["NOUN"]}
  verbs = list(words["VERB"])
  swap = frozenset(verbs[i] for i in rng.permutation(len(verbs))[: len(verbs) // 2])
  fertile = frozenset(FERTILE) | frozenset(words["VERB"][len(VERB) :: 6])
  keys = [w for name, ws in words.items() if name != "DET" for w in ws]
  keys += [f"{d}#{k}" for d in words["DET"] for k in range(NUM_NOUN_CLASSES)]
  keys += [f"particle#{w}" for w in sorted(fertile)]
  keys += [f"agr#{k}" for k in range(NUM_NOUN_CLASSES)]
  syllables = [o + v + c for o, v, c in itertools.product(_ONSETS, _VOWELS, _CODAS)]
  picks = rng.choice(len(syllables) ** 2, size=len(keys), replace=False)
  table = dict(
    zip(keys, (syllables[p // len(syllables)] + syllables[p % len(syllables)] for p in picks))
  )
  return ReorderLexicon(
    words=words,
    noun_class=noun_class,
    swap_verbs=swap,
    fertile=fertile,
    cipher={k: v for k, v in table.items() if not k.startswith(("particle#", "agr#"))},
    particle={w: table[f"particle#{w}"] for w in sorted(fertile)},
    agreement=tuple(table[f"agr#{k}"] for k in range(NUM_NOUN_CLASSES)),
  )


def make_reorder_pairs(n: int, seed: int, lexicon: ReorderLexicon) -> list[tuple[str, str]]:
  """n (source, target) pairs of the reordering grammar, a pure function of its arguments."""
  rng = np.random.default_rng([seed, 4])
  w = lexicon.words
  pick = lambda cat: w[cat][rng.integers(len(w[cat]))]

  def np_() -> list[str]:
    words = [pick("DET")] + ([pick("ADJ")] if rng.random() < 0.5 else [])
    return words + [pick("NOUN")]

  pairs = []
  for _ in range(n):
    subj, verb, obj = np_(), pick("VERB"), np_()
    pp = [pick("PREP")] + np_() if rng.random() < 0.5 else []
    source = subj + [verb] + obj + pp
    pairs.append((" ".join(source), " ".join(lexicon.translate(subj, verb, obj, pp))))
  return pairs


def write_corpus(
  out_dir: str,
  sizes: dict[str, int],
  seed: int = 0,
  grammar: str = "cipher",
  lexicon_scale: int = 1,
) -> dict:
  """Writes {split}.tsv for each split (train first in the stream) and manifest.json."""
  if grammar not in GRAMMARS:
    raise ValueError(f"grammar must be one of {GRAMMARS}, got {grammar!r}")
  if grammar == "cipher" and lexicon_scale != 1:
    raise ValueError("--lexicon-scale is for the reordering grammar (--grammar reorder)")
  if grammar == "cipher":
    lexicon = make_lexicon(seed)
    pairs = make_pairs(sum(sizes.values()), seed, lexicon)
  else:
    lexicon = make_reorder_lexicon(seed, lexicon_scale)
    pairs = make_reorder_pairs(sum(sizes.values()), seed, lexicon)
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
  }
  if grammar == "cipher":
    manifest["rules"] = "word -> cipher; ADJ NOUN -> c(NOUN) c(ADJ); FERTILE word w -> c(w) c2(w)"
  else:
    manifest.update(
      grammar=grammar,
      lexicon_scale=lexicon_scale,
      source_words=sum(len(ws) for ws in lexicon.words.values()),
      words={k: list(v) for k, v in lexicon.words.items()},
      noun_class=lexicon.noun_class,
      swap_verbs=sorted(lexicon.swap_verbs),
      agreement=list(lexicon.agreement),
      rules=(
        "NP_s V NP_o [PREP NP] -> [c(NP) c(PREP)] c(NP_a) c(NP_b) c(V) [c2(V)] agr(k(subj)); "
        "(NP_a, NP_b) = (NP_o, NP_s) for swap verbs; NP: c(DET#k(N)) c(N) [c(ADJ)]"
      ),
    )
  with open(os.path.join(out_dir, "manifest.json"), "w", encoding="utf-8") as f:
    json.dump(manifest, f, indent=2)
  return manifest


# The synthetic corpora the shipped configs read (configs/padir_synthetic*.py, padir_reorder*.py),
# by directory name, and the flags that make them.
SHIPPED = {
  "synthetic": "",
  "synthetic_reorder": " --grammar reorder",
  "synthetic_reorder4": " --grammar reorder --lexicon-scale 4",
}


def make_command(corpus_dir: str) -> str | None:
  """The command that writes corpus_dir where it is named as a shipped config's synthetic
  corpus (data/synthetic, ...), else None: what a missing split's message tells a new user."""
  flags = SHIPPED.get(os.path.basename(os.path.normpath(corpus_dir)))
  return None if flags is None else f"python -m padir.data.synthetic --out {corpus_dir}{flags}"


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", required=True, help="directory for train/valid/test.tsv")
  parser.add_argument("--train", type=int, default=60_000)
  parser.add_argument("--valid", type=int, default=512)
  parser.add_argument("--test", type=int, default=1024)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--grammar", default="cipher", choices=GRAMMARS)
  parser.add_argument(
    "--lexicon-scale", type=int, default=1, help="reorder: open word classes x this (e.g. 4)"
  )
  args = parser.parse_args(argv)
  sizes = {"train": args.train, "valid": args.valid, "test": args.test}
  try:
    manifest = write_corpus(args.out, sizes, args.seed, args.grammar, args.lexicon_scale)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(f"wrote {manifest['counts']} pairs to {args.out}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
