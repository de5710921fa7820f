"""Damaged PaDIR input files: a truncated or bit-flipped vocabulary (the SentencePiece model and
its VOCAB.json record) or corpus file is refused with one line (a gmlm.checks.UserError, which
the entry points print as `error: ...`) that names the file and the fix; following the fix
gives a working vocabulary again. Each damage is placed at a chosen byte, so each case is one
outcome, not a lottery over where a random flip lands."""

from __future__ import annotations

import json
import pathlib
import re

import ml_collections
import pytest

from gmlm.checks import UserError
from padir.data import corpus as data
from padir.data import tokenizer as tokenizer_lib
from padir.data import vocab

# Line 3 holds the only non-ASCII character ("í", bytes c3 ad).
PAIRS = [
  ("the man", "el hombre"),
  ("the woman", "la mujer"),
  ("the day", "el día"),
  ("the king and the city", "el rey y la ciudad"),
] * 10


def _config(corpus_dir: pathlib.Path) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(
    {
      "data": {
        "corpus_dir": str(corpus_dir),
        "source_lang": "en",
        "target_lang": "es",
        "vocab_path": "",
        "vocab_size": 30,
        "train_vocab": True,
      }
    }
  )


def _write_tsv(path: pathlib.Path) -> bytes:
  raw = "".join(f"{s}\t{t}\n" for s, t in PAIRS).encode("utf-8")
  path.write_bytes(raw)
  return raw


def _flip(path: pathlib.Path, offset: int, bit: int) -> None:
  raw = bytearray(path.read_bytes())
  raw[offset] ^= bit
  path.write_bytes(bytes(raw))


def _refused(call, error: type[UserError], *names: str) -> str:
  """call() raises `error`, a UserError, in one line naming every one of `names` and a fix."""
  with pytest.raises(error) as info:
    call()
  message = str(info.value)
  assert isinstance(info.value, UserError) and "\n" not in message, message
  for name in names:
    assert name in message, (name, message)
  assert "delete" in message.lower() or "restore" in message.lower(), message
  return message


@pytest.fixture
def trained(tmp_path):
  """A corpus directory with a trained vocabulary: (config, model path, record path)."""
  _write_tsv(tmp_path / "train.tsv")
  config = _config(tmp_path)
  vocab.prepare_vocabulary(config)
  model = pathlib.Path(vocab.vocabulary_path(config))
  return config, model, pathlib.Path(f"{model}.json")


def _hash_offset(record: pathlib.Path, key: str) -> int:
  """The byte offset of the first hex digit of record[key] in the record file."""
  text = record.read_text(encoding="utf-8")
  value = json.loads(text)[key]
  return text.index(f'"{value}"') + 1


@pytest.mark.parametrize(
  "damage",
  [
    "model truncated",
    "model bit flipped mid-file",
    "model bit flipped where it still parses",
    "record truncated",
    "record bit flipped in its model hash",
    "record bit flipped in its corpus hash",
  ],
)
def test_a_damaged_vocabulary_is_refused_naming_the_file_and_the_fix(trained, damage):
  config, model, record = trained
  good = model.read_bytes()
  what, how = damage.split(" ", 1)
  if damage == "model truncated":
    model.write_bytes(good[: len(good) // 3])
  elif damage == "model bit flipped mid-file":
    _flip(model, len(good) // 2, 0x10)
  elif damage == "model bit flipped where it still parses":
    _flip(model, 100, 0x10)  # inside a piece's text: SentencePiece reads another piece
    assert tokenizer_lib.Tokenizer(str(model)).sp.serialized_model_proto() != good
  elif damage == "record truncated":
    record.write_bytes(record.read_bytes()[:40])
  else:  # a hex digit 'a'..'f' becomes 'q'..'v', or a digit becomes ' '..')' (still a string)
    key = "model_sha256" if "model hash" in how else "sha256"
    offset = _hash_offset(record, key)
    _flip(record, offset, 0x10 if record.read_bytes()[offset] >= ord("a") else 0x01)
  error = data.CorpusError if "corpus hash" in how else vocab.VocabularyError
  damaged = str(model) if what == "model" or "hash" in how else str(record)
  _refused(lambda: vocab.prepare_vocabulary(config), error, damaged)
  # The fix: delete the model and its record; training again gives the same vocabulary.
  model.unlink()
  record.unlink()
  vocab.prepare_vocabulary(config)
  assert model.read_bytes() == good


def test_a_vocabulary_without_record_that_does_not_parse_is_refused(tmp_path):
  """Made elsewhere (no record, so no hash to check) or left half-written by an older version
  killed during training: SentencePiece's own parse error becomes one line with the fix."""
  _write_tsv(tmp_path / "train.tsv")
  config = _config(tmp_path)
  config.data.vocab_path = str(tmp_path / "elsewhere.model")
  vocab.prepare_vocabulary(config)
  model = tmp_path / "elsewhere.model"
  (tmp_path / "elsewhere.model.json").unlink()
  model.write_bytes(model.read_bytes()[:1000])
  _refused(lambda: vocab.prepare_vocabulary(config), vocab.VocabularyError, str(model))


def test_training_a_vocabulary_puts_model_and_record_in_place_together(tmp_path, monkeypatch):
  """A kill while the model is written leaves no model in place (the next run trains again):
  the model is written beside, its record first, then renamed over the path."""
  _write_tsv(tmp_path / "train.tsv")
  config = _config(tmp_path)
  model = pathlib.Path(vocab.vocabulary_path(config))
  seen = {}
  real = tokenizer_lib.train_tokenizer

  def train(texts, path, size):
    seen["path"] = path
    out = real(texts, path, size)
    seen["in place"] = model.exists()
    return out

  monkeypatch.setattr(tokenizer_lib, "train_tokenizer", train)
  vocab.prepare_vocabulary(config)
  assert seen["path"] != str(model) and not seen["in place"]
  assert json.loads((tmp_path / "spm30.model.json").read_text())["model_sha256"]


def _line_of(raw: bytes, offset: int) -> int:
  return raw.count(b"\n", 0, offset) + 1


@pytest.mark.parametrize(
  "damage, message",
  [
    ("truncated in a source", r"found 0 tabs"),
    ("truncated inside a UTF-8 character", r"not valid UTF-8"),
    ("bit flipped in a tab", r"found 0 tabs"),
    ("bit flipped in a line end", r"found 2 tabs"),
    ("bit flipped in a UTF-8 character", r"not valid UTF-8"),
  ],
)
def test_a_damaged_corpus_file_is_refused_naming_the_file_and_line(tmp_path, damage, message):
  path = tmp_path / "train.tsv"
  raw = _write_tsv(path)
  if damage == "truncated in a source":
    offset = raw.index(b"king") + 2  # line 4
    path.write_bytes(raw[:offset])
  elif damage == "truncated inside a UTF-8 character":
    offset = raw.index("í".encode()) + 1  # line 3: c3 without its ad
    path.write_bytes(raw[:offset])
  else:
    offset = {
      "bit flipped in a tab": raw.index(b"\t"),  # 0x09 -> 0x19: line 1 has no tab
      "bit flipped in a line end": raw.index(b"\n"),  # 0x0a -> 0x1a: lines 1 and 2 are one
      "bit flipped in a UTF-8 character": raw.index("í".encode()) + 1,  # ad -> ed: a lead byte
    }[damage]
    _flip(path, offset, 0x40 if "UTF-8" in damage else 0x10)
  where = re.escape(f"{path}, line {_line_of(raw, offset)}: ")
  with pytest.raises(data.CorpusError, match=where + ".*" + message) as info:
    data.read_split(str(tmp_path), "train", "en", "es")
  assert isinstance(info.value, UserError) and "\n" not in str(info.value)


def test_a_truncated_aligned_file_is_refused_naming_both_files(tmp_path):
  """Cut at a line end, a .tsv holds fewer whole pairs (nothing to see in the file; the
  vocabulary and the dataset cache, fingerprinted, notice); two aligned files disagree."""
  src, tgt = tmp_path / "train.en", tmp_path / "train.es"
  src.write_text("".join(f"{s}\n" for s, _ in PAIRS), encoding="utf-8")
  text = "".join(f"{t}\n" for _, t in PAIRS)
  tgt.write_text(text[: text.index("\n", len(text) // 2) + 1], encoding="utf-8")
  with pytest.raises(
    data.CorpusError, match=re.escape(f"misaligned files: {src} has 40 lines, {tgt} has 2")
  ):
    data.read_split(str(tmp_path), "train", "en", "es")


def test_a_corpus_changed_in_place_refuses_the_vocabulary_trained_on_it(trained):
  """A bit flipped inside a word leaves a valid corpus ("man" -> "}an"): nothing in the file
  says so, but the vocabulary trained on the file before is refused with the fix."""
  config, model, record = trained
  path = pathlib.Path(config.data.corpus_dir) / "train.tsv"
  _flip(path, path.read_bytes().index(b"man"), 0x10)
  assert len(data.read_split(config.data.corpus_dir, "train", "en", "es")) == len(PAIRS)
  _refused(lambda: vocab.prepare_vocabulary(config), data.CorpusError, str(model), str(record))


def test_loading_a_trained_run_checks_its_vocabulary(trained, tmp_path, monkeypatch):
  """translate / evaluate load a run through padir.model.restore: a vocabulary damaged where
  SentencePiece still parses it is refused there too, before the model is built."""
  from padir.model import restore

  config, model, _ = trained
  run = tmp_path / "run"
  run.mkdir()
  (run / "config.json").write_text(config.to_json())
  monkeypatch.setattr(restore, "checkpoint_steps", lambda workdir: [1])
  _flip(model, 100, 0x10)
  _refused(lambda: restore.load_model(str(run)), vocab.VocabularyError, str(model))


def test_two_runs_on_one_corpus_build_its_cache_one_after_the_other(tmp_path):
  """An AR baseline and PaDIR started side by side on one corpus used to build the same tfds
  cache at once, and the second's rename failed (FileExistsError). While one run holds the
  cache's lock, another waits; then it reads the first's files."""
  import fcntl
  import subprocess
  import sys
  import time

  from padir_util import write_corpus

  from padir.data import tfds_corpus

  corpus = write_corpus(tmp_path, {"train": 20, "valid": 4, "test": 4}, max_words=5)
  data_dir = pathlib.Path(corpus) / "tfds"
  data_dir.mkdir()
  script = (
    "import sys; from padir.data import tfds_corpus; "
    "print(len(tfds_corpus.local_data_sources(sys.argv[1], 'en', 'es')['train']))"
  )
  with open(data_dir / ".prepare.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # as if another run were building the cache
    other = subprocess.Popen(
      [sys.executable, "-c", script, corpus],
      stdout=subprocess.PIPE,
      text=True,
      cwd=pathlib.Path(__file__).resolve().parents[2],
    )
    time.sleep(8)  # long enough to import tfds and reach the lock
    assert other.poll() is None, "the second run did not wait for the lock"
  out, _ = other.communicate(timeout=120)  # the lock released: it builds the cache
  assert other.returncode == 0 and out.split()[-1] == "20"  # (tfds prints a note first)
  assert len(tfds_corpus.local_data_sources(corpus, "en", "es")["train"]) == 20  # and we read it


# ----------------------------------------------------------------------------- before the workdir


def _break(corpus: pathlib.Path, fault: str) -> str:
  """Breaks a good corpus directory in one way; returns what the refusal must name."""
  train = corpus / "train.tsv"
  if fault == "empty corpus":
    train.write_bytes(b"")
    return f"{train} is empty"
  if fault == "missing train split":
    train.unlink()
    return f"no train split in {corpus}"
  if fault == "missing valid split":
    (corpus / "valid.tsv").unlink()
    return f"no valid split in {corpus}"
  raw = train.read_bytes().split(b"\n")
  if fault == "a line without a tab":
    raw[2] = raw[2].replace(b"\t", b" ")
    train.write_bytes(b"\n".join(raw))
    return f"{train}, line 3: expected 'source<TAB>target' (one tab), found 0 tabs"
  raw[4] = raw[4].replace(b" ", b" \xff ", 1)  # invalid UTF-8
  train.write_bytes(b"\n".join(raw))
  return f"{train}, line 5: not valid UTF-8 (byte 0xff"


FAULTS = [
  "empty corpus",
  "missing train split",
  "missing valid split",
  "a line without a tab",
  "invalid UTF-8",
]


@pytest.mark.parametrize("fault", FAULTS)
def test_a_bad_corpus_is_refused_before_the_workdir_is_written(tmp_path, fault):
  """Each of the issue's data errors: one line naming the file (and line), raised before the
  run directory exists (no config.json, no TensorBoard file), so the corrected command can
  run in the same workdir (the next test runs it)."""
  from padir_util import tiny_run_config, write_corpus

  from gmlm import cli

  corpus = tmp_path / "corpus"
  corpus.mkdir()
  write_corpus(corpus, {"train": 40, "valid": 8, "test": 8}, max_words=4)
  named = _break(corpus, fault)
  work = tmp_path / "work"
  with pytest.raises(data.CorpusError) as info:
    cli.run(tiny_run_config(str(corpus), steps=2), str(work), "train.py")
  assert named in str(info.value) and "\n" not in str(info.value), str(info.value)
  assert not work.exists()


@pytest.mark.slow  # a training after the refusal
def test_the_corrected_command_then_trains_in_the_same_workdir(tmp_path):
  """A missing train split refused, the corpus made, the same command in the same workdir:
  it trains (a refused run left nothing there for the config guard to refuse)."""
  from padir_util import tiny_run_config, write_corpus

  from gmlm import cli

  corpus, work = tmp_path / "corpus", tmp_path / "work"
  corpus.mkdir()
  config = tiny_run_config(str(corpus), steps=2, eval_every=2)
  with pytest.raises(data.CorpusError, match="no train split"):
    cli.run(config, str(work), "train.py")
  write_corpus(corpus, {"train": 40, "valid": 8, "test": 8}, max_words=4)
  cli.run(config, str(work), "train.py")
  assert json.loads((work / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 2


@pytest.mark.parametrize(
  "name",
  ["padir_synthetic_ctc_2x1", "padir_synthetic_ar", "padir_reorder_ctc", "padir_reorder_large"],
)
def test_a_missing_synthetic_corpus_names_the_command_that_makes_it(tmp_path, monkeypatch, name):
  """From a fresh clone (no data/): the refusal names the data step, that command (the one the
  config's own header gives) makes the corpus, and the corpus then passes the check."""
  import importlib

  from gmlm import cli
  from padir.data import synthetic

  monkeypatch.chdir(tmp_path)
  config = importlib.import_module(f"configs.{name}").get_config()
  with pytest.raises(data.CorpusError) as info:
    cli.run(config, "runs/x", "train.py")
  command = re.search(r"make the corpus first: `(.*)`$", str(info.value)).group(1)
  header = pathlib.Path(__file__).resolve().parents[2] / "configs" / f"{name}.py"
  assert command in header.read_text(encoding="utf-8")
  assert command.startswith(f"python -m padir.data.synthetic --out {config.data.corpus_dir}")
  argv = command.split()[3:] + ["--train", "50", "--valid", "8", "--test", "8"]  # a small one
  assert synthetic.main(argv) == 0
  data.check_corpus(config.data)
  assert not pathlib.Path("runs").exists()
