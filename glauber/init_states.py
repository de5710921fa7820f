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


def _tokens(tokenizer, text: str) -> list[int]:
  return tokenizer(text, add_special_tokens=False)["input_ids"]


def read_texts(texts: str | os.PathLike | Sequence[str]) -> list[str]:
  """A list of strings, or a file with one text per line (blank lines skipped); a string that
  names no file and does not end in .txt is one text."""
  if isinstance(texts, (str, os.PathLike)):
    path = Path(texts)
    if not path.is_file():
      if isinstance(texts, os.PathLike) or str(texts).endswith(".txt"):
        raise ValueError(f"init text file {str(path)!r} does not exist")
      return [str(texts)]
    texts = [line.strip() for line in path.read_text().splitlines() if line.strip()]
  texts = list(texts)
  if not texts:
    raise ValueError("the list of initial texts is empty")
  return texts


def from_text(tokenizer, lay: Layout, texts: str | os.PathLike | Sequence[str], num_chains: int,
              pad: bool = False) -> np.ndarray:
  """tokens_BL: chain b starts from texts[b % len(texts)], truncated to n tokens (or padded
  with [MASK] when pad; otherwise a text shorter than n is an error naming it)."""
  texts = read_texts(texts)
  rows = []
  for text in texts:
    ids = _tokens(tokenizer, text)[:lay.num_sites]
    if len(ids) < lay.num_sites:
      if not pad:
        raise ValueError(f"init text {text!r} has {len(ids)} tokens, fewer than n = "
                         f"{lay.num_sites}; give a longer text, a smaller n, or pad=True "
                         "(pads with [MASK])")
      ids = ids + [lay.mask_id] * (lay.num_sites - len(ids))
    rows.append(ids)
  free_BN = np.asarray([rows[b % len(rows)] for b in range(_check(num_chains))], np.int32)
  return lay.sequences(free_BN)


def text_cuts(tokenizer, lay: Layout, texts: str | os.PathLike | Sequence[str]
              ) -> list[dict[str, object]]:
  """For each starting text: the text its n free sites hold ("kept") and how many of its
  tokens did not fit ("tokens_cut")."""
  out = []
  for text in read_texts(texts):
    ids = _tokens(tokenizer, text)
    out.append({"kept": tokenizer.decode(ids[:lay.num_sites]),
                "tokens_cut": max(0, len(ids) - lay.num_sites)})
  return out


def random_tokens(rng: np.random.Generator, lay: Layout, candidates: np.ndarray,
                  num_chains: int) -> np.ndarray:
  return lay.sequences(rng.choice(np.asarray(candidates), (_check(num_chains), lay.num_sites)))


def all_mask(lay: Layout, num_chains: int) -> np.ndarray:
  return lay.sequences(np.full((_check(num_chains), lay.num_sites), lay.mask_id, np.int32))


def _check(num_chains: int) -> int:
  if num_chains < 1:
    raise ValueError(f"num_chains must be >= 1, got {num_chains}")
  return int(num_chains)
