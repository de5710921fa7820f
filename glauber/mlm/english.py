"""Offline English text: the gensim test-data Wikipedia pages and Lee news articles, as sentences.

The text ships inside the `gensim==4.3.3` wheel (`gensim/test/test_data/`); nothing of gensim is
imported, only its data files are read:

  pip install --no-deps --target .whl gensim==4.3.3

Splits are by document, in file order: the first 90% of the Wikipedia pages and of the news
articles train, the last 10% are held out (never trained on). Wiki markup is stripped here
(templates, tables, references, files, categories, link syntax, emphasis, headings, HTML).
"""

from __future__ import annotations

import bz2
import html
import os
import pathlib
import re
import xml.etree.ElementTree as ET

WIKI_FILE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
NEWS_FILE = "lee_background.cor"
GENSIM_WHEEL = "gensim==4.3.3"  # ships the two files above (only its data is read)
HELD_OUT_FRACTION = 0.1


def data_dir() -> pathlib.Path:
  """gensim's test_data directory: $GLAUBER_GENSIM_DATA, ./.whl/gensim/..., or an installed gensim."""
  candidates = []
  if os.environ.get("GLAUBER_GENSIM_DATA"):  # when set, the only place looked at
    candidates.append(pathlib.Path(os.environ["GLAUBER_GENSIM_DATA"]))
  else:
    root = pathlib.Path(__file__).resolve().parents[2]
    candidates += [pathlib.Path(".whl/gensim/test/test_data"), root / ".whl/gensim/test/test_data"]
    import importlib.util

    spec = importlib.util.find_spec("gensim")
    if spec is not None and spec.submodule_search_locations:
      candidates.append(pathlib.Path(list(spec.submodule_search_locations)[0]) / "test/test_data")
  for c in candidates:
    if (c / WIKI_FILE).is_file() and (c / NEWS_FILE).is_file():
      return c
  raise FileNotFoundError(
    f"The offline English text ({WIKI_FILE}, {NEWS_FILE}) was not found in "
    f"{[str(c) for c in candidates]}. Install it with "
    f"`pip install --no-deps --target .whl {GENSIM_WHEEL}` (only its data files are read), "
    "or point GLAUBER_GENSIM_DATA at a directory holding them."
  )


def _drop_nested(text: str, open_: str, close: str) -> str:
  """Removes balanced open_ ... close spans (innermost first, so nesting is handled)."""
  pattern = re.compile(
    re.escape(open_) + r"(?:(?!" + re.escape(open_) + r").)*?" + re.escape(close), re.S
  )
  while True:
    text, n = pattern.subn("", text)
    if not n:
      return text


def strip_wiki(text: str) -> str:
  """Plain text from MediaWiki markup (good enough for sentence-level language modelling)."""
  text = html.unescape(text)
  text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
  text = re.sub(r"<ref[^>/]*/>", "", text)
  text = re.sub(r"<ref[^>]*>.*?</ref>", "", text, flags=re.S)
  text = re.sub(
    r"<(math|gallery|timeline|table|code|source|pre)[^>]*>.*?</\1>", "", text, flags=re.S
  )
  text = _drop_nested(text, "{{", "}}")
  text = _drop_nested(text, "{|", "|}")
  # files, images, categories and interlanguage links, which may contain nested [[...]]
  while True:
    new = re.sub(
      r"\[\[(?:File|Image|Category|[a-z\-]{2,12}):(?:[^\[\]]|\[\[[^\[\]]*\]\])*\]\]",
      "",
      text,
      flags=re.I,
    )
    if new == text:
      break
    text = new
  text = re.sub(r"\[\[(?:[^\[\]|]*\|)?([^\[\]|]*)\]\]", r"\1", text)  # [[target|label]] -> label
  text = re.sub(r"\[(?:https?|ftp)://\S+\s([^\]]*)\]", r"\1", text)  # [url label] -> label
  text = re.sub(r"\[(?:https?|ftp)://\S+\]", "", text)
  text = re.sub(r"'{2,}", "", text)
  text = re.sub(r"<[^>]+>", "", text)
  lines = []
  for line in text.split("\n"):
    line = line.strip()
    if not line or line.startswith(("=", "|", "!", "{", "}", "__")):
      continue
    lines.append(re.sub(r"^[*#:;]+\s*", "", line))
  return "\n".join(lines)


def wiki_pages(path: str | os.PathLike) -> list[str]:
  """Article texts (plain) of a MediaWiki XML dump, in file order; redirects are skipped."""
  pages = []
  with bz2.open(path, "rb") as f:
    for _, elem in ET.iterparse(f):
      if elem.tag.endswith("}page") or elem.tag == "page":
        text = next((e.text for e in elem.iter() if e.tag.endswith("text")), None) or ""
        ns = next((e.text for e in elem.iter() if e.tag.endswith("ns")), "0")
        if ns == "0" and not text.lstrip().lower().startswith("#redirect"):
          pages.append(strip_wiki(text))
        elem.clear()
  return pages


_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9])")


def sentences(text: str, min_words: int = 5, max_words: int = 60) -> list[str]:
  """Sentences of plain text, kept when they look like prose (length, letters, no leftovers)."""
  out = []
  for paragraph in text.split("\n"):
    for s in _SENTENCE_END.split(paragraph):
      s = re.sub(r"\s+", " ", s).strip()
      words = s.split()
      if not (min_words <= len(words) <= max_words) or s[-1] not in ".!?\"'":
        continue
      letters = sum(ch.isalpha() for ch in s)
      if letters < 0.6 * len(s) or any(t in s for t in ("[[", "]]", "{{", "}}", "|", "http")):
        continue
      out.append(s)
  return out


def documents(directory: str | os.PathLike | None = None) -> dict[str, list[str]]:
  """{"wiki": page texts, "news": article texts}, each in file order."""
  d = pathlib.Path(directory) if directory else data_dir()
  with open(d / NEWS_FILE, encoding="utf-8", errors="replace") as f:
    news = [line.strip() for line in f if line.strip()]
  return {"wiki": wiki_pages(d / WIKI_FILE), "news": news}


def split_documents(
  docs: list[str], held_out_fraction: float = HELD_OUT_FRACTION
) -> tuple[list[str], list[str]]:
  """(train, held_out): the last ceil(fraction * n) documents are held out."""
  n_held = max(1, -(-int(round(len(docs) * held_out_fraction * 1000)) // 1000))
  return docs[:-n_held], docs[-n_held:]


def corpus(
  split: str,
  directory: str | os.PathLike | None = None,
  sources: tuple[str, ...] = ("wiki", "news"),
) -> list[list[str]]:
  """Documents of the split ("train" or "held_out"), each a list of sentences.

  A few sentences occur verbatim in both a training and a held-out document (Wikipedia repeats
  itself, news wires too); they are dropped from both splits, so no held-out sentence is ever
  seen in training.
  """
  if split not in ("train", "held_out"):
    raise ValueError(f"split={split!r}; use 'train' or 'held_out'.")
  parts = {"train": [], "held_out": []}
  for source, docs in documents(directory).items():
    if source not in sources:
      continue
    train, held = split_documents(docs)
    parts["train"] += [sentences(d) for d in train]
    parts["held_out"] += [sentences(d) for d in held]
  seen = [{s for d in parts[k] for s in d} for k in ("train", "held_out")]
  shared = seen[0] & seen[1]
  return [kept for d in parts[split] if (kept := [s for s in d if s not in shared])]
