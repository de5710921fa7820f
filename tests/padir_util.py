"""A toy English -> Spanish word corpus for the PaDIR tests (pairs of aligned word lists)."""

from __future__ import annotations

import pathlib

import numpy as np

EN = "the a man woman house land king city water light day night god people son".split()
ES = "el la hombre mujer casa tierra rey ciudad agua luz día noche dios pueblo hijo".split()


def write_corpus(directory: pathlib.Path, sizes: dict[str, int], max_words: int) -> str:
  """{split}.tsv files of random aligned phrases (1..max_words words), fixed seed; the directory."""
  rng = np.random.default_rng(0)
  for split, n in sizes.items():
    with open(directory / f"{split}.tsv", "w", encoding="utf-8") as f:
      for _ in range(n):
        idx = rng.integers(0, len(EN), rng.integers(1, max_words + 1))
        f.write(" ".join(EN[i] for i in idx) + "\t" + " ".join(ES[i] for i in idx) + "\n")
  return str(directory)


def tiny_model(decoder: str = "nar", seed: int = 0, **overrides):
  """A random 1 + 1-layer model (by default V = 24, lengths 6, d = 16), in eval mode."""
  from flax import nnx

  from padir.model import transformer as model_lib

  cfg = {
    "vocab_size": 24,
    "max_source_length": 6,
    "max_target_length": 6,
    "num_encoder_layers": 1,
    "num_decoder_layers": 1,
    "num_heads": 2,
    "d_model": 16,
    "d_ff": 16,
    "dropout_rate": 0.0,
    "decoder": decoder,
  }
  model = model_lib.Transformer(model_lib.ModelConfig(**{**cfg, **overrides}), rngs=nnx.Rngs(seed))
  model.eval()
  return model


def tiny_run_config(corpus_dir: str, steps: int, **train):
  """configs/padir_bible_en_es.py shrunk for tests: a 1 + 1-layer PaDIR (d = 16) on corpus_dir
  with a 40-piece vocabulary, lengths 16, batch 4, `steps` steps, a log line and a checkpoint
  every 2, an evaluation every 4 (`train` overrides), no translation."""
  from configs import padir_bible_en_es

  c = padir_bible_en_es.get_config()
  c.data.corpus_dir, c.data.prepare_bible, c.data.vocab_size = corpus_dir, False, 40
  c.data.max_source_length = c.data.max_target_length = 16
  c.model.update(num_encoder_layers=1, num_decoder_layers=1, num_heads=2, d_model=16, d_ff=32)
  c.train.update(
    batch_size=4,
    num_train_steps=steps,
    warmup_steps=2,
    log_every=2,
    eval_every=4,
    eval_batches=1,
    checkpoint_every=2,
    keep_checkpoints=2,
    progress_bar=False,
  )
  c.train.update(train)
  c.decode.update(num_examples=0, batch_size=4, num_lengths=2)
  return c


def benchmark_module(name: str):
  """A module of benchmarks/ (a benchmark's peer, not the library's), imported by path."""
  import importlib.util
  import pathlib
  import sys

  path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
  spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # dataclasses look their module up while it executes
  spec.loader.exec_module(module)
  return module


class Killed(Exception):
  """A preemption, simulated by `checkpoints_killed_after`."""


def checkpoints_killed_after(step: int):
  """padir.training.loop's Checkpoints class, raising Killed right after the checkpoint at
  `step` is on disk (monkeypatch it over training.Checkpoints)."""
  from padir.training import loop as training

  class KilledAfter(training.Checkpoints):
    def save(self, s, items, **kwargs):
      saved = super().save(s, items, **{**kwargs, "wait": True})
      if s == step:
        raise Killed
      return saved

  return KilledAfter
