"""A bilingual SentencePiece vocabulary with fixed special ids (pad, EOS, BOS, UNK, [MASK], [LEN]).

Paper (App. L.2): one 32k vocabulary per language pair, trained on both sides of the training
set. The ids below are the same for every vocabulary this module trains, so models and losses
can use them as constants.
"""

from __future__ import annotations

import io
import os
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm

PAD_ID = 0
EOS_ID = 1
BOS_ID = 2
UNK_ID = 3
MASK_ID = 4  # the [MASK] hypothesis token of the masked noising variants
LEN_ID = 5  # prepended to the encoder input; its final state predicts the target length
NUM_SPECIAL = 6  # ids below this are never sampled as "random vocabulary tokens"
# Ids that never occur inside a target, so decoders never predict them (a predicted PAD would
# also be mistaken for padding by the next refinement pass).
NEVER_PREDICTED = (PAD_ID, BOS_ID, MASK_ID, LEN_ID)
MASK_PIECE = "[MASK]"
LEN_PIECE = "[LEN]"


class Tokenizer:
  """SentencePiece with the special ids above; encode() adds no EOS (the data pipeline does)."""

  def __init__(self, model_path: str):
    if not os.path.isfile(model_path):
      raise FileNotFoundError(
        f"SentencePiece vocabulary {model_path!r} does not exist. Train one on the training "
        f"split first (padir.data.tokenizer.train_tokenizer, or run training, which trains it when "
        f"config.data.vocab_path is missing and config.data.train_vocab is True)."
      )
    self.path = model_path
    self.sp = spm.SentencePieceProcessor(model_file=model_path)
    expected = {
      PAD_ID: "<pad>",
      EOS_ID: "</s>",
      BOS_ID: "<s>",
      UNK_ID: "<unk>",
      MASK_ID: MASK_PIECE,
      LEN_ID: LEN_PIECE,
    }
    found = {i: self.sp.id_to_piece(i) for i in expected}
    if found != expected:
      raise ValueError(
        f"{model_path} has special pieces {found}, expected {expected}: it was not "
        f"trained by padir.data.tokenizer.train_tokenizer"
      )

  @property
  def vocab_size(self) -> int:
    return self.sp.get_piece_size()

  def encode(self, text: str) -> list[int]:
    return self.sp.encode(text)

  def decode(self, ids: Sequence[int] | np.ndarray) -> str:
    """Decodes up to the first EOS (or pad); other special ids are dropped."""
    out = []
    for i in np.asarray(ids).tolist():
      if i in (EOS_ID, PAD_ID):
        break
      if i >= NUM_SPECIAL:
        out.append(i)
    return self.sp.decode(out)


def train_tokenizer(
  texts: Iterable[str],
  model_path: str,
  vocab_size: int = 8000,
  character_coverage: float = 0.9999,
  max_sentences: int = 2_000_000,
  seed_sentencepiece_size: int = 200_000,
) -> Tokenizer:
  """Trains a unigram SentencePiece model on `texts` (both languages) and writes model_path."""
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
    sentence_iterator=iter(texts),
    model_writer=model,
    vocab_size=vocab_size,
    model_type="unigram",
    character_coverage=character_coverage,
    pad_id=PAD_ID,
    eos_id=EOS_ID,
    bos_id=BOS_ID,
    unk_id=UNK_ID,
    control_symbols=[MASK_PIECE, LEN_PIECE],
    input_sentence_size=max_sentences,
    shuffle_input_sentence=True,
    seed_sentencepiece_size=seed_sentencepiece_size,
    minloglevel=2,
  )
  os.makedirs(os.path.dirname(os.path.abspath(model_path)), exist_ok=True)
  with open(model_path, "wb") as f:
    f.write(model.getvalue())
  return Tokenizer(model_path)
