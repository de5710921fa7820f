"""The accelerator suite and its numerics tests, on whatever backend jax has.

`pytest -m accelerator` (run by benchmarks/accelerator.py on a GPU) selects the numerics:
  - model parity: BERT, ModernBERT, GPT-2 and Llama tiny models against float32 CPU (PyTorch)
    references shipped as tests/fixtures/accelerator/*.npz (tools/make_accelerator_fixtures.py),
    at the highest matmul precision and at the backend's default (TF32 on NVIDIA GPUs);
  - sampler exactness: the t-step law of Ising k-Gibbs chains vs exact enumeration;
  - bf16: Glauber chains on a tiny MLM computing in bfloat16 (logits, softmax and log-probs in
    float32) draw from the exact float64 law of its float32 weights;
  - 1-vs-N devices: sharded chains equal unsharded ones (skipped on one device).
Every law test compares the total-variation distance of the empirical law to the exact one with
the 0.999 quantile of its null distribution (multinomial draws from the exact law with the same
number of draws), not a hand-set number. The unmarked test runs the whole suite at --tiny sizes.

The roofline (FLOPs from gmlm.lowering.cost) is checked against hand counts of the MLM forward
and the PaDIR training step, and against a measurement on this CPU; `--plan` runs at tiny sizes.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_at_xla_defaults

REPO = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "accelerator"
ARCHS = ("BertForMaskedLM", "ModernBertForMaskedLM", "GPT2LMHeadModel", "LlamaForCausalLM")
CAUSAL = ("GPT2LMHeadModel", "LlamaForCausalLM")
SECTIONS = ("tests", "matmul_peak", "mlm_forward", "glauber", "padir", "ising")
# Each section's headline number: at least one row must have it, finite and > 0.
HEADLINE = {
  "matmul_peak": "tflops",
  "mlm_forward": "seq_per_s",
  "glauber": "chain_steps_per_s",
  "ising": "flips_per_ns",
  "padir": "target_tokens_per_s",
}


def tv_null_quantile(
  p_XS: np.ndarray, draws_X: np.ndarray, q: float = 0.999, reps: int = 4000, seed: int = 0
) -> float:
  """The q-quantile of the TV distance between the exact joint law of (start x, end state)
  (starts in proportion to draws_X, ends ~ p_XS[x]) and its empirical law from those draws."""
  rng = np.random.default_rng(seed)
  w_X = draws_X / draws_X.sum()
  tv_R = np.zeros(reps)
  for p_S, m, w in zip(p_XS, draws_X, w_X):
    counts_RS = rng.multinomial(int(m), p_S / p_S.sum(), size=reps)
    tv_R += w * 0.5 * np.abs(counts_RS / m - p_S).sum(-1)
  return float(np.quantile(tv_R, q))


def joint_tv(p_XS: np.ndarray, counts_XS: np.ndarray) -> float:
  draws_X = counts_XS.sum(-1)
  w_X = draws_X / draws_X.sum()
  return float((w_X * 0.5 * np.abs(counts_XS / draws_X[:, None] - p_XS).sum(-1)).sum())


# ----------------------------------------------------------------------------- the suite


@pytest.mark.slow  # the whole accelerator suite, tiny, in a child interpreter
def test_accelerator_suite_tiny_writes_every_section(tmp_path):
  proc = subprocess.run(
    [
      sys.executable,
      str(REPO / "benchmarks" / "accelerator.py"),
      "--tiny",
      "--budget",
      "1200",
      "--out",
      str(tmp_path),
    ],  # fmt: skip
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=1500,
  )
  assert (tmp_path / "accelerator.json").is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
  result = json.loads((tmp_path / "accelerator.json").read_text())
  assert result["tiny"] and result["peak_tflops"]["bfloat16"] > 0
  assert tuple(result["sections"]) == SECTIONS
  for name, sec in result["sections"].items():
    assert sec["error"] is None, (name, sec["error"], proc.stdout[-3000:])
    assert sec["rows"], name
    for row in sec["rows"]:
      assert isinstance(row["steady_s"], float) and row["steady_s"] > 0, (name, row)
    if name in HEADLINE:
      values = [r[HEADLINE[name]] for r in sec["rows"] if r.get(HEADLINE[name]) is not None]
      assert values and all(math.isfinite(v) and v > 0 for v in values), (name, sec["rows"])
  tests = result["sections"]["tests"]["rows"][0]
  assert tests["passed"] >= 2 and tests["failed"] == 0 and tests["error"] == 0, tests
  glauber = {r["case"].split(" B=")[0] for r in result["sections"]["glauber"]["rows"]}
  assert {"chains bfloat16", "chains float32", "torch float32 cpu"} <= glauber, glauber
  assert any(c.startswith("rejection-free") for c in glauber), glauber
  ising = " ".join(r["case"] for r in result["sections"]["ising"]["rows"])
  assert "ours clique" in ising and "thrml clique" in ising and "ours dense" in ising, ising
  padir = [r["case"] for r in result["sections"]["padir"]["rows"]]
  assert any("padir refine" in c for c in padir) and any("ar greedy" in c for c in padir), padir
  assert any("ctc decode" in c for c in padir), padir
  # The roofline: a prediction per timed row with a cost, and a reason wherever measured is
  # not within 2x of the prediction from this CPU's own peak and bandwidth.
  roofline = result["roofline"]
  assert result["tb_per_s"] > 0
  assert {r["section"] for r in roofline} == set(SECTIONS) - {"tests"}, roofline
  for r in roofline:
    assert r["gflop"] > 0 and r["gbytes"] > 0 and r["H100_s"] > 0 and r["H200_s"] > 0, r
    assert r["H200_s"] <= r["H100_s"] and r["here_s"] > 0, r
    assert r["within_2x"] or r["reason"], r
  assert proc.returncode == 0, proc.stderr[-3000:]


def _suite(out, *args: str) -> subprocess.Popen:
  cmd = [sys.executable, str(REPO / "benchmarks" / "accelerator.py"), "--tiny", "--out", str(out)]
  return subprocess.Popen(
    cmd + list(args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
  )


def _records(path: pathlib.Path) -> list[dict]:
  return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow  # the suite end to end under a budget, in a child interpreter
def test_a_budget_that_forces_skips_ends_in_time_saying_what_it_skipped(tmp_path):
  """--budget bounds the run, compiles included: with 12 s for sections whose tiny rows take
  longer in all (PaDIR's training step alone compiles in ~10-40 s here), every row starts
  before the deadline (a row runs to its end once admitted), rows that will not fit are
  skipped with a note naming the prediction, and every row finished is in results.jsonl."""
  budget = 12  # below the padir section's first-row prior (20 s), so it must skip
  t0 = time.monotonic()
  proc = _suite(
    tmp_path, "--budget", str(budget), "--sections", "matmul_peak,mlm_forward,glauber,padir"
  )
  out, _ = proc.communicate(timeout=600)
  wall = time.monotonic() - t0
  result = json.loads((tmp_path / "accelerator.json").read_text())
  rows = [r for r in _records(tmp_path / "results.jsonl") if r["kind"] == "row"]
  assert len(rows) == sum(len(sec["rows"]) for sec in result["sections"].values()) > 0
  # a row's wall_s counts from its admission; t_s is when it was written
  starts = [r["t_s"] - r["wall_s"] for r in rows]
  assert max(starts) < budget, (starts, out[-3000:])
  # The time outside rows (imports, models built, the report) is not the budget's to cut: ~5 s
  # quiet here, 26 s beside three trainings; a run that ignored the budget takes minutes.
  assert result["wall_s"] <= 4 * (budget + 5) and wall <= 4 * (budget + 5) + 30, (
    result["wall_s"],
    wall,
    out[-3000:],
  )
  notes = [n for sec in result["sections"].values() for n in sec["notes"]]
  skipped = [n for n in notes if n.startswith("skipped") and "predicted" in n]
  assert skipped, notes


@pytest.mark.slow  # up to five tiny training steps compiled (~25 s each here)
def test_padir_variants_runs_only_when_named_and_times_each_layout(tmp_path):
  """padir_variants is not in the default run and runs when named: one row per layout (the
  default scan, the loop, remat=dots_saveable and full, the stages scanned, twice the batch) or a
  note naming it as skipped, each row's MFU count from the hand count at its own batch. The budget admits the
  first row and, here, cuts some of the rest, so both paths are taken."""
  proc = _suite(tmp_path, "--budget", "45", "--sections", "padir_variants")
  out, _ = proc.communicate(timeout=900)
  assert proc.returncode == 0, out[-3000:]
  result = json.loads((tmp_path / "accelerator.json").read_text())
  assert list(result["sections"]) == ["padir_variants"], out[-2000:]
  sec = result["sections"]["padir_variants"]
  labels = ("(default: scan)", " loop", "remat=dots_saveable", "remat=full", "stages scanned")
  labels += ("B=8 T=12 scan",)
  for label in labels:
    rows = [r for r in sec["rows"] if label in r["case"]]
    skipped = [n for n in sec["notes"] if n.startswith("skipped") and label.strip() in n]
    assert len(rows) == 1 or skipped, (label, sec)
  assert sec["rows"], sec
  b = bench()
  for r in sec["rows"]:
    B = int(r["case"].split("B=")[1].split()[0])
    assert r["hand_gflop"] == pytest.approx(b.padir_step_flops(b.TINY.padir, B, 12, 12) / 1e9)
  assert "padir_variants" not in b.SECTIONS  # the default run leaves it out


def test_a_run_killed_mid_way_keeps_every_finished_row_for_report(tmp_path):
  """Each finished row is appended at once: a run killed (SIGKILL, as a lease's end) after
  some rows leaves them all readable, and --report prints each of them and the roofline."""
  path = tmp_path / "results.jsonl"
  proc = _suite(tmp_path, "--budget", "600", "--sections", "matmul_peak,mlm_forward,glauber")
  deadline = time.monotonic() + 300
  rows = []
  while time.monotonic() < deadline and len(rows) < 4:
    time.sleep(0.5)
    if path.is_file():
      rows = [r for r in _records(path) if r["kind"] == "row"]
  proc.kill()
  proc.communicate()
  assert len(rows) >= 4 and not (tmp_path / "accelerator.json").exists()
  rows = [r for r in _records(path) if r["kind"] == "row"]  # what the kill left
  report = subprocess.run(
    [sys.executable, str(REPO / "benchmarks" / "accelerator.py"), "--report", str(path)],
    cwd=REPO, capture_output=True, text=True, timeout=300,
  )  # fmt: skip
  assert report.returncode == 0, report.stderr[-3000:]
  for r in rows:
    assert r["case"] in report.stdout, (r["case"], report.stdout[-3000:])
  assert "## roofline" in report.stdout and "matmul_peak bfloat16" in report.stdout
  loaded = bench().load_results(path)
  assert [r["case"] for sec in loaded["sections"].values() for r in sec["rows"]] == [
    r["case"] for r in rows
  ]
  assert loaded["peak_tflops"]["bfloat16"] > 0


# ----------------------------------------------------------------------------- roofline


def bench():
  """benchmarks/accelerator.py as a module."""
  spec = importlib.util.spec_from_file_location(
    "_accelerator", REPO / "benchmarks" / "accelerator.py"
  )
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module
  spec.loader.exec_module(module)
  return module


def bert_mid(b) -> dict:
  """A 4-layer d = 256 BERT: matmuls dominate its FLOPs, and it compiles in seconds."""
  return dict(
    b.BERT_BASE, vocab_size=4000, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
    intermediate_size=1024, max_position_embeddings=64,
  )  # fmt: skip


def test_roofline_flops_of_the_mlm_forward_match_a_hand_count():
  """The lowered module's FLOPs of masked_logits (one masked row), lowered for CUDA on this CPU
  (gmlm.lowering.cost: the analysis of a compiled GPU program misses its cuBLAS matmuls), within
  5% of the matmul count from the shapes (benchmarks/mlm_forward.flops_per_sequence; XLA adds
  the elementwise ops)."""
  from gmlm import lowering
  from gmlm import nn as gm

  b = bench()
  B, L, c = 8, 32, bert_mid(b)
  model = b.bert_model(c, "float32")
  tokens = jnp.asarray(b.sequences(B, L, c["vocab_size"]))
  positions = jnp.full((B, 1), L // 2, jnp.int32)
  hand = B * b.load_benchmark("mlm_forward").flops_per_sequence(c, L, rows_in_last_layer=1)
  for platform in ("cuda", None):  # the same count for CUDA and for this CPU
    cost = lowering.cost(gm.masked_logits, model, tokens, positions, platform=platform)
    assert cost.flops == pytest.approx(hand, rel=0.05), (platform, cost.flops / hand, cost)


def test_lowered_flops_do_not_need_the_backend_s_own_analysis(monkeypatch):
  """On a GPU machine jax's Lowered.cost_analysis() returns None (the CUDA plugin sits behind
  the PJRT C API: the first H200 run's counts all read 0). With it made to return None here,
  gmlm.lowering.cost still counts a matmul's 2 n^3 FLOPs and its bytes, for CUDA and here."""
  from gmlm import lowering

  monkeypatch.setattr(jax.stages.Lowered, "cost_analysis", lambda self: None)
  n = 96
  a = jnp.ones((n, n), jnp.float32)
  for platform in ("cuda", None):
    cost = lowering.cost(jax.jit(lambda x: x @ x), a, platform=platform)
    assert cost.flops == 2 * n**3, (platform, cost)
    assert cost.bytes >= 2 * 4 * n * n, (platform, cost)  # one operand read, the output written


def test_roofline_flops_of_the_padir_step_match_a_hand_count():
  """The lowered module's FLOPs of the suite's PaDIR training step (two stages, AdaFactor),
  lowered for CUDA on this CPU, within 5% of padir_step_flops (padir.training.flops: 3x the
  forward's matmuls counted from the model's shapes; XLA adds elementwise ops and the
  optimizer). Nothing is compiled."""
  from gmlm import lowering
  from padir.model import transformer as model_lib

  b = bench()
  c = dict(
    vocab_size=4096,
    num_encoder_layers=1,
    num_decoder_layers=1,
    num_heads=4,
    d_model=512,
    d_ff=2048,
    max_source_length=32,
    max_target_length=32,
  )
  cfg = model_lib.ModelConfig(**c)
  step, state = b.padir_train_step(cfg, "float32")
  batch = b.padir_batch(cfg, 16, 32)
  cost = lowering.cost(step, state, batch, jax.random.key(0), platform="cuda")
  hand = b.padir_step_flops(c, 16, 32, 32)
  assert cost.flops == pytest.approx(hand, rel=0.05), (cost.flops / hand, cost)


@pytest.mark.slow  # measures a matmul peak, a bandwidth and a forward (~30 s)
def test_roofline_predicts_a_compute_bound_forward_within_2x_on_this_cpu():
  """The roofline from this CPU's measured float32 peak and bandwidth predicts a
  compute-bound forward (B = 64, L = 32, d = 512) within 2x of its measured time. At d = 256
  its lowered module's 7.6 FLOP per (unfused) byte sat at this machine's balance (0.43 TFLOP/s
  over 0.055 TB/s measured under xdist, 2026-11-27), and the bound flipped; d = 512 doubles it.
  Measured in a process compiled at XLA's defaults, as a user's run is: the suite's
  fast-compile setting (tests/conftest.py) leaves elementwise code unvectorized, and its
  bandwidth a tenth of the machine's (0.006 TB/s), which would flip the bound."""
  run_at_xla_defaults(__file__, "roofline_of_a_compute_bound_forward")


def roofline_of_a_compute_bound_forward():
  """The test above's measurement and assertions (run in its own process)."""
  from gmlm import nn as gm

  b = bench()
  sizes = dataclasses.replace(b.TINY, peak_n=1024, stream_mb=256, min_seconds=1.0)
  ctx = b.Context(sizes, tiny=False)
  peak = b.Section("matmul_peak", 900)
  b.section_matmul_peak(ctx, peak)
  forward = b.Section("mlm_forward", 900)
  wide = dict(bert_mid(b), hidden_size=512, num_attention_heads=8, intermediate_size=2048)
  model, B, L = b.bert_model(wide, "float32"), 64, 32
  compile_s, _, cost = b.forward_rate(ctx, model, "float32", B, L)
  tokens = jnp.asarray(b.sequences(B, L, model.config.vocab_size, B))
  positions = jnp.full((B, 1), L // 2, jnp.int32)
  call = lambda: b.block(gm.masked_logits(model, tokens, positions))
  best = min(b._once(call) for _ in range(5))  # the peak's statistic: load only slows a call
  # the peak again, after the forward, and the lower of the two: the load the forward ran under
  # (under pytest-xdist another worker may have been idle for the first and busy for the second)
  before = dict(ctx.peak_tflops)
  b.section_matmul_peak(ctx, b.Section("matmul_peak", 900))
  ctx.peak_tflops = {k: min(v, before.get(k, v)) for k, v in ctx.peak_tflops.items()}
  forward.row(f"float32 B={B} L={L}", compile_s, best, cost, "float32")
  rows = b.roofline(ctx, {"mlm_forward": dict(rows=forward.rows)}, "cpu")
  (r,) = rows
  assert r["here_bound"] == "compute", r
  assert r["within_2x"], (r, ctx.peak_tflops, ctx.tb_per_s)


@pytest.mark.slow  # compiles 8 small programs on 8 simulated devices (~1-3 min)
def test_plan_tiny_compiled_memory_agrees_with_the_arithmetic(tmp_path):
  """--plan --tiny: every option on 1 and 8 devices compiled; the compiled arguments are the
  arithmetic's parameters and optimizer state (within 2%: keys, counters) plus the batch; the
  compiled peak within 2x of the arithmetic's total; 64 devices by arithmetic alone."""
  proc = subprocess.run(
    [
      sys.executable,
      str(REPO / "benchmarks" / "accelerator.py"),
      "--plan",
      "--tiny",
      "--out",
      str(tmp_path),
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=1500,
    env={**os.environ, "PYTHONPATH": str(REPO)},
  )
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  plan = json.loads((tmp_path / "plan.json").read_text())
  rows = plan["rows"]
  compiled = [r for r in rows if r["devices"] in (1, 8)]
  assert len(compiled) == 8 and all("compiled_gb" in r for r in compiled), compiled
  assert all("compiled_gb" not in r for r in rows if r["devices"] == 64)
  batch = 2 * 16 * 8 * 4  # inputs and targets, int32
  for r in compiled:
    assert 0.5 <= r["compiled_vs_arithmetic"] <= 2, r
    if r["what"] == "padir":
      state = r["params"] + r["optimizer"]
      held = r["compiled_arguments_gb"] * 1e9 - batch / r["data"]
      assert held == pytest.approx(state, rel=0.02), (held, r)
  by = {(r["what"], r["devices"], r["data"], r["model"], r["rule"]): r for r in rows}
  assert by["padir", 8, 4, 2, "fsdp"]["params"] < by["padir", 8, 8, 1, "replicated"]["params"]
  assert by["padir", 8, 1, 8, "fsdp"]["params"] < by["padir", 8, 4, 2, "fsdp"]["params"]
  assert plan["fewest_h100"]["padir"]["devices"] == 1


# ----------------------------------------------------------------------------- model parity


def fixture_model(arch: str):
  """(our model loaded from the fixture's checkpoint, tokens, mask, reference logits)."""
  from safetensors.numpy import save_file

  from gmlm import nn as gm

  f = np.load(FIXTURES / f"{arch}.npz")
  with tempfile.TemporaryDirectory() as d:
    (pathlib.Path(d) / "config.json").write_text(str(f["config_json"]))
    save_file(
      {k[2:]: f[k] for k in f.files if k.startswith("w/")},
      str(pathlib.Path(d) / "model.safetensors"),
      metadata={"format": "pt"},
    )
    model = gm.load_model(d)
  return model, f["tokens"], f["mask"], f["logits"]


def our_logits(arch: str, model, tokens, mask) -> np.ndarray:
  from gmlm import nn as gm

  fn = gm.causal_logits if arch in CAUSAL else gm.full_logits
  return np.asarray(fn(model, jnp.asarray(tokens), jnp.asarray(mask)))


def _parity(arch: str, precision: str, tolerance: float) -> None:
  model, tokens, mask, ref = fixture_model(arch)
  with jax.default_matmul_precision(precision):
    ours = our_logits(arch, model, tokens, mask)
  assert ours.shape == ref.shape and np.abs(ref).max() > 0.5
  real = mask == 1
  scale = max(1.0, float(np.abs(ref).max()))
  err = float(np.abs(ours[real] - ref[real]).max())
  assert err <= tolerance * scale, f"{arch} at {precision} on {jax.default_backend()}: {err:.3g}"


@pytest.mark.accelerator
@pytest.mark.parametrize("arch", ARCHS)
def test_parity_highest(arch):
  """float32 at the highest precision: the CPU tolerance of tests/gmlm/test_models_parity.py."""
  _parity(arch, "highest", 1e-4)


@pytest.mark.accelerator
@pytest.mark.parametrize("arch", ARCHS)
def test_parity_default_precision(arch):
  """The backend's default float32 matmuls (TF32 on NVIDIA: 10 mantissa bits, relative error
  ~5e-4 per product, compounded over the layers): a gross error (a wrong kernel, a layout
  bug) is O(1) relative to the logits, far above 1e-2."""
  _parity(arch, "default", 1e-2)


# ----------------------------------------------------------------------------- sampler laws


@pytest.mark.accelerator
@pytest.mark.parametrize("k", [1, 2])
def test_ising_exactness(k):
  """t steps of k-Gibbs from a few starts: the empirical law of (start, end) vs the rows of
  the exact P^t (ising.exact), within the 0.999 quantile of the TV null."""
  from ising import exact, samplers
  from ising import model as ising_model

  rng = np.random.default_rng(0)
  n, t, per_start = 4, 3, 8192
  A = rng.standard_normal((n, n))
  J = (A + A.T) / 2
  np.fill_diagonal(J, 0)
  m = ising_model.ising(0.5 * rng.standard_normal(n), 0.6 * J)
  states = ising_model.all_states(n)
  starts = np.array([0, 5, 10, 15])
  x0 = np.repeat(states[starts], per_start, axis=0)
  x = np.asarray(samplers.sample(jax.random.key(k), m, x0, t, method="gibbs", k=k))
  end = ising_model.state_index(x).reshape(len(starts), per_start)
  counts = np.stack([np.bincount(e, minlength=2**n) for e in end])
  P_t = np.linalg.matrix_power(exact.kgibbs_transition_matrix(m, k), t)[starts]
  tv, bound = joint_tv(P_t, counts), tv_null_quantile(P_t, counts.sum(-1))
  assert tv <= bound, f"k={k}: TV {tv:.4f} > null 0.999 quantile {bound:.4f}"


def bf16_twin(model):
  """The same weights (float32 masters) computing in bfloat16."""
  import dataclasses

  from flax import nnx

  from gmlm import nn as gm

  twin = gm.Bert(dataclasses.replace(model.config, dtype=jnp.bfloat16), nnx.Rngs(0))
  nnx.update(twin, nnx.state(model, nnx.Param))
  return twin


@pytest.mark.accelerator
def test_bf16_glauber_draws_the_exact_law():
  """One Glauber step from 8 starts, 8,192 chains each, with the tiny MLM computing in bf16:
  the empirical law of (start, next state) vs the exact float64 law of the float32 weights
  (glauber_util.transition_matrix), within the 0.999 quantile of the TV null. The one-step law
  lives on n (C - 1) + 1 = 21 states per start, so the test resolves TV ~0.01, while bf16
  moves a conditional probability by up to ~1e-2 (checked nonzero: bf16 is really used)."""
  from glauber_util import (
    ALL_STATES,
    exact_conditionals,
    sequences,
    spec,
    state_index,
    tiny_mlm,
    transition_matrix,
  )

  from glauber import chains

  model = tiny_mlm()
  twin = bf16_twin(model)
  cond_f32, cond_bf16 = exact_conditionals(model), exact_conditionals(twin)
  change = float(np.abs(cond_bf16 - cond_f32).max())
  assert 0 < change < 0.05, change
  P = transition_matrix(cond_f32)
  starts = np.random.default_rng(3).choice(len(ALL_STATES), 8, replace=False)
  per_start = 8192
  x0 = np.repeat(sequences(ALL_STATES[starts]), per_start, axis=0)
  out, _ = chains.run(jax.random.key(7), twin, spec(1.0), chains.init_state(x0), 1, 1)
  end = state_index(np.asarray(spec(1.0).free(out.tokens_BL))).reshape(len(starts), per_start)
  counts = np.stack([np.bincount(e, minlength=len(ALL_STATES)) for e in end])
  tv, bound = joint_tv(P[starts], counts), tv_null_quantile(P[starts], counts.sum(-1))
  exact_gap = joint_tv(P[starts], per_start * transition_matrix(cond_bf16)[starts])
  assert tv <= bound, (
    f"TV {tv:.4f} > null 0.999 quantile {bound:.4f} (exact bf16 vs f32 law: {exact_gap:.4f})"
  )


# ----------------------------------------------------------------------------- devices


def _mesh_size(num_chains: int) -> int:
  n = jax.device_count()
  while n > 1 and num_chains % n:
    n -= 1
  return n


@pytest.mark.accelerator
def test_one_vs_n_devices_same_chains():
  """Glauber (plain and rejection-free) and Ising chains sharded over N devices equal the
  unsharded run (the key schedule does not depend on the sharding)."""
  size = _mesh_size(16)
  if size < 2:
    pytest.skip(f"{jax.device_count()} device(s): nothing to compare")
  from glauber_util import device_run

  from gmlm.core import mesh as mesh_lib
  from ising import model as ising_model
  from ising import samplers

  mesh = mesh_lib.make_mesh(size, 1, jax.devices()[:size])
  one, many = device_run(None), device_run(mesh)
  for name in one:
    np.testing.assert_array_equal(one[name], many[name], err_msg=name)
  m = ising_model.clique_model(8, 4, 1.0, 1.0)
  x0 = np.asarray(samplers.random_states(jax.random.key(0), 16, 8))
  a = samplers.sample(jax.random.key(1), m, x0, 20, k=2)
  b = samplers.sample(jax.random.key(1), m, x0, 20, k=2, mesh=mesh)
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
