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

  from padir import model as model_lib

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
