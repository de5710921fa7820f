"""PaDIR vs AR decoding speed, side by side in one process (padir.speed).

  python benchmarks/padir_speed.py --nar runs/padir_synthetic --ar runs/padir_synthetic_ar \
      [--deep-shallow runs/padir_synthetic_ar_deep_shallow] [--sentences 200] [--json OUT]
  python benchmarks/padir_speed.py --tiny          # random tiny models: a smoke run

Decoders: PaDIR with 4 and 10 passes (5 length candidates) on the --nar model, PaDIR-4 trimmed
(speed.Trimmed: each call decodes at its longest candidate length rounded up to a multiple of 8,
not at max_target_length; the same tokens), AR greedy and beam 5 on the --ar model, and greedy on the deep-encoder / one-layer-decoder AR model. Sources:
the first --sentences lines of the test split of the --nar run's corpus. Prints, per decoder,
the decoder passes, latency at batch 1 (p50, p99; compilation reported apart), throughput at
batch 64, the speedups over AR greedy (> 1: faster) and the peak memory. The issue's targets
(PaDIR 4 passes: >= 2x lower p50 and >= 3x lower p99 than AR greedy) are read off the
"p50 speedup" and "p99 speedup" columns. A last line splits PaDIR-4's batch-1 time into the
encoder, one decoder pass over the candidates and the loop's passes (speed.breakdown), and
gives the floor no stopping rule can beat: the encoder and two passes. Time it on a quiet
machine only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from flax import nnx  # noqa: E402

from gmlm.runs import markdown_table  # noqa: E402
from padir import data, evaluate, refinement, restore, speed  # noqa: E402
from padir import model as model_lib  # noqa: E402
from padir import tokenizer as tok_lib  # noqa: E402


def tiny_models() -> dict[str, model_lib.Transformer]:
  """Random models of width 16 over 40 ids: PaDIR and AR 1+1 layers, deep-shallow AR 2+1."""
  base = dict(
    vocab_size=40,
    max_source_length=12,
    max_target_length=12,
    num_heads=2,
    d_model=16,
    d_ff=32,
    dropout_rate=0.0,
  )
  models = {}
  for name, extra in (
    ("nar", dict(decoder="nar", num_encoder_layers=1, num_decoder_layers=1)),
    ("ar", dict(decoder="ar", num_encoder_layers=1, num_decoder_layers=1)),
    ("deep_shallow", dict(decoder="ar", num_encoder_layers=2, num_decoder_layers=1)),
  ):
    model = model_lib.Transformer(model_lib.ModelConfig(**base, **extra), rngs=nnx.Rngs(0))
    model.eval()
    models[name] = model
  return models


def tiny_sources(n: int, model: model_lib.Transformer) -> np.ndarray:
  rng = np.random.default_rng(0)
  S = model.cfg.max_source_length
  out = np.full((n, S), tok_lib.PAD_ID, np.int32)
  for i in range(n):
    length = rng.integers(2, S)
    out[i, : length - 1] = rng.integers(tok_lib.NUM_SPECIAL, model.cfg.vocab_size, length - 1)
    out[i, length - 1] = tok_lib.EOS_ID
  return out


def test_sources(workdir: str, tok: tok_lib.Tokenizer, config, n: int) -> np.ndarray:
  d = config.data
  pairs = data.read_split(d.corpus_dir, "test", d.source_lang, d.target_lang)[:n]
  return evaluate.encode_batch(tok, [s for s, _ in pairs], len(pairs), d.max_source_length)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--nar", help="PaDIR run directory")
  parser.add_argument("--ar", help="AR run directory")
  parser.add_argument("--deep-shallow", help="deep-encoder / 1-layer-decoder AR run directory")
  parser.add_argument("--sentences", type=int, default=200)
  parser.add_argument(
    "--tiny",
    action="store_true",
    help="random tiny models, 4 sentences, PaDIR-4 and AR greedy only, batch 1 throughout",
  )
  parser.add_argument("--json", help="also write the results there")
  args = parser.parse_args(argv)

  if args.tiny:
    models = tiny_models()
    del models["deep_shallow"]
    sources = tiny_sources(4, models["nar"])
    throughput_batch = 1  # one shape per decoder: one compilation
  else:
    if not (args.nar and args.ar):
      parser.error("--nar and --ar are required (or --tiny)")
    models, sources = {}, None
    for name, workdir in (("nar", args.nar), ("ar", args.ar), ("deep_shallow", args.deep_shallow)):
      if workdir:
        model, tok, config = restore.load_model(workdir)
        models[name] = model
        if name == "nar":
          sources = test_sources(workdir, tok, config, args.sentences)
    throughput_batch = speed.THROUGHPUT_BATCH

  plan = [(d, "nar") for d in speed.standard_decoders()[:2]]
  # the same decoder at the width of each call's longest candidate (same tokens, less work)
  plan.append((speed.Decoder("padir-4-trim8", "padir", refinement.RefineOptions(), trim=8), "nar"))
  plan += [(d, "ar") for d in speed.standard_decoders()[2:]]
  if "deep_shallow" in models:
    plan.append((speed.Decoder("deep-shallow-greedy", "greedy"), "deep_shallow"))
  if args.tiny:
    plan = [p for p in plan if p[0].name in ("padir-4", "padir-4-trim8", "ar-greedy")]
  results = {}
  for decoder, model_name in plan:
    model = models[model_name]
    S = model.cfg.max_source_length
    src = np.pad(sources, ((0, 0), (0, max(S - sources.shape[1], 0))))[:, :S]
    results[decoder.name] = speed.measure(model, decoder, src, throughput_batch=throughput_batch)
    results[decoder.name]["parameters"] = model_lib.count_params(model)
    print(f"measured {decoder.name}", flush=True)
  speedups = speed.ratios(results, "ar-greedy")
  print(markdown_table(speed.TABLE_HEADER, speed.table_rows(results, speedups), digits=3))
  for name, r in speedups.items():
    print(
      f"ratio vs ar-greedy  {name:22s} p50 {r['p50_speedup']:.2f}x  p99 {r['p99_speedup']:.2f}x"
      f"  throughput {r['throughput_ratio']:.2f}x"
    )
  params = {name: results[name]["parameters"] for name in results}
  print("parameters:", params)
  parts = speed.breakdown(models["nar"], refinement.RefineOptions(), sources)
  print(
    f"padir-4 at batch 1, where the time goes (speed.breakdown, medians over "
    f"{parts['sentences']} sources): encoder {parts['encoder_ms']:.2f} ms; one pass over "
    f"{parts['candidates']} candidates x {parts['width']:.1f} positions {parts['pass_ms']:.2f} ms;"
    f" loop passes {parts['steps']:.2f} (the chosen candidate's {parts['passes']:.2f}); "
    f"encoder + passes x pass = {parts['model_ms']:.2f} ms (padir-4-trim8 measured, the same "
    f"widths: p50 {results['padir-4-trim8']['p50_ms']:.2f} ms); the floor, encoder + 2 passes = "
    f"{parts['floor_ms']:.2f} ms, against AR greedy's p50 {results['ar-greedy']['p50_ms']:.2f} ms"
  )
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump({"results": results, "speedups": speedups, "breakdown": parts}, f, indent=2)
  return 0


if __name__ == "__main__":
  sys.exit(main())
