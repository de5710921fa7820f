"""A run config's vocabulary: where it lives, training it once on the train split, and loading
it with its integrity checked.

config.data.vocab_path names it (default CORPUS_DIR/spm{vocab_size}.model); when the file is
missing and config.data.train_vocab is set, a SentencePiece model is trained on both sides of
the training split (padir.data.tokenizer.train_tokenizer) and put in place atomically (a kill during
training leaves no partial model). Beside it, VOCAB_PATH.json records the corpus it was trained
on (directory and the SHA-256 of its train files, `padir.data.corpus.fingerprint`, like the dataset
cache) and the SHA-256 of the model file itself.

A vocabulary whose corpus files changed since is refused, not silently reused: its ids would no
longer be those of the data, and runs trained with it (which `padir.model.restore` reopens by the same
path) would decode with another vocabulary if it were retrained in place. A model file that does
not match its recorded SHA-256 (a flipped bit can leave a SentencePiece model that still loads,
with another piece), that SentencePiece cannot parse (truncated), or a record that is not JSON,
is refused with one line naming the file and the fix (VocabularyError). A vocabulary without a
record (made elsewhere, e.g. a distillation teacher's) or trained on another corpus directory is
used as given; a record written before model hashes were recorded is trusted for the model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re

import ml_collections
import sentencepiece as spm

from gmlm.checks import UserError
from gmlm.runs import atomic_write_text
from padir.data import corpus as data
from padir.data import tokenizer as tokenizer_lib


class VocabularyError(UserError):
  """A damaged vocabulary or vocabulary record, or a vocabulary size the corpus cannot fill;
  the message names the file or key and the fix."""


def vocabulary_path(config: ml_collections.ConfigDict) -> str:
  d = config.data
  return d.vocab_path or os.path.join(d.corpus_dir, f"spm{d.vocab_size}.model")


def prepare_vocabulary(config: ml_collections.ConfigDict) -> tokenizer_lib.Tokenizer:
  """The config's vocabulary, trained first if it is missing and config.data.train_vocab;
  raises data.CorpusError if it was trained on this corpus's train files and they changed,
  VocabularyError if the model or its record is damaged."""
  d = config.data
  path = vocabulary_path(config)
  if os.path.isfile(path):
    check_trained_on(path, d)
  elif d.train_vocab:
    logging.info("training a %d-piece SentencePiece vocabulary on %s", d.vocab_size, d.corpus_dir)
    pairs = data.read_split(d.corpus_dir, "train", d.source_lang, d.target_lang)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
      tokenizer_lib.train_tokenizer((s for pair in pairs for s in pair), tmp, d.vocab_size)
    except RuntimeError as e:
      most = re.search(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)", str(e))
      if most is None:
        raise
      raise VocabularyError(
        f"data.vocab_size={d.vocab_size}: SentencePiece {spm.__version__} finds at most "
        f"{most.group(1)} pieces in {d.corpus_dir}'s train split; set "
        f"--config.data.vocab_size={most.group(1)} (or fewer)"
      ) from None
    record = {**_trained_on(d), "model_sha256": _sha256(tmp)}
    atomic_write_text(path + ".json", json.dumps(record, indent=2))
    os.replace(tmp, path)  # last: a model in place always has its record
  return load(path)


def load(path: str) -> tokenizer_lib.Tokenizer:
  """The vocabulary at path, checked against the model SHA-256 of its record (if any)."""
  then = _read_record(path)
  if then is not None and "model_sha256" in then and os.path.isfile(path):
    now = _sha256(path)
    if now != then["model_sha256"]:
      raise VocabularyError(
        f"{path} is damaged: its SHA-256 ({now[:12]}) is not the one recorded in {path}.json "
        f"when it was trained ({str(then['model_sha256'])[:12]}; or the record is damaged). "
        f"Restore it from a copy, or delete {path} and {path}.json to train it again (runs "
        "trained with it then decode differently)"
      )
  try:
    return tokenizer_lib.Tokenizer(path)
  except RuntimeError as e:  # SentencePiece: "could not parse ModelProto", "... is invalid"
    raise VocabularyError(
      f"{path} is not a readable SentencePiece model (truncated or damaged: {e}). Restore it "
      f"from a copy, or delete it (and {path}.json) to train it again with "
      "config.data.train_vocab=True"
    ) from None


def _sha256(path: str) -> str:
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def _read_record(path: str) -> dict | None:
  """path + ".json", or None without one; VocabularyError if it is not a JSON object."""
  record = path + ".json"
  if not os.path.isfile(record):
    return None
  try:
    with open(record, encoding="utf-8") as f:
      then = json.load(f)
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    then = e
  if not isinstance(then, dict):
    raise VocabularyError(
      f"{record} is damaged (not a JSON object: {then}): it records which corpus and which "
      f"model bytes {path} holds. Restore it from a copy, or delete {path} and {record} to "
      "train the vocabulary again (runs trained with it then decode differently)"
    )
  return then


def _trained_on(d: ml_collections.ConfigDict) -> dict[str, str]:
  files = data.split_files(d.corpus_dir, "train", d.source_lang, d.target_lang)
  return {
    "corpus_dir": os.path.abspath(d.corpus_dir),
    "files": [os.path.basename(f) for f in files],
    "sha256": data.fingerprint({"train": files}),
  }


def check_trained_on(path: str, d: ml_collections.ConfigDict) -> None:
  """Refuses the vocabulary at path if it was trained on d.corpus_dir's train files and they
  have changed since (or its record no longer says what they were)."""
  record = path + ".json"
  then = _read_record(path)
  if then is None or then.get("corpus_dir") != os.path.abspath(d.corpus_dir):
    return
  now = _trained_on(d)
  if now["sha256"] != then.get("sha256"):
    files = ", ".join(os.path.join(d.corpus_dir, f) for f in then.get("files", now["files"]))
    raise data.CorpusError(
      f"{path} was trained on {files} before it changed (SHA-256 "
      f"{str(then.get('sha256'))[:12]} then, {now['sha256'][:12]} now; or {record} is "
      f"damaged): its ids no longer fit the data. Delete {path} and {record} to "
      "train it again on the current files (runs trained with the old one then decode "
      "differently), or set config.data.vocab_path to a new file"
    )
