"""A family of reordering tasks (issue 43): translation grammars drawn from a seed and a few knobs.

    python -m padir.data.grammar --out data/family_sov --task sov [--train 60000 --valid 512 --test 1024]
    python -m padir.data.grammar --out DIR --order VSO --np-order mirror --adposition post \
        --adverb front --clause front --agreement --fertility 0.2 --lexicon-size 400 \
        --min-words 30 --max-words 40 --seed 3

writes DIR/{train,valid,test}.tsv (`source<TAB>target`, the format padir.data.corpus reads, as
padir.data.synthetic writes it) and DIR/manifest.json (the knobs, the lexicon, the counts), so a
config points at DIR exactly as at a padir.data.synthetic corpus.

Source language (English-like, SVO, prepositions, adjective before noun):
    SENT   -> CLAUSE
    CLAUSE -> NP_s VERB NP_o [ADV] PP* [CONJ CLAUSE]
    NP     -> DET [ADJ] NOUN          PP -> PREP NP
Each choice is drawn from numpy's PCG64 seeded by (seed, split stream); optional constituents
(PPs, a subordinate clause, adjectives, the adverb) are added until the sentence has at least
`min_words` words, and a sentence over `max_words` is drawn again, so every source has
min_words..max_words words (a subordinate clause nests the same rule, at most `max_depth` deep).

Target language: every source word w becomes its cipher c(w) (two syllables, one-to-one), and
the knobs (`Knobs`) say where each constituent goes; each clause is linearised recursively:
- order: the permutation of S, V, O in the clause ("SVO", "SOV", "VSO", "VOS", "OSV", "OVS");
- np_order: inside a noun phrase, "det_adj_noun" (the source's), "det_noun_adj" (head-initial
  noun phrase: the adjective after its noun) or "mirror" (noun adj det);
- adposition: "pre" (c(PREP) NP) or "post" (NP c(PREP): head-final adpositional phrases);
- adverb: "stay" (after the S/V/O core), "front" (first word of its clause) or "preverb" (right
  before the verb);
- clause: "stay" (CONJ + subordinate clause at the end of its clause) or "front" (before the
  main clause's words: movement over the whole clause);
- agreement: with it, the last word of every clause is agr(k(subject noun)), the marker of the
  subject's noun class (one of 4, seeded): agreement over the whole clause, PPs included;
- fertility: this share of the open-class words (nouns, adjectives, verbs, adverbs; seeded)
  become two cipher words, c(w) then its particle c2(w);
- mirror: the whole target sentence reversed after all of the above (the mirror language);
- lexicon_size: open-class source words (40% nouns, 25% verbs, 25% adjectives, 10% adverbs; the
  English words of padir.data.synthetic first, then generated pseudo-English words).
`FAMILY` names the tasks of benchmarks/padir_family.py.
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

from gmlm.runs import atomic_write_text
from padir.data import synthetic

ORDERS = ("SVO", "SOV", "VSO", "VOS", "OSV", "OVS")
NP_ORDERS = ("det_adj_noun", "det_noun_adj", "mirror")
ADPOSITIONS = ("pre", "post")
ADVERBS = ("stay", "front", "preverb")
CLAUSES = ("stay", "front")
NUM_NOUN_CLASSES = 4
_ADV = ("quickly", "slowly", "often", "never", "today", "again", "always", "soon")
_CONJ = ("because", "while", "although", "when")
_SHARES = {"NOUN": 0.4, "VERB": 0.25, "ADJ": 0.25, "ADV": 0.1}


@dataclasses.dataclass(frozen=True)
class Knobs:
  """The grammar's settings (module docstring); the defaults are the source language's own
  order (a word-for-word cipher)."""

  order: str = "SVO"
  np_order: str = "det_adj_noun"
  adposition: str = "pre"
  adverb: str = "stay"
  clause: str = "stay"
  agreement: bool = False
  fertility: float = 0.0
  mirror: bool = False
  lexicon_size: int = 80
  min_words: int = 5
  max_words: int = 16
  max_depth: int = 2

  def check(self) -> None:
    for name, allowed in (
      ("order", ORDERS),
      ("np_order", NP_ORDERS),
      ("adposition", ADPOSITIONS),
      ("adverb", ADVERBS),
      ("clause", CLAUSES),
    ):
      if getattr(self, name) not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
    if not 0 <= self.fertility <= 1:
      raise ValueError(f"fertility must be in [0, 1], got {self.fertility}")
    if self.lexicon_size < 8:
      raise ValueError(f"lexicon_size must be >= 8, got {self.lexicon_size}")
    if not 3 <= self.min_words <= self.max_words:
      raise ValueError(
        f"need 3 <= min_words <= max_words, got {self.min_words} and {self.max_words}"
      )


# The tasks of benchmarks/padir_family.py: SOV, VSO, mirror orders and one of 30-40 words.
FAMILY: dict[str, Knobs] = {
  "sov": Knobs(order="SOV", adposition="post", np_order="det_noun_adj", agreement=True),
  "vso": Knobs(order="VSO", adverb="front", fertility=0.15),
  "mirror": Knobs(order="OVS", np_order="mirror", adposition="post", mirror=True),
  "osv_clause": Knobs(order="OSV", clause="front", adverb="preverb", agreement=True),
  "vos_fertile": Knobs(order="VOS", np_order="det_noun_adj", fertility=0.3, lexicon_size=200),
  "sov_long": Knobs(
    order="SOV",
    adposition="post",
    clause="front",
    agreement=True,
    fertility=0.1,
    min_words=30,
    max_words=40,
    max_depth=3,
  ),
}


@dataclasses.dataclass(frozen=True)
class NounPhrase:
  det: str
  adj: str | None
  noun: str


@dataclasses.dataclass(frozen=True)
class Clause:
  """A source clause: subject, verb, object, an optional adverb, PPs (preposition, noun
  phrase) and an optional subordinate clause introduced by conj."""

  subj: NounPhrase
  verb: str
  obj: NounPhrase
  adverb: str | None = None
  pps: tuple[tuple[str, NounPhrase], ...] = ()
  conj: str | None = None
  sub: "Clause | None" = None


@dataclasses.dataclass(frozen=True)
class Grammar:
  """Knobs and the lexicon they were drawn with."""

  knobs: Knobs
  words: dict[str, tuple[str, ...]]  # category -> source words
  noun_class: dict[str, int]
  cipher: dict[str, str]  # source word -> target word
  particle: dict[str, str]  # fertile word -> its second target word
  agreement: tuple[str, ...]  # the marker of each noun class

  def word(self, w: str) -> list[str]:
    return [self.cipher[w]] + ([self.particle[w]] if w in self.particle else [])

  def noun_phrase(self, np_: NounPhrase) -> list[str]:
    parts = {"det": [np_.det], "adj": [np_.adj] if np_.adj else [], "noun": [np_.noun]}
    order = {
      "det_adj_noun": ("det", "adj", "noun"),
      "det_noun_adj": ("det", "noun", "adj"),
      "mirror": ("noun", "adj", "det"),
    }[self.knobs.np_order]
    return [t for part in order for w in parts[part] for t in self.word(w)]

  def clause(self, c: Clause) -> list[str]:
    """The target words of a clause (module docstring), recursively."""
    k = self.knobs
    adverb = self.word(c.adverb) if c.adverb else []
    verb = (adverb if k.adverb == "preverb" else []) + self.word(c.verb)
    parts = {"S": self.noun_phrase(c.subj), "V": verb, "O": self.noun_phrase(c.obj)}
    core = [w for role in k.order for w in parts[role]]
    out = (adverb + core) if k.adverb == "front" else core
    out += adverb if k.adverb == "stay" else []
    for prep, np_ in c.pps:
      p, n = self.word(prep), self.noun_phrase(np_)
      out += (p + n) if k.adposition == "pre" else (n + p)
    if k.agreement:
      out.append(self.agreement[self.noun_class[c.subj.noun]])
    if c.sub is not None:
      sub = self.word(c.conj) + self.clause(c.sub)
      out = (sub + out) if k.clause == "front" else (out + sub)
    return out

  def translate(self, c: Clause) -> list[str]:
    out = self.clause(c)
    return out[::-1] if self.knobs.mirror else out


def source_words(c: Clause) -> list[str]:
  """The English-like source of a clause: S V O [ADV] PP* [CONJ CLAUSE]."""

  def np_words(np_: NounPhrase) -> list[str]:
    return [np_.det] + ([np_.adj] if np_.adj else []) + [np_.noun]

  out = np_words(c.subj) + [c.verb] + np_words(c.obj) + ([c.adverb] if c.adverb else [])
  for prep, np_ in c.pps:
    out += [prep] + np_words(np_)
  if c.sub is not None:
    out += [c.conj] + source_words(c.sub)
  return out


def _open_words(category: str, n: int, rng: np.random.Generator, taken: set[str]) -> list[str]:
  base = {"NOUN": synthetic.NOUN, "VERB": synthetic.VERB, "ADJ": synthetic.ADJ, "ADV": _ADV}
  own = list(base[category][:n])
  return own + synthetic._pseudo_words(n - len(own), rng, taken)


def make_grammar(knobs: Knobs = Knobs(), seed: int = 0) -> Grammar:
  """The lexicon of a grammar: source words, noun classes, fertile words, one-to-one ciphers."""
  knobs.check()
  rng = np.random.default_rng([seed, 43, 1])
  closed = {"DET": synthetic.DET[:6], "PREP": synthetic.PREP, "CONJ": _CONJ}
  taken = {w for ws in closed.values() for w in ws} | set(_ADV)
  taken |= set(synthetic.NOUN) | set(synthetic.VERB) | set(synthetic.ADJ)
  words = dict(closed)
  for category, share in _SHARES.items():
    words[category] = tuple(
      _open_words(category, max(2, round(share * knobs.lexicon_size)), rng, taken)
    )
  noun_class = {w: int(rng.integers(NUM_NOUN_CLASSES)) for w in words["NOUN"]}
  open_words = [w for c in _SHARES for w in words[c]]
  num_fertile = round(knobs.fertility * len(open_words))
  fertile = sorted(open_words[i] for i in rng.permutation(len(open_words))[:num_fertile])
  keys = [w for ws in words.values() for w in ws]
  keys += [f"particle#{w}" for w in fertile] + [f"agr#{k}" for k in range(NUM_NOUN_CLASSES)]
  syllables = [
    o + v + c for o, v, c in itertools.product(synthetic._ONSETS, synthetic._VOWELS, "nr")
  ]
  syllables += [o + v for o, v in itertools.product(synthetic._ONSETS, synthetic._VOWELS)]
  picks = rng.choice(len(syllables) ** 2, size=len(keys), replace=False)
  table = dict(
    zip(keys, (syllables[p // len(syllables)] + syllables[p % len(syllables)] for p in picks))
  )
  return Grammar(
    knobs=knobs,
    words=words,
    noun_class=noun_class,
    cipher={k: v for k, v in table.items() if "#" not in k},
    particle={w: table[f"particle#{w}"] for w in fertile},
    agreement=tuple(table[f"agr#{k}"] for k in range(NUM_NOUN_CLASSES)),
  )


def sample_clause(rng: np.random.Generator, grammar: Grammar) -> Clause:
  """One source sentence with min_words..max_words words (module docstring)."""
  k, w = grammar.knobs, grammar.words
  pick = lambda cat: w[cat][rng.integers(len(w[cat]))]

  def noun_phrase() -> NounPhrase:
    return NounPhrase(pick("DET"), pick("ADJ") if rng.random() < 0.5 else None, pick("NOUN"))

  def clause(depth: int, budget: int) -> Clause:
    c = Clause(
      noun_phrase(), pick("VERB"), noun_phrase(), pick("ADV") if rng.random() < 0.3 else None
    )
    # Grow until the budget (words still wanted) is met: PPs and, below max_depth, a clause.
    while len(source_words(c)) < budget:
      if depth < k.max_depth and c.sub is None and rng.random() < 0.4:
        sub = clause(depth + 1, budget - len(source_words(c)) - 1)
        c = dataclasses.replace(c, conj=pick("CONJ"), sub=sub)
      elif len(c.pps) < 4:
        c = dataclasses.replace(c, pps=c.pps + ((pick("PREP"), noun_phrase()),))
      elif c.adverb is None:
        c = dataclasses.replace(c, adverb=pick("ADV"))
      else:
        break
    return c

  while True:
    budget = int(rng.integers(k.min_words, k.max_words + 1))
    c = clause(1, budget)
    if k.min_words <= len(source_words(c)) <= k.max_words:
      return c


def make_pairs(n: int, seed: int, grammar: Grammar) -> list[tuple[str, str]]:
  """n (source, target) pairs: a pure function of (n, seed, grammar)."""
  rng = np.random.default_rng([seed, 43, 2])
  pairs = []
  for _ in range(n):
    c = sample_clause(rng, grammar)
    pairs.append((" ".join(source_words(c)), " ".join(grammar.translate(c))))
  return pairs


def write_corpus(
  out_dir: str, sizes: dict[str, int], knobs: Knobs = Knobs(), seed: int = 0
) -> dict:
  """Writes {split}.tsv (train first in the stream) and manifest.json; returns the manifest.
  Each file is written whole beside its path and renamed into place, the manifest last, so two
  runs that start together on a missing corpus (two models of one task) both write it and
  neither reads a file the other is still writing."""
  grammar = make_grammar(knobs, seed)
  pairs = make_pairs(sum(sizes.values()), seed, grammar)
  os.makedirs(out_dir, exist_ok=True)
  start, counts = 0, {}
  for split, n in sizes.items():
    text = "".join(f"{s}\t{t}\n" for s, t in pairs[start : start + n])
    atomic_write_text(os.path.join(out_dir, f"{split}.tsv"), text)
    counts[split], start = n, start + n
  lengths = [len(s.split()) for s, _ in pairs]
  manifest = {
    "source_language": "en",
    "target_language": "cx",
    "grammar": "family",
    "seed": seed,
    "knobs": dataclasses.asdict(knobs),
    "counts": counts,
    "source_words": [min(lengths), max(lengths)] if lengths else [],
    "words": {c: list(ws) for c, ws in grammar.words.items()},
    "noun_class": grammar.noun_class,
    "cipher": grammar.cipher,
    "particle": grammar.particle,
    "agreement": list(grammar.agreement),
  }
  atomic_write_text(os.path.join(out_dir, "manifest.json"), json.dumps(manifest, indent=2))
  return manifest


FAMILY_SIZES = {"valid": 512, "test": 1024}  # a family task's held-out splits (pairs)


def prepare_if_missing(out_dir: str, task: str, seed: int = 0, train_pairs: int = 60_000) -> dict:
  """A family task's corpus in out_dir (a run config's data.grammar_task): written when its
  manifest is missing, else checked to be that task's (knobs, seed, sizes), so a config never
  trains on another task's corpus in the same directory. Returns the manifest."""
  if task not in FAMILY:
    raise ValueError(f"data.grammar_task={task!r} is not a family task: one of {sorted(FAMILY)}")
  sizes = {"train": train_pairs, **FAMILY_SIZES}
  path = os.path.join(out_dir, "manifest.json")
  if not os.path.isfile(path):
    return write_corpus(out_dir, sizes, FAMILY[task], seed)
  with open(path, encoding="utf-8") as f:
    manifest = json.load(f)
  want = {"knobs": dataclasses.asdict(FAMILY[task]), "seed": seed, "counts": sizes}
  want = json.loads(json.dumps(want))  # as the manifest stores it (tuples as lists)
  got = {k: manifest.get(k) for k in want}
  if got != want:
    raise ValueError(
      f"data.corpus_dir={out_dir!r} holds another corpus ({got}) than data.grammar_task="
      f"{task!r} (seed {seed}, {train_pairs} training pairs) writes: point data.corpus_dir "
      f"elsewhere"
    )
  return manifest


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", required=True, help="directory for train/valid/test.tsv")
  parser.add_argument("--task", default=None, choices=sorted(FAMILY), help="a task of FAMILY")
  parser.add_argument("--train", type=int, default=60_000)
  parser.add_argument("--valid", type=int, default=512)
  parser.add_argument("--test", type=int, default=1024)
  parser.add_argument("--seed", type=int, default=0)
  defaults = Knobs()
  for f in dataclasses.fields(Knobs):
    flag = "--" + f.name.replace("_", "-")
    if f.type in ("bool", bool):
      parser.add_argument(flag, action="store_true", default=None)
    else:
      kind = {"int": int, "float": float}.get(str(f.type), str)
      parser.add_argument(
        flag, type=kind, default=None, help=f"default {getattr(defaults, f.name)}"
      )
  args = parser.parse_args(argv)
  base = FAMILY[args.task] if args.task else defaults
  given = {f.name: getattr(args, f.name) for f in dataclasses.fields(Knobs)}
  knobs = dataclasses.replace(base, **{k: v for k, v in given.items() if v is not None})
  sizes = {"train": args.train, "valid": args.valid, "test": args.test}
  try:
    manifest = write_corpus(args.out, sizes, knobs, args.seed)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(f"wrote {manifest['counts']} pairs to {args.out} ({knobs})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
