"""The accelerator suite: one process that proves and measures the project on a GPU/TPU.

  python benchmarks/accelerator.py --out DIR [--budget 300] [--tiny] [--sections tests,...]
  python benchmarks/accelerator.py --report DIR/results.jsonl    # the tables of a (killed) run
  python benchmarks/accelerator.py --plan --out DIR [--tiny]     # memory plans, no timing

--budget SECONDS (default 300) bounds the whole run, compiles included: each section gets the
budget left times its weight over the weights of the sections still to run (time one leaves
passes on), predicts its next row's cost from the last row it measured (its wall time, compile
included, scaled by the row's size; a prior before any) and skips what will not fit, with a
note saying so. Every finished row, note and section end is appended to DIR/results.jsonl at
once (JSON lines), so a run killed at its lease's end keeps them; `--report FILE` prints the
tables and the roofline from such a file. At the end DIR/accelerator.json holds the same run as
one document. The compiled programs persist (gmlm.compile_cache): a repeated suite loads them.

Sections, in this order (each catches its own failure, records it, and the next one runs):
  tests        `pytest -m accelerator` in a subprocess (model parity vs float32 CPU reference
               fixtures, sampler exactness, bf16 law, 1-vs-N-device equality; the export test
               runs in CPU CI): pass/fail counts. Runs first, before this process takes the
               accelerator's memory.
  matmul_peak  the bf16 and float32 matmul peak of this device (8192^3, best of 10), measured in
               this process: the denominators of every MFU below; and the stream bandwidth
               (in-place x + 1 over 1 GB), the roofline's other limit.
  mlm_forward  a BERT-base-shape random MLM (gmlm.nn.from_config, masked_logits at one row),
               bf16 and float32, batch 256 and 4,096, L = 22: sequences/s and MFU.
  glauber      glauber.chains on the same shape (L = 22, n = 20 free sites), 1k and 4k chains:
               chain-steps/s, MFU, and the ratio to the forward's own sequences/s at that
               batch (the sampler's overhead); beside a batched PyTorch Glauber loop on the
               same weights at the same sizes (a subprocess; CUDA when torch has it); and the
               rejection-free mode at a temperature where the median stay probability is
               >= 0.99 (the default English MLM when its base weights are installed, else the
               random BERT-base with a planted low-temperature trap).
  padir        PaDIR training at the paper's size (6+6 layers, d = 512, 32k vocabulary), bf16
               then float32 compute (config.model.dtype: bf16 matmuls and activations over
               float32 master weights, softmax and losses in float32): target tokens/s and MFU
               by the hand count (padir.training.flops, as training runs log it), each step
               followed by a profile of 3 traced steps (gmlm.profiling: the five costliest XLA
               ops and their shares of the device time; under CUDA graphs, set XLA_FLAGS=
               --xla_gpu_enable_command_buffer= to see ops, not graphs); then decode
               latency p50/p99 at batch 1 of the recommended CTC decoder, the paper's
               refinement decoder and AR greedy.
  ising        spin updates per ns of ising.samplers (k = 1, 2, 4, and k = 1 with one step per
               loop iteration) vs thrml on the clique and a dense model (the workers of
               benchmarks/ising_throughput.py).

Every row reports compile_s (first call minus a steady call, or the measured compile) apart
from its steady-state time per call, and wall_s, what the row cost the budget. The roofline
(last table, `roofline` in the JSON): per timed row, the FLOPs and bytes of its lowered module
(gmlm.lowering.cost: the same count on every platform, scan bodies at their trip counts; the
bytes unfused, an upper bound), arithmetic intensity, and the time predicted as
max(FLOPs / peak, bytes / bandwidth) on an H100 and an H200 (HARDWARE: published peaks) and on
this device (its measured peak and bandwidth) beside the measured time, with a reason where
the two differ by more than 2x.

--plan: bytes per device (parameters, optimizer, gradients, activations) of PaDIR training at
the paper's size and of a Glauber step on BERT-base with 16k chains, under each sharding option
on 1, 8 and 64 devices, by arithmetic, beside the compiled memory analysis on 1 and 8 devices
simulated on the CPU (a subprocess), and the fewest H100s that hold each (plan.json). Sizes
scale down with --tiny (the CPU smoke test, tests/test_accelerator.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable

# Leave accelerator memory to the PyTorch worker (XLA would preallocate 75%).
os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.6")

import numpy as np  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
  sys.path.insert(0, str(REPO))

BERT_BASE = dict(
  architectures=["BertForMaskedLM"],
  vocab_size=30522,
  hidden_size=768,
  num_hidden_layers=12,
  num_attention_heads=12,
  intermediate_size=3072,
  max_position_embeddings=512,
)
BERT_TINY = dict(
  BERT_BASE,
  vocab_size=1200,
  hidden_size=64,
  num_hidden_layers=2,
  num_attention_heads=4,
  intermediate_size=128,
  max_position_embeddings=160,
)
CLS, SEP, MASK, FIRST_WORD = 101, 102, 103, 999  # bert-base-uncased ids; < 999: special/unused
N_SITES, L_CHAIN = 20, 22
TRAP, TRAP_BIAS = 1100, 12.0  # a head bias that plants a low-temperature trap (random model)
SECTIONS = ("tests", "matmul_peak", "mlm_forward", "glauber", "padir", "ising")  # the order run
OPTIONAL = ("padir_variants",)  # run when named in --sections only, after the others

# Published dense peaks (no sparsity) and HBM bandwidth, for the roofline's predictions.
# H100 SXM5 80 GB: BF16 989.4 TFLOP/s (1,979 "with sparsity"), TF32 494.7, HBM3 3.35 TB/s;
# H200 SXM 141 GB: the same tensor cores, HBM3e 4.8 TB/s. NVIDIA's datasheets:
# https://www.nvidia.com/en-us/data-center/h100/ and https://www.nvidia.com/en-us/data-center/h200/
# (the H100 PCIe is slower: 756 TFLOP/s BF16, 2.0 TB/s). float32 rows use TF32, the precision
# of jax's default float32 matmuls on NVIDIA GPUs.
HARDWARE = {
  "H100": dict(tflops={"bfloat16": 989.4, "float32": 494.7}, tb_per_s=3.35, memory_gb=80),
  "H200": dict(tflops={"bfloat16": 989.4, "float32": 494.7}, tb_per_s=4.8, memory_gb=141),
}


@dataclasses.dataclass(frozen=True)
class Sizes:
  bert: dict
  peak_n: int
  mlm_batches: tuple[int, ...]
  mlm_lengths: tuple[int, ...]
  chains: tuple[int, ...]
  chain_steps: int
  rejection_free_chains: int
  rejection_free_steps: int
  ising_clique: tuple[int, int, int]  # n, chains, steps
  ising_dense: tuple[int, int, int]
  ising_ks: tuple[int, ...]
  padir: dict
  padir_batch: int
  padir_length: int
  latency_calls: int
  min_seconds: float
  shares_s: dict  # section -> its weight in the budget (unused time passes to the next ones)
  priors_s: dict  # section -> predicted seconds of its first row, before any is measured
  pytest_args: tuple[str, ...]
  padir_precisions: tuple[str, ...] = ("bfloat16", "float32")
  stream_mb: int = 1024  # the array the bandwidth is measured on (read + write)


FULL = Sizes(
  bert=BERT_BASE,
  peak_n=8192,
  mlm_batches=(256, 4096),
  mlm_lengths=(22,),
  chains=(1024, 4096),
  chain_steps=8,
  rejection_free_chains=64,
  rejection_free_steps=400,
  ising_clique=(10, 65536, 100),
  ising_dense=(64, 4096, 64),
  ising_ks=(1, 2, 4),
  padir=dict(
    vocab_size=32000,
    num_encoder_layers=6,
    num_decoder_layers=6,
    num_heads=8,
    d_model=512,
    d_ff=2048,
    max_source_length=64,
    max_target_length=64,
  ),
  padir_batch=256,
  padir_length=64,
  latency_calls=100,
  min_seconds=0.5,
  shares_s=dict(
    tests=70, matmul_peak=10, mlm_forward=40, glauber=50, padir=110, ising=20, padir_variants=200
  ),
  priors_s=dict(
    tests=60,
    matmul_peak=5,
    mlm_forward=10,
    glauber=15,
    padir=60,
    ising=10,
    decode=15,
    profile=5,
    padir_variants=60,
  ),  # decode: one batch-1 decoder's compile + 100 calls; profile: 3 traced steps and the parse
  pytest_args=("--ignore", str(REPO / "tests" / "test_export.py")),  # CPU CI runs it
)
TINY = Sizes(
  bert=BERT_TINY,
  peak_n=256,
  mlm_batches=(4, 16),
  mlm_lengths=(22,),
  chains=(16,),
  chain_steps=2,
  rejection_free_chains=4,
  rejection_free_steps=16,
  ising_clique=(10, 256, 8),
  ising_dense=(12, 64, 8),
  ising_ks=(1, 2),
  padir=dict(
    vocab_size=300,
    num_encoder_layers=1,
    num_decoder_layers=1,
    num_heads=2,
    d_model=32,
    d_ff=64,
    max_source_length=12,
    max_target_length=12,
  ),
  padir_batch=4,
  padir_length=12,
  latency_calls=5,
  min_seconds=0.0,
  shares_s={
    name: 1 for name in SECTIONS + OPTIONAL
  },  # the smoke test runs every size its budget allows
  priors_s=dict(
    tests=30,
    matmul_peak=1,
    mlm_forward=3,
    glauber=5,
    padir=20,
    ising=3,
    decode=8,
    profile=2,
    padir_variants=20,
  ),  # CPU
  pytest_args=("-k", "parity_highest or ising_exactness"),
  padir_precisions=("float32",),
  stream_mb=64,
)  # the bf16 step is tested in tests/padir/test_padir_precision.py


def load_benchmark(name: str):
  """A sibling benchmark script as a module (benchmarks/ is not a package)."""
  path = REPO / "benchmarks" / f"{name}.py"
  spec = importlib.util.spec_from_file_location(f"_bench_{name}", path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # dataclasses look their module up there
  spec.loader.exec_module(module)
  return module


def block(x):
  import jax

  return jax.block_until_ready(x)


def timed(fn: Callable[[], Any], min_seconds: float, min_calls: int = 2) -> tuple[float, float]:
  """(first call s, steady s per call): calls back to back after the first, for at least
  min_seconds and min_calls, blocking once at the end (what a pipelined loop sees)."""
  t0 = time.perf_counter()
  block(fn())
  first = time.perf_counter() - t0
  calls, t0 = 0, time.perf_counter()
  while calls < min_calls or time.perf_counter() - t0 < min_seconds:
    out = fn()
    calls += 1
  block(out)
  return first, (time.perf_counter() - t0) / calls


class Results:
  """The results file: one JSON line per finished row, note and section end, appended and
  flushed at once, so a run killed at its lease's end keeps every row it finished."""

  def __init__(self, path: pathlib.Path | None, t0: float | None = None):
    self.path = path
    self.t0 = time.perf_counter() if t0 is None else t0  # each record's t_s counts from here
    if path is not None:
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_text("")

  def write(self, kind: str, **fields) -> None:
    if self.path is None:
      return
    t_s = time.perf_counter() - self.t0  # when it was written, seconds into the run
    with open(self.path, "a", encoding="utf-8") as f:
      f.write(json.dumps({"kind": kind, **fields, "t_s": t_s}, default=float) + "\n")


class Section:
  """Rows of one section and the time it may take: `fits(what, size)` predicts the next row's
  cost (its compile included) from the last measured row, linear in its size (a prior before
  any), and says whether it ends before the deadline; a row that will not fit is skipped, and
  a note says so."""

  def __init__(self, name: str, share_s: float, results: Results | None = None, prior_s=0.0):
    self.name, self.rows, self.notes = name, [], []
    self.deadline = time.perf_counter() + share_s
    self.results = results or Results(None)
    self.prior_s = prior_s
    self._mark = time.perf_counter()  # when the row being measured began

  def row(
    self,
    case: str,
    compile_s: float | None,
    steady_s: float | None,
    cost=None,
    dtype=None,
    size: float | None = None,
    **metrics,
  ) -> dict:
    """cost (gmlm.lowering.Cost of the timed call) and the compute dtype feed the roofline;
    size: the row's work in any unit its section's predictions scale by."""
    now = time.perf_counter()
    r = dict(case=case, compile_s=compile_s, steady_s=steady_s, **metrics)
    if cost is not None:
      r.update(gflop=cost.flops / 1e9, gbytes=cost.bytes / 1e9, while_loops=cost.while_loops)
      r["dtype"] = dtype or "float32"
    r["wall_s"], r["size"] = now - self._mark, size
    self._mark = now
    self.rows.append(r)
    self.results.write("row", section=self.name, **r)
    print(f"  {self.name:11s} {fmt_row(r)}", flush=True)
    return r

  def note(self, text: str) -> None:
    self.notes.append(text)
    self.results.write("note", section=self.name, note=text)

  def predict(self, size: float | None, prior_s: float | None = None) -> float:
    """Seconds the next row of `size` will take: the last sized row's wall time scaled by size
    (compiles included), else the row's prior (prior_s), else the section's."""
    sized = [r for r in self.rows if r.get("size") and r.get("wall_s")]
    if not sized or size is None:
      return self.prior_s if prior_s is None else prior_s
    return sized[-1]["wall_s"] * size / sized[-1]["size"]

  def fits(self, what: str, size: float | None = None, prior_s: float | None = None) -> bool:
    left, predicted = self.deadline - time.perf_counter(), self.predict(size, prior_s)
    if predicted <= left:
      self._mark = time.perf_counter()
      return True
    self.note(f"skipped {what}: predicted {predicted:.1f} s, {max(left, 0):.1f} s left")
    return False

  def over(self, what: str, size: float | None = None, prior_s: float | None = None) -> bool:
    return not self.fits(what, size, prior_s)


@dataclasses.dataclass
class Context:
  sizes: Sizes
  tiny: bool
  peak_tflops: dict = dataclasses.field(default_factory=dict)  # dtype name -> TFLOP/s
  tb_per_s: float | None = None  # this device's measured memory bandwidth (read + write)
  forward: dict = dataclasses.field(default_factory=dict)  # (dtype, B, L) -> seq/s


def dtype_of(name: str):
  import jax.numpy as jnp

  return {"bfloat16": jnp.bfloat16, "float32": jnp.float32}[name]


def mfu(ctx: Context, flops_per_s: float, dtype: str) -> float | None:
  peak = ctx.peak_tflops.get(dtype)
  return None if not peak else flops_per_s / (peak * 1e12)


# ----------------------------------------------------------------------------- sections


def section_tests(ctx: Context, s: Section) -> None:
  cmd = [
    sys.executable,
    "-m",
    "pytest",
    "-m",
    "accelerator",
    "-q",
    "-p",
    "no:cacheprovider",
    *ctx.sizes.pytest_args,
    str(REPO / "tests"),
  ]
  env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
  t0 = time.perf_counter()
  try:
    proc = subprocess.run(
      cmd,
      cwd=REPO,
      env=env,
      capture_output=True,
      text=True,
      timeout=max(10.0, s.deadline - time.perf_counter()),
    )
    out, rc = proc.stdout, proc.returncode
  except subprocess.TimeoutExpired as e:
    out, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), -1
    s.note("pytest ran past this section's share of the budget and was stopped")
  counts = {k: 0 for k in ("passed", "failed", "skipped", "error")}
  summary = [ln for ln in out.splitlines() if re.search(r"\d+ (passed|failed|skipped|error)", ln)]
  last = summary[-1] if summary else ""
  for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", last):
    counts[word.rstrip("s") if word.startswith("error") else word] += int(n)
  for ln in out.splitlines():
    if ln.startswith(("FAILED", "ERROR")):
      s.note(ln[:200])
  s.row("pytest -m accelerator", None, time.perf_counter() - t0, exit_code=rc, **counts)
  if rc not in (0, 5) or counts["failed"] or counts["error"]:
    raise RuntimeError(f"accelerator tests: exit {rc}, {counts}")


def section_matmul_peak(ctx: Context, s: Section) -> None:
  import jax
  import jax.numpy as jnp

  from gmlm import lowering

  n = ctx.sizes.peak_n
  for name in ("bfloat16", "float32"):
    a = jax.random.normal(jax.random.key(0), (n, n), dtype_of(name))
    b = jax.random.normal(jax.random.key(1), (n, n), dtype_of(name))
    dot = jax.jit(jnp.dot)
    t0 = time.perf_counter()
    compiled = dot.lower(a, b).compile()
    compile_s = time.perf_counter() - t0
    block(compiled(a, b))
    best = min(_once(lambda: block(compiled(a, b))) for _ in range(10))
    ctx.peak_tflops[name] = 2 * n**3 / best / 1e12
    cost = lowering.cost(dot, a, b)
    s.row(f"{name} {n}^3", compile_s, best, cost, name, tflops=ctx.peak_tflops[name])
  s.note("float32 uses jax's default matmul precision (TF32 on NVIDIA GPUs)")
  stream_bandwidth(ctx, s)


def stream_bandwidth(ctx: Context, s: Section) -> None:
  """The memory bandwidth the roofline divides bytes by: x + 1 over an array far larger than
  any cache (one read and one write of every element), in place (donated: a fresh output
  would time the OS's first touch of its pages on CPU), best of 10."""
  import jax
  import jax.numpy as jnp

  from gmlm import lowering

  x = jnp.zeros((ctx.sizes.stream_mb * 2**20 // 4,), jnp.float32)
  add = jax.jit(lambda x: x + 1.0, donate_argnums=0)
  cost = lowering.cost(add, x)
  holder = {"x": x}

  def once():
    holder["x"] = block(add(holder["x"]))

  first = _once(once)
  best = min(_once(once) for _ in range(10))
  ctx.tb_per_s = 2 * holder["x"].nbytes / best / 1e12
  s.row(f"stream x + 1, {ctx.sizes.stream_mb} MB", first - best, best, cost, tb_per_s=ctx.tb_per_s)


def _once(fn) -> float:
  t0 = time.perf_counter()
  fn()
  return time.perf_counter() - t0


def bert_model(config: dict, dtype: str, seed: int = 0, trap: bool = False):
  """A random BERT of `config` computing in `dtype`, its weights stored in it too (the float32
  model's, cast: every dtype has the same weights); with trap, the head's bias favours token
  TRAP by TRAP_BIAS."""
  import jax
  from flax import nnx

  from gmlm import nn as gm

  d = dtype_of(dtype)
  model = gm.from_config(config, rngs=nnx.Rngs(seed))
  if trap:
    bias = model.head.bias_V
    bias[...] = bias[...].at[TRAP].add(TRAP_BIAS)
  if dtype == "float32":
    return model
  cast = gm.from_config(config, rngs=nnx.Rngs(seed), dtype=d, param_dtype=d)
  nnx.update(cast, jax.tree.map(lambda x: x.astype(d), nnx.state(model, nnx.Param)))
  return cast


def sequences(B: int, L: int, vocab: int, seed: int = 0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  free = rng.integers(FIRST_WORD, vocab, (B, L - 2))
  return np.concatenate([np.full((B, 1), CLS), free, np.full((B, 1), SEP)], 1).astype(np.int32)


def forward_rate(ctx: Context, model, dtype: str, B: int, L: int) -> tuple[float, float, Any]:
  """(compile s, steady s per call, gmlm.lowering.Cost) of masked_logits at one row per
  sequence."""
  import jax.numpy as jnp

  from gmlm import lowering
  from gmlm import nn as gm

  tokens = jnp.asarray(sequences(B, L, model.config.vocab_size, B))
  positions = jnp.full((B, 1), L // 2, jnp.int32)
  fn = gm.masked_logits
  first, steady = timed(lambda: fn(model, tokens, positions), ctx.sizes.min_seconds)
  ctx.forward[dtype, B, L] = B / steady
  return first - steady, steady, lowering.cost(fn, model, tokens, positions)


def section_mlm_forward(ctx: Context, s: Section) -> None:
  flops = load_benchmark("mlm_forward").flops_per_sequence
  c = ctx.sizes.bert
  for dtype in ("bfloat16", "float32"):
    model = bert_model(c, dtype)
    for L in ctx.sizes.mlm_lengths:
      for B in ctx.sizes.mlm_batches:
        if s.over(f"{dtype} B={B} L={L}", B * L):
          continue
        compile_s, steady, cost = forward_rate(ctx, model, dtype, B, L)
        rate = B / steady
        s.row(
          f"{dtype} B={B} L={L}",
          compile_s,
          steady,
          cost,
          dtype,
          size=B * L,
          seq_per_s=rate,
          mfu=mfu(ctx, rate * flops(c, L, rows_in_last_layer=1), dtype),
        )
  s.note(
    "FLOPs: benchmarks/mlm_forward.flops_per_sequence (matmuls; last layer at the "
    "masked row only, as masked_logits computes)"
  )


def section_glauber(ctx: Context, s: Section) -> None:
  import jax

  from glauber import chains
  from glauber.layout import Layout
  from gmlm import lowering

  flops = load_benchmark("mlm_forward").flops_per_sequence
  c = ctx.sizes.bert
  V = c["vocab_size"]
  lay = Layout((), N_SITES, CLS, SEP, MASK)  # [CLS] x_1..x_n [SEP], no prefix
  spec = lambda T: chains.make_spec(np.arange(FIRST_WORD, V), V, lay, T)
  steps = ctx.sizes.chain_steps
  per_step = flops(c, L_CHAIN, rows_in_last_layer=1)
  with tempfile.TemporaryDirectory() as directory:
    for dtype in ("bfloat16", "float32"):
      model = bert_model(c, dtype, trap=True)
      if dtype == "float32":
        from gmlm.nn import export

        export.save_pretrained(model, directory)  # the same weights for PyTorch
      for B in ctx.sizes.chains:
        if s.over(f"chains {dtype} B={B}", B):
          continue
        state = chains.init_state(sequences(B, L_CHAIN, V, B))
        holder = {"state": state}

        def call():
          holder["state"], _ = chains.run(
            jax.random.key(0), model, spec(1.0), holder["state"], 1, steps
          )  # keys fold in state.t
          return holder["state"].tokens_BL

        first, steady = timed(call, ctx.sizes.min_seconds)
        rate = B * steps / steady
        if (dtype, B, L_CHAIN) not in ctx.forward:
          forward_rate(ctx, model, dtype, B, L_CHAIN)
        # One step's program (one compile; the scan of the call's steps repeats it).
        step = jax.jit(chains.make_step("glauber"))
        tokens = holder["state"].tokens_BL
        cost = lowering.cost(step, jax.random.key(0), 0, model, spec(1.0), tokens) * steps
        s.row(
          f"chains {dtype} B={B}",
          first - steady,
          steady,
          cost,
          dtype,
          size=B,
          chain_steps_per_s=rate,
          mfu=mfu(ctx, rate * per_step, dtype),
          vs_forward=rate / ctx.forward[dtype, B, L_CHAIN],
        )
    torch_glauber(ctx, s, directory)
  rejection_free(ctx, s, spec)


def torch_glauber(ctx: Context, s: Section, directory: str) -> None:
  """The batched PyTorch loop in a subprocess (its own CUDA context and memory)."""
  rates = {}
  for B in ctx.sizes.chains:
    if s.over(f"torch B={B}", B):
      continue
    cmd = [
      sys.executable,
      str(pathlib.Path(__file__).resolve()),
      "--torch_worker",
      directory,
      "--chains",
      str(B),
      "--steps",
      str(ctx.sizes.chain_steps),
    ]
    proc = subprocess.run(
      cmd,
      cwd=REPO,
      capture_output=True,
      text=True,
      timeout=max(30.0, s.deadline - time.perf_counter() + 30),
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
      raise RuntimeError(f"torch worker failed: {proc.stderr[-1500:]}")
    r = json.loads(lines[-1][len("RESULT ") :])
    rates[B] = r
    ours = next((x for x in s.rows if x["case"] == f"chains {r['dtype']} B={B}"), None)
    s.row(
      f"torch {r['dtype']} {r['device']} B={B}",
      r["first_s"] - r["step_s"],
      r["step_s"] * ctx.sizes.chain_steps,
      size=B,
      chain_steps_per_s=r["chain_steps_per_s"],
      ours_vs_torch=(None if ours is None else ours["chain_steps_per_s"] / r["chain_steps_per_s"]),
    )


def torch_worker(directory: str, B: int, steps: int) -> dict:
  """Batched Glauber in PyTorch eager: every chain masks a random free site, one forward of the
  encoder, the head at that row, a draw from softmax over the candidates."""
  import torch
  import transformers

  cuda = torch.cuda.is_available()
  device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
  torch.set_grad_enabled(False)
  model = transformers.BertForMaskedLM.from_pretrained(directory).to(device, dtype).eval()
  V = model.config.vocab_size
  cands = torch.arange(FIRST_WORD, V, device=device)
  gen = torch.Generator(device=device).manual_seed(0)
  x = torch.tensor(sequences(B, L_CHAIN, V, B), device=device, dtype=torch.long)
  rows = torch.arange(B, device=device)

  def step():
    i = 1 + torch.randint(N_SITES, (B,), device=device, generator=gen)
    inp = x.clone()
    inp[rows, i] = MASK
    h = model.bert(input_ids=inp).last_hidden_state[rows, i]
    logits = model.cls(h[:, None])[:, 0].float()[:, cands]
    x[rows, i] = cands[torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)[:, 0]]

  sync = torch.cuda.synchronize if cuda else (lambda: None)
  with torch.inference_mode():
    t0 = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(steps):
      step()
    sync()
    steady = (time.perf_counter() - t0) / steps
  return dict(
    device=device,
    dtype=str(dtype).replace("torch.", ""),
    first_s=first,
    step_s=steady,
    chain_steps_per_s=B / steady,
  )


def rejection_free(ctx: Context, s: Section, random_spec) -> None:
  """Rejection-free vs plain steps at the largest T on a grid with median stay >= 0.99."""
  import jax

  from glauber import chains
  from glauber import rejection_free as rf
  from glauber.layout import Layout, max_sequence_length

  if s.over("rejection-free"):
    return
  B, steps = ctx.sizes.rejection_free_chains, ctx.sizes.rejection_free_steps
  try:
    if ctx.tiny:
      raise FileNotFoundError("tiny: the random model with a trap")
    from glauber import init_states
    from gmlm import nn as gm

    model, tok = gm.load("default")
    n = 16
    cands = chains.candidate_ids(tok, model.config.vocab_size)
    lay = Layout.from_tokenizer(tok, n, "", max_sequence_length(model))
    x0 = init_states.from_text(tok, lay, ["the river flows through the old town ."], B)
    spec = lambda T: chains.make_spec(cands, model.config.vocab_size, lay, T)
    label = "default MLM"
    x0, _ = chains.run(jax.random.key(0), model, spec(0.0), chains.init_state(x0), 1, 200)
    start = x0.tokens_BL
    grid = (0.3, 0.2, 0.15, 0.1, 0.07, 0.05)
  except Exception as e:  # noqa: BLE001 - e.g. the base weights are not installed
    s.note(f"rejection-free on the random BERT with a planted trap ({e})"[:300])
    model, spec, label = bert_model(ctx.sizes.bert, "float32", trap=True), random_spec, "trap"
    start = np.asarray(sequences(B, L_CHAIN, ctx.sizes.bert["vocab_size"]))
    start[:, 1:-1] = TRAP
    grid = (1.0, 0.7, 0.5, 0.3, 0.2, 0.1)
  for T in grid:
    _, median = rf.choose_mode(model, spec(T), start)
    if median >= 0.99:
      break
  state = chains.init_state(start)
  plain = lambda: chains.run(jax.random.key(1), model, spec(T), state, 1, steps)[0].tokens_BL
  first, steady = timed(plain, 0.0, 1)
  s.row(
    f"plain {label} T={T} B={B}",
    first - steady,
    steady,
    chain_steps_per_s=B * steps / steady,
    median_stay=median,
  )
  fast = lambda: rf.run(jax.random.key(2), model, spec(T), state, 1, steps)[0].tokens_BL
  first, steady_nf = timed(fast, 0.0, 1)
  s.note("no roofline for the rejection-free row: host-driven rounds of data-dependent while loops")
  s.row(
    f"rejection-free {label} T={T} B={B}",
    first - steady_nf,
    steady_nf,
    chain_steps_per_s=B * steps / steady_nf,
    vs_plain=steady / steady_nf,
  )


def section_ising(ctx: Context, s: Section) -> None:
  bench = load_benchmark("ising_throughput")
  for kind, (n, B, steps) in (("clique", ctx.sizes.ising_clique), ("dense", ctx.sizes.ising_dense)):
    spec = bench.ModelSpec(kind, kind, n, B, steps)
    ours = {}
    for sampler, fn in (("ours", bench.run_ours), ("thrml", bench.run_thrml)):
      if s.over(f"{sampler} {kind}"):
        continue
      rows = fn(spec, list(ctx.sizes.ising_ks), 2)
      if sampler == "ours":  # one step per loop iteration: what samplers.UNROLL buys
        rows += bench.run_ours(spec, [1], 2, unroll=1)
      for r in rows:
        rate = r["updates"] / r["seconds"] / 1e9
        if sampler == "ours":
          ours[r["method"]] = rate
        extra = {} if sampler == "ours" or "k=1" not in ours else {"ours_k1_vs": ours["k=1"] / rate}
        cost = None
        if sampler == "ours":  # methods "k=2", "k=1 unroll=1"
          cost = ising_cost(bench, spec, int(re.match(r"k=(\d+)", r["method"]).group(1)))
        s.row(
          f"{sampler} {kind} N={n} B={B} {r['method']}",
          r["compile_s"],
          r["seconds"],
          cost,
          flips_per_ns=rate,
          **extra,
        )
  s.note("flips = spin updates (k per chain per k-Gibbs step; N per chain per thrml sweep)")


def ising_cost(bench, spec, k: int):
  """gmlm.lowering.Cost of the program benchmarks/ising_throughput.run_ours times."""
  import jax
  import jax.numpy as jnp

  from gmlm import lowering
  from ising import model as ising_model
  from ising import samplers

  model = ising_model.ising(*bench.model_arrays(spec))
  x0 = jnp.asarray(bench.initial_spins(spec), jnp.int8)
  return lowering.cost(
    samplers._run,
    jax.random.key(0),
    model,
    x0,
    jnp.int32(0),
    num_steps=spec.steps,
    method="gibbs",
    k=k,
    mesh=None,
  )


def padir_step_flops(c: dict, B: int, S: int, T: int, stages: int = 2) -> float:
  """Hand count of the matmul FLOPs of one PaDIR training step of the model `c` (ModelConfig
  fields) on B rows of S source and T target tokens: padir.training.flops, the count every
  training run logs its MFU by."""
  from padir.model import transformer as model_lib
  from padir.training import flops

  cfg = model_lib.ModelConfig(**c)
  return flops.step_flops(cfg, flops.Step(B, S, T, num_stages=stages))


def padir_batch(cfg, B: int, T: int, seed: int = 0) -> dict:
  """Random EOS-terminated sources and targets of T tokens."""
  import jax.numpy as jnp

  from padir.data import tokenizer as tok_lib

  rng = np.random.default_rng(seed)
  words = lambda shape: rng.integers(tok_lib.NUM_SPECIAL, cfg.vocab_size, shape)
  eos = lambda x: np.concatenate([x[:, :-1], np.full((x.shape[0], 1), tok_lib.EOS_ID)], 1)
  return {
    "inputs": jnp.asarray(eos(words((B, T))), jnp.int32),
    "targets": jnp.asarray(eos(words((B, T))), jnp.int32),
  }


def padir_train_step(cfg, precision: str, scan_stages: bool = False):
  """(jitted step(state, batch, key) -> (state, loss), state): padir_loss (2 stages; scan_stages:
  config.loss.scan_stages) and AdaFactor as padir.training.optim.make_optimizer, the state
  donated."""
  import jax
  import optax
  from flax import nnx

  from padir.model import losses
  from padir.model import transformer as model_lib
  from padir.training import optim

  model = model_lib.Transformer(dataclasses.replace(cfg, dtype=precision), rngs=nnx.Rngs(0))
  tx = optim.per_layer(
    optax.adafactor(
      learning_rate=1e-3, decay_rate=0.8, clipping_threshold=1.0, multiply_by_parameter_scale=True
    )
  )  # as padir.training.optim.make_optimizer (optimizer_by_shape)
  graphdef, state = nnx.split((model, nnx.Optimizer(model, tx, wrt=nnx.Param)))

  def train_step(state, batch, key):
    model, opt = nnx.merge(graphdef, state)
    loss_fn = lambda m: losses.padir_loss(m, batch, key, scan_stages=scan_stages)[0]
    loss, grads = nnx.value_and_grad(loss_fn)(model)
    opt.update(model, grads)
    return nnx.state((model, opt)), loss

  return jax.jit(train_step, donate_argnums=0), state


def padir_train_row(
  ctx: Context,
  s: Section,
  cfg,
  precision: str,
  B: int,
  T: int,
  label: str = "",
  profile=True,
  scan_stages: bool = False,
) -> None:
  """One timed row of the paper-size training step of `cfg` in `precision` on B x T (compile
  apart), its MFU by the hand count, and (profile) the five costliest ops of 3 traced steps."""
  import jax

  from gmlm import lowering

  z = ctx.sizes
  batch = padir_batch(cfg, B, T)
  hand = padir_step_flops(z.padir, B, T, T)
  step, state = padir_train_step(cfg, precision, scan_stages)
  t0 = time.perf_counter()
  compiled = step.lower(state, batch, jax.random.key(0)).compile()
  compile_s = time.perf_counter() - t0
  cost = lowering.cost(step, state, batch, jax.random.key(0))
  holder = {"state": state, "i": 0}

  def call():
    holder["i"] += 1
    holder["state"], loss = compiled(holder["state"], batch, jax.random.key(holder["i"]))
    return loss

  first, steady = timed(call, z.min_seconds)
  s.row(
    f"train {precision} compute B={B} T={T}{label}",
    compile_s,
    steady,
    cost,
    precision,
    size=B / z.padir_batch,
    target_tokens_per_s=B * T / steady,
    mfu=mfu(ctx, hand / steady, precision),
    step_gflop=cost.flops / 1e9,
    hand_gflop=hand / 1e9,
  )
  if profile and not s.over(f"padir profile {precision}{label}", prior_s=z.priors_s["profile"]):
    profile_step(s, precision, call, steady)


def section_padir(ctx: Context, s: Section) -> None:
  from padir.model import transformer as model_lib

  z = ctx.sizes
  cfg = model_lib.ModelConfig(**z.padir)
  for precision in z.padir_precisions:
    if s.over(f"padir train {precision}", 1):
      continue
    padir_train_row(ctx, s, cfg, precision, z.padir_batch, z.padir_length)
  s.note(
    "train: float32 master weights; 'bfloat16' = ModelConfig(dtype='bfloat16'), "
    "bf16 matmuls and activations with softmax, norms and losses in float32; "
    "MFU from the hand count (hand_gflop: padir.training.flops, matmuls only, as training "
    "runs log it); gflop: the lowered module (gmlm.lowering.cost, elementwise ops included); "
    "padir_loss with 2 stages"
  )
  latency(ctx, s, cfg)


def profile_step(s: Section, precision: str, call, steady: float) -> None:
  """The five costliest XLA ops of 3 traced training steps (gmlm.profiling: a jax.profiler
  trace), their shares of the device time, and the device's busy fraction: where the step's
  time goes when its MFU falls short."""
  import tempfile

  from gmlm import profiling

  calls = 3
  try:
    p = profiling.top_ops(call, calls, tempfile.mkdtemp(prefix="padir_trace_"), k=5)
  except Exception as e:  # a profiler that cannot run here costs a note, not the section
    s.note(f"profile {precision}: {type(e).__name__}: {e}")
    return
  s.row(
    f"profile {precision}: top ops",
    None,
    p["wall_ms_per_call"] / 1e3,
    None,
    precision,
    device_ms=p["device_ms_per_call"],
    busy=p["busy"],
    top_ops=[
      dict(op=o["op"], share=round(o["share"], 4), ms=round(o["ms_per_call"], 3), what=o["detail"])
      for o in p["ops"]
    ],
    top_kinds=[dict(kind=k["kind"], share=round(k["share"], 4)) for k in p["kinds"]],
  )
  shares = ", ".join(f"{o['op']} {100 * o['share']:.1f}%" for o in p["ops"])
  s.note(
    f"profile {precision} ({p['plane']}, {calls} steps, {p['device_ms_per_call']:.1f} ms of "
    f"ops per {1e3 * steady:.1f} ms step, busy {p['busy']:.2f}): {shares}"
  )


def latency(ctx: Context, s: Section, cfg) -> None:
  """p50 / p99 of one batch-1 translation: the recommended CTC decoder (one pass, blank
  penalty 1.0, configs/padir_bible_en_es_ctc_distill.py), PaDIR (4 refinement steps, top-3
  lengths) and AR greedy with its KV cache (max_target_length steps)."""
  import jax
  import jax.numpy as jnp
  from flax import nnx

  from padir.data import tokenizer as tok_lib
  from padir.decoding import autoregressive as decode
  from padir.decoding import ctc
  from padir.model import transformer as model_lib

  S = cfg.max_source_length // 2
  src = np.random.default_rng(1).integers(tok_lib.NUM_SPECIAL, cfg.vocab_size, (1, S))
  src[0, -1] = tok_lib.EOS_ID
  src = jnp.asarray(src, jnp.int32)
  nar = model_lib.Transformer(cfg, rngs=nnx.Rngs(1))
  ar = model_lib.Transformer(dataclasses.replace(cfg, decoder="ar"), rngs=nnx.Rngs(2))
  ctc_model = model_lib.Transformer(dataclasses.replace(cfg, ctc_upsample=2), rngs=nnx.Rngs(3))
  for m in (nar, ar, ctc_model):
    m.eval()
  padir_fn = jax.jit(lambda m, x, k: decode.refine(m, x, k, num_steps=4, num_lengths=3))
  ar_fn = jax.jit(decode.greedy_ar)
  ctc_fn = jax.jit(lambda m, x: ctc.decode(m, x, num_passes=1, blank_penalty=1.0)["tokens"])
  p50 = {}
  from gmlm import lowering

  costs = {
    "ctc decode": lambda: lowering.cost(ctc_fn, ctc_model, src),
    "padir refine": lambda: lowering.cost(padir_fn, nar, src, jax.random.key(0)),
    "ar greedy": lambda: lowering.cost(ar_fn, ar, src),
  }
  for name, call in (
    ("ctc decode", lambda k: ctc_fn(ctc_model, src)),
    ("padir refine", lambda k: padir_fn(nar, src, k)["tokens"]),
    ("ar greedy", lambda k: ar_fn(ar, src)),
  ):
    if s.over(name, prior_s=ctx.sizes.priors_s["decode"]):
      continue
    t0 = time.perf_counter()
    block(call(jax.random.key(0)))
    first = time.perf_counter() - t0
    times = [_once(lambda: block(call(jax.random.key(i)))) for i in range(ctx.sizes.latency_calls)]
    p50[name], p99 = np.percentile(times, 50), np.percentile(times, 99)
    s.row(
      f"decode {name} B=1 S={S}",
      first - p50[name],
      p50[name],
      costs[name](),
      cfg.dtype,
      p50_ms=1e3 * p50[name],
      p99_ms=1e3 * p99,
    )
  if "padir refine" in p50 and "ar greedy" in p50:
    s.note(
      f"decode p50 AR / PaDIR = {p50['ar greedy'] / p50['padir refine']:.2f}x "
      f"(random weights: refinement may stop early or run all 4 steps)"
    )


def section_padir_variants(ctx: Context, s: Section) -> None:
  """Not in the default run (`--sections padir_variants`): the paper-size bf16 step in the
  layouts and sizes that decide its MFU, each a row beside the default's (scanned layers, no
  remat, B = 256): the layers unrolled (the loop), the scan with remat=dots_saveable (fewer
  saved activations, each matmul's output kept), and twice the batch."""
  from padir.model import transformer as model_lib

  z = ctx.sizes
  cfg = model_lib.ModelConfig(**z.padir)
  B, T = z.padir_batch, z.padir_length
  precision = z.padir_precisions[0]
  scan = dict(scan_layers="scan")
  for label, variant, batch, stages in (
    (" (default: scan)", scan, B, False),
    (" loop", dict(scan_layers="loop"), B, False),
    (" scan remat=dots_saveable", dict(scan, remat="dots_saveable"), B, False),
    (" scan remat=full", dict(scan, remat="full"), B, False),
    (" scan stages scanned", scan, B, True),
    (" scan", scan, 2 * B, False),
  ):
    # (a skipped row's note names it as its case would: the tests find it by that name)
    if s.over(f"padir train {precision} B={batch} T={T}{label}", batch / B):
      continue
    padir_train_row(
      ctx,
      s,
      dataclasses.replace(cfg, **variant),
      precision,
      batch,
      T,
      label,
      profile=False,
      scan_stages=stages,
    )


# ----------------------------------------------------------------------------- roofline


def predict(gflop: float, gbytes: float, tflops: float, tb_per_s: float) -> tuple[float, str]:
  """(seconds, bound): max(FLOPs / peak, bytes / bandwidth), and which of the two binds."""
  compute, memory = gflop / (1e3 * tflops), gbytes / (1e3 * tb_per_s)
  return max(compute, memory), ("compute" if compute >= memory else "memory")


def why_not_within_2x(r: dict, predicted: float, bound: str) -> str | None:
  """None when measured is within 2x of predicted, else the likeliest reason, from the row."""
  ratio = r["steady_s"] / predicted
  if 0.5 <= ratio <= 2:
    return None
  if r.get("while_loops"):
    return "a data-dependent while loop is counted once: the prediction is a lower bound"
  if ratio < 0.5 and bound == "memory":
    return (
      "faster than its bytes allow: XLA counts every fused op's operands as memory traffic, "
      "which a cache (CPU caches; a GPU's 50 MB L2) serves without touching DRAM/HBM"
    )
  if ratio < 0.5:
    return "faster than predicted: the peak measured beside it is below this program's rate"
  if predicted < 1e-3:
    return (
      f"a {1e6 * predicted:.0f} us program: per-op dispatch and launch overhead, not "
      f"{'FLOPs' if bound == 'compute' else 'bytes'}, sets its time"
    )
  return (
    f"runs at {100 / ratio:.0f}% of the {bound} roofline: time outside its two limits "
    "(small or oddly shaped matmuls, non-matmul ops, layout copies)"
  )


def roofline(ctx: Context, sections: dict, device_kind: str) -> list[dict]:
  """Per timed row with a cost: FLOPs, bytes, arithmetic intensity, the time predicted on an
  H100 and an H200 (HARDWARE, published peaks) and on this device (its measured matmul peak in
  the row's dtype and its measured stream bandwidth) beside the measured time; a row
  not within 2x of its measurement gets a reason (the model's claim is on compute-bound rows;
  memory-bound ones are bounded by a DRAM/HBM byte count that caches undercut)."""
  out = []
  for name, sec in sections.items():
    for r in sec["rows"]:
      if not r.get("gflop") or not r.get("steady_s"):  # no count (or none recorded): no row
        continue
      dtype = r.get("dtype", "float32")
      row = dict(
        section=name,
        case=r["case"],
        dtype=dtype,
        gflop=r["gflop"],
        gbytes=r["gbytes"],
        flop_per_byte=r["gflop"] / r["gbytes"] if r["gbytes"] else None,
        measured_s=r["steady_s"],
      )
      for gpu, hw in HARDWARE.items():
        row[f"{gpu}_s"], row[f"{gpu}_bound"] = predict(
          r["gflop"], r["gbytes"], hw["tflops"][dtype], hw["tb_per_s"]
        )
        if gpu in device_kind:
          row[f"measured_vs_{gpu}"] = r["steady_s"] / row[f"{gpu}_s"]
      peak = ctx.peak_tflops.get(dtype)
      if peak and ctx.tb_per_s:
        here, bound = predict(r["gflop"], r["gbytes"], peak, ctx.tb_per_s)
        row.update(here_s=here, here_bound=bound, measured_vs_here=r["steady_s"] / here)
        row["within_2x"] = 0.5 <= row["measured_vs_here"] <= 2
        row["reason"] = why_not_within_2x(r, here, bound)
      out.append(row)
  return out


def print_roofline(rows: list[dict]) -> None:
  print(
    f"\n## roofline (predicted s = max(FLOPs / peak, bytes / bandwidth); H100 / H200: published "
    f"dense peaks and HBM bandwidth; here: the measured matmul peak and stream bandwidth)\n"
    f"{'case':44s} {'GFLOP':>9s} {'GB':>8s} {'F/B':>6s} {'H100 s':>9s} {'H200 s':>9s} "
    f"{'here s':>9s} {'bound':>7s} {'measured':>9s} {'meas/here':>9s}"
  )
  for r in rows:
    print(
      f"{(r['section'] + ' ' + r['case'])[:44]:44s} {r['gflop']:9.4g} {r['gbytes']:8.3g} "
      f"{fmt(r['flop_per_byte']):>6s} {r['H100_s']:9.3g} {r['H200_s']:9.3g} "
      f"{fmt(r.get('here_s')):>9s} {r.get('here_bound', '-'):>7s} {r['measured_s']:9.3g} "
      f"{fmt(r.get('measured_vs_here')):>9s}"
    )
    if r.get("reason"):
      print(f"    not within 2x: {r['reason']}")


# ----------------------------------------------------------------------------- --plan

# The paper's PaDIR (6+6 layers, d = 512, FFN 2048, 32k vocabulary, batch 2,048 sentence pairs;
# 128-token sources and targets, ModelConfig's default maximum) and Glauber on BERT-base with
# 16,384 chains of L = 22 tokens (n = 20 free sites, the suite's chains), bf16 compute.
PLAN_FULL = dict(
  padir=dict(FULL.padir, max_source_length=128, max_target_length=128),
  padir_batch=2048,
  bert=BERT_BASE,
  chains=16384,
  devices=(1, 8, 64),
)
PLAN_TINY = dict(
  padir=dict(TINY.padir, max_source_length=8, max_target_length=8),
  padir_batch=16,
  bert=BERT_TINY,
  chains=64,
  devices=(1, 8, 64),
)
SIMULATED = 8  # devices the compiled memory analysis runs on (a subprocess, CPU)


def padir_options(devices: int) -> list[tuple[int, int, str]]:
  """(data, model, params rule) of each sharding option on `devices`: data parallel (the model
  replicated), and tensor parallel over model = 2 and 8 by the logical rules or FSDP."""
  out = [(devices, 1, "replicated")]
  for model in (2, 8):
    if devices % model == 0 and devices >= model:
      out += [(devices // model, model, "logical"), (devices // model, model, "fsdp")]
  return out


def _itemsize(dtype) -> int:
  try:
    return np.dtype(dtype).itemsize
  except TypeError:  # a PRNG key: two 32-bit words
    return 8


def _shard_bytes(tree, shardings) -> float:
  import jax

  sizes = jax.tree.map(
    lambda x, sh: np.prod(sh.shard_shape(x.shape)) * _itemsize(x.dtype), tree, shardings
  )
  return float(sum(jax.tree.leaves(sizes)))


def padir_plan_arithmetic(plan: dict, data: int, model: int, rule: str) -> dict:
  """Bytes per device by arithmetic from shapes alone (nothing compiled): parameters and
  AdaFactor state as padir.training.sharding places them on an abstract mesh, gradients like the
  parameters, activations = rows per device x the bytes autodiff saves per row (the vjp
  residuals at 2 rows minus those at 1, from jax.eval_shape: the parameters drop out), not
  split by the model axis (exact for FSDP, an upper bound for the logical rules)."""
  import jax
  import optax
  from flax import nnx

  from gmlm import lowering
  from padir.model import losses
  from padir.model import transformer as model_lib
  from padir.training import sharding as sharding_lib

  cfg = model_lib.ModelConfig(**plan["padir"])

  def make():
    m = model_lib.Transformer(cfg, rngs=nnx.Rngs(0))
    return m, nnx.Optimizer(m, optax.adafactor(1e-3), wrt=nnx.Param)

  graphdef, state = nnx.split(nnx.eval_shape(make))
  mesh = lowering.abstract_mesh({"data": data, "model": model})
  shardings = sharding_lib.state_shardings(state, mesh, "fsdp" if rule == "replicated" else rule)
  params = _shard_bytes(state[0], shardings[0])
  optimizer = _shard_bytes(state[1], shardings[1])

  model_def, weights, rest = nnx.split(
    nnx.eval_shape(lambda: model_lib.Transformer(cfg, rngs=nnx.Rngs(0))), nnx.Param, ...
  )

  def residuals(rows: int) -> float:
    shape = lambda L: jax.ShapeDtypeStruct((rows, L), np.int32)
    batch = {"inputs": shape(cfg.max_source_length), "targets": shape(cfg.max_target_length)}

    def saved(weights, rest, batch):
      def loss(w, r):  # the dropout keys enter the vjp too: their counters advance inside it
        return losses.padir_loss(nnx.merge(model_def, w, r), batch, jax.random.key(0))[0]

      return jax.vjp(loss, weights, rest)[1]

    leaves = jax.tree.leaves(jax.eval_shape(saved, weights, rest, batch))
    return float(sum(x.size * _itemsize(x.dtype) for x in leaves))

  per_row = residuals(2) - residuals(1)
  rows = plan["padir_batch"] / data
  return dict(params=params, optimizer=optimizer, gradients=params, activations=rows * per_row)


def glauber_plan_arithmetic(plan: dict, devices: int) -> dict:
  """Bytes per device of one bf16 Glauber step by arithmetic: the float32 weights replicated,
  the chains' tokens split over "data", and the live activations of a forward (no backward):
  per chain, the FFN's hidden units, the queries / keys / values / output, the attention
  scores (float32) and the head's logits at the masked row with the tempered candidates
  (float32)."""
  c = plan["bert"]
  D, F, V, N = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_attention_heads"]
  params = 4 * (
    V * D
    + c["max_position_embeddings"] * D
    + 2 * D
    + D * D
    + V  # embeddings, head
    + c["num_hidden_layers"] * (4 * D * D + 2 * D * F + 9 * D + F)
  )
  rows = plan["chains"] / devices
  per_row = 2 * L_CHAIN * (F + 4 * D) + 4 * N * L_CHAIN * L_CHAIN + 4 * 2 * V
  return dict(params=params, optimizer=0.0, chains=rows * L_CHAIN * 4, activations=rows * per_row)


def plan_worker(tiny: bool) -> list[dict]:
  """Compiled memory analysis (per device) of the PaDIR training step under every option on
  1 and SIMULATED devices, and of one bf16 Glauber step on 1 and SIMULATED devices. Runs in
  a process started with SIMULATED CPU devices; nothing executes, only compiles. On CPU the
  masked-logits chunking (gmlm.nn.masked.CPU_CHUNK_TOKENS) is turned off, as on a GPU."""
  import jax
  from jax.sharding import NamedSharding
  from jax.sharding import PartitionSpec as P

  from glauber import chains
  from glauber.layout import Layout
  from gmlm import lowering
  from gmlm import nn as gm
  from gmlm.core import mesh as mesh_lib
  from gmlm.nn import masked
  from padir.model import transformer as model_lib
  from padir.training import sharding as sharding_lib

  masked.CPU_CHUNK_TOKENS = 2**62
  plan = PLAN_TINY if tiny else PLAN_FULL
  out = []

  def memory(compiled) -> dict:
    m = compiled.memory_analysis()
    return dict(
      argument=float(m.argument_size_in_bytes),
      output=float(m.output_size_in_bytes),
      alias=float(m.alias_size_in_bytes),
      temp=float(m.temp_size_in_bytes),
    )

  cfg = model_lib.ModelConfig(**plan["padir"])
  B, T = plan["padir_batch"], cfg.max_target_length
  for devices in (1, SIMULATED):
    for data, model, rule in padir_options(devices):
      step, state = padir_train_step(cfg, "bfloat16")
      state = jax.eval_shape(lambda: state)
      mesh = mesh_lib.make_mesh(data, model, jax.devices()[:devices])
      shardings = sharding_lib.state_shardings(
        state, mesh, "fsdp" if rule == "replicated" else rule
      )
      state = lowering.shaped(state, shardings)
      batch = lowering.shaped(
        padir_batch(cfg, B, T), {k: NamedSharding(mesh, P("data")) for k in ("inputs", "targets")}
      )
      key = lowering.shaped(jax.random.key(0), NamedSharding(mesh, P()))
      t0 = time.perf_counter()
      compiled = step.lower(state, batch, key).compile()
      out.append(
        dict(
          what="padir", devices=devices, data=data, model=model, rule=rule,
          compile_s=time.perf_counter() - t0, **memory(compiled),
        )
      )  # fmt: skip
      print("RESULT " + json.dumps(out[-1]), flush=True)
  V = plan["bert"]["vocab_size"]
  fast = gm.with_dtype(bert_model(plan["bert"], "float32"), jax.numpy.bfloat16)
  lay = Layout((), N_SITES, CLS, SEP, MASK)
  spec = chains.make_spec(np.arange(FIRST_WORD, V), V, lay, 1.0)
  step = jax.jit(chains.make_step("glauber"))
  for devices in (1, SIMULATED):
    mesh = mesh_lib.make_mesh(devices, 1, jax.devices()[:devices])
    rep = NamedSharding(mesh, P())
    tokens = jax.ShapeDtypeStruct(
      (plan["chains"], L_CHAIN), jax.numpy.int32, sharding=NamedSharding(mesh, P("data"))
    )
    model = lowering.shaped(fast, jax.tree.map(lambda _: rep, fast))
    t0 = time.perf_counter()
    compiled = step.lower(lowering.shaped(jax.random.key(0), rep), 0, model, spec, tokens).compile()
    out.append(
      dict(
        what="glauber", devices=devices, data=devices, model=1, rule="chains over data",
        compile_s=time.perf_counter() - t0, **memory(compiled),
      )
    )  # fmt: skip
    print("RESULT " + json.dumps(out[-1]), flush=True)
  return out


def run_plan(tiny: bool, out_dir: pathlib.Path) -> int:
  """--plan: bytes per device of PaDIR training and Glauber chains at paper size under each
  sharding option on 1, 8 and 64 devices (arithmetic; compiled on 1 and 8 simulated devices,
  the two side by side), and the fewest devices that fit an H100's 80 GB."""
  plan = PLAN_TINY if tiny else PLAN_FULL
  env = {
    **os.environ,
    # the caller's XLA flags kept (the test suite's compile setting), the devices added
    "XLA_FLAGS": " ".join(
      [os.environ.get("XLA_FLAGS", ""), f"--xla_force_host_platform_device_count={SIMULATED}"]
    ).strip(),
    "JAX_PLATFORMS": "cpu",
  }
  cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--plan_worker"]
  cmd += ["--tiny"] if tiny else []
  t0 = time.perf_counter()
  proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
  compiled = [
    json.loads(ln[len("RESULT ") :]) for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")
  ]
  if proc.returncode:
    print(proc.stderr[-3000:], file=sys.stderr)
  found = {(c["what"], c["devices"], c["data"], c["model"], c["rule"]): c for c in compiled}
  rows = []
  for devices in plan["devices"]:
    for data, model, rule in padir_options(devices):
      a = padir_plan_arithmetic(plan, data, model, rule)
      rows.append(dict(what="padir", devices=devices, data=data, model=model, rule=rule, **a))
    a = glauber_plan_arithmetic(plan, devices)
    rows.append(dict(what="glauber", devices=devices, data=devices, model=1, rule="chains over data", **a))  # fmt: skip
  for r in rows:
    r["arithmetic_gb"] = sum(r[k] for k in ("params", "optimizer", "gradients", "chains", "activations") if k in r) / 1e9  # fmt: skip
    c = found.get((r["what"], r["devices"], r["data"], r["model"], r["rule"]))
    if c is not None:  # what the compiled program holds at its peak: arguments + temporaries
      r["compiled_gb"] = (c["argument"] + c["output"] - c["alias"] + c["temp"]) / 1e9
      r["compiled_arguments_gb"], r["compiled_temp_gb"] = c["argument"] / 1e9, c["temp"] / 1e9
      r["compiled_vs_arithmetic"] = r["compiled_gb"] / r["arithmetic_gb"]
    r["fits_h100"] = r.get("compiled_gb", r["arithmetic_gb"]) <= HARDWARE["H100"]["memory_gb"]
  fewest = {}
  for what in ("padir", "glauber"):
    fit = [r for r in rows if r["what"] == what and r["fits_h100"]]
    fewest[what] = min(fit, key=lambda r: (r["devices"], r.get("compiled_gb", r["arithmetic_gb"])), default=None)  # fmt: skip
  print(
    f"{'plan':8s} {'devices':>7s} {'mesh':>6s} {'rule':16s} {'params':>8s} {'optim':>8s} "
    f"{'grads':>8s} {'activ':>8s} {'arith GB':>9s} {'compiled GB':>11s} {'ratio':>6s} fits H100"
  )
  gb = lambda r, k: f"{r.get(k, 0) / 1e9:8.3g}"
  for r in rows:
    print(
      f"{r['what']:8s} {r['devices']:7d} {r['data']:>3d}x{r['model']:<2d} {r['rule']:16s} "
      f"{gb(r, 'params')} {gb(r, 'optimizer')} {gb(r, 'gradients')} {gb(r, 'activations')} "
      f"{r['arithmetic_gb']:9.3g} {fmt(r.get('compiled_gb')):>11s} "
      f"{fmt(r.get('compiled_vs_arithmetic')):>6s} {'yes' if r['fits_h100'] else 'no'}"
    )
  for what, r in fewest.items():
    where = (
      "none of the options"
      if r is None
      else (f"{r['devices']} device(s), {r['data']}x{r['model']} {r['rule']}")
    )
    print(f"fewest H100s (80 GB) for {what}: {where}")
  out_dir.mkdir(parents=True, exist_ok=True)
  result = dict(tiny=tiny, plan=plan, rows=rows, compiled=compiled, fewest_h100=fewest,
                wall_s=time.perf_counter() - t0)  # fmt: skip
  (out_dir / "plan.json").write_text(json.dumps(result, indent=1, default=float))
  print(f"wrote {out_dir / 'plan.json'}")
  return 0 if len(compiled) == len(found) and not proc.returncode else 1


# ----------------------------------------------------------------------------- driver


def fmt(v) -> str:
  if v is None:
    return "-"
  if isinstance(v, float):
    return f"{v:.4g}"
  return str(v)


def fmt_row(r: dict) -> str:
  extra = " ".join(
    f"{k}={fmt(v)}" for k, v in r.items() if k not in ("case", "compile_s", "steady_s")
  )
  return f"{r['case']:42s} {fmt(r['compile_s']):>9s} {fmt(r['steady_s']):>10s}  {extra}"


def run_sections(
  ctx: Context, names: list[str], order: list[str], results: Results, deadline: float
) -> None:
  """Runs `names` (of `order`, the whole run's sections); each gets the budget left times its
  weight over the weights of the sections still to run (time one leaves passes on)."""
  weights = ctx.sizes.shares_s
  for name in names:
    rest = order[order.index(name) :]
    share = (deadline - time.perf_counter()) * weights[name] / sum(weights[n] for n in rest)
    s = Section(name, share, results, ctx.sizes.priors_s.get(name, 0.0))
    t0 = time.perf_counter()
    error = None
    try:
      globals()[f"section_{name}"](ctx, s)
    except Exception as e:  # noqa: BLE001 - one failing section must not lose the others
      error = f"{type(e).__name__}: {e}"[:1000]
      traceback.print_exc()
      print(f"  {name:11s} FAILED: {error}", flush=True)
    results.write("section", section=name, error=error, wall_s=time.perf_counter() - t0)


def load_results(path: pathlib.Path) -> dict:
  """The run a results file holds, as accelerator.json has it: the header, device, sections
  (rows, notes, error, wall_s; a section cut off by a kill has the rows it finished), the
  measured peaks and bandwidth (from the matmul_peak rows) and the roofline. Unreadable lines
  (a write cut off by a kill) are skipped."""
  result: dict = {"sections": {}, "peak_tflops": {}, "tb_per_s": None}
  for line in pathlib.Path(path).read_text(encoding="utf-8").splitlines():
    try:
      record = json.loads(line)
    except json.JSONDecodeError:
      continue
    kind = record.pop("kind", None)
    if kind in ("header", "device", "end"):
      result.update(record)
      continue
    name = record.pop("section", None)
    sec = result["sections"].setdefault(name, dict(rows=[], notes=[], error=None, wall_s=0.0))
    if kind == "row":
      sec["rows"].append(record)
      sec["wall_s"] += record.get("wall_s") or 0.0
      if name == "matmul_peak" and record.get("tflops"):
        result["peak_tflops"][record["dtype"]] = record["tflops"]
      if name == "matmul_peak" and record.get("tb_per_s"):
        result["tb_per_s"] = record["tb_per_s"]
    elif kind == "note":
      sec["notes"].append(record["note"])
    elif kind == "section":
      sec.update(error=record["error"], wall_s=record["wall_s"])
  sizes = TINY if result.get("tiny") else FULL
  ctx = Context(sizes, bool(result.get("tiny")), result["peak_tflops"], result["tb_per_s"])
  result["roofline"] = roofline(ctx, result["sections"], result.get("device_kind", ""))
  return result


def render(result: dict) -> None:
  """Prints a run's tables (a section's rows and notes) and its roofline."""
  print(
    f"\n{result.get('device_kind', '?')} ({result.get('backend', '?')}, "
    f"{result.get('device_count', '?')} device(s)), jax {result.get('jax', '?')}, "
    f"budget {fmt(result.get('budget_s'))} s, {fmt(result.get('wall_s'))} s"
  )
  for name, sec in result["sections"].items():
    failed = f"  FAILED: {sec['error']}" if sec["error"] else ""
    print(f"\n## {name} ({sec['wall_s']:.1f} s){failed}")
    print(f"{'case':42s} {'compile s':>9s} {'steady s':>10s}  metrics")
    for r in sec["rows"]:
      print(fmt_row(r))
    for note in sec["notes"]:
      print(f"  note: {note}")
  print_roofline(result["roofline"])


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--out", help="directory for results.jsonl and accelerator.json")
  p.add_argument("--tiny", action="store_true", help="tiny sizes (the CPU smoke test)")
  p.add_argument("--sections", default=",".join(SECTIONS))
  p.add_argument(
    "--budget", type=float, default=300.0, help="seconds the whole run may take, compiles included"
  )
  p.add_argument("--report", help="print the tables and roofline of a results.jsonl, then stop")
  p.add_argument("--plan", action="store_true", help="paper-size memory plans (no timing)")
  p.add_argument("--plan_worker", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--torch_worker", help=argparse.SUPPRESS)
  p.add_argument("--chains", type=int, help=argparse.SUPPRESS)
  p.add_argument("--steps", type=int, help=argparse.SUPPRESS)
  a = p.parse_args(argv)
  t0 = time.perf_counter()
  if a.torch_worker:
    print("RESULT " + json.dumps(torch_worker(a.torch_worker, a.chains, a.steps)), flush=True)
    return 0
  if a.plan_worker:
    plan_worker(a.tiny)
    return 0
  if a.report:
    render(load_results(pathlib.Path(a.report)))
    return 0
  if not a.out:
    p.error("--out DIR is required")
  if a.plan:
    return run_plan(a.tiny, pathlib.Path(a.out))
  if a.budget <= 0:
    p.error(f"--budget={a.budget}: give the seconds the run may take, e.g. --budget 300")
  names = [n for n in a.sections.split(",") if n]
  unknown = sorted(set(names) - set(SECTIONS + OPTIONAL))
  if unknown:
    p.error(f"unknown sections {unknown}; choose from {SECTIONS + OPTIONAL}")
  names = [n for n in SECTIONS + OPTIONAL if n in names]  # always the default order
  from gmlm import compile_cache

  out = pathlib.Path(a.out)
  results = Results(out / "results.jsonl", t0)
  results.write("header", tiny=a.tiny, budget_s=a.budget, order=names)
  ctx = Context(TINY if a.tiny else FULL, a.tiny)
  deadline = t0 + a.budget
  print(f"{'section':11s} {'case':42s} {'compile s':>9s} {'steady s':>10s}  metrics", flush=True)
  tests = [n for n in names if n == "tests"]  # before jax takes the device
  run_sections(ctx, tests, names, results, deadline)
  import jax

  compile_cache.enable()  # a repeated suite loads what an earlier one compiled
  results.write(
    "device",
    device=str(jax.devices()[0]),
    device_kind=jax.devices()[0].device_kind,
    backend=jax.default_backend(),
    device_count=jax.device_count(),
    jax=jax.__version__,
  )
  run_sections(ctx, [n for n in names if n != "tests"], names, results, deadline)
  results.write("end", wall_s=time.perf_counter() - t0)
  result = load_results(out / "results.jsonl")
  (out / "accelerator.json").write_text(json.dumps(result, indent=1, default=float))
  render(result)
  print(f"\nwrote {out / 'results.jsonl'} and {out / 'accelerator.json'}")
  return 1 if any(sec["error"] for sec in result["sections"].values()) else 0


if __name__ == "__main__":
  sys.exit(main())
