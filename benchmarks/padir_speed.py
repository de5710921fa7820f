"""PaDIR vs AR decoding speed, side by side in one process (padir.evaluation.latency).

  python benchmarks/padir_speed.py --nar runs/padir_synthetic --ar runs/padir_synthetic_ar \
      [--deep-shallow runs/padir_synthetic_ar_deep_shallow] [--sentences 200] [--json OUT]
  python benchmarks/padir_speed.py --tiny          # random tiny models: a smoke run
  python benchmarks/padir_speed.py --frontier --nar RUN [--nar RUN2 ...] --ar RUN \
      [--deep-shallow RUN] [--sentences 200] [--out DIR]      # the BLEU-latency frontier
  python benchmarks/padir_speed.py --frontier --tiny --out DIR   # its smoke run
  python benchmarks/padir_speed.py --by-width --nar CTC_RUN [--sentences 500] [--repeats 5]

Decoders: the --nar run's by --decoder (padir.decoding.decoders.choose; "auto", the default, is
the run's recommended one, so a CTC run benchmarks with the same command as a PaDIR run; "ctc"
or "padir" names one and a run that cannot use it is refused in one line): for refinement PaDIR
with 4 and 10 passes (5 length candidates) and PaDIR-4 trimmed (decoding.Trimmed: each call
decodes at its longest candidate length rounded up to a multiple of 8, not at max_target_length;
the same tokens), for CTC one pass untrimmed and on sources trimmed to multiples of 8; AR greedy and beam 5 on the --ar model, and greedy on the deep-encoder / one-layer-decoder AR model. Sources:
the first --sentences lines of the test split of the --nar run's corpus. Prints, per decoder,
the decoder passes, latency at batch 1 (p50, p99; compilation reported apart), throughput at
batch 64, the speedups over AR greedy (> 1: faster) and the peak memory. The issue's targets
(PaDIR 4 passes: >= 2x lower p50 and >= 3x lower p99 than AR greedy) are read off the
"p50 speedup" and "p99 speedup" columns. A last line splits PaDIR-4's batch-1 time into the
encoder, one decoder pass over the candidates and the loop's passes (speed.breakdown), and
gives the floor no stopping rule can beat: the encoder and two passes. Time it on a quiet
machine only.

--frontier (issue 30): on the same test sources, in one process, every decoder's BLEU (its
batch-1 outputs, SacreBLEU against the references), batch-1 p50 / p99 latency and batch-64
throughput: per --nar run the PaDIR grid of decoding.frontier_decoders (1 / 2 / 5 length
candidates with the length prior x 1 / 2 / 4 passes, untrimmed and trimmed to a multiple of
8, target width and source alike (decoding.Decoder.source_trim; --no-source-trim: the target
only); frozen candidates leave the work, refinement.RefineOptions.row_stop="compact", and a
trimmed decode is one call, decoding.OneCallTrimmed; --row-stop mask / --two-calls for the
others); on --ar AR greedy untrimmed and trimmed (greedy-trim8: the sources cut to their width,
so the encoder and cross-attention run over fewer positions, and the KV cache grown 8 slots at
a time, decode.greedy_ar(window=8); the same tokens), beam 5 and the same greedy decoder in
eager PyTorch (benchmarks/torch_ar.py); greedy untrimmed and trimmed on --deep-shallow. The "vs AR
greedy" columns and the paired bootstrap compare with the faster AR greedy row (p99: the row
of the lower p99). Prints the table with the Pareto-optimal rows (no other row has
lower p50 and higher BLEU) marked, the GEMM rates of XLA and PyTorch at the models' shapes
with the ratio ceiling they set, and writes DIR/frontier.png (BLEU against p50, log x, one
marker per model family, the frontier drawn) and DIR/frontier.json. Latencies are timed with
Python's garbage collector paused (speed.gc_paused), the JAX decoders' calls interleaved
in blocks (speed.measure_many: every decoder decodes a block of 25 sources, warm, before any
decodes the next block, in a shuffled order, so that the machine's drift falls on all rows
alike; PyTorch's row is timed apart, before them), each source --repeats times (p50 / p99
over all the decodes). --single-thread runs XLA and PyTorch on one thread each (set before
jax is imported), the way a batch-1 server pins one thread per request: no collective wait on
a second core another process holds, which is what p99 sees on a 2-core machine.

--by-width (issue 30's p99): the --nar CTC run's one-pass decoder trimmed to --trim, each test
source decoded --repeats times at batch 1, grouped by the trimmed source width
(speed.latency_by_width: min / p50 / p90 / p99 per width and over all), and the cost of a
jitted identity call with the same arguments (speed.call_overhead_ms): whether p99 is the
widest sources or the spread of identical work, and what is fixed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if "--single-thread" in sys.argv[1:]:  # before jax is imported: XLA reads its flags once
  os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
  ).strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch_ar  # noqa: E402  (benchmarks/, beside this script)
from flax import nnx  # noqa: E402

from gmlm.runs import markdown_table  # noqa: E402
from padir.data import corpus as data
from padir.data import tokenizer as tok_lib  # noqa: E402
from padir.decoding import ctc, ngram, refinement  # noqa: E402
from padir.decoding import decoders as decoding  # noqa: E402
from padir.evaluation import latency as speed  # noqa: E402
from padir.evaluation import metrics
from padir.evaluation import translation as evaluate
from padir.model import restore
from padir.model import transformer as model_lib  # noqa: E402


def gemm_rates(
  shapes: Sequence[tuple[int, int, int]], reps: int = 20, threads: int | None = None
) -> list[dict[str, float]]:
  """GF/s of a float32 product [m, k] x [k, n] under XLA (jitted jnp.dot) and in PyTorch
  (torch.mm), the best of `reps` timed calls each, per (m, k, n): the ceiling the two
  libraries' matrix multiply sets on a JAX / PyTorch decoder's speed ratio at these shapes
  ("ratio" = XLA / PyTorch)."""
  import torch

  if threads:
    torch.set_num_threads(threads)
  rng = np.random.default_rng(0)
  dot = jax.jit(jnp.dot)
  out = []
  for m, k, n in shapes:
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    aj, bj = jnp.asarray(a), jnp.asarray(b)
    at, bt = torch.from_numpy(a), torch.from_numpy(b)
    rates = {}
    for name, fn in (
      ("xla", lambda: dot(aj, bj).block_until_ready()),
      ("torch", lambda: torch.mm(at, bt)),
    ):
      fn()
      best = min(speed._timed(fn)[0] for _ in range(reps))
      rates[name] = 2 * m * k * n / best / 1e9
    out.append({"m": m, "k": k, "n": n, **rates, "ratio": rates["xla"] / rates["torch"]})
  return out


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


def nar_decoders(
  model: model_lib.Transformer,
  choice: str,
  lm: Any = None,
  lm_weight: float = 1.5,
  length_norm: float = 1.5,
) -> list[decoding.Decoder]:
  """The --nar run's rows for --decoder `choice` (decoding.choose: "auto" = the run's own):
  refinement PaDIR-4, PaDIR-10 and PaDIR-4 trimmed, CTC one pass untrimmed and trimmed, or a
  DAG model's lookahead path and beam search (with lm, an n-gram model of padir.decoding.ngram,
  also its beam joined by that model at lm_weight, normalised by length^length_norm), trimmed; a
  choice the model cannot use, or
  an AR run, raises ValueError."""
  cfg = {
    "decoder": model.cfg.decoder,
    "ctc_upsample": model.cfg.ctc_upsample,
    "dag_upsample": model.cfg.dag_upsample,
  }
  kind = decoding.choose(choice, cfg)
  if kind not in ("ctc", "padir", "dag"):
    raise ValueError(
      f"--nar must name a PaDIR, CTC or DAG run; this one is {decoding.model_name(cfg)}"
    )
  if kind == "ctc":
    return decoding.ctc_decoders((1,), (0, 8))
  if kind == "dag":
    rows = [
      decoding.Decoder(f"dag-{s}-trim8", "dag", trim=8, dag_strategy=s)
      for s in ("lookahead", "beam")
    ]
    if lm is not None:
      rows.append(
        decoding.Decoder(
          "dag-beam-lm-trim8",
          "dag",
          trim=8,
          dag_strategy="beam",
          dag_lm=lm,
          dag_lm_weight=lm_weight,
          dag_length_norm=length_norm,
        )
      )
    return rows
  # the same decoder at the width of each call's longest candidate (same tokens, less work)
  trimmed = decoding.Decoder("padir-4-trim8", "padir", refinement.RefineOptions(), trim=8)
  return decoding.standard_decoders()[:2] + [trimmed]


def test_sources(workdir: str, tok: tok_lib.Tokenizer, config, n: int) -> np.ndarray:
  d = config.data
  pairs = data.read_split(d.corpus_dir, "test", d.source_lang, d.target_lang)[:n]
  return evaluate.encode_batch(tok, [s for s, _ in pairs], len(pairs), d.max_source_length)


class TinyTokenizer:
  """A stand-in tokenizer for the tiny models: ids as words, up to the first EOS / PAD."""

  def decode(self, ids) -> str:
    out = []
    for i in np.asarray(ids).tolist():
      if i in (tok_lib.EOS_ID, tok_lib.PAD_ID):
        break
      out.append(str(i))
    return " ".join(out)


FAMILY_MARKERS = {"PaDIR": "o", "AR": "s", "deep-shallow AR": "^", "PyTorch AR": "x"}


def frontier_plot(rows: list[dict], path: str) -> None:
  """BLEU against p50 latency (log x): one marker per model family, one colour per model,
  the Pareto frontier as a step line through the optimal rows."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import matplotlib.ticker  # noqa: F401  (matplotlib.ticker below)

  fig, ax = plt.subplots(figsize=(9, 6))
  models = sorted({r["model"] for r in rows})
  colours = {m: f"C{i}" for i, m in enumerate(models)}
  seen = set()
  # Labels of the frontier's rows, in latency order, alternate below and above their marker:
  # neighbours on the frontier (e.g. our greedy and PyTorch's at the same BLEU) do not overprint.
  ranked = sorted((r["p50_ms"], i) for i, r in enumerate(rows) if r["pareto"])
  label_dy = {i: (-8 if k % 2 == 0 else 5) for k, (_, i) in enumerate(ranked)}
  for i, r in enumerate(rows):
    label = f"{r['family']}: {r['model']}"
    ax.scatter(
      r["p50_ms"],
      r["bleu"],
      marker=FAMILY_MARKERS.get(r["family"], "o"),
      color=colours[r["model"]],
      facecolors="none" if r.get("trim") else None,
      s=60,
      label=None if label in seen else label,
    )
    seen.add(label)
    if r["pareto"]:
      ax.annotate(
        r["decoder"],
        (r["p50_ms"], r["bleu"]),
        fontsize=7,
        xytext=(4, label_dy[i]),
        textcoords="offset points",
      )
  best = sorted((r for r in rows if r["pareto"]), key=lambda r: r["p50_ms"])
  if best:
    ax.step(
      [r["p50_ms"] for r in best],
      [r["bleu"] for r in best],
      where="post",
      color="k",
      lw=1,
      alpha=0.6,
      label="Pareto frontier",
    )
  ax.set_xscale("log")
  ax.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
  ax.xaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
  ax.set_xlabel("p50 latency at batch 1 (ms, log scale)")
  ax.set_ylabel("BLEU")
  ax.set_title("BLEU against batch-1 latency (hollow PaDIR markers: trimmed)")
  ax.grid(alpha=0.3, which="both")
  ax.legend(fontsize=7, loc="lower right")
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


FRONTIER_HEADER = [
  "",
  "family",
  "model",
  "decoder",
  "BLEU",
  "p50 ms",
  "p99 ms",
  "sent/s @64",
  "passes",
  "p50 vs AR greedy",
  "p99 vs AR greedy",
  "BLEU - AR greedy [95%]",
]


def by_width(args) -> int:
  """The --by-width mode (module docstring)."""
  if args.tiny:
    base = tiny_models()["nar"].cfg
    cfg = dataclasses.replace(base, ctc_upsample=2, num_decoder_layers=1)
    model = model_lib.Transformer(cfg, rngs=nnx.Rngs(0))
    model.eval()
    sources, name = tiny_sources(args.sentences or 8, model), "tiny-ctc"
  else:
    if not args.nar or len(args.nar) != 1:
      print("error: --by-width needs one --nar RUN (a CTC run); fix: name it")
      return 2
    model, tok, config = restore.load_model(args.nar[0])
    if not model.cfg.ctc_upsample:
      print(f"error: --by-width: {args.nar[0]} is not a CTC run (model.ctc_upsample 0)")
      return 2
    sources = test_sources(args.nar[0], tok, config, args.sentences or 200)
    name = os.path.basename(os.path.normpath(args.nar[0]))
  decoder = decoding.ctc_decoders((1,), (args.trim,), args.blank_penalty)[0]
  fn = decoding.decode_fn(model, decoder)
  rows = speed.latency_by_width(fn, sources, repeats=args.repeats)
  k = model.cfg.ctc_upsample
  header = ["source width", "slots", "sources", "decodes", "min ms", "p50 ms", "p90 ms", "p99 ms"]
  table = [
    [
      r["width"],
      "-" if r["width"] == "all" else ctc.num_slots(r["width"], k),
      r["sources"],
      r["decodes"],
      r["min_ms"],
      r["p50_ms"],
      r["p90_ms"],
      r["p99_ms"],
    ]
    for r in rows
  ]
  print(f"{name}: {decoder.name}, batch 1, {args.repeats} decodes a source")
  print(markdown_table(header, table, digits=3))
  overhead = speed.call_overhead_ms(model, sources[:1])
  print(f"a jitted identity call with the same arguments: {overhead:.3f} ms")
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump({"rows": rows, "call_overhead_ms": overhead, "decoder": decoder.name}, f, indent=2)
  return 0


def frontier(args) -> int:
  """The --frontier mode (module docstring)."""
  if args.tiny:
    tiny = tiny_models()
    runs = [("PaDIR", "tiny-nar", tiny["nar"], TinyTokenizer(), None)]
    runs += [("AR", "tiny-ar", tiny["ar"], TinyTokenizer(), None)]
    runs += [("deep-shallow AR", "tiny-deep-shallow", tiny["deep_shallow"], TinyTokenizer(), None)]
    sources = tiny_sources(args.sentences or 4, tiny["nar"])
    references = [TinyTokenizer().decode(row) for row in sources]
    target_lang = "en"
    throughput_batch = 1
  else:
    if not (args.nar and args.ar):
      print("error: --frontier needs --nar RUN (one or more) and --ar RUN; fix: name them")
      return 2
    runs = []
    for family, workdirs in (
      ("PaDIR", args.nar),
      ("AR", [args.ar]),
      ("deep-shallow AR", [args.deep_shallow] if args.deep_shallow else []),
    ):
      for workdir in workdirs:
        model, tok, config = restore.load_model(workdir)
        runs.append((family, os.path.basename(os.path.normpath(workdir)), model, tok, config))
    config = runs[0][4]
    d = config.data
    pairs = data.read_split(d.corpus_dir, "test", d.source_lang, d.target_lang)[
      : args.sentences or 200
    ]
    references = [t for _, t in pairs]
    target_lang = d.target_lang
    throughput_batch = speed.THROUGHPUT_BATCH
  lengths = tuple(int(x) for x in args.lengths.split(","))
  passes = tuple(int(x) for x in args.passes.split(","))
  plan = []
  for family, name, model, tok, config in runs:
    if family == "PaDIR":
      try:
        nar_decoders(model, args.decoder)  # a --decoder this run cannot use: refused
      except ValueError as e:
        print(f"error: --decoder={args.decoder}: {name}: {e}", file=sys.stderr)
        return 2
    if family == "PaDIR" and model.cfg.ctc_upsample:
      decoders = decoding.ctc_decoders(passes, (0, args.trim), args.blank_penalty)
    elif family == "PaDIR":
      decoders = decoding.frontier_decoders(
        lengths,
        passes,
        (0, args.trim),
        args.variant,
        args.row_stop,
        not args.two_calls,
        not args.no_source_trim,
      )
    elif family == "AR":
      decoders = [
        decoding.Decoder("greedy", "greedy"),
        decoding.Decoder(
          f"greedy-trim{args.trim}", "greedy", source_trim=args.trim, cache_window=args.trim
        ),
        decoding.Decoder("beam5", "beam", beam_size=5),
      ]
      plan.append(("PyTorch AR", name, model, tok, decoding.Decoder("torch-greedy", "torch")))
      if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    else:
      decoders = [
        decoding.Decoder("greedy", "greedy"),
        decoding.Decoder(
          f"greedy-trim{args.trim}", "greedy", source_trim=args.trim, cache_window=args.trim
        ),
      ]
    plan += [(family, name, model, tok, dec) for dec in decoders]

  encoded = {}  # per model: its decoders share one encoding of the sources

  def sources_for(model, tok):
    if id(model) not in encoded:
      S = model.cfg.max_source_length
      if args.tiny:
        encoded[id(model)] = np.pad(sources, ((0, 0), (0, max(S - sources.shape[1], 0))))[:, :S]
      else:
        encoded[id(model)] = evaluate.encode_batch(tok, [s for s, _ in pairs], len(pairs), S)
    return encoded[id(model)]

  # PyTorch apart (its OpenMP threads spin after each call and would slow whichever decoder
  # came next); the JAX decoders together, their batch-1 calls interleaved in blocks of 25
  # sources (speed.measure_many), so that the machine's drift falls on all rows alike.
  measured = {}
  for i, (family, name, model, tok, decoder) in enumerate(plan):
    if decoder.kind == "torch":
      measured[i] = speed.measure(
        model,
        decoder,
        sources_for(model, tok),
        throughput_batch=throughput_batch,
        keep_tokens=True,
        fn=torch_ar.torch_decode_fn(model),
      )
  jax_rows = [i for i, p in enumerate(plan) if p[4].kind != "torch"]
  jobs = [(plan[i][2], plan[i][4], sources_for(plan[i][2], plan[i][3]), None) for i in jax_rows]
  many = speed.measure_many(
    jobs, throughput_batch=throughput_batch, keep_tokens=True, repeats=args.repeats
  )
  measured.update(zip(jax_rows, many))
  rows = []
  for i, (family, name, model, tok, decoder) in enumerate(plan):
    r = measured[i]
    hyps = [tok.decode(row) for row in r.pop("tokens")]
    bleu = metrics.bleu(hyps, references, target_lang).score
    rows.append(
      {
        **r,
        "family": family,
        "model": name,
        "decoder": decoder.name,
        "bleu": bleu,
        "trim": decoder.trim,
        "hypotheses": hyps,
      }
    )
    print(
      f"measured {family} {name} {decoder.name}: BLEU {bleu:.2f}, p50 {r['p50_ms']:.2f} ms",
      flush=True,
    )
  marks = speed.pareto([(r["p50_ms"], r["bleu"]) for r in rows])
  # The baseline: the faster of AR greedy with and without source trimming (the same tokens),
  # at p50 for the p50 ratios and BLEU, at p99 for the p99 ratios (the stronger row each time).
  greedy = [r for r in rows if r["family"] == "AR" and r["decoder"].startswith("greedy")]
  base = min(greedy, key=lambda r: r["p50_ms"])
  base99 = min(greedy, key=lambda r: r["p99_ms"])
  print(
    f"baseline (AR greedy, the lower p50): {base['decoder']}; the lower p99: {base99['decoder']}"
  )
  for r, m in zip(rows, marks):
    r["pareto"] = m
    # Paired bootstrap (Koehn 2004) against AR greedy on the same sources: the issue's
    # "within 1 BLEU" is read from the interval, not from the bare difference.
    b = metrics.paired_bootstrap(r["hypotheses"], base["hypotheses"], references, target_lang)
    r["vs_ar_greedy"] = {"delta": b.delta, "low": b.low, "high": b.high, "p": b.p_value}
  table = [
    [
      "*" if r["pareto"] else "",
      r["family"],
      r["model"],
      r["decoder"],
      r["bleu"],
      r["p50_ms"],
      r["p99_ms"],
      r["throughput"],
      r["passes"],
      base["p50_ms"] / r["p50_ms"],
      base99["p99_ms"] / r["p99_ms"],
      "{delta:+.2f} [{low:+.2f}, {high:+.2f}]".format(**r["vs_ar_greedy"]),
    ]
    for r in rows
  ]
  print(markdown_table(FRONTIER_HEADER, table, digits=3))
  print(
    "(*: Pareto-optimal in p50 latency and BLEU; 'vs AR greedy' > 1: faster than the AR greedy "
    "row of the lower p50, for p99 of the lower p99)"
  )
  d_models = sorted({m.cfg.d_model for _, _, m, _, _ in runs})
  shapes = [(1, d, d) for d in d_models] + [(64, d, d) for d in d_models]
  shapes += [(64 * 28, d, d) for d in d_models] + [(512, 512, 512)]
  gemm = gemm_rates(shapes, reps=3 if args.tiny else 20)
  for g in gemm:
    print(
      f"GEMM [{g['m']}x{g['k']}] x [{g['k']}x{g['n']}]: XLA {g['xla']:.1f} GF/s, PyTorch "
      f"{g['torch']:.1f} GF/s, ceiling XLA/PyTorch {g['ratio']:.2f}x"
    )
  os.makedirs(args.out, exist_ok=True)
  frontier_plot(rows, os.path.join(args.out, "frontier.png"))
  with open(os.path.join(args.out, "frontier.json"), "w", encoding="utf-8") as f:
    json.dump(
      {
        "rows": rows,
        "gemm": gemm,
        "sentences": len(references),
        "repeats": args.repeats,
        "single_thread": args.single_thread,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
      },
      f,
      indent=2,
    )
  print(f"wrote {os.path.join(args.out, 'frontier.png')} and frontier.json")
  return 0


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--frontier", action="store_true", help="the BLEU-latency frontier")
  parser.add_argument("--lengths", default="1,2,5", help="--frontier: PaDIR length candidates")
  parser.add_argument("--passes", default="1,2,4", help="--frontier: PaDIR passes at most")
  parser.add_argument("--trim", type=int, default=8, help="--frontier: the trimmed rows' multiple")
  parser.add_argument(
    "--no-source-trim",
    action="store_true",
    help="--frontier: trimmed PaDIR rows trim the target width only, not the sources",
  )
  parser.add_argument(
    "--blank-penalty",
    type=float,
    default=0.0,
    help="--frontier: a CTC run's decoders lower the blank's logit by this (padir.decoding.ctc.decode)",
  )
  parser.add_argument("--variant", default="length-prior-reset", help="--frontier: PaDIR variant")
  parser.add_argument("--out", default=".", help="--frontier: where frontier.png / .json go")
  parser.add_argument(
    "--row-stop", default="compact", choices=refinement.ROW_STOPS, help="--frontier: PaDIR rows"
  )
  parser.add_argument(
    "--two-calls", action="store_true", help="--frontier: trimmed PaDIR as decoding.Trimmed"
  )
  parser.add_argument(
    "--torch-threads", type=int, default=0, help="--frontier: PyTorch's threads (0: its default)"
  )
  parser.add_argument(
    "--single-thread",
    action="store_true",
    help="XLA and PyTorch on one thread each (batch-1 serving pins a thread per request; no "
    "wait on a second core that another process holds)",
  )
  parser.add_argument("--nar", action="append", help="PaDIR run directory (--frontier: several)")
  parser.add_argument(
    "--decoder",
    default="auto",
    choices=("auto", "ctc", "padir", "dag"),
    help="the --nar run's decoder: auto (the run's own: CTC for a CTC run, the DAG's for a DAG "
    "run, else refinement)",
  )
  parser.add_argument(
    "--dag-lm-order",
    type=int,
    default=5,
    help="a DAG run's 'dag-beam-lm' row: the n-gram order over its training targets (0: none)",
  )
  parser.add_argument("--dag-lm-weight", type=float, default=1.5, help="that row's weight")
  parser.add_argument(
    "--dag-length-norm", type=float, default=1.5, help="that row's score / length^this"
  )
  parser.add_argument("--ar", help="AR run directory")
  parser.add_argument("--deep-shallow", help="deep-encoder / 1-layer-decoder AR run directory")
  parser.add_argument("--sentences", type=int, help="test sources (default 200; --tiny: 4)")
  parser.add_argument(
    "--tiny",
    action="store_true",
    help="random tiny models, 4 sentences, PaDIR-4 and AR greedy only, batch 1 throughout",
  )
  parser.add_argument("--json", help="also write the results there")
  parser.add_argument(
    "--by-width",
    action="store_true",
    help="the --nar CTC run's 1-pass trimmed decoder: latency by source width (--tiny: random)",
  )
  parser.add_argument(
    "--repeats",
    type=int,
    default=5,
    help="--by-width, --frontier: batch-1 decodes per source (p50 / p99 over all of them)",
  )
  args = parser.parse_args(argv)
  if args.single_thread:
    import torch

    torch.set_num_threads(1)
    args.torch_threads = 1
  if args.frontier:
    return frontier(args)
  if args.by_width:
    return by_width(args)
  if args.nar:
    args.nar = args.nar[0]

  lm = None  # a DAG run's n-gram model
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
          sources = test_sources(workdir, tok, config, args.sentences or 200)
          if model.cfg.dag_upsample and args.dag_lm_order:
            lm = ngram.from_corpus(config.data, tok, args.dag_lm_order)
    throughput_batch = speed.THROUGHPUT_BATCH

  try:
    nar = nar_decoders(models["nar"], args.decoder, lm, args.dag_lm_weight, args.dag_length_norm)
    plan = [(d, "nar") for d in nar]
  except ValueError as e:
    print(f"error: --decoder={args.decoder}: {e}", file=sys.stderr)
    return 2
  plan += [(d, "ar") for d in decoding.standard_decoders()[2:]]
  if "deep_shallow" in models:
    plan.append((decoding.Decoder("deep-shallow-greedy", "greedy"), "deep_shallow"))
  if args.tiny:
    plan = [p for p in plan if p[0].name in ("padir-4", "padir-4-trim8", "ar-greedy")]
  refining = any(d.kind == "padir" for d, _ in plan)
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
  parts = speed.breakdown(models["nar"], refinement.RefineOptions(), sources) if refining else {}
  if refining:
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
