"""padir.data.corpus + padir.data.tokenizer: corpus validation, the tfds round trip, the grain pipeline."""

import collections
import os

import numpy as np
import pytest

from padir.data import corpus as data
from padir.data import tfds_corpus
from padir.data import tokenizer as tok_lib

WORDS_EN = "the a man woman house land king city water light day night god people son".split()
WORDS_ES = "el la hombre mujer casa tierra rey ciudad agua luz día noche dios pueblo hijo".split()


def _synthetic_pairs(n: int, seed: int) -> list[tuple[str, str]]:
  rng = np.random.default_rng(seed)
  pairs = []
  for _ in range(n):
    idx = rng.integers(0, len(WORDS_EN), rng.integers(1, 12))
    pairs.append((" ".join(WORDS_EN[i] for i in idx), " ".join(WORDS_ES[i] for i in idx)))
  return pairs


def _write_tsv(path, pairs):
  with open(path, "w", encoding="utf-8") as f:
    f.writelines(f"{s}\t{t}\n" for s, t in pairs)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
  d = tmp_path_factory.mktemp("corpus")
  for split, n, seed in (("train", 300, 0), ("valid", 20, 1), ("test", 20, 2)):
    _write_tsv(d / f"{split}.tsv", _synthetic_pairs(n, seed))
  return str(d)


@pytest.fixture(scope="module")
def tokenizer(corpus_dir):
  texts = [s for pair in data.read_split(corpus_dir, "train", "en", "es") for s in pair]
  return tok_lib.train_tokenizer(texts, os.path.join(corpus_dir, "spm.model"), vocab_size=48)


# ----------------------------------------------------------------------------- validation


def test_empty_corpus_is_an_error(tmp_path):
  (tmp_path / "train.tsv").write_text("")
  with pytest.raises(data.CorpusError, match="empty: the corpus has no sentence pairs"):
    data.read_tsv(str(tmp_path / "train.tsv"))


def test_empty_side_names_the_line(tmp_path):
  (tmp_path / "train.tsv").write_text("a\tb\nc\td\ne\t  \n")
  with pytest.raises(data.CorpusError, match=r"line 3: empty target side"):
    data.read_tsv(str(tmp_path / "train.tsv"))
  (tmp_path / "train.tsv").write_text("a\tb\n\td\n")
  with pytest.raises(data.CorpusError, match=r"line 2: empty source side"):
    data.read_tsv(str(tmp_path / "train.tsv"))


def test_wrong_number_of_tabs_names_the_line(tmp_path):
  (tmp_path / "train.tsv").write_text("a\tb\nno tab here\n")
  with pytest.raises(data.CorpusError, match=r"line 2: expected 'source<TAB>target'.*found 0 tabs"):
    data.read_tsv(str(tmp_path / "train.tsv"))


def test_misaligned_files(tmp_path):
  (tmp_path / "train.en").write_text("a\nb\nc\n")
  (tmp_path / "train.es").write_text("x\ny\n")
  with pytest.raises(data.CorpusError, match=r"misaligned files: .*train.en has 3 lines, .*has 2"):
    data.read_split(str(tmp_path), "train", "en", "es")
  (tmp_path / "train.es").write_text("x\n\nz\n")
  with pytest.raises(data.CorpusError, match=r"line 2: empty target side"):
    data.read_split(str(tmp_path), "train", "en", "es")
  (tmp_path / "train.es").write_text("x\ny\nz\n")
  assert data.read_split(str(tmp_path), "train", "en", "es") == [("a", "x"), ("b", "y"), ("c", "z")]


def test_missing_split_is_an_error(tmp_path):
  with pytest.raises(data.CorpusError, match="no valid split"):
    data.split_files(str(tmp_path), "valid", "en", "es")


def test_missing_vocabulary_is_an_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="does not exist. Train one"):
    tok_lib.Tokenizer(str(tmp_path / "nope.model"))


def test_invalid_utf8_names_the_file_and_the_line(tmp_path):
  path = tmp_path / "train.tsv"
  path.write_bytes("a house\tuna casa\n".encode() + b"the caf\xe9\tel caf\xe9\n")
  with pytest.raises(
    data.CorpusError,
    match=r"train.tsv, line 2: not valid UTF-8 \(byte 0xe9 "
    r"at column 8\)",
  ):
    data.read_split(str(tmp_path), "train", "en", "es")


def _vocab_config(corpus_dir, vocab_size: int):
  import ml_collections

  data_config = dict(corpus_dir=str(corpus_dir), source_lang="en", target_lang="es")
  data_config.update(vocab_path="", vocab_size=vocab_size, train_vocab=True)
  return ml_collections.ConfigDict({"data": data_config})


def test_a_vocabulary_trained_on_changed_corpus_files_is_refused(tmp_path):
  """The vocabulary is fingerprinted by the train split it was trained on, like the dataset
  cache: after the files change, it is refused with the fix instead of silently reused."""
  from padir.data import vocab

  _write_tsv(tmp_path / "train.tsv", _synthetic_pairs(100, 0))
  config = _vocab_config(tmp_path, 40)
  first = vocab.prepare_vocabulary(config)
  assert (
    vocab.prepare_vocabulary(config).sp.serialized_model_proto()
    == first.sp.serialized_model_proto()
  )  # unchanged files: reused
  with open(tmp_path / "train.tsv", "a", encoding="utf-8") as f:
    f.write("a new line\tuna línea nueva\n")
  with pytest.raises(
    data.CorpusError,
    match=r"spm40.model was trained on .*train.tsv before it "
    r"changed.*Delete .*spm40.model",
  ):
    vocab.prepare_vocabulary(config)
  # A vocabulary made elsewhere (no fingerprint, e.g. a distillation teacher's) is used as given.
  config.data.vocab_path = str(tmp_path / "copy.model")
  (tmp_path / "copy.model").write_bytes((tmp_path / "spm40.model").read_bytes())
  assert vocab.prepare_vocabulary(config).vocab_size == 40


def test_a_vocabulary_the_corpus_cannot_fill_is_one_line_naming_the_key_and_the_most(tmp_path):
  """SentencePiece refuses a vocabulary larger than the pieces it finds (how many depends on its
  version: 0.2.2 finds 168 in the synthetic corpus where 0.2.3 finds 176): the error names
  data.vocab_size, its value and the largest size that works; and that size then trains."""
  from padir.data import vocab

  _write_tsv(tmp_path / "train.tsv", _synthetic_pairs(100, 0))
  config = _vocab_config(tmp_path, 5000)  # 30 words: far fewer substrings than that
  with pytest.raises(vocab.VocabularyError) as e:
    vocab.prepare_vocabulary(config)
  message = str(e.value)
  assert "\n" not in message and "data.vocab_size=5000" in message, message
  most = int(message.rsplit("--config.data.vocab_size=", 1)[1].split()[0])
  assert 40 < most < 5000
  assert not list(tmp_path.glob("spm5000.model*")), "a failed training left a file behind"
  config.data.vocab_size = most
  assert vocab.prepare_vocabulary(config).vocab_size == most


# ----------------------------------------------------------------------------- tokenizer


def test_vocabulary_has_the_fixed_special_ids(tokenizer):
  sp = tokenizer.sp
  assert tokenizer.vocab_size == 48
  assert [sp.pad_id(), sp.eos_id(), sp.bos_id(), sp.unk_id()] == [
    tok_lib.PAD_ID,
    tok_lib.EOS_ID,
    tok_lib.BOS_ID,
    tok_lib.UNK_ID,
  ]
  assert sp.piece_to_id("[MASK]") == tok_lib.MASK_ID and sp.piece_to_id("[LEN]") == tok_lib.LEN_ID
  ids = tokenizer.encode("the king [MASK] la casa")
  # Control symbols never come out of plain text (unseen characters become UNK).
  assert tok_lib.MASK_ID not in ids and tok_lib.LEN_ID not in ids and tok_lib.UNK_ID in ids
  assert (
    tokenizer.decode(tokenizer.encode("el rey y la casa") + [tok_lib.EOS_ID, 17])
    == "el rey y la casa"
  )


# ----------------------------------------------------------------------------- tfds + grain


def test_tfds_round_trip_preserves_every_pair(corpus_dir, tmp_path):
  sources = tfds_corpus.local_data_sources(corpus_dir, "en", "es", data_dir=str(tmp_path))
  for split in data.SPLITS:
    expected = collections.Counter(data.read_split(corpus_dir, split, "en", "es"))
    got = collections.Counter((r["source"].decode(), r["target"].decode()) for r in sources[split])
    assert got == expected


def test_pipeline_filters_pads_and_shuffles_deterministically(corpus_dir, tokenizer, tmp_path):
  source = tfds_corpus.local_data_sources(corpus_dir, "en", "es", data_dir=str(tmp_path))["train"]
  max_len = 8
  # Independent count of the pairs that fit (EOS included).
  fits = [
    len(tokenizer.encode(r["source"].decode())) + 1 <= max_len
    and len(tokenizer.encode(r["target"].decode())) + 1 <= max_len
    for r in source
  ]
  assert 0 < sum(fits) < len(fits)

  def epoch(seed):
    ds, report = data.make_dataset(
      source,
      tokenizer,
      batch_size=7,
      max_source_length=max_len,
      max_target_length=max_len,
      seed=seed,
      drop_remainder=False,
    )
    return list(ds), report

  batches, report = epoch(seed=0)
  assert (report.total, report.kept, report.too_long) == (
    len(fits),
    sum(fits),
    len(fits) - sum(fits),
  )
  targets = np.concatenate([b["targets"] for b in batches])
  inputs = np.concatenate([b["inputs"] for b in batches])
  assert targets.shape == (sum(fits), max_len) and targets.dtype == np.int32
  # Every kept pair exactly once per epoch, each row EOS-terminated then PAD-padded.
  expected = collections.Counter(
    (r["source"].decode(), r["target"].decode()) for r, ok in zip(source, fits) if ok
  )
  assert (
    collections.Counter((tokenizer.decode(s), tokenizer.decode(t)) for s, t in zip(inputs, targets))
    == expected
  )
  for row in np.concatenate([inputs, targets]):
    n = int((row != tok_lib.PAD_ID).sum())
    assert row[n - 1] == tok_lib.EOS_ID and not row[n:].any()
  again, _ = epoch(seed=0)
  other, _ = epoch(seed=1)
  assert all((a["targets"] == b["targets"]).all() for a, b in zip(batches, again))
  assert not all((a["targets"] == b["targets"]).all() for a, b in zip(batches, other))


def test_pipeline_rejects_a_corpus_where_nothing_fits(corpus_dir, tokenizer):
  pairs = [{"source": b"the king", "target": b"el rey y la casa del hombre"}]
  with pytest.raises(data.CorpusError, match="all 1 pairs are longer"):
    data.make_dataset(pairs, tokenizer, batch_size=1, max_source_length=8, max_target_length=2)


# ----------------------------------------------------------------------------- length buckets


def _pairs_of(batch, tokenizer):
  return [
    (tokenizer.decode(s), tokenizer.decode(t)) for s, t in zip(batch["inputs"], batch["targets"])
  ]


def test_bucketed_batches_cover_each_pair_once_with_bounded_padding(
  corpus_dir, tokenizer, tmp_path
):
  source = tfds_corpus.local_data_sources(corpus_dir, "en", "es", data_dir=str(tmp_path))["train"]
  max_len, boundaries, batch_size = 12, (4, 6, 8), 5
  # Independent lengths (EOS included) and the expected bucket of each pair that fits.
  lengths = [
    (
      len(tokenizer.encode(r["source"].decode())) + 1,
      len(tokenizer.encode(r["target"].decode())) + 1,
    )
    for r in source
  ]
  kept = [
    (r["source"].decode(), r["target"].decode())
    for r, (a, b) in zip(source, lengths)
    if a <= max_len and b <= max_len
  ]
  edges = [0, 4, 6, 8, 12]

  def epochs(seed, num_epochs=1, drop_remainder=False):
    ds, _ = data.make_dataset(
      source,
      tokenizer,
      batch_size=batch_size,
      max_source_length=max_len,
      max_target_length=max_len,
      seed=seed,
      num_epochs=num_epochs,
      drop_remainder=drop_remainder,
      bucket_boundaries=boundaries,
    )
    return list(ds)

  batches = epochs(seed=0)
  assert collections.Counter(
    p for b in batches for p in _pairs_of(b, tokenizer)
  ) == collections.Counter(kept)  # every pair exactly once
  widths = set()
  for b in batches:
    L = b["inputs"].shape[1]
    assert b["targets"].shape[1] == L and L in edges[1:] and 1 <= len(b["inputs"]) <= batch_size
    lower = edges[edges.index(L) - 1]
    n = np.maximum((b["inputs"] != tok_lib.PAD_ID).sum(1), (b["targets"] != tok_lib.PAD_ID).sum(1))
    assert ((n > lower) & (n <= L)).all()  # padding below the bucket width L - lower
    widths.add(L)
  assert len(widths) > 1  # the corpus really spans several buckets
  # Same seed, same batches; another seed, another order; the next epoch, another order.
  same, other = epochs(seed=0), epochs(seed=1)
  assert all((a["targets"] == b["targets"]).all() for a, b in zip(batches, same))
  assert [b["targets"].tolist() for b in batches] != [b["targets"].tolist() for b in other]
  two = epochs(seed=0, num_epochs=2)
  assert len(two) == 2 * len(batches)
  assert [b["targets"].tolist() for b in two[: len(batches)]] == [
    b["targets"].tolist() for b in batches
  ]
  second = two[len(batches) :]
  assert collections.Counter(
    p for b in second for p in _pairs_of(b, tokenizer)
  ) == collections.Counter(kept)
  assert [b["targets"].tolist() for b in second] != [b["targets"].tolist() for b in batches]
  # drop_remainder: full batches only, floor(bucket size / batch size) of them per bucket.
  full = epochs(seed=0, drop_remainder=True)
  keys = [max(a, b) for a, b in lengths if a <= max_len and b <= max_len]
  counts = np.bincount(np.searchsorted(edges[1:], keys), minlength=4)
  assert len(full) == (counts // batch_size).sum()
  assert all(len(b["inputs"]) == batch_size for b in full)


@pytest.mark.parametrize("buckets", [(), (4, 6, 8)])
def test_process_shards_split_every_global_batch(corpus_dir, tokenizer, tmp_path, buckets):
  source = tfds_corpus.local_data_sources(corpus_dir, "en", "es", data_dir=str(tmp_path))["train"]

  def batches(batch_size, shard_index=0, shard_count=1):
    ds, _ = data.make_dataset(
      source,
      tokenizer,
      batch_size=batch_size,
      max_source_length=12,
      max_target_length=12,
      seed=3,
      bucket_boundaries=buckets,
      shard_index=shard_index,
      shard_count=shard_count,
    )
    return list(ds)

  whole = batches(6)
  shards = [batches(3, p, 2) for p in range(2)]
  assert len(shards[0]) == len(shards[1]) == len(whole) > 0
  for g, a, b in zip(whole, *shards):
    assert a["inputs"].shape == b["inputs"].shape == (3, g["inputs"].shape[1])
    # Row for row, not only the same pairs: the noise and dropout masks are drawn per row.
    for k in ("inputs", "targets"):
      np.testing.assert_array_equal(np.concatenate([a[k], b[k]]), g[k])


def test_bucketed_iterator_resumes_from_its_state(corpus_dir, tokenizer, tmp_path):
  source = tfds_corpus.local_data_sources(corpus_dir, "en", "es", data_dir=str(tmp_path))["train"]
  ds, _ = data.make_dataset(
    source,
    tokenizer,
    batch_size=4,
    max_source_length=12,
    max_target_length=12,
    num_epochs=None,
    bucket_boundaries=(4, 8),
  )
  it = iter(ds)
  for _ in range(50):  # into the second epoch (28 batches each)
    next(it)
  state = it.get_state()
  expected = [next(it)["targets"].tolist() for _ in range(5)]
  resumed = iter(ds)
  resumed.set_state(state)
  assert [next(resumed)["targets"].tolist() for _ in range(5)] == expected
