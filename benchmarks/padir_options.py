"""What each PaDIR decoding option does to quality and speed, side by side in one process.

  python benchmarks/padir_options.py --nar runs/padir_synthetic [--ar runs/padir_synthetic_ar] \
      [--sentences 1024] [--latency-sentences 50] [--json OUT]
  python benchmarks/padir_options.py --tiny        # random tiny models: a smoke run

One trained PaDIR model decodes the first --sentences pairs of its corpus's test split with the
paper's decoder (padir.decoding.refinement.RefineOptions defaults: 4 passes, 5 lengths, stutter reset to
the noise and dropped, summed score, early stop, cross-attention cached) and with each option
changed alone: the reference's rules (stutter, drop, score, early stop, uncached
cross-attention, length offsets, random starts) and the ones beyond it (Mask-Predict remasking,
sampled refinement, AR reranking when --ar is given, the length predictor's log-probability
added to the score), plus our former decoder ("legacy"). Per
variant: BLEU and chrF (SacreBLEU), word stutter, mean decoder passes, sentences/s at batch 64
over the whole decode (compilation excluded), p50 latency at batch 1 over --latency-sentences,
and the differences from the paper's row; the paper's decoder is timed again last, so the gap
between its two rows shows the run's timing noise. Time it on a quiet machine only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from gmlm.runs import markdown_table  # noqa: E402
from padir.data import corpus as data
from padir.data import tokenizer as tok_lib  # noqa: E402
from padir.decoding import decoders, refinement
from padir.evaluation import latency as speed  # noqa: E402
from padir.evaluation import metrics
from padir.evaluation import translation as evaluate
from padir.model import restore
from padir.model import transformer as model_lib  # noqa: E402

BATCH = 64

# (name, RefineOptions overrides): each changes one rule of the paper's decoder.
VARIANTS = [
  ("paper", {}),
  ("10 passes", {"num_steps": 10}),
  ("stutter=mask", {"stutter": "mask"}),
  ("stutter=keep", {"stutter": "keep"}),
  ("drop=reset", {"drop": "reset"}),
  ("drop=none", {"drop": "none"}),
  ("score=mean", {"score": "mean"}),
  ("brevity 0.6", {"brevity_alpha": 0.6}),
  ("no early stop", {"early_stop": False}),
  ("uncached cross-attn", {"cache_cross": False}),
  ("length offsets 3", {"length_offsets": 3}),
  ("2 starts", {"num_starts": 2}),
  ("remask=confidence", {"remask": "confidence"}),
  ("remask, 10 passes", {"remask": "confidence", "num_steps": 10}),
  ("T=0.5 sampled", {"temperature": 0.5}),
  ("rerank=ar", {"rerank": "ar"}),
  ("length prior", {"length_prior": True}),
  ("length prior, drop=reset", {"length_prior": True, "drop": "reset"}),
  ("legacy (ours before)", "legacy"),
  ("paper, again", {}),  # the same work as the first row: the timing noise of this run
]

HEADER = [
  "variant",
  "hyp.",
  "BLEU",
  "chrF",
  "stutter",
  "passes",
  "sent/s @64",
  "p50 ms",
  "dBLEU",
  "speed vs paper",
]


def options_for(overrides) -> refinement.RefineOptions:
  if overrides == "legacy":
    return refinement.legacy_options(True, num_steps=4, num_lengths=5)
  return dataclasses.replace(refinement.RefineOptions(), **overrides)


def decode_all(model, ar_model, options, sources_PS, seed: int) -> tuple[np.ndarray, float]:
  """Tokens [P, T] of every source at batch BATCH (the last batch padded) and the wall time
  of all batches after a first compiling call."""
  P = len(sources_PS)
  padded = np.resize(sources_PS, (-(-P // BATCH) * BATCH, sources_PS.shape[1]))
  padded[:P] = sources_PS
  key = jax.random.key(seed)
  run = lambda i: refinement.refine_jit(
    model, jnp.asarray(padded[i : i + BATCH]), jax.random.fold_in(key, i), options, ar_model
  )["tokens"]
  jax.block_until_ready(run(0))  # compile
  start, out = time.perf_counter(), []
  for i in range(0, len(padded), BATCH):
    out.append(np.asarray(jax.block_until_ready(run(i))))
  return np.concatenate(out)[:P], time.perf_counter() - start


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--nar", help="PaDIR run directory")
  parser.add_argument("--ar", help="AR run directory (the rerank=ar row)")
  parser.add_argument("--sentences", type=int, default=1024)
  parser.add_argument("--latency-sentences", type=int, default=50)
  parser.add_argument("--tiny", action="store_true", help="random tiny models, 3 variants")
  parser.add_argument("--json", help="also write the results there")
  args = parser.parse_args(argv)

  if args.tiny:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import padir_speed

    models = padir_speed.tiny_models()
    model, ar_model = models["nar"], models["ar"]
    sources = padir_speed.tiny_sources(8, model)
    references = ["a b c"] * len(sources)
    tok, target_lang, latency_n = None, "en", 2
    variants = [v for v in VARIANTS if v[0] in ("paper", "drop=reset", "rerank=ar")]
  else:
    if not args.nar:
      parser.error("--nar is required (or --tiny)")
    model, tok, config = restore.load_model(args.nar)
    ar_model = restore.load_model(args.ar)[0] if args.ar else None
    d = config.data
    pairs = data.read_split(d.corpus_dir, "test", d.source_lang, d.target_lang)[: args.sentences]
    sources = evaluate.encode_batch(
      tok, [s for s, _ in pairs], len(pairs), model.cfg.max_source_length
    )
    references = [t for _, t in pairs]
    target_lang, latency_n = d.target_lang, args.latency_sentences
    variants = [v for v in VARIANTS if v[0] != "rerank=ar" or ar_model is not None]

  decode_all(model, ar_model, options_for({}), sources[:BATCH], seed=0)  # warm the process up
  results = {}
  for name, overrides in variants:
    options = options_for(overrides)
    tokens, seconds = decode_all(model, ar_model, options, sources, seed=0)
    if tok is None:
      hyps = [" ".join(str(i) for i in row if i >= tok_lib.NUM_SPECIAL) for row in tokens]
    else:
      hyps = [tok.decode(row) for row in tokens]
    timing = speed.measure(
      model,
      decoders.Decoder(name, "padir", options),
      sources[:latency_n],
      throughput_batch=1,
      throughput_batches=1,
      ar_model=ar_model if options.rerank == "ar" else None,
    )
    results[name] = {
      "options": dataclasses.asdict(options),
      "hypotheses": options.num_candidates,
      "bleu": metrics.bleu(hyps, references, target_lang).score,
      "chrf": metrics.chrf(hyps, references).score,
      "stutter": metrics.stutter_rate(hyps, references),
      "passes": timing["passes"],
      "throughput": len(sources) / seconds,
      "p50_ms": timing["p50_ms"],
      "example": hyps[0],
    }
    print(f"measured {name}: BLEU {results[name]['bleu']:.2f}", flush=True)
  base = results["paper"]
  rows = [
    [
      name,
      r["hypotheses"],
      r["bleu"],
      r["chrf"],
      r["stutter"],
      r["passes"],
      r["throughput"],
      r["p50_ms"],
      r["bleu"] - base["bleu"],
      r["throughput"] / base["throughput"],
    ]
    for name, r in results.items()
  ]
  print(markdown_table(HEADER, rows, digits=3))
  print(f"sentences: {len(sources)} (test split); parameters: {model_lib.count_params(model)}")
  print("peak memory:", speed.peak_memory())
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump(results, f, indent=2)
  return 0


if __name__ == "__main__":
  sys.exit(main())
