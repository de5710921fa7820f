"""A run config's vocabulary: where it lives, and training it once on the train split.

config.data.vocab_path names it (default CORPUS_DIR/spm{vocab_size}.model); when the file is
missing and config.data.train_vocab is set, a SentencePiece model is trained on both sides of
the training split (padir.tokenizer.train_tokenizer).
"""

from __future__ import annotations

import logging
import os

import ml_collections

from padir import data
from padir import tokenizer as tokenizer_lib


def vocabulary_path(config: ml_collections.ConfigDict) -> str:
  d = config.data
  return d.vocab_path or os.path.join(d.corpus_dir, f"spm{d.vocab_size}.model")


def prepare_vocabulary(config: ml_collections.ConfigDict) -> tokenizer_lib.Tokenizer:
  """The config's vocabulary, trained first if it is missing and config.data.train_vocab."""
  d = config.data
  path = vocabulary_path(config)
  if not os.path.isfile(path) and d.train_vocab:
    logging.info("training a %d-piece SentencePiece vocabulary on %s", d.vocab_size, d.corpus_dir)
    pairs = data.read_split(d.corpus_dir, "train", d.source_lang, d.target_lang)
    tokenizer_lib.train_tokenizer((s for pair in pairs for s in pair), path, d.vocab_size)
  return tokenizer_lib.Tokenizer(path)
