"""Where the free sites are: every chain's sequence is [CLS] prefix x_1..x_n [SEP].

The prefix (e.g. "Albert Einstein said that") is frozen; only the n free sites at positions
offset .. offset + n - 1 (offset = 1 + len(prefix)) ever change. A `Layout` states this once;
`chains.Spec` holds it, and the initial states (`init_states`) are built from it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gmlm.checks import UserError


@dataclasses.dataclass(frozen=True)
class Layout:
  prefix_ids: tuple[int, ...]
  num_sites: int  # n
  cls_id: int
  sep_id: int
  mask_id: int

  def __post_init__(self):
    if self.num_sites < 1:
      raise ValueError(f"the number of free sites n must be >= 1, got {self.num_sites}")

  @property
  def offset(self) -> int:
    """The position of the first free site."""
    return 1 + len(self.prefix_ids)

  @property
  def length(self) -> int:
    """L = offset + n + 1 tokens."""
    return self.offset + self.num_sites + 1

  def sequences(self, free_BN: np.ndarray) -> np.ndarray:
    """tokens_BL of the free tokens free_BN."""
    B = free_BN.shape[0]
    return np.concatenate(
      [
        np.full((B, 1), self.cls_id),
        np.tile(self.prefix_ids, (B, 1)),
        free_BN,
        np.full((B, 1), self.sep_id),
      ],
      axis=1,
    ).astype(np.int32)

  @classmethod
  def from_tokenizer(
    cls, tokenizer, num_sites: int, prefix: str = "", max_length: int | None = None
  ) -> "Layout":
    """The layout of n free sites after `prefix`, checked against the model's position table
    (max_length)."""
    if num_sites < 1:
      raise ValueError(f"the number of free sites n must be >= 1, got {num_sites}")
    for name in ("cls_token_id", "sep_token_id", "mask_token_id"):
      if getattr(tokenizer, name, None) is None:
        raise ValueError(
          f"the tokenizer has no {name[:-3]}; Glauber chains need a masked-LM "
          "tokenizer with [CLS]/[SEP]/[MASK] (or <s>/</s>/<mask>)"
        )
    prefix_ids = tuple(tokenizer(prefix, add_special_tokens=False)["input_ids"]) if prefix else ()
    lay = cls(
      prefix_ids,
      int(num_sites),
      tokenizer.cls_token_id,
      tokenizer.sep_token_id,
      tokenizer.mask_token_id,
    )
    if max_length is not None and lay.length > max_length:
      if lay.offset + 1 >= max_length:
        raise UserError(
          f"the prefix {shorten(prefix)} is {len(prefix_ids)} tokens: with [CLS] and "
          f"[SEP] it leaves no room for free sites in the model's {max_length} "
          "positions; shorten it"
        )
      raise UserError(
        f"n = {num_sites} free sites + prefix ({len(prefix_ids)} tokens) + "
        f"[CLS]/[SEP] = {lay.length} tokens exceeds the model's {max_length} "
        f"positions; use n <= {max_length - lay.offset - 1}"
      )
    return lay


def shorten(text: str, width: int = 60) -> str:
  """repr(text), cut to about `width` characters with its length said when longer."""
  if len(text) <= width:
    return repr(text)
  return f"{text[:width]!r}... ({len(text)} characters)"


def max_sequence_length(model) -> int:
  """The longest sequence the model's position table takes (RoBERTa offsets its positions)."""
  c = model.config
  if getattr(c, "roberta_positions", False):
    return c.max_positions - c.pad_token_id - 1
  return c.max_positions
