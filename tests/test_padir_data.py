"""padir.data + padir.tokenizer: corpus validation, the tfds round trip, the grain pipeline."""

import collections
import os

import numpy as np
import pytest

from padir import data
from padir import tokenizer as tok_lib

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


# ----------------------------------------------------------------------------- tokenizer


def test_vocabulary_has_the_fixed_special_ids(tokenizer):
  sp = tokenizer.sp
  assert tokenizer.vocab_size == 48
  assert [sp.pad_id(), sp.eos_id(), sp.bos_id(), sp.unk_id()] == [
      tok_lib.PAD_ID, tok_lib.EOS_ID, tok_lib.BOS_ID, tok_lib.UNK_ID]
  assert sp.piece_to_id("[MASK]") == tok_lib.MASK_ID and sp.piece_to_id("[LEN]") == tok_lib.LEN_ID
  ids = tokenizer.encode("the king [MASK] la casa")
  # Control symbols never come out of plain text (unseen characters become UNK).
  assert tok_lib.MASK_ID not in ids and tok_lib.LEN_ID not in ids and tok_lib.UNK_ID in ids
  assert tokenizer.decode(tokenizer.encode("el rey y la casa") + [tok_lib.EOS_ID, 17]) == "el rey y la casa"


# ----------------------------------------------------------------------------- tfds + grain


def test_tfds_round_trip_preserves_every_pair(corpus_dir, tmp_path):
  sources = data.local_data_sources(corpus_dir, "en", "es", data_dir=str(tmp_path))
  for split in data.SPLITS:
    expected = collections.Counter(data.read_split(corpus_dir, split, "en", "es"))
    got = collections.Counter((r["source"].decode(), r["target"].decode()) for r in sources[split])
    assert got == expected


def test_pipeline_filters_pads_and_shuffles_deterministically(corpus_dir, tokenizer, tmp_path):
  source = data.local_data_sources(corpus_dir, "en", "es", data_dir=str(tmp_path))["train"]
  max_len = 8
  # Independent count of the pairs that fit (EOS included).
  fits = [len(tokenizer.encode(r["source"].decode())) + 1 <= max_len and
          len(tokenizer.encode(r["target"].decode())) + 1 <= max_len for r in source]
  assert 0 < sum(fits) < len(fits)

  def epoch(seed):
    ds, report = data.make_dataset(source, tokenizer, batch_size=7, max_source_length=max_len,
                                   max_target_length=max_len, seed=seed, drop_remainder=False)
    return list(ds), report

  batches, report = epoch(seed=0)
  assert (report.total, report.kept, report.too_long) == (len(fits), sum(fits), len(fits) - sum(fits))
  targets = np.concatenate([b["targets"] for b in batches])
  inputs = np.concatenate([b["inputs"] for b in batches])
  assert targets.shape == (sum(fits), max_len) and targets.dtype == np.int32
  # Every kept pair exactly once per epoch, each row EOS-terminated then PAD-padded.
  expected = collections.Counter(
      (r["source"].decode(), r["target"].decode()) for r, ok in zip(source, fits) if ok)
  assert collections.Counter(
      (tokenizer.decode(s), tokenizer.decode(t)) for s, t in zip(inputs, targets)) == expected
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
