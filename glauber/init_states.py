"""Initial states of Glauber chains: [CLS] prefix x_1..x_n [SEP] with n free sites (`Layout`).

x comes from text (tokenised and truncated to n tokens, or padded with [MASK] when `pad` is on;
`text_cuts` says what a truncation dropped), from random candidate tokens, or is all [MASK].
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from glauber.layout import Layout
from gmlm import checks
from gmlm.checks import UserError


def _tokens(tokenizer, text: str) -> list[int]:
  return tokenizer(text, add_special_tokens=False)["input_ids"]


TEXT_SUFFIXES = (".txt", ".text", ".lines")


def looks_like_path(text: str) -> bool:
  """A known text-file suffix (TEXT_SUFFIXES), or one word with a path separator."""
  text = text.strip()
  one_word = not any(c.isspace() for c in text)
  return text.lower().endswith(TEXT_SUFFIXES) or (one_word and ("/" in text or os.sep in text))


def read_texts(texts: str | os.PathLike | Sequence[str]) -> list[str]:
  """The starting texts. A list of strings; or a string that is: the name of an existing file
  (UTF-8, one text per line, blank lines skipped); texts separated by "|" (the command-line
  form of a list: --config.init_text='first text|second text'); a string that looks like a path
  (`looks_like_path`) but names no file: an error (a mistyped path is never used as the text);
  else one text."""
  if isinstance(texts, (str, os.PathLike)):
    path = Path(texts)
    if path.is_file():
      texts = [line.strip() for line in checks.read_lines(path) if line.strip()]
    elif isinstance(texts, str) and "|" in texts:
      texts = [t.strip() for t in texts.split("|") if t.strip()]
    elif isinstance(texts, os.PathLike) or looks_like_path(texts):
      raise UserError(
        f"init text file {str(texts)!r} does not exist (a string ending in "
        f"{', '.join(TEXT_SUFFIXES)} or one word with a '/' names a file; give an "
        "existing file, or the text itself)"
      )
    else:
      return [texts]
  texts = list(texts)
  if not texts:
    raise UserError("the list of initial texts is empty")
  return texts


def from_text(
  tokenizer,
  lay: Layout,
  texts: str | os.PathLike | Sequence[str],
  num_chains: int,
  pad: bool = False,
) -> np.ndarray:
  """tokens_BL: chain b starts from texts[b % len(texts)], truncated to n tokens (or padded
  with [MASK] when pad; otherwise a text shorter than n is an error naming it)."""
  texts = read_texts(texts)
  rows = []
  for text in texts:
    ids = _tokens(tokenizer, text)[: lay.num_sites]
    if len(ids) < lay.num_sites:
      if not pad:
        raise ValueError(
          f"init text {text!r} has {len(ids)} tokens, fewer than n = "
          f"{lay.num_sites}; give a longer text, a smaller n, or pad=True "
          "(pads with [MASK])"
        )
      ids = ids + [lay.mask_id] * (lay.num_sites - len(ids))
    rows.append(ids)
  free_BN = np.asarray([rows[b % len(rows)] for b in range(_check(num_chains))], np.int32)
  return lay.sequences(free_BN)


def text_cuts(
  tokenizer, lay: Layout, texts: str | os.PathLike | Sequence[str]
) -> list[dict[str, object]]:
  """For each starting text: the text its n free sites hold ("kept"), how many of its tokens
  did not fit ("tokens_cut") and its words the vocabulary lacks ("unknown": they start as the
  tokenizer's unknown token, e.g. [UNK])."""
  out = []
  for text in read_texts(texts):
    ids = _tokens(tokenizer, text)
    out.append(
      {
        "kept": tokenizer.decode(ids[: lay.num_sites]),
        "tokens_cut": max(0, len(ids) - lay.num_sites),
        "unknown": unknown_words(tokenizer, text),
      }
    )
  return out


def unknown_words(tokenizer, text: str) -> list[str]:
  """The whitespace-separated words of text that tokenize to the unknown token."""
  unk = getattr(tokenizer, "unk_token_id", None)
  if unk is None or unk not in _tokens(tokenizer, text):
    return []
  return [w for w in text.split() if unk in _tokens(tokenizer, w)]


def random_tokens(
  rng: np.random.Generator, lay: Layout, candidates: np.ndarray, num_chains: int
) -> np.ndarray:
  return lay.sequences(rng.choice(np.asarray(candidates), (_check(num_chains), lay.num_sites)))


def all_mask(lay: Layout, num_chains: int) -> np.ndarray:
  return lay.sequences(np.full((_check(num_chains), lay.num_sites), lay.mask_id, np.int32))


def _check(num_chains: int) -> int:
  if num_chains < 1:
    raise ValueError(f"num_chains must be >= 1, got {num_chains}")
  return int(num_chains)


def candidate_tokens(tokenizer, words) -> np.ndarray:
  """The token id of each word; a UserError names a word that is not one token."""
  ids = []
  for w in words:
    pieces = tokenizer(w, add_special_tokens=False)["input_ids"]
    if len(pieces) != 1:
      raise UserError(
        f"config.candidates: {w!r} is {len(pieces)} tokens "
        f"({tokenizer.convert_ids_to_tokens(pieces)}) for this model; give one-token words"
      )
    ids.append(pieces[0])
  if len(set(ids)) < len(ids):
    raise UserError(f"config.candidates {tuple(words)} map to repeated token ids {ids}")
  return np.asarray(ids, np.int32)


def check_candidate_words(config) -> list[str]:
  """config.candidates: >= 2 distinct non-empty words (whether each is one token of the model
  is `candidate_tokens`' check, once the tokenizer is loaded)."""
  words = checks.get(config, "candidates")
  checks.check(
    isinstance(words, (list, tuple))
    and len(words) >= 2
    and all(isinstance(w, str) and w.strip() for w in words)
    and len(set(words)) == len(words),
    "candidates",
    words,
    "must be >= 2 distinct words, each one token of the model's vocabulary",
  )
  return list(words)


def check_temperature(config, key: str = "temperature"):
  """A temperature >= 0 (0 = argmax, inf = uniform), else one line naming the key."""
  T = checks.get(config, key)
  checks.check(
    isinstance(T, (int, float)) and not isinstance(T, bool) and T >= 0,
    key,
    T,
    "the temperature must be >= 0 (0 = argmax, inf = uniform)",
  )
  return T
