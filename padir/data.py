"""Parallel corpora -> tfds (array_record) -> grain batches of padded token ids.

A local corpus is a directory with, per split (train / valid / test), either
    SPLIT.tsv                       one `source<TAB>target` pair per line, or
    SPLIT.SRC_LANG + SPLIT.TGT_LANG two line-aligned plain-text files.
`LocalParallelCorpus` (a tfds GeneratorBasedBuilder) validates it and writes array_record files;
`make_dataset` reads them back with `tfds.data_source`, tokenizes, drops pairs longer than the
configured maximum (and says how many), shuffles with a seed and pads every batch to the maximum
lengths (static shapes: one compilation).

WMT (the paper's data, needs internet and tensorflow-datasets' downloads; not run here):
    import tensorflow_datasets as tfds
    import tensorflow_datasets.translate.wmt14  # also wmt16 (ro-en), wmt17 (zh-en)
    builder = tfds.builder("wmt14_translate/de-en", data_dir=DIR)  # "wmt16_translate/ro-en",
    builder.download_and_prepare(                                  # "wmt17_translate/zh-en"
        file_format="array_record")
    source = builder.as_data_source()["train"]  # records {"de": bytes, "en": bytes}
then pass `source`, with keys=("de", "en"), to `make_dataset` below.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from typing import Any, Mapping, Sequence

import grain
import numpy as np
import tensorflow_datasets as tfds

from padir import tokenizer as tokenizer_lib

SPLITS = ("train", "valid", "test")


class CorpusError(ValueError):
  """A malformed local corpus; the message names the file and line."""


# ----------------------------------------------------------------------------- reading files


def _read_lines(path: str) -> list[str]:
  with open(path, encoding="utf-8") as f:
    return [line.rstrip("\n").rstrip("\r") for line in f]


def read_tsv(path: str) -> list[tuple[str, str]]:
  """Reads `source<TAB>target` lines; raises CorpusError naming the first bad line (1-based)."""
  lines = _read_lines(path)
  pairs = []
  for n, line in enumerate(lines, start=1):
    fields = line.split("\t")
    if len(fields) != 2:
      raise CorpusError(f"{path}, line {n}: expected 'source<TAB>target' (one tab), found "
                        f"{len(fields) - 1} tabs")
    _check_pair(fields[0], fields[1], f"{path}, line {n}")
    pairs.append((fields[0].strip(), fields[1].strip()))
  if not pairs:
    raise CorpusError(f"{path} is empty: the corpus has no sentence pairs")
  return pairs


def read_aligned(source_path: str, target_path: str) -> list[tuple[str, str]]:
  """Reads two line-aligned files; raises CorpusError if their line counts differ."""
  sources, targets = _read_lines(source_path), _read_lines(target_path)
  if len(sources) != len(targets):
    raise CorpusError(f"misaligned files: {source_path} has {len(sources)} lines, {target_path} "
                      f"has {len(targets)}")
  if not sources:
    raise CorpusError(f"{source_path} and {target_path} are empty: the corpus has no sentence pairs")
  for n, (src, tgt) in enumerate(zip(sources, targets), start=1):
    _check_pair(src, tgt, f"{source_path} / {target_path}, line {n}")
  return [(s.strip(), t.strip()) for s, t in zip(sources, targets)]


def _check_pair(src: str, tgt: str, where: str) -> None:
  if not src.strip():
    raise CorpusError(f"{where}: empty source side")
  if not tgt.strip():
    raise CorpusError(f"{where}: empty target side")


def split_files(corpus_dir: str, split: str, source_lang: str, target_lang: str) -> list[str]:
  """The file(s) holding one split: [SPLIT.tsv] or [SPLIT.SRC, SPLIT.TGT]."""
  tsv = os.path.join(corpus_dir, f"{split}.tsv")
  aligned = [os.path.join(corpus_dir, f"{split}.{lang}") for lang in (source_lang, target_lang)]
  if os.path.isfile(tsv):
    return [tsv]
  if all(os.path.isfile(p) for p in aligned):
    return aligned
  raise CorpusError(f"no {split} split in {corpus_dir}: expected {tsv} or {aligned[0]} + "
                    f"{aligned[1]}")


def read_split(corpus_dir: str, split: str, source_lang: str,
               target_lang: str) -> list[tuple[str, str]]:
  files = split_files(corpus_dir, split, source_lang, target_lang)
  return read_tsv(files[0]) if len(files) == 1 else read_aligned(*files)


# ----------------------------------------------------------------------------- tfds builder


class LocalParallelCorpus(tfds.core.GeneratorBasedBuilder):
  """A local parallel corpus as a tfds dataset with features {source, target} (UTF-8 bytes).

  The builder config is named after a fingerprint of the corpus files, so editing the corpus
  makes a fresh dataset instead of silently reusing a stale one.
  """

  VERSION = tfds.core.Version("1.0.0")

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls) -> None:
    # No checksums file to look up next to this module (nothing is downloaded). tfds' own lookup
    # imports `importlib_resources`, which tensorflow-datasets does not declare.
    return None

  def __init__(self, *, corpus_dir: str, source_lang: str, target_lang: str,
               splits: Sequence[str] = SPLITS, **kwargs):
    self._corpus_dir = corpus_dir
    self._langs = (source_lang, target_lang)
    self._files = {s: split_files(corpus_dir, s, source_lang, target_lang) for s in splits}
    digest = hashlib.sha256()
    for split in splits:
      for path in self._files[split]:
        digest.update(split.encode())
        with open(path, "rb") as f:
          digest.update(f.read())
    config = tfds.core.BuilderConfig(name=f"{source_lang}_{target_lang}_{digest.hexdigest()[:12]}")
    kwargs.setdefault("file_format", "array_record")
    super().__init__(config=config, **kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        description=f"Local parallel corpus {self._corpus_dir} ({self._langs[0]}->{self._langs[1]})",
        features=tfds.features.FeaturesDict({
            "source": tfds.features.Text(), "target": tfds.features.Text()}),
    )

  def _split_generators(self, dl_manager):
    del dl_manager
    return {split: self._generate_examples(split) for split in self._files}

  def _generate_examples(self, split: str):
    pairs = read_split(self._corpus_dir, split, *self._langs)
    for i, (src, tgt) in enumerate(pairs):
      yield i, {"source": src, "target": tgt}


def local_data_sources(corpus_dir: str, source_lang: str, target_lang: str,
                       data_dir: str | None = None,
                       splits: Sequence[str] = SPLITS) -> dict[str, Any]:
  """Prepares (once) and opens the array_record files: split -> random-access data source."""
  builder = LocalParallelCorpus(corpus_dir=corpus_dir, source_lang=source_lang,
                                target_lang=target_lang, splits=splits,
                                data_dir=data_dir or os.path.join(corpus_dir, "tfds"))
  builder.download_and_prepare(file_format="array_record")
  return builder.as_data_source()


# ----------------------------------------------------------------------------- grain pipeline


@dataclasses.dataclass(frozen=True)
class FilterReport:
  total: int
  kept: int
  too_long: int  # pairs whose source or target (with EOS) exceeds its maximum length


def _text(value: Any) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _encode_pair(record: Mapping[str, Any], tok: tokenizer_lib.Tokenizer,
                 keys: tuple[str, str]) -> tuple[list[int], list[int]]:
  return (tok.encode(_text(record[keys[0]])) + [tokenizer_lib.EOS_ID],
          tok.encode(_text(record[keys[1]])) + [tokenizer_lib.EOS_ID])


def filter_by_length(source: Sequence[Mapping[str, Any]], tok: tokenizer_lib.Tokenizer,
                     max_source_length: int, max_target_length: int,
                     keys: tuple[str, str] = ("source", "target")) -> tuple[np.ndarray, FilterReport]:
  """Indices of the pairs that fit (lengths count the EOS), after one tokenization pass."""
  kept = []
  for i in range(len(source)):
    src_ids, tgt_ids = _encode_pair(source[i], tok, keys)
    if len(src_ids) <= max_source_length and len(tgt_ids) <= max_target_length:
      kept.append(i)
  report = FilterReport(total=len(source), kept=len(kept), too_long=len(source) - len(kept))
  return np.asarray(kept, np.int64), report


class _Encode(grain.transforms.Map):

  def __init__(self, source, tok: tokenizer_lib.Tokenizer, keys: tuple[str, str],
               max_source_length: int, max_target_length: int):
    self.source, self.tok, self.keys = source, tok, keys
    self.max_lengths = (max_source_length, max_target_length)

  def map(self, index: int) -> dict[str, np.ndarray]:
    out = {}
    for name, ids, max_len in zip(("inputs", "targets"),
                                  _encode_pair(self.source[int(index)], self.tok, self.keys),
                                  self.max_lengths):
      padded = np.full((max_len,), tokenizer_lib.PAD_ID, np.int32)
      padded[:len(ids)] = ids
      out[name] = padded
    return out


def make_dataset(source: Sequence[Mapping[str, Any]], tok: tokenizer_lib.Tokenizer, *,
                 batch_size: int, max_source_length: int, max_target_length: int,
                 seed: int = 0, shuffle: bool = True, num_epochs: int | None = 1,
                 drop_remainder: bool = True, keys: tuple[str, str] = ("source", "target"),
                 name: str = "") -> tuple[grain.IterDataset, FilterReport]:
  """Batches {"inputs": [B, Ls], "targets": [B, Lt]} int32, EOS-terminated, PAD_ID-padded.

  num_epochs=None repeats forever; each epoch is a different permutation of the same seed.
  """
  indices, report = filter_by_length(source, tok, max_source_length, max_target_length, keys)
  if report.kept == 0:
    raise CorpusError(f"{name or 'dataset'}: all {report.total} pairs are longer than "
                      f"max_source_length={max_source_length} / max_target_length="
                      f"{max_target_length}")
  logging.info("%s: dropped %d of %d pairs longer than %d source / %d target tokens",
               name or "dataset", report.too_long, report.total, max_source_length,
               max_target_length)
  ds = grain.MapDataset.source(indices)
  if shuffle:
    ds = ds.shuffle(seed=seed)
  if num_epochs != 1:
    ds = ds.repeat(num_epochs)  # reseeds the shuffle each epoch
  ds = ds.map(_Encode(source, tok, keys, max_source_length, max_target_length))
  ds = ds.batch(batch_size, drop_remainder=drop_remainder)
  return ds.to_iter_dataset(), report


