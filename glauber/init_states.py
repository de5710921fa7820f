"""Initial states of Glauber chains: [CLS] prefix x_1..x_n [SEP] with n free sites.

The prefix (e.g. "Albert Einstein said that") is frozen; x comes from text (tokenised and
truncated to n tokens, or padded with [MASK] when `pad` is on), from random candidate tokens,
or is all [MASK].
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Layout:
  prefix_ids: tuple[int, ...]
  num_sites: int
  cls_id: int
  sep_id: int
  mask_id: int

  @property
  def offset(self) -> int:
    return 1 + len(self.prefix_ids)

  @property
  def length(self) -> int:
    return self.offset + self.num_sites + 1

  def sequences(self, free_BN: np.ndarray) -> np.ndarray:
    B = free_BN.shape[0]
    return np.concatenate([np.full((B, 1), self.cls_id), np.tile(self.prefix_ids, (B, 1)),
                           free_BN, np.full((B, 1), self.sep_id)], axis=1).astype(np.int32)


def max_sequence_length(model) -> int:
  c = model.config
  if getattr(c, "roberta_positions", False):
    return c.max_positions - c.pad_token_id - 1
  return c.max_positions


def _tokens(tokenizer, text: str) -> list[int]:
  return tokenizer(text, add_special_tokens=False)["input_ids"]


def layout(tokenizer, num_sites: int, prefix: str = "", max_length: int | None = None) -> Layout:
  """Validates n and the prefix against the model's position table (max_length)."""
  if num_sites < 1:
    raise ValueError(f"the number of free sites n must be >= 1, got {num_sites}")
  for name in ("cls_token_id", "sep_token_id", "mask_token_id"):
    if getattr(tokenizer, name, None) is None:
      raise ValueError(f"the tokenizer has no {name[:-3]}; Glauber chains need a masked-LM "
                       "tokenizer with [CLS]/[SEP]/[MASK] (or <s>/</s>/<mask>)")
  lay = Layout(tuple(_tokens(tokenizer, prefix)) if prefix else (), int(num_sites),
               tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id)
  if max_length is not None and lay.length > max_length:
    if lay.offset + 1 >= max_length:
      raise ValueError(f"the prefix {prefix!r} is {len(lay.prefix_ids)} tokens: with [CLS] and "
                       f"[SEP] it leaves no room for free sites in the model's {max_length} "
                       "positions")
    raise ValueError(f"n = {num_sites} free sites + prefix ({len(lay.prefix_ids)} tokens) + "
                     f"[CLS]/[SEP] = {lay.length} tokens exceeds the model's {max_length} "
                     f"positions; use n <= {max_length - lay.offset - 1}")
  return lay


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


def random_tokens(rng: np.random.Generator, lay: Layout, candidates: np.ndarray,
                  num_chains: int) -> np.ndarray:
  return lay.sequences(rng.choice(np.asarray(candidates), (_check(num_chains), lay.num_sites)))


def all_mask(lay: Layout, num_chains: int) -> np.ndarray:
  return lay.sequences(np.full((_check(num_chains), lay.num_sites), lay.mask_id, np.int32))


def _check(num_chains: int) -> int:
  if num_chains < 1:
    raise ValueError(f"num_chains must be >= 1, got {num_chains}")
  return int(num_chains)
