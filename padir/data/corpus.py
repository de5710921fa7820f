"""Parallel corpora -> grain batches of padded token ids.

A local corpus is a directory with, per split (train / valid / test), either
    SPLIT.tsv                       one `source<TAB>target` pair per line, or
    SPLIT.SRC_LANG + SPLIT.TGT_LANG two line-aligned plain-text files.
`read_split` validates and reads one split; padir.data.tfds_corpus writes a corpus as array_record
files (tfds) and opens them as random-access sources; `make_dataset` reads such a source,
tokenizes, drops pairs longer than the configured maximum (and says how many), shuffles with a
seed and pads every batch to the maximum lengths (static shapes: one compilation), or, with
`bucket_boundaries`, batches pairs of similar length and pads each batch only to its bucket's
boundary (one compilation per bucket).
With several processes (multi-host), each reads its rows of every global batch (`shard_index`,
`shard_count`): contiguous slices which, concatenated in process order, are the global batch that
one process would read, row for row.

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

from gmlm import checks
from gmlm.checks import UserError
from padir.data import synthetic
from padir.data import tokenizer as tokenizer_lib

SPLITS = ("train", "valid", "test")


class CorpusError(UserError):
  """A malformed local corpus; the message names the file and line (a UserError: the entry
  points print it as one line)."""


# ----------------------------------------------------------------------------- reading files


def _read_lines(path: str) -> list[str]:
  return checks.read_lines(path, CorpusError)  # invalid UTF-8: names the file and line


def read_tsv(path: str) -> list[tuple[str, str]]:
  """Reads `source<TAB>target` lines; raises CorpusError naming the first bad line (1-based)."""
  lines = _read_lines(path)
  pairs = []
  for n, line in enumerate(lines, start=1):
    fields = line.split("\t")
    if len(fields) != 2:
      raise CorpusError(
        f"{path}, line {n}: expected 'source<TAB>target' (one tab), found {len(fields) - 1} tabs"
      )
    _check_pair(fields[0], fields[1], f"{path}, line {n}")
    pairs.append((fields[0].strip(), fields[1].strip()))
  if not pairs:
    raise CorpusError(f"{path} is empty: the corpus has no sentence pairs")
  return pairs


def read_aligned(source_path: str, target_path: str) -> list[tuple[str, str]]:
  """Reads two line-aligned files; raises CorpusError if their line counts differ."""
  sources, targets = _read_lines(source_path), _read_lines(target_path)
  if len(sources) != len(targets):
    raise CorpusError(
      f"misaligned files: {source_path} has {len(sources)} lines, {target_path} has {len(targets)}"
    )
  if not sources:
    raise CorpusError(
      f"{source_path} and {target_path} are empty: the corpus has no sentence pairs"
    )
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
  make = synthetic.make_command(corpus_dir)
  raise CorpusError(
    f"no {split} split in {corpus_dir}: expected {tsv} or {aligned[0]} + {aligned[1]}"
    + (f"; make the corpus first: `{make}`" if make else "")
  )


def fingerprint(files: dict[str, list[str]]) -> str:
  """SHA-256 of the corpus files of some splits ({split: split_files(...)}), in that order: the
  name of the tfds dataset built from them, and what a vocabulary records of its training data."""
  digest = hashlib.sha256()
  for split, paths in files.items():
    for path in paths:
      digest.update(split.encode())
      with open(path, "rb") as f:
        digest.update(f.read())
  return digest.hexdigest()


def read_split(
  corpus_dir: str, split: str, source_lang: str, target_lang: str
) -> list[tuple[str, str]]:
  files = split_files(corpus_dir, split, source_lang, target_lang)
  return read_tsv(files[0]) if len(files) == 1 else read_aligned(*files)


def check_corpus(data: Any, splits: Sequence[str] = ("train", "valid")) -> None:
  """Reads every split a job will read from a run config's `data` (read_split: a missing split,
  which names the command that makes a shipped synthetic corpus, an empty file, a line without
  its tab, invalid UTF-8, an empty side), so that a bad corpus is refused (CorpusError, one line)
  before the run directory is written. With data.prepare_bible (data.grammar_task) a missing
  split is the job's to fetch (write): only the splits already there are read."""
  for split in splits:
    job_makes = data.get("prepare_bible") or data.get("grammar_task")
    if job_makes and not os.path.isfile(
      os.path.join(data.corpus_dir, f"{split}.tsv")
    ):
      continue
    read_split(data.corpus_dir, split, data.source_lang, data.target_lang)


# ----------------------------------------------------------------------------- grain pipeline


@dataclasses.dataclass(frozen=True)
class FilterReport:
  total: int
  kept: int
  too_long: int  # pairs whose source or target (with EOS) exceeds its maximum length


def _text(value: Any) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _encode_pair(
  record: Mapping[str, Any], tok: tokenizer_lib.Tokenizer, keys: tuple[str, str]
) -> tuple[list[int], list[int]]:
  return (
    tok.encode(_text(record[keys[0]])) + [tokenizer_lib.EOS_ID],
    tok.encode(_text(record[keys[1]])) + [tokenizer_lib.EOS_ID],
  )


def token_lengths(
  source: Sequence[Mapping[str, Any]],
  tok: tokenizer_lib.Tokenizer,
  keys: tuple[str, str] = ("source", "target"),
) -> np.ndarray:
  """[N, 2]: source and target lengths in tokens, EOS included (one tokenization pass)."""
  lengths = np.zeros((len(source), 2), np.int64)
  for i in range(len(source)):
    src_ids, tgt_ids = _encode_pair(source[i], tok, keys)
    lengths[i] = len(src_ids), len(tgt_ids)
  return lengths


def filter_by_length(
  source: Sequence[Mapping[str, Any]],
  tok: tokenizer_lib.Tokenizer,
  max_source_length: int,
  max_target_length: int,
  keys: tuple[str, str] = ("source", "target"),
  lengths: np.ndarray | None = None,
) -> tuple[np.ndarray, FilterReport]:
  """Indices of the pairs that fit (lengths count the EOS)."""
  if lengths is None:
    lengths = token_lengths(source, tok, keys)
  fits = (lengths[:, 0] <= max_source_length) & (lengths[:, 1] <= max_target_length)
  kept = np.flatnonzero(fits).astype(np.int64)
  report = FilterReport(total=len(source), kept=len(kept), too_long=len(source) - len(kept))
  return kept, report


def _encode_padded(
  source, tok: tokenizer_lib.Tokenizer, keys: tuple[str, str], index: int, lengths: tuple[int, int]
) -> dict[str, np.ndarray]:
  out = {}
  for name, ids, max_len in zip(
    ("inputs", "targets"), _encode_pair(source[int(index)], tok, keys), lengths
  ):
    padded = np.full((max_len,), tokenizer_lib.PAD_ID, np.int32)
    padded[: len(ids)] = ids
    out[name] = padded
  return out


def _encode_batch(
  source, tok: tokenizer_lib.Tokenizer, keys: tuple[str, str], indices, lengths: tuple[int, int]
) -> dict[str, np.ndarray]:
  examples = [_encode_padded(source, tok, keys, i, lengths) for i in indices]
  return {k: np.stack([e[k] for e in examples]) for k in ("inputs", "targets")}


class _EncodeRows(grain.transforms.Map):
  """A global batch of corpus indices -> this process's rows of it, tokenized and padded."""

  def __init__(self, source, tok, keys, max_lengths: tuple[int, int], rows: slice):
    self.source, self.tok, self.keys = source, tok, keys
    self.max_lengths, self.rows = max_lengths, rows

  def map(self, indices: np.ndarray) -> dict[str, np.ndarray]:
    return _encode_batch(self.source, self.tok, self.keys, indices[self.rows], self.max_lengths)


def bucket_batches(
  bucket_P: np.ndarray,
  batch_size: int,
  *,
  seed: int,
  epoch: int,
  shuffle: bool = True,
  drop_remainder: bool = True,
) -> list[np.ndarray]:
  """One epoch's batches: positions into bucket_P, each batch from one bucket.

  Within each bucket the examples are permuted and cut into batches; the batches of all buckets
  are then permuted together. Both permutations come from a generator seeded by (seed, epoch).
  With drop_remainder, each bucket's last partial batch is left out of the epoch (at most
  batch_size - 1 examples per bucket, a different choice every epoch).
  """
  rng = np.random.default_rng([seed, epoch])
  batches = []
  for b in np.unique(bucket_P):
    members = np.flatnonzero(bucket_P == b)
    if shuffle:
      members = rng.permutation(members)
    stop = len(members) - len(members) % batch_size if drop_remainder else len(members)
    batches += [members[i : i + batch_size] for i in range(0, stop, batch_size)]
  if shuffle:
    batches = [batches[i] for i in rng.permutation(len(batches))]
  return batches


class _BucketedBatch(grain.transforms.MapWithIndex):
  """Global batch number i -> this process's rows of batch i % n of epoch i // n, padded to
  the bucket boundary."""

  def __init__(
    self,
    source,
    tok,
    keys,
    indices,
    bucket_of,
    boundaries,
    max_lengths,
    *,
    batch_size,
    shard_index,
    shard_count,
    seed,
    shuffle,
    drop_remainder,
  ):
    self.source, self.tok, self.keys = source, tok, keys
    self.indices, self.bucket_of, self.boundaries = indices, bucket_of, boundaries
    self.max_lengths = max_lengths
    self.batch_size, self.shard_index, self.shard_count = batch_size, shard_index, shard_count
    self.plan_args = dict(seed=seed, shuffle=shuffle, drop_remainder=drop_remainder)
    self.num_batches = len(self.plan(0))
    self._cached = (0, self.plan(0))

  def plan(self, epoch: int) -> list[np.ndarray]:
    return bucket_batches(
      self.bucket_of, self.batch_size * self.shard_count, epoch=epoch, **self.plan_args
    )

  def map_with_index(self, i: int, _) -> dict[str, np.ndarray]:
    epoch, j = divmod(i, self.num_batches)
    if self._cached[0] != epoch:
      self._cached = (epoch, self.plan(epoch))
    rows = self._cached[1][j]
    bound = int(self.boundaries[self.bucket_of[rows[0]]])
    lengths = (min(bound, self.max_lengths[0]), min(bound, self.max_lengths[1]))
    mine = rows[self.shard_index * self.batch_size : (self.shard_index + 1) * self.batch_size]
    return _encode_batch(self.source, self.tok, self.keys, self.indices[mine], lengths)


def make_dataset(
  source: Sequence[Mapping[str, Any]],
  tok: tokenizer_lib.Tokenizer,
  *,
  batch_size: int,
  max_source_length: int,
  max_target_length: int,
  seed: int = 0,
  shuffle: bool = True,
  num_epochs: int | None = 1,
  drop_remainder: bool = True,
  keys: tuple[str, str] = ("source", "target"),
  name: str = "",
  bucket_boundaries: Sequence[int] = (),
  shard_index: int = 0,
  shard_count: int = 1,
) -> tuple[grain.IterDataset, FilterReport]:
  """Batches {"inputs": [B, Ls], "targets": [B, Lt]} int32, EOS-terminated, PAD_ID-padded.

  num_epochs=None repeats forever; each epoch is a different permutation of the same seed.
  Without buckets, Ls and Lt are the maximum lengths. With bucket_boundaries (token counts,
  EOS included; max(max_source_length, max_target_length) closes the last bucket), a pair goes
  to the first bucket whose boundary is >= max(its source length, its target length), every
  batch holds one bucket's pairs, and Ls = min(boundary, max_source_length), Lt likewise.
  batch_size is per process: process shard_index of shard_count gets rows
  [shard_index * batch_size, (shard_index + 1) * batch_size) of each global batch.
  """
  if not 0 <= shard_index < shard_count:
    raise ValueError(f"shard_index={shard_index} is not in [0, shard_count={shard_count})")
  if shard_count > 1 and not drop_remainder:
    raise ValueError(
      "shard_count > 1 needs drop_remainder=True: every process must get a full "
      "share of every global batch"
    )
  lengths = token_lengths(source, tok, keys)
  indices, report = filter_by_length(
    source, tok, max_source_length, max_target_length, keys, lengths
  )
  if report.kept == 0:
    raise CorpusError(
      f"{name or 'dataset'}: all {report.total} pairs are longer than "
      f"max_source_length={max_source_length} / max_target_length="
      f"{max_target_length}"
    )
  logging.info(
    "%s: dropped %d of %d pairs longer than %d source / %d target tokens",
    name or "dataset",
    report.too_long,
    report.total,
    max_source_length,
    max_target_length,
  )
  if bucket_boundaries:
    longest = max(max_source_length, max_target_length)
    boundaries = np.unique([b for b in bucket_boundaries if b < longest] + [longest])
    if boundaries[0] < 1:
      raise ValueError(f"bucket boundaries must be >= 1, got {list(bucket_boundaries)}")
    bucket_of = np.searchsorted(boundaries, lengths[indices].max(1), side="left")
    batches = _BucketedBatch(
      source,
      tok,
      keys,
      indices,
      bucket_of,
      boundaries,
      (max_source_length, max_target_length),
      batch_size=batch_size,
      shard_index=shard_index,
      shard_count=shard_count,
      seed=seed,
      shuffle=shuffle,
      drop_remainder=drop_remainder,
    )
    if batches.num_batches == 0:
      raise CorpusError(
        f"{name or 'dataset'}: no bucket holds a full global batch of "
        f"{batch_size * shard_count} pairs"
      )
    ds = grain.MapDataset.range(batches.num_batches)
    if num_epochs != 1:
      ds = ds.repeat(num_epochs)
    return ds.map_with_index(batches).to_iter_dataset(), report
  ds = grain.MapDataset.source(indices)
  if shuffle:
    ds = ds.shuffle(seed=seed)
  if num_epochs != 1:
    ds = ds.repeat(num_epochs)  # reseeds the shuffle each epoch
  # Global batch i is elements [i * G, (i + 1) * G) of the stream (G = batch_size * shard_count);
  # this process's rows of it are the contiguous slice [shard_index * batch_size, ...), so the
  # processes' rows, concatenated in process order, are the global batch row for row (the mesh's
  # data axis orders them so; noise and dropout masks are drawn per row).
  ds = ds.batch(batch_size * shard_count, drop_remainder=drop_remainder)
  rows = slice(shard_index * batch_size, (shard_index + 1) * batch_size)
  ds = ds.map(_EncodeRows(source, tok, keys, (max_source_length, max_target_length), rows))
  return ds.to_iter_dataset(), report
