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
"""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "accelerator"
ARCHS = ("BertForMaskedLM", "ModernBertForMaskedLM", "GPT2LMHeadModel", "LlamaForCausalLM")
CAUSAL = ("GPT2LMHeadModel", "LlamaForCausalLM")
SECTIONS = ("tests", "matmul_peak", "mlm_forward", "glauber", "ising", "padir")
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


def test_accelerator_suite_tiny_writes_every_section(tmp_path):
  proc = subprocess.run(
    [sys.executable, str(REPO / "benchmarks" / "accelerator.py"), "--tiny", "--out", str(tmp_path)],
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
  assert proc.returncode == 0, proc.stderr[-3000:]


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
