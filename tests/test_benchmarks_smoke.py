"""Smoke test: the throughput benchmark runs end to end on small sizes and prints its ratios."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import xla_flags

ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(script: str, *args: str, timeout: int, xla_defaults: bool = False) -> str:
  """stdout of `python benchmarks/SCRIPT ARGS` run from the repository root; it must exit 0.
  xla_defaults: compiled at XLA's defaults (a benchmark whose time is running, not compiling),
  not at the suite's fast-compile setting (tests/conftest.py)."""
  env = {**os.environ, "XLA_FLAGS": xla_flags(0, xla_defaults=True)} if xla_defaults else None
  proc = subprocess.run(
    [sys.executable, str(ROOT / "benchmarks" / script), *args],
    capture_output=True,
    text=True,
    timeout=timeout,
    cwd=ROOT,
    env=env,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stdout


@pytest.mark.slow  # a benchmark end to end in a child interpreter
def test_ising_throughput_quick_runs_and_prints_ratios():
  out = run_benchmark(
    "ising_throughput.py", "--quick", "--skip-thrml", "--repeats", "1", "--rounds", "1", timeout=120
  )
  assert "spin updates/s" in out
  for model in ("clique", "dense"):
    for k in (1, 2, 4):
      assert re.search(rf"ratio ours/numpy\s+{model}\s+k={k}\s+\d+\.\d+x", out), out
  assert "FAILED" not in out and "thrml    sweep" not in out


@pytest.mark.slow  # a benchmark end to end in a child interpreter
def test_rectangle_tiny_runs_and_prints_the_ratio_and_parity():
  out = run_benchmark("rectangle.py", "--tiny", timeout=300)
  assert re.search(r"ratio ours/torch \d+\.\dx", out), out
  gap = float(re.search(r"max \|dR ours - dR torch\| = (\S+)", out).group(1))
  assert gap < 1e-4, out  # the same weights give the same dR (float32)
  assert "peak RSS" in out


@pytest.mark.slow  # a benchmark end to end in a child interpreter
def test_padir_speed_tiny_runs_and_prints_ratios():
  out = run_benchmark("padir_speed.py", "--tiny", timeout=600)
  assert re.search(r"\| padir-4 \| [\d.]+ \| [\d.]+ \| [\d.]+ \|", out), out
  for name in ("padir-4", "padir-4-trim8", "ar-greedy"):
    assert re.search(rf"ratio vs ar-greedy\s+{name}\s+p50 \d+\.\d+x\s+p99 \d+\.\d+x", out), out
  assert re.search(r"ratio vs ar-greedy\s+ar-greedy\s+p50 1\.00x\s+p99 1\.00x", out), out
  assert re.search(
    r"padir-4 at batch 1, where the time goes .* the floor, encoder \+ 2 passes = "
    r"[\d.]+ ms, against AR greedy's p50 [\d.]+ ms",
    out,
  ), out


@pytest.mark.slow  # a benchmark end to end in a child interpreter
def test_padir_speed_by_width_tiny_prints_a_row_per_width_and_the_call_floor():
  out = run_benchmark("padir_speed.py", "--by-width", "--tiny", "--repeats", "2", timeout=600)
  assert "tiny-ctc: ctc-S1-trim8, batch 1, 2 decodes a source" in out, out
  assert re.search(r"\| all \| - \| 8 \| 16 \|", out), out
  assert re.search(r"\| 8 \| 16 \| \d+ \| \d+ \|", out), out
  assert re.search(r"a jitted identity call with the same arguments: \d+\.\d+ ms", out), out


@pytest.mark.slow  # a benchmark end to end in a child interpreter
def test_padir_speed_frontier_tiny_prints_the_table_and_writes_the_figure(tmp_path):
  out = run_benchmark(
    "padir_speed.py",
    "--frontier",
    "--tiny",
    "--lengths",
    "1,2",
    "--passes",
    "1,2",
    "--out",
    str(tmp_path),
    "--single-thread",
    "--repeats",
    "2",
    timeout=900,
  )
  for family, decoder in (
    ("PaDIR", "padir-L1-S1"),
    ("PaDIR", "padir-L2-S2-trim8"),
    ("AR", "greedy"),
    ("AR", "greedy-trim8"),
    ("AR", "beam5"),
    ("PyTorch AR", "torch-greedy"),
    ("deep-shallow AR", "greedy"),
    ("deep-shallow AR", "greedy-trim8"),
  ):
    assert re.search(
      rf"\| \*? ?\| {re.escape(family)} \| tiny-\S+ \| {decoder} \| [\d.]+ \|", out
    ), out
  assert out.count("| * |") >= 1  # at least one Pareto-optimal row
  # Every row's paired bootstrap against AR greedy, which is 0 against itself.
  assert re.search(r"\| AR \| tiny-\S+ \| greedy \|.*\| \+0\.00 \[\+0\.00, \+0\.00\] \|", out), out
  assert re.search(
    r"baseline \(AR greedy, the lower p50\): greedy(-trim8)?; the lower p99: greedy(-trim8)?\n", out
  ), out
  assert out.count("] |") >= 6
  assert re.search(r"GEMM \[512x512\] x \[512x512\]: XLA [\d.]+ GF/s, PyTorch [\d.]+ GF/s", out)
  assert (tmp_path / "frontier.png").stat().st_size > 10_000
  saved = json.loads((tmp_path / "frontier.json").read_text())
  # --single-thread reaches XLA before jax is imported, and is recorded with the results.
  assert saved["single_thread"] is True
  assert "--xla_cpu_multi_thread_eigen=false" in saved["xla_flags"]
  # The JAX rows' latencies pool --repeats decodes of each source; PyTorch's is timed apart, once.
  assert saved["repeats"] == 2 and saved["sentences"] == 4
  for row in saved["rows"]:
    assert row["decodes"] == (4 if row["family"] == "PyTorch AR" else 8), row["decoder"]


@pytest.mark.slow  # a benchmark end to end in a child interpreter
def test_padir_options_tiny_prints_one_row_per_variant_against_the_paper_row():
  out = run_benchmark("padir_options.py", "--tiny", timeout=600)
  for name in ("paper", "drop=reset", "rerank=ar"):
    assert re.search(rf"\| {re.escape(name)} \| 5 \| [\d.]+ \| [\d.]+ \|", out), out
  # The paper row is the reference of the difference columns: 0 BLEU and speed 1 against itself.
  assert re.search(r"\| paper \| 5 \|( [\d.e-]+ \|){6} 0 \| 1 \|", out), out


@pytest.mark.slow  # two frameworks imported, ~5 programs compiled
def test_unmasking_tiny_prints_each_samplers_ratio_overhead_and_the_gemm_ceiling():
  """One chain count (the table's code is the same for each)."""
  out = run_benchmark(
    "unmasking.py", "--tiny", "--chains", "8", "--repeats", "1", "--single_thread", timeout=600
  )
  assert not re.search(r"\s16 \|", out), out  # --chains replaces --tiny's 8,16
  for B in (8,):
    for name in ("ancestral random", "ancestral confidence", "parallel S=4 cosine confidence"):
      floor = r"-?[\d.]+%" if "confidence" in name else "-"  # the rule floor: confidence only
      assert re.search(
        rf"{re.escape(name)}\s+{B} \|\s+[\d.]+\s+[\d.]+\s+[\d.]+x \|\s+-?[\d.]+% \|\s+-?[\d.]+%"
        rf" \|\s+{floor}$",
        out,
        re.M,
      ), out
    assert re.search(rf"glauber \(n steps\)\s+{B} \|", out), out
    assert re.search(
      rf"GEMM at the model's shapes, {B} chains: XLA [\d.]+ GF/s, PyTorch [\d.]+ GF/s: ceiling ratio ours/torch [\d.]+x",
      out,
    ), out
  assert "peak RSS" in out
