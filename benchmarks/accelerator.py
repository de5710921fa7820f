"""The accelerator suite: one process that proves and measures the project on a GPU/TPU.

  python benchmarks/accelerator.py --out DIR [--tiny] [--sections tests,mlm_forward,...]

Prints a table and writes DIR/accelerator.json. Sections, in order (each catches its own
failure, records it, and the next one runs):
  tests        `pytest -m accelerator` in a subprocess (model parity vs float32 CPU reference
               fixtures, sampler exactness, bf16 law, 1-vs-N-device equality): pass/fail counts.
               Runs first, before this process takes the accelerator's memory.
  matmul_peak  the bf16 and float32 matmul peak of this device (8192^3, best of 10), measured in
               this process: the denominators of every MFU below.
  mlm_forward  a BERT-base-shape random MLM (gmlm.nn.from_config, masked_logits at one row),
               bf16 and float32, batch 64 -> 4,096, L = 22 and 128: sequences/s and MFU.
  glauber      glauber.chains on the same shape (L = 22, n = 20 free sites), 1k -> 16k chains:
               chain-steps/s, MFU, and the ratio to the forward's own sequences/s at that
               batch (the sampler's overhead); beside a batched PyTorch Glauber loop on the
               same weights (a subprocess; CUDA when torch has it); and the rejection-free mode
               at a temperature where the median stay probability is >= 0.99 (the default
               English MLM when its base weights are installed, else the random BERT-base with
               a planted low-temperature trap, as benchmarks/glauber_throughput.py does).
  ising        spin updates per ns of ising.samplers (k = 1, 2, 4) vs thrml on the clique and
               a dense model (the workers of benchmarks/ising_throughput.py).
  padir        PaDIR training at the paper's size (6+6 layers, d = 512, 32k vocabulary):
               target tokens/s and MFU (FLOPs from XLA's cost analysis of the compiled step),
               float32 and bf16 compute (config.model.dtype: bf16 matmuls and activations
               over float32 master weights, softmax and losses in float32); decode latency p50/p99 at batch 1, PaDIR
               refinement (padir.decode.refine) vs AR greedy (padir.decode.greedy_ar).

Every row reports compile_s (first call minus a steady call, or the measured compile) apart
from its steady-state time per call. Sizes scale down with --tiny (the CPU smoke test,
tests/test_accelerator.py). Full sizes fit in ~9 minutes on one H100: each section has a time
share and skips the rest of its sizes (noted in the table) once past it.
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
SECTIONS = ("tests", "matmul_peak", "mlm_forward", "glauber", "ising", "padir")


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
  shares_s: dict  # section -> seconds it may take
  pytest_args: tuple[str, ...]
  padir_precisions: tuple[str, ...] = ("float32", "bfloat16")


FULL = Sizes(
  bert=BERT_BASE,
  peak_n=8192,
  mlm_batches=(64, 256, 1024, 4096),
  mlm_lengths=(22, 128),
  chains=(1024, 4096, 16384),
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
  shares_s=dict(tests=150, matmul_peak=20, mlm_forward=90, glauber=110, ising=70, padir=90),
  pytest_args=(),
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
  shares_s={name: 900 for name in SECTIONS},  # the smoke test runs every size
  pytest_args=("-k", "parity_highest or ising_exactness"),
  padir_precisions=("float32",),
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


class Section:
  """Rows of one section; `over()` says whether its time share is spent."""

  def __init__(self, name: str, share_s: float):
    self.name, self.rows, self.notes = name, [], []
    self.deadline = time.perf_counter() + share_s

  def row(self, case: str, compile_s: float | None, steady_s: float | None, **metrics) -> dict:
    r = dict(case=case, compile_s=compile_s, steady_s=steady_s, **metrics)
    self.rows.append(r)
    print(f"  {self.name:11s} {fmt_row(r)}", flush=True)
    return r

  def over(self, what: str) -> bool:
    if time.perf_counter() < self.deadline:
      return False
    self.notes.append(f"skipped {what}: past this section's time share")
    return True


@dataclasses.dataclass
class Context:
  sizes: Sizes
  tiny: bool
  peak_tflops: dict = dataclasses.field(default_factory=dict)  # dtype name -> TFLOP/s
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
    s.notes.append("pytest ran past this section's time share and was stopped")
  counts = {k: 0 for k in ("passed", "failed", "skipped", "error")}
  summary = [ln for ln in out.splitlines() if re.search(r"\d+ (passed|failed|skipped|error)", ln)]
  last = summary[-1] if summary else ""
  for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)", last):
    counts[word.rstrip("s") if word.startswith("error") else word] += int(n)
  for ln in out.splitlines():
    if ln.startswith(("FAILED", "ERROR")):
      s.notes.append(ln[:200])
  s.row("pytest -m accelerator", None, time.perf_counter() - t0, exit_code=rc, **counts)
  if rc not in (0, 5) or counts["failed"] or counts["error"]:
    raise RuntimeError(f"accelerator tests: exit {rc}, {counts}")


def section_matmul_peak(ctx: Context, s: Section) -> None:
  import jax
  import jax.numpy as jnp

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
    s.row(f"{name} {n}^3", compile_s, best, tflops=ctx.peak_tflops[name])
  s.notes.append("float32 uses jax's default matmul precision (TF32 on NVIDIA GPUs)")


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


def forward_rate(ctx: Context, model, dtype: str, B: int, L: int) -> tuple[float, float]:
  """(compile s, steady s per call) of masked_logits at one row per sequence."""
  import jax
  import jax.numpy as jnp

  from gmlm import nn as gm

  tokens = jnp.asarray(sequences(B, L, model.config.vocab_size, B))
  positions = jnp.full((B, 1), L // 2, jnp.int32)
  fn = jax.jit(gm.masked_logits)
  first, steady = timed(lambda: fn(model, tokens, positions), ctx.sizes.min_seconds)
  ctx.forward[dtype, B, L] = B / steady
  return first - steady, steady


def section_mlm_forward(ctx: Context, s: Section) -> None:
  flops = load_benchmark("mlm_forward").flops_per_sequence
  c = ctx.sizes.bert
  for dtype in ("bfloat16", "float32"):
    model = bert_model(c, dtype)
    for L in ctx.sizes.mlm_lengths:
      for B in ctx.sizes.mlm_batches:
        if s.over(f"{dtype} B={B} L={L}"):
          continue
        compile_s, steady = forward_rate(ctx, model, dtype, B, L)
        rate = B / steady
        s.row(
          f"{dtype} B={B} L={L}",
          compile_s,
          steady,
          seq_per_s=rate,
          mfu=mfu(ctx, rate * flops(c, L, rows_in_last_layer=1), dtype),
        )
  s.notes.append(
    "FLOPs: benchmarks/mlm_forward.flops_per_sequence (matmuls; last layer at the "
    "masked row only, as masked_logits computes)"
  )


def section_glauber(ctx: Context, s: Section) -> None:
  import jax

  from glauber import chains
  from glauber.layout import Layout

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
        if s.over(f"chains {dtype} B={B}"):
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
        s.row(
          f"chains {dtype} B={B}",
          first - steady,
          steady,
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
    if s.over(f"torch B={B}"):
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
    s.notes.append(f"rejection-free on the random BERT with a planted trap ({e})"[:300])
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
      for r in fn(spec, list(ctx.sizes.ising_ks), 2):
        rate = r["updates"] / r["seconds"] / 1e9
        if sampler == "ours":
          ours[r["method"]] = rate
        extra = {} if sampler == "ours" or "k=1" not in ours else {"ours_k1_vs": ours["k=1"] / rate}
        s.row(
          f"{sampler} {kind} N={n} B={B} {r['method']}",
          r["compile_s"],
          r["seconds"],
          flips_per_ns=rate,
          **extra,
        )
  s.notes.append("flips = spin updates (k per chain per k-Gibbs step; N per chain per thrml sweep)")


def section_padir(ctx: Context, s: Section) -> None:
  import jax
  import jax.numpy as jnp
  import optax
  from flax import nnx

  from padir import losses
  from padir import model as model_lib
  from padir import tokenizer as tok_lib

  z = ctx.sizes
  cfg = model_lib.ModelConfig(**z.padir)
  B, T = z.padir_batch, z.padir_length
  rng = np.random.default_rng(0)
  words = lambda shape: rng.integers(tok_lib.NUM_SPECIAL, cfg.vocab_size, shape)
  eos = lambda x: np.concatenate([x[:, :-1], np.full((x.shape[0], 1), tok_lib.EOS_ID)], 1)
  batch = {
    "inputs": jnp.asarray(eos(words((B, T))), jnp.int32),
    "targets": jnp.asarray(eos(words((B, T))), jnp.int32),
  }
  for precision in z.padir_precisions:
    if s.over(f"padir train {precision}"):
      continue
    model = model_lib.Transformer(dataclasses.replace(cfg, dtype=precision), rngs=nnx.Rngs(0))
    tx = optax.adafactor(
      learning_rate=1e-3, decay_rate=0.8, clipping_threshold=1.0, multiply_by_parameter_scale=True
    )  # as padir.optim.make_optimizer
    graphdef, state = nnx.split((model, nnx.Optimizer(model, tx, wrt=nnx.Param)))

    def train_step(state, batch, key):
      model, opt = nnx.merge(graphdef, state)
      loss_fn = lambda m: losses.padir_loss(m, batch, key)[0]
      loss, grads = nnx.value_and_grad(loss_fn)(model)
      opt.update(model, grads)
      return nnx.state((model, opt)), loss

    t0 = time.perf_counter()
    compiled = (
      jax.jit(train_step, donate_argnums=0).lower(state, batch, jax.random.key(0)).compile()
    )
    compile_s = time.perf_counter() - t0
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    flops = float(cost.get("flops", 0.0)) if cost else 0.0
    holder = {"state": state, "i": 0}

    def call():
      holder["i"] += 1
      holder["state"], loss = compiled(holder["state"], batch, jax.random.key(holder["i"]))
      return loss

    first, steady = timed(call, z.min_seconds)
    s.row(
      f"train {precision} compute B={B} T={T}",
      compile_s,
      steady,
      target_tokens_per_s=B * T / steady,
      mfu=mfu(ctx, flops / steady, precision) if flops else None,
      step_gflop=flops / 1e9,
    )
  s.notes.append(
    "train: float32 master weights; 'bfloat16' = ModelConfig(dtype='bfloat16'), "
    "bf16 matmuls and activations with softmax, norms and losses in float32; "
    "FLOPs from XLA's cost analysis; padir_loss with 2 stages"
  )
  latency(ctx, s, cfg)


def latency(ctx: Context, s: Section, cfg) -> None:
  """p50 / p99 of one batch-1 translation: PaDIR (4 refinement steps, top-3 lengths) vs AR
  greedy with its KV cache (max_target_length steps)."""
  import jax
  import jax.numpy as jnp
  from flax import nnx

  from padir import decode
  from padir import model as model_lib
  from padir import tokenizer as tok_lib

  S = cfg.max_source_length // 2
  src = np.random.default_rng(1).integers(tok_lib.NUM_SPECIAL, cfg.vocab_size, (1, S))
  src[0, -1] = tok_lib.EOS_ID
  src = jnp.asarray(src, jnp.int32)
  nar = model_lib.Transformer(cfg, rngs=nnx.Rngs(1))
  ar = model_lib.Transformer(dataclasses.replace(cfg, decoder="ar"), rngs=nnx.Rngs(2))
  nar.eval()
  ar.eval()
  padir_fn = jax.jit(lambda m, x, k: decode.refine(m, x, k, num_steps=4, num_lengths=3))
  ar_fn = jax.jit(decode.greedy_ar)
  p50 = {}
  for name, call in (
    ("padir refine", lambda k: padir_fn(nar, src, k)["tokens"]),
    ("ar greedy", lambda k: ar_fn(ar, src)),
  ):
    if s.over(name):
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
      p50_ms=1e3 * p50[name],
      p99_ms=1e3 * p99,
    )
  if len(p50) == 2:
    s.notes.append(
      f"decode p50 AR / PaDIR = {p50['ar greedy'] / p50['padir refine']:.2f}x "
      f"(random weights: refinement may stop early or run all 4 steps)"
    )


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


def run_sections(ctx: Context, names: list[str]) -> dict:
  out = {}
  for name in names:
    s = Section(name, ctx.sizes.shares_s[name])
    t0 = time.perf_counter()
    error = None
    try:
      globals()[f"section_{name}"](ctx, s)
    except Exception as e:  # noqa: BLE001 - one failing section must not lose the others
      error = f"{type(e).__name__}: {e}"[:1000]
      traceback.print_exc()
      print(f"  {name:11s} FAILED: {error}", flush=True)
    out[name] = dict(rows=s.rows, notes=s.notes, error=error, wall_s=time.perf_counter() - t0)
  return out


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--out", help="directory for accelerator.json")
  p.add_argument("--tiny", action="store_true", help="tiny sizes (the CPU smoke test)")
  p.add_argument("--sections", default=",".join(SECTIONS))
  p.add_argument("--torch_worker", help=argparse.SUPPRESS)
  p.add_argument("--chains", type=int, help=argparse.SUPPRESS)
  p.add_argument("--steps", type=int, help=argparse.SUPPRESS)
  a = p.parse_args(argv)
  if a.torch_worker:
    print("RESULT " + json.dumps(torch_worker(a.torch_worker, a.chains, a.steps)), flush=True)
    return 0
  if not a.out:
    p.error("--out DIR is required")
  names = [n for n in a.sections.split(",") if n]
  unknown = sorted(set(names) - set(SECTIONS))
  if unknown:
    p.error(f"unknown sections {unknown}; choose from {SECTIONS}")
  ctx = Context(TINY if a.tiny else FULL, a.tiny)
  t0 = time.perf_counter()
  print(f"{'section':11s} {'case':42s} {'compile s':>9s} {'steady s':>10s}  metrics", flush=True)
  tests = run_sections(ctx, [n for n in names if n == "tests"])  # before jax takes the device
  import jax

  sections = {**tests, **run_sections(ctx, [n for n in names if n != "tests"])}
  result = dict(
    device=str(jax.devices()[0]),
    device_kind=jax.devices()[0].device_kind,
    backend=jax.default_backend(),
    device_count=jax.device_count(),
    jax=jax.__version__,
    tiny=a.tiny,
    peak_tflops=ctx.peak_tflops,
    wall_s=time.perf_counter() - t0,
    sections=sections,
  )
  out = pathlib.Path(a.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / "accelerator.json").write_text(json.dumps(result, indent=1, default=float))
  print(
    f"\n{result['device_kind']} ({result['backend']}, {result['device_count']} device(s)), "
    f"jax {result['jax']}, {result['wall_s']:.0f} s"
  )
  for name, sec in sections.items():
    failed = f"  FAILED: {sec['error']}" if sec["error"] else ""
    print(f"\n## {name} ({sec['wall_s']:.1f} s){failed}")
    print(f"{'case':42s} {'compile s':>9s} {'steady s':>10s}  metrics")
    for r in sec["rows"]:
      print(fmt_row(r))
    for note in sec["notes"]:
      print(f"  note: {note}")
  print(f"\nwrote {out / 'accelerator.json'}")
  return 1 if any(sec["error"] for sec in sections.values()) else 0


if __name__ == "__main__":
  sys.exit(main())
