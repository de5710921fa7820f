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
