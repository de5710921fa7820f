"""padir.jobs.translate (configs/padir_translate.py) on a tiny hand-made checkpoint: good lines
translate as line i decodes alone with key fold_in(key(seed), i); an empty and an over-long line
get a message naming their line and an empty output line; bad checkpoints are refused first."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import padir_util
import pytest
from flax import nnx

from configs import padir_bible_en_es, padir_translate
from gmlm import cli, runs
from gmlm.checkpoints import Checkpoints
from gmlm.checks import ConfigError, UserError
from padir.data import tokenizer as tok_lib
from padir.decoding import autoregressive as decode
from padir.decoding import ctc, decoders, refinement
from padir.jobs import translate as translate_job
from padir.model import restore
from padir.model import transformer as model_lib

L = 8  # maximum source and target length


def make_run(
  directory,
  decoder: str = "nar",
  job: str = "padir.jobs.train",
  short: bool = False,
  ctc_upsample: float = 0,
) -> str:
  """A training run directory as train.py leaves it: config.json, the vocabulary it names and
  a checkpoint of a random tiny model; short: its length head ranks lengths 0..3 first, so
  PaDIR's candidates are short and decode trimmed; ctc_upsample > 0: a CTC model."""
  directory.mkdir(parents=True)
  texts = [f"{a} {b}" for a, b in zip(padir_util.EN, padir_util.ES)] * 4
  vocab = str(directory / "spm.model")
  tok = tok_lib.train_tokenizer(texts, vocab, vocab_size=40)
  c = padir_bible_en_es.get_config()
  c.job = job
  c.data.update(vocab_path=vocab, max_source_length=L, max_target_length=L)
  c.model.update(
    decoder=decoder,
    num_encoder_layers=1,
    num_decoder_layers=1,
    num_heads=2,
    d_model=16,
    d_ff=16,
    ctc_upsample=ctc_upsample,
  )
  (directory / "config.json").write_text(runs.dumps(c), encoding="utf-8")
  model = model_lib.Transformer(
    model_lib.ModelConfig.from_run_config(c, tok.vocab_size), rngs=nnx.Rngs(0)
  )
  if short:
    head = model.length_head
    head.kernel[...] = jnp.zeros_like(head.kernel[...])
    head.bias[...] = jnp.where(jnp.arange(L + 1) <= 3, 10.0 - jnp.arange(L + 1), -10.0)
  ckpt = Checkpoints(directory / restore.CHECKPOINTS)
  ckpt.save(1, {"params": nnx.state(model, nnx.Param)})
  ckpt.close()
  return str(directory)


def _config(checkpoint: str, **overrides) -> ml_collections.ConfigDict:
  c = padir_translate.get_config()
  c.update(checkpoint=checkpoint, progress_bar=False, **overrides)
  return c


@pytest.mark.parametrize("trim", [0, 2, 8])
def test_bad_lines_are_reported_and_left_empty_while_the_others_translate(tmp_path, capsys, trim):
  """trim: 0 decodes at max_target_length, 2 at the batch's longest candidate rounded up to
  even (decoders.Trimmed: below L here), 8 = L: the same tokens each way."""
  ckpt = make_run(tmp_path / "padir", short=True)
  lines = ["the man", "", "the king " * 20, "a woman"]
  (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
  config = _config(
    ckpt, input=str(tmp_path / "in.txt"), output=str(tmp_path / "out.txt"), batch_size=4, trim=trim
  )
  results = cli.run(config, str(tmp_path / "work"), "sample.py")
  err = capsys.readouterr().err
  assert "line 2: empty line" in err and "line 3: " in err and "maximum source length 8" in err
  out = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")
  assert len(out) == 5 and out[4] == "" and out[1] == out[2] == ""
  assert [s["line"] for s in results["skipped"]] == [2, 3] and results["translated"] == 2
  assert results["decoder"] == "padir"  # "auto" on a PaDIR run: refinement
  assert json.loads((tmp_path / "work" / "results.json").read_text())["lines"] == 4

  # The good lines, decoded here as the job documents: line i with fold_in(key(seed), i).
  model, tok, _ = restore.load_model(ckpt)
  inputs = np.zeros((4, L), np.int32)
  for b, text in enumerate([lines[0]] + [lines[3]] * 3):
    ids = tok.encode(text) + [tok_lib.EOS_ID]
    inputs[b, : len(ids)] = ids
  keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(jnp.array([0, 3, 3, 3]))
  tokens = refinement.refine_jit(model, jnp.asarray(inputs), keys, refinement.RefineOptions())
  assert [out[0], out[3]] == [tok.decode(np.asarray(tokens["tokens"][b])) for b in (0, 1)]
  if trim == 2:  # the batch really decoded at a smaller width
    trimmed = decoders.Trimmed(model, translate_job.options(config), trim)
    assert trimmed.width(jnp.asarray(inputs)) < L


def _assert_the_hint_works_from_a_fresh_clone(message: str) -> None:
  """The hint's commands, in order: the data step writes the corpus the training config reads
  (a fresh clone has no data/), and the training config exists."""
  import importlib
  import pathlib
  import re

  make = re.search(r"`python -m (\S+) --out (\S+) && python train.py --config (\S+) ", message)
  assert make, message
  module, out, config_path = make.groups()
  assert hasattr(importlib.import_module(module), "main")
  path = pathlib.Path(__file__).resolve().parents[2] / config_path
  config = importlib.import_module(f"configs.{path.stem}").get_config()
  assert path.is_file() and config.data.corpus_dir == out
  assert config.model.ctc_upsample > 0  # the recommended model: CTC


def test_a_missing_or_foreign_checkpoint_is_refused_before_any_work(tmp_path):
  work = tmp_path / "work"
  for missing in ("", str(tmp_path / "nowhere")):  # says so, and names the quickest to train
    with pytest.raises(ConfigError, match=r"(is required|does not exist)") as info:
      cli.prepare(_config(missing), str(work), "sample.py")
    _assert_the_hint_works_from_a_fresh_clone(str(info.value))
  (tmp_path / "empty").mkdir()
  with pytest.raises(ConfigError, match="must be a training run directory"):
    cli.prepare(_config(str(tmp_path / "empty")), str(work), "sample.py")
  foreign = tmp_path / "glauber_run"
  foreign.mkdir()
  (foreign / "config.json").write_text(json.dumps({"job": "glauber.jobs.sample"}))
  with pytest.raises(ConfigError, match="is a run of 'glauber.jobs.sample'"):
    cli.prepare(_config(str(foreign)), str(work), "sample.py")
  (foreign / "config.json").write_text(
    json.dumps({"job": "padir.jobs.train", "model": {"decoder": "nar"}})
  )
  with pytest.raises(ConfigError, match="has no checkpoint"):
    cli.prepare(_config(str(foreign)), str(work), "sample.py")
  assert not work.exists()


def test_a_run_whose_vocabulary_is_missing_here_is_refused_in_one_line(tmp_path):
  """A run's config.json names its vocabulary relative to where it was trained: from another
  directory the file is missing, and that is one line naming it, before the workdir is made."""
  ckpt = make_run(tmp_path / "padir")
  (tmp_path / "padir" / "spm.model").rename(tmp_path / "moved.model")
  work = tmp_path / "work"
  with pytest.raises(ConfigError, match=r"vocabulary .*spm.model, which does not exist here"):
    cli.prepare(_config(ckpt), str(work), "sample.py")
  assert not work.exists()


def test_an_input_that_is_not_utf8_leaves_the_workdir_untouched(tmp_path):
  ckpt = make_run(tmp_path / "padir")
  (tmp_path / "in.txt").write_bytes(b"the man\nthe \xff king\n")
  work = tmp_path / "work"
  with pytest.raises(UserError, match=r"in.txt, line 2: not valid UTF-8"):
    cli.run(_config(ckpt, input=str(tmp_path / "in.txt")), str(work), "sample.py")
  assert not work.exists()  # config.json was written before the check


def test_a_line_mostly_of_unknown_characters_is_warned_about(tmp_path, capsys):
  """The toy vocabulary has no ï, é, ü, CJK or emoji: every word of line 2 holds an <unk> (the
  toy model takes 8 tokens, so the words are short)."""
  ckpt = make_run(tmp_path / "padir")
  tok = tok_lib.Tokenizer(str(tmp_path / "padir" / "spm.model"))
  lines = ["the man", "ï é 東", "the 🎉 man"]
  issue = "naïve café über 東京 🎉"  # issue 27's line
  want = [w for w in issue.split() if tok_lib.UNK_ID in tok.encode(w)]
  assert translate_job.unknown_words(tok, issue) == want == issue.split()
  (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
  results = cli.run(_config(ckpt, input=str(tmp_path / "in.txt")), str(tmp_path / "w"), "sample.py")
  err = capsys.readouterr().err
  assert "line 2: warning: 3 of 3 words hold characters the model's vocabulary lacks" in err
  assert "line 1:" not in err and "line 3:" not in err  # 1 of 3 unknown: no warning
  assert results["translated"] == 3


def _translate_file(tmp_path, ckpt: str, lines: list[str], **overrides):
  """(the output lines, results) of the job translating `lines` from a file to a file."""
  (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
  out = tmp_path / "out.txt"
  config = _config(ckpt, input=str(tmp_path / "in.txt"), output=str(out), **overrides)
  results = cli.run(config, str(tmp_path / "work"), "sample.py")
  return out.read_text(encoding="utf-8").split("\n")[:-1], results


def _direct(decode_batch, tok, lines: list[str], batch_size: int) -> list[str]:
  """The lines decoded by `decode_batch(inputs [B, L]) -> tokens` on one padded batch, the last
  line repeated to fill it (as the job batches), and detokenized."""
  inputs = np.zeros((batch_size, L), np.int32)
  for b, text in enumerate(lines + lines[-1:] * (batch_size - len(lines))):
    ids = tok.encode(text) + [tok_lib.EOS_ID]
    inputs[b, : len(ids)] = ids
  tokens = np.asarray(decode_batch(jnp.asarray(inputs)))
  return [tok.decode(tokens[b]) for b in range(len(lines))]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_ar_checkpoints_decode_greedily_or_by_beam(tmp_path, beam_size):
  """The CLI's AR output equals padir.decoding.autoregressive's greedy / beam search run directly on the same
  (padded) batch: a batch of 2 lines, the second repeated to fill batch_size 3."""
  ckpt = make_run(tmp_path / "ar", decoder="ar")
  lines = ["the man", "a woman"]
  out, _ = _translate_file(tmp_path, ckpt, lines, batch_size=3, beam_size=beam_size)
  model, tok, _ = restore.load_model(ckpt)
  if beam_size == 1:
    want = _direct(lambda x: decode.greedy_ar(model, x), tok, lines, 3)
  else:
    want = _direct(
      lambda x: decode.beam_search(model, x, beam_size, length_penalty=0.6)["tokens"], tok, lines, 3
    )
  assert out == want


@pytest.mark.parametrize("passes, penalty", [(1, 0.0), (2, 1.5)])
def test_a_ctc_checkpoint_translates_by_default_as_ctc_decode_does(tmp_path, passes, penalty):
  """The issue's command on a CTC run (decoder "auto"): its output equals
  padir.decoding.ctc.decode's tokens on the same lines, untrimmed, decoded by the tokenizer; the
  trimmed sources (trim=2) change no token."""
  ckpt = make_run(tmp_path / "ctc", ctc_upsample=2)
  lines = ["the man", "a king", "god"]
  out, results = _translate_file(
    tmp_path, ckpt, lines, batch_size=4, trim=2, ctc_passes=passes, ctc_blank_penalty=penalty
  )
  model, tok, _ = restore.load_model(ckpt)
  want = _direct(lambda x: ctc.decode(model, x, passes, penalty)["tokens"], tok, lines, 4)
  assert out == want and any(want)
  assert results["decoder"] == "ctc" and results["translated"] == 3
  assert results["options"] == {"passes": passes, "blank_penalty": penalty, "trim": 2}


@pytest.mark.parametrize(
  "run, decoder, error",
  [
    ("ar", "ctc", r"config.decoder='ctc'.*cannot decode an AR model.*'greedy' or 'beam'"),
    ("ar", "padir", r"config.decoder='padir'.*cannot decode an AR model"),
    ("ctc", "padir", r"config.decoder='padir'.*cannot decode a CTC model.*'ctc'"),
    ("ctc", "greedy", r"config.decoder='greedy'.*cannot decode a CTC model"),
    ("padir", "ctc", r"config.decoder='ctc'.*cannot decode a PaDIR \(refinement\) model"),
    ("padir", "beam", r"config.decoder='beam'.*cannot decode a PaDIR"),
    ("ar", "beem", r"config.decoder='beem'.*must be one of 'auto', 'ctc'"),
    ("ar", "beam", r"config.decoder='beam'.*beam_size=1 is greedy search"),
  ],
)
def test_a_decoder_the_run_cannot_use_is_refused_in_one_line_before_anything(
  tmp_path, run, decoder, error
):
  kinds = {"ar": {"decoder": "ar"}, "ctc": {"ctc_upsample": 2}, "padir": {}}
  ckpt = make_run(tmp_path / run, **kinds[run])
  work = tmp_path / "work"
  with pytest.raises(ConfigError, match=error) as info:
    cli.prepare(_config(ckpt, decoder=decoder), str(work), "sample.py")
  assert "\n" not in str(info.value)
  assert not work.exists()


def test_each_run_kind_translates_with_its_named_decoder(tmp_path):
  """decoder="greedy" / "beam" on an AR run: the same outputs as decoder="auto" with the
  matching beam_size (auto's choice; a PaDIR run's "auto" is refinement: the tests above)."""
  lines = ["the man", "a woman"]
  (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
  outputs = {}
  for run, decoder, beam in [
    ("ar", "auto", 1),
    ("ar", "greedy", 1),
    ("ar", "auto", 3),
    ("ar", "beam", 3),
  ]:
    if not (tmp_path / run).exists():
      make_run(tmp_path / run, decoder="ar")
    name = f"{run}-{decoder}-{beam}"
    config = _config(
      str(tmp_path / run),
      input=str(tmp_path / "in.txt"),
      output=str(tmp_path / f"{name}.txt"),
      decoder=decoder,
      beam_size=beam,
    )
    results = cli.run(config, str(tmp_path / name), "sample.py")
    outputs[name] = ((tmp_path / f"{name}.txt").read_text(encoding="utf-8"), results["decoder"])
  assert outputs["ar-auto-1"] == outputs["ar-greedy-1"] and outputs["ar-auto-1"][1] == "greedy"
  assert outputs["ar-auto-3"] == outputs["ar-beam-3"] and outputs["ar-beam-3"][1] == "beam"


def test_invalid_utf8_on_stdin_is_refused_in_one_line_naming_it_before_any_work(tmp_path):
  """The issue's bytes on stdin (not a file): one line naming stdin's line 2 and the fix, rc 2,
  nothing on stdout and no workdir, as --config.input=FILE does with the same bytes; the
  corrected input then translates every line."""
  import subprocess
  import sys

  ckpt = make_run(tmp_path / "padir")
  repo = str(__import__("pathlib").Path(__file__).resolve().parents[2])
  work = tmp_path / "work"
  command = [
    sys.executable,
    "sample.py",
    "--config",
    "configs/padir_translate.py",
    "--workdir",
    str(work),
    f"--config.checkpoint={ckpt}",
    "--config.progress_bar=False",
  ]
  env = {**__import__("os").environ, "JAX_PLATFORMS": "cpu"}
  bad = subprocess.run(
    command, input=b"the man\na \xff man\n", capture_output=True, cwd=repo, env=env
  )
  err = bad.stderr.decode()
  assert bad.returncode == 2, err
  assert "stdin, line 2: not valid UTF-8 (byte 0xff at column 3)" in err, err
  assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
  assert bad.stdout == b"" and not work.exists()
  good = subprocess.run(command, input=b"the man\na man\n", capture_output=True, cwd=repo, env=env)
  assert good.returncode == 0, good.stderr.decode()
  assert json.loads((work / "results.json").read_text())["translated"] == 2
