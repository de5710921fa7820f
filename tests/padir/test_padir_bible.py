"""padir.data.bible: deterministic splits, alignment rules, and (once) the real Debian packages."""

import collections
import hashlib
import json
import shutil
import subprocess

import pytest

from padir.data import bible
from padir.data import corpus as data


def test_split_is_a_function_of_the_reference_with_2_2_96_percent():
  refs = [("Gen", c, v) for c in range(1, 201) for v in range(1, 151)]  # 30,000 references
  counts = collections.Counter(bible.split_of(r) for r in refs)
  # Independent recomputation of the documented rule for a few references.
  for ref in refs[:50]:
    bucket = int(hashlib.sha256(f"{ref[0]}.{ref[1]}.{ref[2]}".encode()).hexdigest()[:16], 16) % 1000
    assert bible.split_of(ref) == ("test" if bucket < 20 else "valid" if bucket < 40 else "train")
  n = len(refs)
  for split, p in (("test", 0.02), ("valid", 0.02), ("train", 0.96)):
    sigma = (n * p * (1 - p)) ** 0.5
    assert abs(counts[split] - n * p) < 5 * sigma, counts


def test_align_drops_references_with_an_empty_or_missing_side():
  en = {("Gen", 1, 1): "In the beginning", ("Gen", 1, 2): "And the earth", ("Gen", 1, 3): "Light"}
  es = {("Gen", 1, 1): "En el principio", ("Gen", 1, 2): "", ("Gen", 1, 4): "extra"}
  corpus = bible.align(en, es)
  pairs = [p for split in bible.SPLITS for p in corpus.pairs[split]]
  assert pairs == [("In the beginning", "En el principio")]
  assert corpus.dropped == ["Gen.1.2", "Gen.1.3", "Gen.1.4"]


def test_normalize_makes_one_tsv_safe_line():
  assert bible.normalize("  a\tb\n c  ") == "a b c"


def test_missing_apt_get_gives_instructions(tmp_path, monkeypatch):
  monkeypatch.setattr(shutil, "which", lambda name: None)
  with pytest.raises(bible.CorpusPreparationError, match="apt-get is not available.*copy the .deb"):
    bible.fetch_sword_modules(str(tmp_path))


def test_real_kjv_and_reina_valera_align_verse_by_verse(tmp_path_factory):
  if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
    pytest.skip("apt-get/dpkg not available on this machine")
  cache = tmp_path_factory.mktemp("sword_cache")
  try:
    sword_root = bible.fetch_sword_modules(str(cache))
  except (bible.CorpusPreparationError, subprocess.CalledProcessError) as e:
    pytest.skip(f"Debian packages could not be downloaded: {e}")
  en = bible.read_module(sword_root, bible.ENGLISH_MODULE, books=["Ruth"])
  es = bible.read_module(sword_root, bible.SPANISH_MODULE, books=["Ruth"])
  assert len(en) == len(es) == 85  # Ruth: 22 + 23 + 18 + 22 verses in the KJV versification
  assert en[("Ruth", 1, 1)].startswith("Now it came to pass in the days when the judges ruled")
  assert es[("Ruth", 1, 1)].startswith("Y ACONTECIÓ en los días que gobernaban los jueces")
  assert en[("Ruth", 4, 22)] == "And Obed begat Jesse, and Jesse begat David."
  assert "David" in es[("Ruth", 4, 22)]
  corpus = bible.align(en, es)
  assert sum(len(corpus.pairs[s]) for s in bible.SPLITS) == 85 and not corpus.dropped
  # The one-command preparation writes the local-corpus format that padir.data.corpus reads.
  out = tmp_path_factory.mktemp("bible_ruth")
  manifest = bible.prepare(str(out), str(cache), books=["Ruth"])
  read_back = {s: data.read_split(str(out), s, "en", "es") for s in bible.SPLITS}
  assert {s: len(p) for s, p in read_back.items()} == manifest["counts"]
  assert read_back == corpus.pairs


def test_the_es_en_direction_writes_the_same_verses_in_the_same_splits_sides_swapped(
  tmp_path, monkeypatch
):
  refs = [("Gen", 1, v) for v in range(1, 301)]  # enough verses to fill every split
  en = {r: f"english {r[2]}" for r in refs}
  es = {r: f"espanol {r[2]}" for r in refs}
  monkeypatch.setattr(bible, "fetch_sword_modules", lambda cache: "unused")
  monkeypatch.setattr(
    bible, "read_module", lambda root, module, books=None: en if "KJV" in module else es
  )
  forward = bible.prepare(str(tmp_path / "en_es"))
  bible.prepare_if_missing(str(tmp_path / "es_en"), "es", "en")
  backward = json.loads((tmp_path / "es_en" / "manifest.json").read_text())
  assert (forward["source_language"], forward["target_language"]) == ("en", "es")
  assert (backward["source_language"], backward["target_language"]) == ("es", "en")
  assert forward["counts"] == backward["counts"] and min(forward["counts"].values()) > 0
  for split in bible.SPLITS:
    fwd = data.read_split(str(tmp_path / "en_es"), split, "en", "es")
    bwd = data.read_split(str(tmp_path / "es_en"), split, "es", "en")
    assert bwd == [(b, a) for a, b in fwd]
  with pytest.raises(bible.CorpusPreparationError, match="en-es or es-en, not fr-en"):
    bible.prepare_if_missing(str(tmp_path / "fr_en"), "fr", "en")
