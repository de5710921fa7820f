"""Decoding speed: per-sentence latency at batch 1 and throughput at batch 64 (paper Sec. 3.3).

A `Decoder` (padir.decoding.decoders) names one way to translate; `measure` runs it under jit on
sources padded to the model's max_source_length (one shape: one compilation) and reports

- compile_s: the wall time of the first call (compilation + one run; a trimmed PaDIR decoder's
  compiles every width), apart from the rest;
- latency at batch 1: one call per sentence, each timed alone (wall clock, device synchronized);
  p50 and p99 over the sentences, in milliseconds, with Python's garbage collector paused
  (`gc_paused`, as `timeit` does). `measure_many` times several decoders with their calls
  interleaved in blocks of 25 sources (`interleaved_latencies`), so that the machine's drift
  falls on all of them alike: what a comparison of decoders needs;
- throughput at batch 64: sentences per second over full batches after a warm-up call;
- decoder passes per sentence (mean at batch 1): the refinement passes of the chosen candidate
  (early stopping included; every candidate of a source is decoded in the same passes), tokens
  decoded by beam search, max_target_length for greedy (our greedy_ar runs a fixed-length
  loop);
- peak memory: the process's peak resident set so far (ru_maxrss; monotone, so a later decoder
  shows the peak of everything before it) and, where the device reports it, the device's peak
  bytes in use.
"""

from __future__ import annotations

import contextlib
import gc
import resource
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from padir.data import tokenizer as tokenizer_lib
from padir.decoding import refinement
from padir.decoding.decoders import Decoder, decode_fn, pure_jit
from padir.model import transformer as model_lib

THROUGHPUT_BATCH = 64


def peak_memory() -> dict[str, float]:
  """Peak resident set of the process (MiB) and, if reported, the device's peak (MiB)."""
  out = {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
  stats = jax.devices()[0].memory_stats() or {}
  if "peak_bytes_in_use" in stats:
    out["device_peak_mb"] = stats["peak_bytes_in_use"] / 2**20
  return out


@contextlib.contextmanager
def gc_paused():
  """Python's cyclic garbage collector off inside (collected once on entry), as `timeit` does:
  a collection that happens to fall inside one sentence's call (tens of ms in a process holding
  several models and their compiled programs) is the benchmark's garbage, not the decoder's, and
  it lands in p99. Every decoder is timed the same way."""
  enabled = gc.isenabled()
  gc.collect()
  gc.disable()
  try:
    yield
  finally:
    if enabled:
      gc.enable()


def _timed(fn: Callable, *args) -> tuple[float, Any]:
  start = time.perf_counter()
  out = jax.block_until_ready(fn(*args))
  return time.perf_counter() - start, out


def interleaved_latencies(
  jobs: Sequence[tuple[Callable, np.ndarray]],
  key: jax.Array,
  *,
  repeats: int = 1,
  block: int = 25,
  keep_tokens: bool = False,
  seed: int = 0,
) -> list[dict[str, Any]]:
  """Batch-1 latency of several decoders, interleaved in blocks. jobs: (fn, sources [N, S])
  pairs, fn (inputs_BS, key) -> (tokens_BT, passes), the same N for all. The sources go in
  blocks of `block`; each block is decoded by every fn in turn (in an order shuffled per block
  from `seed`), one source at a time with the key fold_in(key, n), after one untimed call on
  the block's first source; all of it `repeats` times, the garbage collector paused.

  Why blocks: timing one decoder after another over minutes lets the machine's drift fall on
  some rows and not others (on this 2-core VM the same AR greedy decoder's p50 moved from 3.1
  to 4.9 ms between runs, 2026-11-26); interleaving every single call instead makes each call
  find the previous decoder's weights and code in the caches, a cost a server running one
  model does not pay (it slowed the 1-2 ms decoders by 15-35% against AR's 5-15%). A block is
  ~0.1 s of one decoder, warm, and the blocks interleave faster than the drift moves.

  Per job: "ms" (every timed decode's wall time, [repeats * N]), "passes" (the first repeat's,
  [N]) and, with keep_tokens, "tokens" (the first repeat's outputs, [N, T])."""
  n_sources = {len(src) for _, src in jobs}
  if len(n_sources) != 1:
    raise ValueError(f"interleaved_latencies: every job needs the same sources, got {n_sources}")
  if block < 1:
    raise ValueError(f"interleaved_latencies: block must be >= 1, got {block}")
  (N,) = n_sources
  order = np.random.default_rng(seed)
  out = [{"ms": [], "passes": [], "tokens": []} for _ in jobs]
  bar = tqdm.tqdm(total=repeats * N * len(jobs), desc="batch-1 latency", unit="decode")
  with gc_paused(), bar:
    for r in range(repeats):
      for b in range(0, N, block):
        for j in order.permutation(len(jobs)):
          fn, src = jobs[j]
          jax.block_until_ready(fn(jnp.asarray(src[b : b + 1]), jax.random.fold_in(key, b)))
          for n in range(b, min(b + block, N)):
            k = jax.random.fold_in(key, n)
            t, (tokens, steps) = _timed(fn, jnp.asarray(src[n : n + 1]), k)
            out[j]["ms"].append(t * 1e3)
            if r == 0:
              out[j]["passes"].append(float(steps))
              if keep_tokens:
                out[j]["tokens"].append(np.asarray(tokens)[0])
          bar.update(min(block, N - b))  # a block at a time: no host work between timed calls
  return [
    {
      "ms": np.asarray(o["ms"]),
      "passes": np.asarray(o["passes"]),
      **({"tokens": np.stack(o["tokens"])} if keep_tokens else {}),
    }
    for o in out
  ]


def measure(
  model: model_lib.Transformer,
  decoder: Decoder,
  sources_PS: np.ndarray,
  *,
  seed: int = 0,
  throughput_batch: int = THROUGHPUT_BATCH,
  throughput_batches: int = 2,
  ar_model: model_lib.Transformer | None = None,
  keep_tokens: bool = False,
  fn: Callable | None = None,
) -> dict[str, Any]:
  """The module docstring's figures for one decoder on encoded sources [N, max_source_length]
  (EOS-terminated, PAD-padded; the first N rows are timed one by one, and full batches of
  throughput_batch rows are cycled from them for the throughput). ar_model: PaDIR's AR
  reranker (options.rerank="ar"), its time included. keep_tokens: also return the batch-1
  outputs ("tokens", [N, T] numpy), e.g. to score them. fn: the decode function to time, in
  decode_fn's signature, where the decoder is not the library's (a benchmark's PyTorch peer)."""
  (result,) = measure_many(
    [(model, decoder, sources_PS, ar_model)],
    fns=[fn],
    seed=seed,
    throughput_batch=throughput_batch,
    throughput_batches=throughput_batches,
    keep_tokens=keep_tokens,
  )
  return result


def measure_many(
  jobs: Sequence[tuple[model_lib.Transformer, Decoder, np.ndarray, model_lib.Transformer | None]],
  *,
  seed: int = 0,
  throughput_batch: int = THROUGHPUT_BATCH,
  throughput_batches: int = 2,
  keep_tokens: bool = False,
  repeats: int = 1,
  fns: Sequence[Callable | None] | None = None,
) -> list[dict[str, Any]]:
  """`measure` for several (model, decoder, sources [N, that model's max_source_length],
  ar_model or None) at once: every decoder compiled first, then their batch-1 latencies
  interleaved in blocks of sources (interleaved_latencies; p50 / p99 over repeats x N decodes),
  then each one's throughput. The tokens, passes and throughput are what `measure` gives each
  alone. fns: per job, a decode function to time instead of decode_fn's (None: decode_fn's)."""
  key = jax.random.key(seed)
  given = list(fns) if fns is not None else [None] * len(jobs)
  fns, compile_s = [], []
  for (model, decoder, sources_PS, ar_model), fn in zip(jobs, given):
    fn = fn or decode_fn(model, decoder, ar_model)
    warm = getattr(fn, "warm", fn)  # Trimmed: every width
    compile_s.append(_timed(warm, jnp.asarray(sources_PS[:1]), key)[0])
    fns.append(fn)
  timed = interleaved_latencies(
    [(fn, job[2]) for fn, job in zip(fns, jobs)],
    key,
    repeats=repeats,
    keep_tokens=keep_tokens,
    seed=seed,
  )
  results = []
  for fn, (model, decoder, sources_PS, _), c, t in zip(fns, jobs, compile_s, timed):
    rows = np.resize(sources_PS, (throughput_batch * throughput_batches, sources_PS.shape[1]))
    batches = [jnp.asarray(rows[i::throughput_batches]) for i in range(throughput_batches)]
    warm = getattr(fn, "warm", fn)
    batch_compile_s = _timed(warm, batches[0], key)[0] if throughput_batch > 1 else 0.0
    total = sum(_timed(fn, b, jax.random.fold_in(key, i))[0] for i, b in enumerate(batches))
    ms = t["ms"]
    results.append(
      {
        "decoder": decoder.record(),
        "sentences": len(sources_PS),
        "decodes": len(ms),
        "compile_s": c,
        "batch_compile_s": batch_compile_s,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "mean_ms": float(ms.mean()),
        "passes": float(np.mean(t["passes"])),
        "throughput": throughput_batch * throughput_batches / total,
        **peak_memory(),
        **({"tokens": t["tokens"]} if keep_tokens else {}),
      }
    )
  return results


def latency_by_width(
  fn: Callable, sources_PS: np.ndarray, *, repeats: int = 5, seed: int = 0
) -> list[dict[str, Any]]:
  """Batch-1 latency grouped by the width a trimmed decoder (one with `.width(inputs)`, e.g.
  SourceTrimmed) runs each source at: every source decoded `repeats` times (the sources in
  order, then again), the garbage collector paused. One row per width, widest last: width,
  sources, decodes, min / p50 / p90 / p99 ms; then a row "all" over every decode. Where p99
  comes from: the widest sources, or the spread of identical work."""
  if not hasattr(fn, "width"):
    raise ValueError("latency_by_width needs a trimmed decoder (one with a .width method)")
  key = jax.random.key(seed)
  widths = [fn.width(sources_PS[n : n + 1]) for n in range(len(sources_PS))]
  warm = getattr(fn, "warm", lambda *args: fn(*args))
  jax.block_until_ready(warm(jnp.asarray(sources_PS[:1]), key))
  times: dict[int, list[float]] = {}
  with gc_paused():
    for _ in range(repeats):
      for n in range(len(sources_PS)):
        x = jnp.asarray(sources_PS[n : n + 1])
        t, _ = _timed(fn, x, key)
        times.setdefault(widths[n], []).append(t * 1e3)

  def row(width, ms, sources):
    ms = np.asarray(ms)
    p = np.percentile(ms, [50, 90, 99])
    return {
      "width": width,
      "sources": sources,
      "decodes": len(ms),
      "min_ms": float(ms.min()),
      "p50_ms": float(p[0]),
      "p90_ms": float(p[1]),
      "p99_ms": float(p[2]),
    }

  rows = [row(w, times[w], widths.count(w)) for w in sorted(times)]
  return rows + [row("all", np.concatenate([times[w] for w in times]), len(widths))]


def call_overhead_ms(model: model_lib.Transformer, inputs_BS, calls: int = 2000) -> float:
  """The median time of a jitted identity call that takes what a decoder takes (the model's
  arrays through pure_jit, the inputs, a key): the floor of any batch-1 decode's latency."""
  ident = pure_jit(lambda m, x, k: (x, jnp.float32(1)), model)
  key = jax.random.key(0)
  x = jnp.asarray(inputs_BS)
  jax.block_until_ready(ident(x, key))
  ts = [_timed(ident, x, key)[0] for _ in range(calls)]
  return float(np.median(ts) * 1e3)


def breakdown(
  model: model_lib.Transformer,
  options: refinement.RefineOptions,
  sources_PS: np.ndarray,
  *,
  multiple: int = 8,
  repeats: int = 5,
  seed: int = 0,
) -> dict[str, Any]:
  """Where a PaDIR decode's time goes at batch 1, source by source (medians over the sources,
  each call timed `repeats` times, its median kept; compilation excluded):

  - encoder_ms: the encoder and the length head;
  - pass_ms: one decoder pass over the source's G candidates at its trimmed width (its longest
    candidate rounded up to `multiple`, as `Trimmed` decodes), cross-attention projected
    beforehand as refinement does once per decode;
  - steps: the refinement loop's passes, which run until EVERY candidate stops changing (or
    num_steps), and passes: the chosen candidate's (what `measure` reports);
  - model_ms: encoder_ms + steps x pass_ms, the decode these parts add up to;
  - floor_ms: encoder_ms + 2 x pass_ms, the least a decode with early stopping can cost (the
    second pass is the one that finds no change): the bound a faster stopping rule could reach.
  """
  G, T = options.num_candidates, model.cfg.max_target_length
  encode = pure_jit(lambda m, x: m.encode(x), model)
  run = pure_jit(lambda m, x, k: refinement.refine(m, x, k, options), model)
  project = pure_jit(lambda m, enc: m.project_encoder(jnp.repeat(enc, G, 0)), model)
  one_pass = pure_jit(lambda m, h, mask, fixed: m.decode(h, None, mask, fixed=fixed), model)
  key = jax.random.key(seed)

  def timed_ms(fn, *args) -> float:
    jax.block_until_ready(fn(*args))  # compiles a new shape outside the timing
    return 1e3 * float(np.median([_timed(fn, *args)[0] for _ in range(repeats)]))

  rows = []
  for n in range(len(sources_PS)):
    x_1S = jnp.asarray(sources_PS[n : n + 1])
    out = run(x_1S, jax.random.fold_in(key, n))
    width = refinement.trimmed_width(int(out["candidate_lengths"].max()), T, multiple)
    enc_1SD, mask_1S = encode(x_1S)
    hyp_GW = jnp.full((G, width), tokenizer_lib.NUM_SPECIAL, jnp.int32)
    mask_GS = jnp.repeat(mask_1S, G, 0)
    fixed = project(enc_1SD)
    rows.append(
      {
        "encoder_ms": timed_ms(encode, x_1S),
        "pass_ms": timed_ms(one_pass, hyp_GW, mask_GS, fixed),
        "steps": int(out["steps"]),
        "passes": int(out["passes"][0]),
        "width": width,
      }
    )
  med = lambda k: float(np.median([r[k] for r in rows]))
  mean = lambda k: float(np.mean([r[k] for r in rows]))
  return {
    "sentences": len(rows),
    "candidates": G,
    "encoder_ms": med("encoder_ms"),
    "pass_ms": med("pass_ms"),
    "width": mean("width"),
    "steps": mean("steps"),
    "passes": mean("passes"),
    "model_ms": float(np.median([r["encoder_ms"] + r["steps"] * r["pass_ms"] for r in rows])),
    "floor_ms": float(np.median([r["encoder_ms"] + 2 * r["pass_ms"] for r in rows])),
  }


def ratios(results: dict[str, dict[str, Any]], baseline: str) -> dict[str, dict[str, float]]:
  """Per decoder: baseline p50 / its p50, baseline p99 / its p99, its throughput / baseline's
  (> 1: this decoder is faster than the baseline)."""
  base = results[baseline]
  return {
    name: {
      "p50_speedup": base["p50_ms"] / r["p50_ms"],
      "p99_speedup": base["p99_ms"] / r["p99_ms"],
      "throughput_ratio": r["throughput"] / base["throughput"],
    }
    for name, r in results.items()
  }


def table_rows(results: dict[str, dict[str, Any]], speedups: dict[str, dict[str, float]]) -> list:
  """Rows for gmlm.runs.markdown_table under TABLE_HEADER."""
  return [
    [
      name,
      r["passes"],
      r["p50_ms"],
      r["p99_ms"],
      r["throughput"],
      r["compile_s"],
      speedups[name]["p50_speedup"],
      speedups[name]["p99_speedup"],
      r["peak_rss_mb"],
    ]
    for name, r in results.items()
  ]


TABLE_HEADER = [
  "decoder",
  "passes",
  "p50 ms",
  "p99 ms",
  "sent/s @64",
  "compile s",
  "p50 speedup",
  "p99 speedup",
  "peak RSS MiB",
]


def pareto(points: Sequence[tuple[float, float]]) -> list[bool]:
  """For (cost, quality) points (e.g. p50 ms, BLEU): whether each is Pareto-optimal, i.e. no
  other point is at most as costly and at least as good, and strictly better in one of the
  two. Equal points are all optimal (neither dominates the other)."""
  return [
    not any(
      (c2 <= c and q2 >= q) and (c2 < c or q2 > q) for j, (c2, q2) in enumerate(points) if j != i
    )
    for i, (c, q) in enumerate(points)
  ]
