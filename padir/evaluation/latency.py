"""Decoding speed: per-sentence latency at batch 1 and throughput at batch 64 (paper Sec. 3.3).

A `Decoder` names one way to translate: PaDIR refinement (num_steps passes at most, num_lengths
length candidates), CTC decoding of a CTC model (padir.decoding.ctc; with trim, on sources cut to their
width: `SourceTrimmed`), AR greedy, or AR beam search. `measure` runs it under jit on sources padded
to the model's max_source_length (one shape: one compilation) and reports

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
import dataclasses
import gc
import resource
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import tqdm
from flax import nnx

from padir.data import tokenizer as tokenizer_lib
from padir.decoding import autoregressive as decode
from padir.decoding import ctc, refinement
from padir.model import transformer as model_lib

THROUGHPUT_BATCH = 64


@dataclasses.dataclass(frozen=True)
class Decoder:
  """One decoding method: kind "padir" (padir.decoding.refinement with `options`, default the paper's),
  "greedy" or "beam" (AR models, beam_size beams), or "torch" (AR greedy in eager PyTorch on
  the same weights: padir.torch_ar, a reference for the JAX decoders' speed). PaDIR with trim = k > 0 decodes each batch at
  the width of its longest candidate rounded up to a multiple of k (`Trimmed`), not at
  max_target_length: the same tokens for less work. source_trim = k > 0 (PaDIR, greedy, beam)
  also cuts the sources to their width rounded up to a multiple of k (`SourceTrimmed`: the
  encoder and the cross-attention over fewer positions, the same tokens); a CTC decoder's trim
  is that source trim already."""

  name: str
  kind: str
  options: refinement.RefineOptions = refinement.RefineOptions()
  beam_size: int = 5
  trim: int = 0
  one_call: bool = False  # trimmed PaDIR: the length choice and the refinement in one call
  passes: int = 1  # kind "ctc": at most this many passes
  blank_penalty: float = 0.0  # kind "ctc": lowers the blank's logit (padir.decoding.ctc.decode)
  source_trim: int = 0  # kinds "padir", "greedy", "beam": sources cut to their width (above)
  cache_window: int = 0  # kind "greedy": the KV cache grown k slots at a time (decode.greedy_ar)

  @property
  def hypotheses(self) -> int:
    """Hypotheses decoded per source: PaDIR candidates, beams, 1 for greedy."""
    return {"padir": self.options.num_candidates, "beam": self.beam_size}.get(self.kind, 1)

  def check(self, model: model_lib.Transformer) -> None:
    wanted = "nar" if self.kind in ("padir", "ctc") else "ar"
    if self.kind not in ("padir", "ctc", "greedy", "beam", "torch"):
      raise ValueError(
        f"{self.name}: kind must be 'padir', 'ctc', 'greedy', 'beam' or 'torch', got {self.kind!r}"
      )
    if self.cache_window and self.kind != "greedy":
      raise ValueError(f"{self.name}: cache_window is for kind 'greedy', got kind {self.kind!r}")
    if self.source_trim and self.kind not in ("padir", "greedy", "beam"):
      raise ValueError(
        f"{self.name}: source_trim is for kinds 'padir', 'greedy' and 'beam' (a ctc decoder's "
        f"trim cuts the source already), got kind {self.kind!r}"
      )
    if (self.kind == "ctc") != bool(model.cfg.ctc_upsample):
      raise ValueError(
        f"{self.name}: a {self.kind} decoder "
        + ("needs" if self.kind == "ctc" else "cannot decode")
        + f" a CTC model (model.ctc_upsample > 0); this one has {model.cfg.ctc_upsample}"
      )
    if model.cfg.decoder != wanted:
      raise ValueError(
        f"{self.name}: a {self.kind} decoder needs a model with decoder={wanted!r}, "
        f"got {model.cfg.decoder!r}"
      )


def _refine(model, inputs_BS, key, options, ar_model=None, width=None, encoded=None):
  out = refinement.refine(
    model, inputs_BS, key, options, ar_model=ar_model, width=width, encoded=encoded
  )
  return out["tokens"], out["passes"].mean()


def _greedy(model, inputs_BS, window=0):
  """The decoder passes greedy decoding ran: up to the batch's last EOS (its loop stops there)."""
  tokens_BT = decode.greedy_ar(model, inputs_BS, window)
  return tokens_BT, jnp.max(jnp.sum(tokens_BT != tokenizer_lib.PAD_ID, axis=1))


def _beam(model, inputs_BS, beam_size):
  out = decode.beam_search(model, inputs_BS, beam_size)
  return out["tokens"], out["steps"]


def _ctc(model, inputs_BS, num_passes, blank_penalty=0.0):
  out = ctc.decode(model, inputs_BS, num_passes, blank_penalty)
  return out["tokens"], out["passes"].mean()


def pure_jit(fn: Callable, *models: nnx.Module) -> Callable:
  """fn(*models, *args) jitted with the models split ONCE into (graph, state): a call passes
  the state arrays only. nnx.jit instead walks and splits the module graph on every call, which
  costs ~7.6 ms per call for the synthetic task's 1.6M-parameter model on this CPU (2026-11-23),
  more than the whole AR greedy decode; latency at batch 1 must not include it. The arrays go
  in as a plain list read from the state's Variables at each call (so the function follows
  later updates of the model's parameters): jit flattens a list in microseconds, an
  nnx.State in a fraction of a millisecond (issue 30)."""
  graphdefs, states = zip(*(nnx.split(m) for m in models)) if models else ((), ())
  is_var = lambda x: isinstance(x, nnx.Variable)
  variables = [jax.tree.leaves(s, is_leaf=is_var) for s in states]
  treedefs = [jax.tree.structure(s) for s in states]
  if any(len(v) != td.num_leaves for v, td in zip(variables, treedefs)):
    raise ValueError("pure_jit: a model Variable holds other than one array")

  @jax.jit
  def run(arrays, *args):
    states = [jax.tree.unflatten(td, a) for td, a in zip(treedefs, arrays)]
    return fn(*(nnx.merge(g, s) for g, s in zip(graphdefs, states)), *args)

  return lambda *args: run([[v.get_raw_value() for v in vs] for vs in variables], *args)


class Trimmed:
  """PaDIR decoding at a trimmed width: one jitted call finds the batch's longest candidate
  length (the encoder and length head), the host rounds it up to a multiple of `multiple`
  (refinement.trimmed_width), and the refinement compiled for that width decodes. Each width
  compiles once: `warm` compiles all of them (ceil(T / multiple)) for an input shape, so that
  timed calls compile nothing. The tokens equal the untrimmed decode's; the cost is a
  device-to-host read of one integer per call (the encoder's states pass on to the refinement)."""

  def __init__(self, model, options, multiple: int, ar_model=None):
    self.max_len = model.cfg.max_target_length
    self.multiple = multiple
    self.widths = sorted(
      {refinement.trimmed_width(n, self.max_len, multiple) for n in range(1, self.max_len + 1)}
    )
    self._longest = pure_jit(lambda m, x: refinement.longest_candidate(m, x, options), model)
    models = (model,) if ar_model is None else (model, ar_model)

    def fn(width):
      if ar_model is None:
        return lambda m, x, key, enc: _refine(m, x, key, options, width=width, encoded=enc)
      return lambda m, a, x, key, enc: _refine(m, x, key, options, a, width, enc)

    self._by_width = {w: pure_jit(fn(w), *models) for w in self.widths}

  def _plan(self, inputs_BS):
    """(the width these inputs decode at, their encoder states)."""
    longest, encoded = self._longest(inputs_BS)
    return refinement.trimmed_width(int(longest), self.max_len, self.multiple), encoded

  def width(self, inputs_BS) -> int:
    return self._plan(inputs_BS)[0]

  def __call__(self, inputs_BS, key):
    width, encoded = self._plan(inputs_BS)
    return self._by_width[width](inputs_BS, key, encoded)

  def warm(self, inputs_BS, key) -> None:
    """Compiles every width (and the length call) for this input shape."""
    _, encoded = self._longest(inputs_BS)
    for f in self._by_width.values():
      jax.block_until_ready(f(inputs_BS, key, encoded))


class OneCallTrimmed:
  """Trimmed's decoding in ONE jitted call per batch: the encoder, the length choice and the
  refinement at the width of the longest candidate rounded up to `multiple`, chosen inside the
  call by a switch between the refinements compiled for each width (no host round trip
  between the length choice and the passes, one dispatch). The same tokens as Trimmed's."""

  def __init__(self, model, options, multiple: int, ar_model=None):
    T = model.cfg.max_target_length
    self.widths = sorted({refinement.trimmed_width(n, T, multiple) for n in range(1, T + 1)})
    widths = jnp.asarray(self.widths)

    def run(m, *rest):
      a, (x, key) = (rest[0], rest[1:]) if ar_model is not None else (None, rest)
      longest, encoded = refinement.longest_candidate(m, x, options)
      branches = [
        lambda w=w: _refine(m, x, key, options, a, width=w, encoded=encoded) for w in self.widths
      ]
      return jax.lax.switch(jnp.searchsorted(widths, longest), branches)

    self._fn = pure_jit(run, *((model,) if ar_model is None else (model, ar_model)))

  def __call__(self, inputs_BS, key):
    return self._fn(inputs_BS, key)


class SourceTrimmed:
  """A decoder run on the sources cut to the batch's longest source (PAD excluded) rounded up
  to a multiple of `multiple`: the columns cut hold PAD in every row, which every attention
  masks out, so the same tokens for less work (the encoder, the cross-attention and, with
  CTC, the decoder's slots all scale with the source width). The width is read on the host
  from the inputs (no device round trip); each width compiles once (`warm` compiles all)."""

  def __init__(self, fn: Callable, max_len: int, multiple: int):
    self.fn, self.max_len, self.multiple = fn, max_len, multiple
    self.widths = sorted(
      {refinement.trimmed_width(n, max_len, multiple) for n in range(1, max_len + 1)}
    )

  def width(self, inputs_BS) -> int:
    longest = int((np.asarray(inputs_BS) != tokenizer_lib.PAD_ID).sum(-1).max())
    return refinement.trimmed_width(max(longest, 1), self.max_len, self.multiple)

  def __call__(self, inputs_BS, key):
    return self.fn(inputs_BS[:, : self.width(inputs_BS)], key)

  def warm(self, inputs_BS, key) -> None:
    """Compiles every source width (and, inside, every width the wrapped decoder has)."""
    for w in self.widths:
      if hasattr(self.fn, "warm"):
        self.fn.warm(inputs_BS[:, :w], key)
      else:
        jax.block_until_ready(self.fn(inputs_BS[:, :w], key))


def decode_fn(
  model: model_lib.Transformer,
  decoder: Decoder,
  ar_model: model_lib.Transformer | None = None,
) -> Callable[..., tuple[Any, Any]]:
  """(inputs_BS, key) -> (tokens_BT, decoder passes per source), jitted (pure_jit), for this
  model and method. PaDIR tokens are the output after the options' stutter drop; ar_model: the
  reranker of options.rerank="ar"."""
  decoder.check(model)
  if decoder.source_trim:
    fn = decode_fn(model, dataclasses.replace(decoder, source_trim=0), ar_model)
    return SourceTrimmed(fn, model.cfg.max_source_length, decoder.source_trim)
  if decoder.kind == "ctc":
    passes, penalty = decoder.passes, decoder.blank_penalty
    fn = pure_jit(lambda m, x, key: _ctc(m, x, passes, penalty), model)
    return SourceTrimmed(fn, model.cfg.max_source_length, decoder.trim) if decoder.trim else fn
  if decoder.kind == "padir":
    options = decoder.options
    if decoder.trim and decoder.one_call:
      return OneCallTrimmed(model, options, decoder.trim, ar_model)
    if decoder.trim:
      return Trimmed(model, options, decoder.trim, ar_model)
    if ar_model is None:
      return pure_jit(lambda m, x, key: _refine(m, x, key, options), model)
    return pure_jit(lambda m, a, x, key: _refine(m, x, key, options, a), model, ar_model)
  if decoder.kind == "greedy":
    window = decoder.cache_window
    return pure_jit(lambda m, x, key: _greedy(m, x, window), model)
  if decoder.kind == "torch":
    from padir import torch_ar

    greedy = torch_ar.TorchGreedy(model)

    def torch_fn(inputs_BS, key):
      tokens_BT = greedy(np.asarray(inputs_BS))
      return tokens_BT, int((tokens_BT != tokenizer_lib.PAD_ID).sum(1).max())

    return torch_fn
  beam_size = decoder.beam_size
  return pure_jit(lambda m, x, key: _beam(m, x, beam_size), model)


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
) -> dict[str, Any]:
  """The module docstring's figures for one decoder on encoded sources [N, max_source_length]
  (EOS-terminated, PAD-padded; the first N rows are timed one by one, and full batches of
  throughput_batch rows are cycled from them for the throughput). ar_model: PaDIR's AR
  reranker (options.rerank="ar"), its time included. keep_tokens: also return the batch-1
  outputs ("tokens", [N, T] numpy), e.g. to score them."""
  (result,) = measure_many(
    [(model, decoder, sources_PS, ar_model)],
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
) -> list[dict[str, Any]]:
  """`measure` for several (model, decoder, sources [N, that model's max_source_length],
  ar_model or None) at once: every decoder compiled first, then their batch-1 latencies
  interleaved in blocks of sources (interleaved_latencies; p50 / p99 over repeats x N decodes),
  then each one's throughput. The tokens, passes and throughput are what `measure` gives each
  alone."""
  key = jax.random.key(seed)
  fns, compile_s = [], []
  for model, decoder, sources_PS, ar_model in jobs:
    fn = decode_fn(model, decoder, ar_model)
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
        "decoder": dataclasses.asdict(decoder),
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


def standard_decoders(passes: Sequence[int] = (4, 10)) -> list[Decoder]:
  """The issue's set: PaDIR with 4 and 10 passes (5 lengths), AR greedy and beam 5."""
  return [Decoder(f"padir-{p}", "padir", refinement.RefineOptions(num_steps=p)) for p in passes] + [
    Decoder("ar-greedy", "greedy"),
    Decoder("ar-beam5", "beam", beam_size=5),
  ]


def frontier_decoders(
  lengths: Sequence[int] = (1, 2, 5),
  passes: Sequence[int] = (1, 2, 4),
  trims: Sequence[int] = (0, 8),
  variant: str = "length-prior-reset",
  row_stop: str = "compact",
  one_call: bool = True,
  source_trim: bool = True,
) -> list[Decoder]:
  """The PaDIR grid of the BLEU-latency frontier (issue 30): every number of length
  candidates x passes x trim, the named refinement variant (default: with the length prior),
  frozen candidates leaving the work (row_stop), trimmed decoders in one call (one_call) and
  with their sources cut to the same multiple (source_trim)."""
  extra = {**refinement.VARIANTS[variant], "row_stop": row_stop}
  return [
    Decoder(
      f"padir-L{g}-S{s}" + (f"-trim{k}" if k else ""),
      "padir",
      refinement.RefineOptions(num_steps=s, num_lengths=g, **extra),
      trim=k,
      one_call=one_call,
      source_trim=k if source_trim else 0,
    )
    for g in lengths
    for s in passes
    for k in trims
  ]


def ctc_decoders(
  passes: Sequence[int] = (1, 2), trims: Sequence[int] = (0, 8), blank_penalty: float = 0.0
) -> list[Decoder]:
  """The CTC model's rows of the frontier: at most each number of passes x source trim."""
  return [
    Decoder(
      f"ctc-S{s}" + (f"-trim{k}" if k else ""), "ctc", passes=s, trim=k, blank_penalty=blank_penalty
    )
    for s in passes
    for k in trims
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
      best = min(_timed(fn)[0] for _ in range(reps))
      rates[name] = 2 * m * k * n / best / 1e9
    out.append({"m": m, "k": k, "n": n, **rates, "ratio": rates["xla"] / rates["torch"]})
  return out
