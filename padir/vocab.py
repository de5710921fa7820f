"""A run config's vocabulary: where it lives, and training it once on the train split.

config.data.vocab_path names it (default CORPUS_DIR/spm{vocab_size}.model); when the file is
missing and config.data.train_vocab is set, a SentencePiece model is trained on both sides of
the training split (padir.tokenizer.train_tokenizer). Beside it, VOCAB_PATH.json records the
corpus it was trained on (directory and the SHA-256 of its train files, `padir.data.fingerprint`,
like the dataset cache). A vocabulary whose corpus files changed since is refused, not silently
reused: its ids would no longer be those of the data, and runs trained with it (which
`padir.restore` reopens by the same path) would decode with another vocabulary if it were
retrained in place. A vocabulary without that record (made elsewhere, e.g. a distillation
teacher's) or trained on another corpus directory is used as given.
"""

from __future__ import annotations

import json
import logging
import os

import ml_collections

from gmlm.runs import atomic_write_text
from padir import data
from padir import tokenizer as tokenizer_lib


def vocabulary_path(config: ml_collections.ConfigDict) -> str:
  d = config.data
  return d.vocab_path or os.path.join(d.corpus_dir, f"spm{d.vocab_size}.model")


def prepare_vocabulary(config: ml_collections.ConfigDict) -> tokenizer_lib.Tokenizer:
  """The config's vocabulary, trained first if it is missing and config.data.train_vocab;
  raises data.CorpusError if it was trained on this corpus's train files and they changed."""
  d = config.data
  path = vocabulary_path(config)
  if os.path.isfile(path):
    check_trained_on(path, d)
  elif d.train_vocab:
    logging.info("training a %d-piece SentencePiece vocabulary on %s", d.vocab_size, d.corpus_dir)
    pairs = data.read_split(d.corpus_dir, "train", d.source_lang, d.target_lang)
    tokenizer_lib.train_tokenizer((s for pair in pairs for s in pair), path, d.vocab_size)
    atomic_write_text(path + ".json", json.dumps(_trained_on(d), indent=2))
  return tokenizer_lib.Tokenizer(path)


def _trained_on(d: ml_collections.ConfigDict) -> dict[str, str]:
  files = data.split_files(d.corpus_dir, "train", d.source_lang, d.target_lang)
  return {
    "corpus_dir": os.path.abspath(d.corpus_dir),
    "files": [os.path.basename(f) for f in files],
    "sha256": data.fingerprint({"train": files}),
  }


def check_trained_on(path: str, d: ml_collections.ConfigDict) -> None:
  """Refuses the vocabulary at path if it was trained on d.corpus_dir's train files and they
  have changed since."""
  record = path + ".json"
  if not os.path.isfile(record):
    return
  with open(record, encoding="utf-8") as f:
    then = json.load(f)
  if then.get("corpus_dir") != os.path.abspath(d.corpus_dir):
    return
  now = _trained_on(d)
  if now["sha256"] != then.get("sha256"):
    files = ", ".join(os.path.join(d.corpus_dir, f) for f in then.get("files", now["files"]))
    raise data.CorpusError(
      f"{path} was trained on {files} before it changed (SHA-256 {then.get('sha256', '')[:12]}"
      f" then, {now['sha256'][:12]} now): its ids no longer fit the data. Delete {path} and "
      f"{record} to train it again on the current files (runs trained with the old one then "
      "decode differently), or set config.data.vocab_path to a new file"
    )
