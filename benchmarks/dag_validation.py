"""A DAG model's validation decoding over a grid of beam settings, side by side in one process:
one `translate` a setting (the model run again for each; validation did so before 2026-11-30)
against `translate_dag_grid` (the model run once a batch, a beam per setting on its graph).

  python benchmarks/dag_validation.py --run runs/padir_family/sov/dag [--sentences 256]
      [--grid 1.5:1.5,1.0:1.5,1.0:1.0,0.5:1.0,0.5:0.5] [--repeats 3]
  python benchmarks/dag_validation.py --tiny      # a random tiny DAG model: a smoke run

Sources: the first --sentences of the run's validation split; the n-gram model the run's
validation uses (padir.evaluation.translation.validation_lm). Prints each contender's seconds
(the fastest of --repeats, the two interleaved, compilation apart), the ratio, whether every
setting's translations are the same both ways, and the compiled programs' temporary memory
(XLA's memory analysis of a batch's program; the per-setting one runs once a setting). Time it
on a quiet machine only.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from configs import padir_family  # noqa: E402
from gmlm.runs import markdown_table  # noqa: E402
from padir.data import corpus as data  # noqa: E402
from padir.data import tokenizer as tokenizer_lib  # noqa: E402
from padir.decoding import ngram  # noqa: E402
from padir.evaluation import translation  # noqa: E402
from padir.model import restore  # noqa: E402


def tiny():
  """A random 1 + 1-layer DAG model, numeral 'words' for a tokenizer, a bigram model, sources."""
  from flax import nnx

  from padir.model import transformer as model_lib

  cfg = model_lib.ModelConfig(
    vocab_size=24,
    max_source_length=8,
    max_target_length=8,
    num_encoder_layers=1,
    num_decoder_layers=1,
    num_heads=2,
    d_model=16,
    d_ff=32,
    dag_upsample=2,
  )
  model = model_lib.Transformer(cfg, rngs=nnx.Rngs(0))
  model.eval()
  tok = types.SimpleNamespace(
    encode=lambda text: [int(x) for x in text.split()],
    decode=lambda ids: " ".join(str(i) for i in ids if i >= tokenizer_lib.NUM_SPECIAL),
  )
  rng = np.random.default_rng(0)
  sources = [" ".join(map(str, rng.integers(4, 24, rng.integers(2, 7)))) for _ in range(16)]
  lm = ngram.build([list(rng.integers(4, 24, 5)) for _ in range(20)], 24, order=2)
  return model, tok, sources, lm, 8


def from_run(workdir: str, sentences: int):
  model, tok, config = restore.load_model(workdir)
  d = config.data
  pairs = data.read_split(d.corpus_dir, "valid", d.source_lang, d.target_lang)[:sentences]
  lm = translation.validation_lm(config, tok)
  return model, tok, [s for s, _ in pairs], lm, config.decode.batch_size


def memory_mb(fn, *args) -> float:
  analysis = fn.lower(*args).compile().memory_analysis()
  return getattr(analysis, "temp_size_in_bytes", 0) / 2**20 if analysis else float("nan")


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--run", help="a DAG model's run directory")
  p.add_argument("--sentences", type=int, default=256)
  p.add_argument("--grid", default=padir_family.BEAM_GRID, help="'w:b,...' (the family's grid)")
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--tiny", action="store_true", help="a random tiny DAG model: a smoke run")
  a = p.parse_args(argv)
  if not a.tiny and not a.run:
    p.error("--run: a DAG model's run directory (or --tiny)")
  settings = translation.parse_beam_grid(a.grid)
  model, tok, sources, lm, batch = tiny() if a.tiny else from_run(a.run, a.sentences)
  if not model.cfg.dag_upsample:
    p.error(f"--run {a.run!r}: not a DAG model (model.dag_upsample is 0)")

  def each():
    return [
      translation.translate(
        model,
        tok,
        sources,
        jax.random.key(0),
        batch_size=batch,
        dag_decoder="beam",
        dag_lm=lm,
        dag_lm_weight=w,
        dag_length_norm=b,
      )
      for w, b in settings
    ]

  def grid():
    return translation.translate_dag_grid(
      model, tok, sources, settings, batch_size=batch, dag_lm=lm
    )

  contenders = {"a setting at a time": each, "the grid in one pass": grid}
  outputs = {name: fn() for name, fn in contenders.items()}  # compiled (and the outputs kept)
  best = {name: float("inf") for name in contenders}
  for _ in range(a.repeats):
    for name, fn in contenders.items():
      start = time.perf_counter()
      fn()
      best[name] = min(best[name], time.perf_counter() - start)
  x = jnp.asarray(
    translation.encode_batch(tok, sources[:batch], batch, model.cfg.max_source_length)
  )
  tables = lm.tables()
  w0, b0 = (jnp.float32(v) for v in settings[0])
  w_N = jnp.asarray([w for w, _ in settings], jnp.float32)
  b_N = jnp.asarray([b for _, b in settings], jnp.float32)
  memory = {
    "a setting at a time": memory_mb(translation._dag, model, x, "beam", tables, w0, b0),
    "the grid in one pass": memory_mb(translation._dag_grid, model, x, tables, w_N, b_N),
  }
  same = outputs["a setting at a time"] == outputs["the grid in one pass"]
  base = best["a setting at a time"]
  rows = [
    [name, f"{best[name]:.2f}", f"{base / best[name]:.2f}x", f"{memory[name]:.1f}"]
    for name in contenders
  ]
  print(
    f"{len(sources)} sources, batches of {batch}, {len(settings)} settings ({a.grid}); "
    f"{'a random tiny model' if a.tiny else a.run}"
  )
  print(markdown_table(["decoding", "seconds", "speed-up", "temp MiB (a batch's program)"], rows))
  print(f"every setting's translations the same both ways: {same}")
  return 0 if same else 1


if __name__ == "__main__":
  sys.exit(main())
