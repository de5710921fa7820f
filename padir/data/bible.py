"""An offline English-Spanish parallel corpus: the KJV and Reina-Valera 1909 Bibles, verse-aligned.

    python -m padir.data.bible --out DIR [--cache DIR/cache] [--direction en-es | es-en]

downloads the Debian packages `sword-text-kjv` and `sword-text-sparv` with `apt-get download`
(no root needed), unpacks them with `dpkg -x`, reads both SWORD modules with `pysword`, aligns
them by verse reference (book, chapter, verse) and writes

    DIR/train.tsv  DIR/valid.tsv  DIR/test.tsv    one `english<TAB>spanish` pair per line
    DIR/manifest.json                             counts, dropped references, split rule

(`--direction es-en`: `spanish<TAB>english`, the same verses in the same splits; the .deb files
of an en-es corpus can be reused with --cache data/bible_en_es/cache.)

The split of a verse is a pure function of its reference (a SHA-256 hash), so it never depends
on the order of reading, on the machine or on the pysword version. Both texts are public domain.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import glob
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from typing import Iterable, Sequence

DEB_PACKAGES = ("sword-text-kjv", "sword-text-sparv")
ENGLISH_MODULE = "engKJV2006eb"
SPANISH_MODULE = "spaRV1909eb"
SPLITS = ("train", "valid", "test")
DIRECTIONS = ("en-es", "es-en")  # source-target
# A verse goes to test if hash % 1000 < 20, to valid if < 40, else to train (2% / 2% / 96%).
TEST_PER_MILLE = 20
VALID_PER_MILLE = 20


class CorpusPreparationError(RuntimeError):
  """The Bible corpus could not be fetched or read; the message says what to do."""


VerseRef = tuple[str, int, int]  # (OSIS book name, chapter, verse), e.g. ("Gen", 1, 1)


def ref_string(ref: VerseRef) -> str:
  return f"{ref[0]}.{ref[1]}.{ref[2]}"


def split_of(ref: VerseRef) -> str:
  """Deterministic split of a verse: SHA-256 of "Book.chapter.verse", modulo 1000."""
  bucket = int.from_bytes(hashlib.sha256(ref_string(ref).encode()).digest()[:8], "big") % 1000
  if bucket < TEST_PER_MILLE:
    return "test"
  if bucket < TEST_PER_MILLE + VALID_PER_MILLE:
    return "valid"
  return "train"


def normalize(text: str) -> str:
  """One line of plain text: whitespace (tabs, newlines included) collapsed to single spaces."""
  return re.sub(r"\s+", " ", text).strip()


def fetch_sword_modules(cache_dir: str) -> str:
  """Downloads and unpacks the two .deb packages into cache_dir; returns the SWORD root.

  Packages already in cache_dir (e.g. copied there by hand) are not downloaded again.
  """
  os.makedirs(cache_dir, exist_ok=True)
  missing = [p for p in DEB_PACKAGES if not glob.glob(os.path.join(cache_dir, f"{p}_*.deb"))]
  if missing:
    if shutil.which("apt-get") is None:
      raise CorpusPreparationError(
        f"apt-get is not available, so the Debian packages {missing} cannot be downloaded. "
        f"On another machine run `apt-get download {' '.join(DEB_PACKAGES)}` (or fetch them "
        f"from https://packages.debian.org) and copy the .deb files into {cache_dir}."
      )
    proc = subprocess.run(
      ["apt-get", "download", *missing], cwd=cache_dir, capture_output=True, text=True
    )
    if proc.returncode != 0:
      raise CorpusPreparationError(
        f"`apt-get download {' '.join(missing)}` failed (exit {proc.returncode}) in {cache_dir}:"
        f"\n{proc.stderr.strip()}\nIs the Debian archive reachable? Running `apt-get update` "
        f"may help; or copy the .deb files into {cache_dir} by hand."
      )
  if shutil.which("dpkg") is None:
    raise CorpusPreparationError(
      f"dpkg is not available to unpack the .deb files in {cache_dir}. Unpack them with "
      f"`ar x FILE.deb && tar xf data.tar.xz` into {os.path.join(cache_dir, 'root')} instead."
    )
  root = os.path.join(cache_dir, "root")
  for deb in sorted(glob.glob(os.path.join(cache_dir, "*.deb"))):
    subprocess.run(["dpkg", "-x", deb, root], check=True, capture_output=True)
  sword_root = os.path.join(root, "usr", "share", "sword")
  if not os.path.isdir(os.path.join(sword_root, "mods.d")):
    raise CorpusPreparationError(f"no SWORD modules found under {sword_root} after unpacking")
  return sword_root


def read_module(
  sword_root: str, module: str, books: Sequence[str] | None = None
) -> dict[VerseRef, str]:
  """All verses of one SWORD Bible module (or only the given OSIS books), as plain text."""
  from pysword.modules import SwordModules  # pylint: disable=g-import-not-at-top

  modules = SwordModules(sword_root)
  found = modules.parse_modules()
  if module not in found:
    raise CorpusPreparationError(f"module {module} not in {sword_root}; found {sorted(found)}")
  bible = modules.get_bible_from_module(module)
  # pysword decompresses the whole book block once per verse; remember the last few blocks.
  # (A private method: if a later pysword renames it, reading is only slower, not wrong.)
  if hasattr(bible, "_decompressed_text"):
    bible._decompressed_text = functools.lru_cache(maxsize=4)(bible._decompressed_text)  # pylint: disable=protected-access
  verses = {}
  for testament_books in bible.get_structure().get_books().values():
    for book in testament_books:
      if books is not None and book.osis_name not in books:
        continue
      texts = list(bible.get_iter(books=[book.osis_name], clean=True))
      if len(texts) != sum(book.chapter_lengths):
        raise CorpusPreparationError(
          f"{module} {book.osis_name}: read {len(texts)} verses, the versification says "
          f"{sum(book.chapter_lengths)}"
        )
      refs = [
        (book.osis_name, c + 1, v + 1) for c, n in enumerate(book.chapter_lengths) for v in range(n)
      ]
      verses.update({ref: normalize(text) for ref, text in zip(refs, texts)})
  return verses


@dataclasses.dataclass(frozen=True)
class AlignedCorpus:
  pairs: dict[str, list[tuple[str, str]]]  # split -> [(english, spanish)] in canonical order
  dropped: list[str]  # references with an empty or missing side


def align(english: dict[VerseRef, str], spanish: dict[VerseRef, str]) -> AlignedCorpus:
  """Pairs verses with the same reference; drops references where either side is empty.

  (Reina-Valera merges a few verses into their neighbours, leaving ~18 empty references.)
  """
  pairs = {split: [] for split in SPLITS}
  dropped = []
  for ref in english:  # dicts keep the canonical (Genesis -> Revelation) order
    en, es = english[ref], spanish.get(ref, "")
    if not en or not es:
      dropped.append(ref_string(ref))
      continue
    pairs[split_of(ref)].append((en, es))
  dropped += [ref_string(ref) for ref in spanish if ref not in english]
  return AlignedCorpus(pairs=pairs, dropped=dropped)


def write_tsv(path: str, pairs: Iterable[tuple[str, str]]) -> int:
  n = 0
  with open(path, "w", encoding="utf-8") as f:
    for src, tgt in pairs:
      f.write(f"{src}\t{tgt}\n")
      n += 1
  return n


def direction_of(source_lang: str, target_lang: str) -> str:
  """ "en-es" or "es-en" for a config's data.source_lang / target_lang; CorpusPreparationError for
  another pair (the Bible corpus has these two languages only)."""
  direction = f"{source_lang}-{target_lang}"
  if direction not in DIRECTIONS:
    raise CorpusPreparationError(
      f"the Bible corpus translates en-es or es-en, not {direction}: set config.data.source_lang"
      " / target_lang to en / es or es / en (or data.prepare_bible=False for another corpus)"
    )
  return direction


def prepare(
  out_dir: str,
  cache_dir: str | None = None,
  books: Sequence[str] | None = None,
  direction: str = "en-es",
) -> dict:
  """Fetches, aligns and writes the corpus (source first: English with direction "en-es",
  Spanish with "es-en"); returns the manifest (also written to out_dir)."""
  if direction not in DIRECTIONS:
    raise CorpusPreparationError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
  cache_dir = cache_dir or os.path.join(out_dir, "cache")
  sword_root = fetch_sword_modules(cache_dir)
  corpus = align(
    read_module(sword_root, ENGLISH_MODULE, books), read_module(sword_root, SPANISH_MODULE, books)
  )
  os.makedirs(out_dir, exist_ok=True)
  flip = direction == "es-en"
  counts = {
    split: write_tsv(
      os.path.join(out_dir, f"{split}.tsv"),
      [(es, en) for en, es in corpus.pairs[split]] if flip else corpus.pairs[split],
    )
    for split in SPLITS
  }
  source, target = direction.split("-")
  manifest = {
    "source_language": source,
    "target_language": target,
    "modules": [ENGLISH_MODULE, SPANISH_MODULE],
    "packages": list(DEB_PACKAGES),
    "counts": counts,
    "dropped": corpus.dropped,
    "split_rule": (
      f"sha256('Book.chapter.verse') % 1000: < {TEST_PER_MILLE} test, "
      f"< {TEST_PER_MILLE + VALID_PER_MILLE} valid, else train"
    ),
  }
  with open(os.path.join(out_dir, "manifest.json"), "w", encoding="utf-8") as f:
    json.dump(manifest, f, indent=2)
  return manifest


def prepare_if_missing(corpus_dir: str, source_lang: str = "en", target_lang: str = "es") -> None:
  """prepare(corpus_dir) in the direction source_lang-target_lang unless corpus_dir already
  holds train.tsv (a run config's data.prepare_bible: the first training run fetches the
  corpus)."""
  if not os.path.isfile(os.path.join(corpus_dir, "train.tsv")):
    direction = direction_of(source_lang, target_lang)
    logging.info("preparing the KJV / Reina-Valera corpus (%s) in %s", direction, corpus_dir)
    prepare(corpus_dir, direction=direction)


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", required=True, help="directory for train/valid/test.tsv")
  parser.add_argument("--cache", default=None, help="where the .deb files go (default OUT/cache)")
  parser.add_argument(
    "--direction", default="en-es", choices=DIRECTIONS, help="source-target (default en-es)"
  )
  args = parser.parse_args(argv)
  try:
    manifest = prepare(args.out, args.cache, direction=args.direction)
  except CorpusPreparationError as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  print(
    f"wrote {manifest['counts']} pairs to {args.out} "
    f"({len(manifest['dropped'])} references dropped: an empty side)"
  )
  return 0


if __name__ == "__main__":
  sys.exit(main())
