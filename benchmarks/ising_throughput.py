"""Spin-update throughput of our Ising samplers vs a vectorized numpy sampler vs thrml.

Throughput unit: spin updates per second, summed over chains. One step of k-Gibbs resamples
one block of k sites per chain from its exact joint conditional, i.e. k spin updates per chain
(Glauber = k-Gibbs with k = 1: one uniformly random site per chain per step). A thrml sweep
resamples every one of the N sites once per chain: N spin updates per chain per sweep.

Samplers, all on the same model and the same number of chains:
  ours    `ising.samplers.sample` (JAX, jitted lax.scan over steps).
  numpy   a vectorized numpy sampler written here: the same algorithm (per step a uniformly
          random block per chain, external fields by gathering rows of J, a draw from the
          exact block conditional over its 2^k configurations by inverting the CDF with one
          uniform; for k = 1 that is u < sigmoid(2 f)), float32 throughout.
  thrml   thrml 0.1.4's IsingEBM / IsingSamplingProgram (block Gibbs over a fixed sequence of
          blocks, vmapped over chains). Its block update draws every spin of a block
          independently given the rest, which is a Gibbs update only when the block is an
          independent set, and its blocks are fixed, not drawn at random. So its closest
          equivalent of Glauber is a systematic sweep of single-spin blocks ("sweep-1"), and of
          block Gibbs a chromatic sweep ("chromatic": each block an independent set of the
          coupling graph). Random k-subsets with a joint 2^k-configuration draw (our k-Gibbs)
          have no thrml counterpart.

Each (model, sampler) pair runs in its own subprocess so that its peak RSS (ru_maxrss) is its
own. Every timing is taken after a warm-up run of the same shape (which compiles), as the best
of --repeats runs, with block_until_ready.

  python benchmarks/ising_throughput.py                 # full run (a few minutes)
  python benchmarks/ising_throughput.py --quick --skip-thrml
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
  sys.path.insert(0, str(REPO_ROOT))

SAMPLERS = ("ours", "numpy", "thrml")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  name: str
  kind: str  # "clique" | "dense"
  n: int
  num_chains: int
  steps: int  # sampler steps per timed run (ours, numpy)
  thrml: bool = True  # whether thrml can run this model within a sane compile time
  thrml_note: str = ""


def model_specs(args: argparse.Namespace) -> list[ModelSpec]:
  if args.quick:
    return [
      ModelSpec("clique", "clique", 10, 4096, args.steps or 20),
      ModelSpec("dense", "dense", 64, 256, args.steps or 10),
    ]
  dense_note = (
    "dense graph: chromatic number N, so thrml needs N single-spin blocks; it unrolls "
    "one update per block into the traced sweep and its XLA compile grows "
    "super-linearly in N (N=100: ~45 s, N=300: > 4 min), so N=1000 is not run; see "
    "the dense-100 row"
  )
  return [
    ModelSpec("clique", "clique", 10, 65_536, args.steps or 100),
    ModelSpec("dense", "dense", 1000, 4096, args.steps or 20, thrml=False, thrml_note=dense_note),
    ModelSpec("dense-100", "dense", 100, 4096, args.steps or 200),
  ]


def model_arrays(spec: ModelSpec) -> tuple[np.ndarray, np.ndarray]:
  """(h[N], J[N, N]) in float32 with our convention phi(x) = h.x + x^T J x (ordered pairs)."""
  if spec.kind == "clique":
    from ising.model import clique_model

    m = clique_model(spec.n, clique_size=4, coupling=1.0, field_in=5.0, field_out=5.0)
    return np.asarray(m.h, np.float32), np.asarray(m.J, np.float32)
  rng = np.random.default_rng(1234 + spec.n)
  A_NN = rng.standard_normal((spec.n, spec.n), dtype=np.float32)
  J_NN = (A_NN + A_NN.T) * np.float32(1.0 / math.sqrt(2.0 * spec.n))  # symmetric, J_ij ~ N(0, 1/N)
  np.fill_diagonal(J_NN, 0.0)
  h_N = rng.standard_normal(spec.n, dtype=np.float32) * np.float32(0.5)
  assert J_NN.dtype == np.float32 and h_N.dtype == np.float32
  return h_N, J_NN


def initial_spins(spec: ModelSpec) -> np.ndarray:
  return np.where(np.random.default_rng(7).random((spec.num_chains, spec.n)) < 0.5, 1, -1).astype(
    np.int8
  )


def peak_rss_mib() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def best_time(run: Callable[[], object], repeats: int) -> tuple[float, float]:
  """(warm-up seconds incl. compile, best of `repeats` timed seconds)."""
  t0 = time.perf_counter()
  run()
  warmup = time.perf_counter() - t0
  best = math.inf
  for _ in range(repeats):
    t0 = time.perf_counter()
    run()
    best = min(best, time.perf_counter() - t0)
  return warmup, best


# ----------------------------------------------------------------------------- numpy sampler


class NumpyGibbs:
  """Vectorized numpy k-Gibbs (k = 1: Glauber) on all chains at once, float32 throughout."""

  def __init__(self, h_N: np.ndarray, J_NN: np.ndarray, seed: int = 0):
    self.h_N = np.ascontiguousarray(h_N, np.float32)
    self.J_NN = np.ascontiguousarray(J_NN, np.float32)
    self.n = self.h_N.shape[0]
    self.rng = np.random.default_rng(seed)

  def random_blocks(self, num_chains: int, k: int) -> np.ndarray:
    """Uniform random k-subsets as int64[k, B]: draw j is the r-th site not drawn before,
    r ~ U[0, N - j) (the law of ours; k x B layout keeps numpy's loops long)."""
    sites_KB = np.empty((k, num_chains), np.int64)
    for j in range(k):
      r_B = self.rng.integers(0, self.n - j, num_chains)
      for prev_B in np.sort(sites_KB[:j], axis=0):  # skip the used sites, smallest first
        r_B += r_B >= prev_B
      sites_KB[j] = r_B
    return sites_KB

  def glauber_step(self, x_BN: np.ndarray, offsets_B: np.ndarray, J_buf_BN: np.ndarray) -> None:
    B = x_BN.shape[0]
    s_B = self.rng.integers(0, self.n, B)
    np.take(self.J_NN, s_B, axis=0, out=J_buf_BN)  # gather rows J[s]
    f_B = self.h_N[s_B] + np.float32(2.0) * np.einsum("bn,bn->b", J_buf_BN, x_BN)
    p_B = np.float32(1.0) / (np.float32(1.0) + np.exp(np.float32(-2.0) * f_B))
    u_B = self.rng.random(B, dtype=np.float32)
    np.put(x_BN, offsets_B + s_B, np.where(u_B < p_B, np.float32(1.0), np.float32(-1.0)))

  def block_step(
    self, x_BN: np.ndarray, offsets_B: np.ndarray, y_CK: np.ndarray, yy_CP: np.ndarray
  ) -> None:
    """Config-major [C, B] / site-major [K, B] layouts: numpy is slow along short last axes."""
    B, k, n = x_BN.shape[0], y_CK.shape[1], self.n
    s_KB = self.random_blocks(B, k)
    J_KBN = np.take(self.J_NN, s_KB, axis=0)  # rows J[s_a]
    J_KKB = np.take(self.J_NN.reshape(-1), s_KB[:, None, :] * n + s_KB[None, :, :])
    x_KB = np.take(x_BN, offsets_B + s_KB)
    e_KB = self.h_N[s_KB] + np.float32(2.0) * (
      np.einsum("kbn,bn->kb", J_KBN, x_BN) - np.einsum("klb,lb->kb", J_KKB, x_KB)
    )
    logits_CB = y_CK @ e_KB + yy_CP @ J_KKB.reshape(k * k, B)
    cdf_CB = np.cumsum(np.exp(logits_CB - logits_CB.max(axis=0)), axis=0)
    u_B = self.rng.random(B, dtype=np.float32)
    c_B = np.minimum((cdf_CB <= u_B * cdf_CB[-1]).sum(axis=0), y_CK.shape[0] - 1)
    np.put(x_BN, offsets_B + s_KB, self.y_KC[:, c_B])

  def run(self, x0_BN: np.ndarray, num_steps: int, k: int) -> np.ndarray:
    x_BN = x0_BN.astype(np.float32)  # float32 spins: the row dot products stay in float32
    B = x_BN.shape[0]
    offsets_B = np.arange(B) * self.n  # flat index of each chain's site 0
    if k == 1:
      J_buf_BN = np.empty_like(x_BN)
      for _ in range(num_steps):
        self.glauber_step(x_BN, offsets_B, J_buf_BN)
    else:
      from ising.model import block_configs  # bit a of c <-> spin a, as ours

      y_CK = block_configs(k).astype(np.float32)
      self.y_KC = np.ascontiguousarray(y_CK.T)
      yy_CP = np.einsum("ck,cl->ckl", y_CK, y_CK).reshape(-1, k * k)
      for _ in range(num_steps):
        self.block_step(x_BN, offsets_B, y_CK, yy_CP)
    assert x_BN.dtype == np.float32
    return x_BN.astype(np.int8)


# ----------------------------------------------------------------------------- workers


def run_ours(spec: ModelSpec, ks: list[int], repeats: int, unroll: int | None = None) -> list[dict]:
  """ising.samplers at block sizes ks; unroll: steps per loop iteration (None: the sampler's
  default, samplers.UNROLL)."""
  import jax
  import jax.numpy as jnp

  from ising import model as ising_model
  from ising import samplers

  h_N, J_NN = model_arrays(spec)
  model = ising_model.ising(h_N, J_NN)
  x0_BN = jnp.asarray(initial_spins(spec))
  key = jax.random.key(0)
  rows = []
  for k in ks:
    extra = {} if unroll is None else {"unroll": unroll}
    run = lambda: samplers.sample(key, model, x0_BN, spec.steps, k=k, **extra).block_until_ready()
    warmup, best = best_time(run, repeats)
    rows.append(
      dict(
        method=f"k={k}" + ("" if unroll is None else f" unroll={unroll}"),
        updates=spec.num_chains * k * spec.steps,
        seconds=best,
        compile_s=warmup - best,
        rss_mib=peak_rss_mib(),
      )
    )
  return rows


def run_numpy(spec: ModelSpec, ks: list[int], repeats: int) -> list[dict]:
  h_N, J_NN = model_arrays(spec)
  sampler = NumpyGibbs(h_N, J_NN)
  x0_BN = initial_spins(spec)
  rows = []
  for k in ks:
    sampler.run(x0_BN, 1, k)  # warm-up (first-touch allocations)
    best = math.inf
    for _ in range(repeats):
      t0 = time.perf_counter()
      sampler.run(x0_BN, spec.steps, k)
      best = min(best, time.perf_counter() - t0)
    rows.append(
      dict(
        method=f"k={k}",
        updates=spec.num_chains * k * spec.steps,
        seconds=best,
        compile_s=0.0,
        rss_mib=peak_rss_mib(),
      )
    )
  return rows


def chromatic_blocks(J_NN: np.ndarray) -> list[list[int]]:
  """Greedy coloring of the coupling graph: each color class is an independent set."""
  n = J_NN.shape[0]
  color = [-1] * n
  for i in range(n):
    used = {color[j] for j in range(n) if J_NN[i, j] != 0 and color[j] >= 0}
    color[i] = next(c for c in range(n) if c not in used)
  return [[i for i in range(n) if color[i] == c] for c in range(max(color) + 1)]


def run_thrml(spec: ModelSpec, ks: list[int], repeats: int) -> list[dict]:
  import equinox as eqx
  import jax
  import jax.numpy as jnp
  import thrml
  from thrml.models import IsingEBM, IsingSamplingProgram

  h_N, J_NN = model_arrays(spec)
  n, B = spec.n, spec.num_chains
  nodes = [thrml.SpinNode() for _ in range(n)]
  i_E, j_E = np.nonzero(np.triu(J_NN, 1))
  # thrml: E(s) = -beta (sum_i b_i s_i + sum_{edges i<j} w_ij s_i s_j), spin Gibbs update
  # P(s_i = +1) = sigmoid(2 gamma_i), gamma_i = b_i + sum_j w_ij s_j. Ours sums J over ordered
  # pairs, so w_ij = 2 J_ij and b = h give gamma_i = f_i, the same conditional.
  ebm = IsingEBM(
    nodes,
    [(nodes[i], nodes[j]) for i, j in zip(i_E, j_E)],
    jnp.asarray(h_N),
    jnp.asarray(2.0 * J_NN[i_E, j_E], jnp.float32),
    jnp.float32(1.0),
  )
  x0_BN = initial_spins(spec) > 0
  schemes = {"sweep-1": [[i] for i in range(n)], "chromatic": chromatic_blocks(J_NN)}
  rows = []
  seen: set[int] = set()
  for label, site_blocks in schemes.items():
    if len(site_blocks) in seen:  # dense graph: chromatic == single-spin sweep
      continue
    seen.add(len(site_blocks))
    blocks = [thrml.Block([nodes[i] for i in b]) for b in site_blocks]
    program = IsingSamplingProgram(ebm, blocks, [])
    sweeps = max(1, round(spec.steps / n))  # about as many updates per chain as Glauber's run
    schedule = thrml.SamplingSchedule(n_warmup=sweeps, n_samples=1, steps_per_sample=1)
    everything = [thrml.Block(nodes)]

    @eqx.filter_jit
    def sweep_all(key, init_blocks):
      keys_B = jax.random.split(key, B)
      return jax.vmap(
        lambda k_, i_: thrml.sample_states(k_, program, schedule, i_, [], everything)
      )(keys_B, init_blocks)

    init_blocks = [jnp.asarray(x0_BN[:, b]) for b in site_blocks]
    key = jax.random.key(0)
    run = lambda: jax.block_until_ready(sweep_all(key, init_blocks))
    warmup, best = best_time(run, repeats)
    rows.append(
      dict(
        method=f"{label} ({len(site_blocks)} blocks)",
        updates=B * n * sweeps,
        seconds=best,
        compile_s=warmup - best,
        rss_mib=peak_rss_mib(),
      )
    )
  return rows


def worker(args: argparse.Namespace) -> None:
  spec = next(s for s in model_specs(args) if s.name == args.model)
  rss_start = peak_rss_mib()
  fn = {"ours": run_ours, "numpy": run_numpy, "thrml": run_thrml}[args.worker]
  rows = fn(spec, args.ks, args.repeats)
  print("RESULT " + json.dumps(dict(rows=rows, rss_import_mib=rss_start)), flush=True)


# ----------------------------------------------------------------------------- driver


def spawn(args: argparse.Namespace, sampler: str, spec: ModelSpec) -> dict | None:
  cmd = [
    sys.executable,
    os.path.abspath(__file__),
    "--worker",
    sampler,
    "--model",
    spec.name,
    "--repeats",
    str(args.repeats),
    "--ks",
    *map(str, args.ks),
  ]
  if args.quick:
    cmd.append("--quick")
  if args.steps:
    cmd += ["--steps", str(args.steps)]
  proc = subprocess.run(cmd, capture_output=True, text=True)
  for line in proc.stdout.splitlines():
    if line.startswith("RESULT "):
      return json.loads(line[len("RESULT ") :])
  print(f"  [{sampler} on {spec.name} failed]\n{proc.stderr[-2000:]}", file=sys.stderr)
  return None


def merge_best(a: dict | None, b: dict | None) -> dict | None:
  """Per method, the faster of two rounds; the peak RSS over both."""
  if a is None or b is None:
    return a or b
  rows = []
  for ra, rb in zip(a["rows"], b["rows"]):
    best = dict(ra if ra["seconds"] <= rb["seconds"] else rb)
    best["rss_mib"] = max(ra["rss_mib"], rb["rss_mib"])
    rows.append(best)
  return dict(rows=rows, rss_import_mib=max(a["rss_import_mib"], b["rss_import_mib"]))


def fmt_rate(r: float | None) -> str:
  return "-" if r is None else f"{r / 1e6:9.2f}M"


def main(argv: list[str] | None = None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument(
    "--steps", type=int, default=0, help="sampler steps per timed run (0 = per-model default)"
  )
  p.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
  p.add_argument("--skip-thrml", action="store_true")
  p.add_argument(
    "--repeats", type=int, default=3, help="timed runs after the warm-up; the best is kept"
  )
  p.add_argument(
    "--rounds",
    type=int,
    default=3,
    help="subprocess rounds per sampler, interleaved across samplers; the best is kept",
  )
  p.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4], help="block sizes (1 = Glauber)")
  p.add_argument("--worker", choices=SAMPLERS, help=argparse.SUPPRESS)
  p.add_argument("--model", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.worker:
    return worker(args)

  import platform

  print(
    f"# Ising sampler throughput  (python {platform.python_version()}, numpy {np.__version__}, "
    f"{os.cpu_count()} CPUs{', quick' if args.quick else ''})"
  )
  print(
    "# unit: spin updates/s summed over chains; one k-Gibbs step = k spin updates per chain "
    "(Glauber: k = 1, one random site per chain per step); one thrml sweep = N updates per chain"
  )
  print(
    f"# time: best of {args.rounds} interleaved rounds x {args.repeats} runs, each after a "
    "warm-up/compile run (shared, loaded CPUs: expect +-30% noise); RSS: peak ru_maxrss of "
    "the sampler's own subprocess, [its value at process start]"
  )
  for spec in model_specs(args):
    samplers = ["ours", "numpy"] + ([] if args.skip_thrml or not spec.thrml else ["thrml"])
    res = {s: None for s in samplers}
    for _ in range(args.rounds):  # alternate the samplers so that load drifts hit them alike
      for s in samplers:
        if res[s] is not None and max(r["compile_s"] for r in res[s]["rows"]) > 30.0:
          continue  # thrml's long compiles: one round
        res[s] = merge_best(res[s], spawn(args, s, spec))
    print(
      f"\n## model {spec.name}: {spec.kind} N={spec.n}, {spec.num_chains} chains, "
      f"{spec.steps} steps/run"
    )
    print(
      f"{'sampler':8s} {'method':22s} {'updates/s':>10s} {'ns/update':>10s} {'compile s':>9s} "
      f"{'peak RSS MiB':>16s}"
    )
    rate: dict[tuple[str, str], float] = {}
    for s in samplers:
      if res[s] is None:
        print(f"{s:8s} FAILED")
        continue
      for row in res[s]["rows"]:
        r = row["updates"] / row["seconds"]
        rate[s, row["method"]] = r
        print(
          f"{s:8s} {row['method']:22s} {fmt_rate(r):>10s} {1e9 / r:10.2f} {row['compile_s']:9.2f} "
          f"{row['rss_mib']:8.0f} [{res[s]['rss_import_mib']:5.0f}]"
        )
    if not spec.thrml and not args.skip_thrml:
      print(f"thrml    not run: {spec.thrml_note}")
    for k in args.ks:
      m = f"k={k}"
      if ("ours", m) in rate and ("numpy", m) in rate:
        print(f"ratio ours/numpy  {spec.name:9s} {m:5s} {rate['ours', m] / rate['numpy', m]:7.2f}x")
    thrml_rows = [(m, r) for (s, m), r in rate.items() if s == "thrml"]
    if ("ours", "k=1") in rate:
      for m, r in thrml_rows:
        print(
          f"ratio ours/thrml  {spec.name:9s} ours k=1 vs thrml {m}: {rate['ours', 'k=1'] / r:7.2f}x"
        )
    report_targets(spec, args.ks, rate)


def report_targets(spec: ModelSpec, ks: list[int], rate: dict[tuple[str, str], float]) -> None:
  """The targets: clique >= 2x numpy and >= 1x thrml; dense N=1000 within 1.5x of numpy."""
  checks = []
  for k in ks:
    m = f"k={k}"
    if ("ours", m) not in rate or ("numpy", m) not in rate:
      continue
    r = rate["ours", m] / rate["numpy", m]
    if spec.name == "clique":
      checks.append((f"ours/numpy {m} >= 2", r >= 2.0))
    elif spec.name == "dense":
      checks.append((f"ours/numpy {m} >= 1/1.5", r >= 1 / 1.5))
  if spec.name == "clique" and ("ours", "k=1") in rate:
    for (s, m), r in rate.items():
      if s == "thrml":
        checks.append((f"ours k=1 / thrml {m} >= 1", rate["ours", "k=1"] / r >= 1.0))
  for name, ok in checks:
    print(f"target {spec.name:9s} {name:40s} {'met' if ok else 'MISSED'}")


if __name__ == "__main__":
  main()
