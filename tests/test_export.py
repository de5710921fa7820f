"""Every hot path lowers for CUDA and TPU from this CPU (gmlm.lowering.check, tests/export_paths):
no lowering error, no host callback, no float64 where float32 / bfloat16 is asked, bfloat16
matmuls where bfloat16 is asked, and sharded paths partitioned over their abstract mesh's
devices. The checker itself is shown to fail on toy paths with a CPU-only op, a host callback
inside a scan, a float64 and a bfloat16 path that computes in float32."""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from export_paths import PATHS
from jax.interpreters import mlir

from gmlm import lowering

TABLE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "accelerators.md"


@pytest.mark.accelerator
@pytest.mark.parametrize("p", PATHS, ids=[p.name.split(" (")[0] for p in PATHS])
def test_path_lowers_for_cuda_and_tpu(p):
  fn, args, kwargs = p.build()
  report = lowering.check(fn, *args, dtype=p.dtype, **kwargs)
  assert report.ok, f"{p.name}: {report.problems}"
  assert report.devices == p.devices, (p.name, report.devices)
  assert sum(report.dots.values()) > 0 or p.name.startswith("ising"), (p.name, report.dots)


def test_the_ar_dropout_step_draws_every_mask_from_xlas_threefry_generator():
  """On CUDA and TPU too, every dropout mask of the AR step (its two embeddings', one draw per
  layer: 4 in the path's 1+1 layers) comes from XLA's bit generator at ThreeFry, none at the
  backend's default algorithm (model.dropout_rng)."""
  import re

  (p,) = [p for p in PATHS if p.name.startswith("padir: AR training step, dropout")]
  fn, args, kwargs = p.build()
  text = jax.export.export(fn, platforms=lowering.PLATFORMS)(*args, **kwargs).mlir_module()
  assert re.findall(r"rng_bit_generator %\S+, algorithm = (\w+)", text) == ["THREE_FRY"] * 4


def test_the_docs_table_lists_every_path():
  text = TABLE.read_text()
  missing = [p.name for p in PATHS if f"| {p.name} |" not in text]
  assert not missing, (
    f"docs/accelerators.md's export table lacks {missing}: python tests/export_paths.py"
  )


# ----------------------------------------------------------------------------- the checker fails


def _cpu_only_primitive():
  """A primitive with a lowering for CPU alone (as LAPACK-only ops or a CPU custom call)."""
  prim = jax.extend.core.Primitive("cpu_only_double")
  prim.def_abstract_eval(lambda x: jax.core.ShapedArray(x.shape, x.dtype))
  prim.def_impl(lambda x: 2 * x)
  mlir.register_lowering(prim, mlir.lower_fun(lambda x: 2 * x, multiple_results=False), "cpu")
  return prim


CPU_ONLY = _cpu_only_primitive()


def toy(x_BD, w_DD, *, variant: str = "clean"):
  """A small scanned MLP: the clean path, or one with a planted problem."""

  def body(h_BD, _):
    h_BD = jnp.tanh(h_BD @ w_DD)
    if variant == "cpu_only":
      h_BD = CPU_ONLY.bind(h_BD)
    if variant == "callback":
      h_BD = jax.pure_callback(np.tanh, jax.ShapeDtypeStruct(h_BD.shape, h_BD.dtype), h_BD)
    if variant == "print":
      jax.debug.print("h {}", h_BD.sum())
    if variant == "float64":
      h_BD = (h_BD.astype(jnp.float64) * 2.0).astype(h_BD.dtype)
    return h_BD, None

  return jax.lax.scan(body, x_BD, None, length=3)[0].sum()


TOY = jax.jit(toy, static_argnames="variant")
X, W = jnp.ones((4, 8)), jnp.ones((8, 8))


def test_checker_passes_the_clean_toy():
  report = lowering.check(TOY, X, W, variant="clean")
  assert report.ok and report.dots == {"f32": 2}, report  # one dot per platform branch
  bf16 = lowering.check(TOY, X.astype(jnp.bfloat16), W.astype(jnp.bfloat16), dtype="bfloat16")
  assert bf16.ok and bf16.dots == {"bf16": 2}, bf16


def test_checker_fails_on_a_cpu_only_op():
  assert float(TOY(X, W, variant="cpu_only")) != 0  # it runs on this CPU
  report = lowering.check(TOY, X, W, variant="cpu_only")
  assert not report.ok and "cpu_only_double" in report.error, report
  assert lowering.check(TOY, X, W, variant="cpu_only", platforms=("cpu",)).ok


@pytest.mark.parametrize(
  "variant, primitive", [("callback", "pure_callback"), ("print", "debug_print")]
)
def test_checker_fails_on_a_host_callback_in_a_scan(variant, primitive):
  report = lowering.check(TOY, X, W, variant=variant)
  assert any(primitive in c for c in report.callbacks), report
  assert any("host callback" in p for p in report.problems), report.problems


def test_checker_fails_on_float64():
  with jax.enable_x64(True):
    report = lowering.check(TOY, X, W, variant="float64")
    clean = lowering.check(TOY, X, W, variant="clean")
  assert report.error is None and report.module_f64 > 0, report
  assert any(w.startswith("convert_element_type: float64") for w in report.wide), report.wide
  assert any("float64 in a float32 program" in p for p in report.problems), report.problems
  assert clean.ok, clean  # x64 enabled alone puts no float64 in a float32 program


def test_checker_fails_on_a_bf16_path_that_computes_in_float32():
  report = lowering.check(TOY, X, W, dtype="bfloat16")
  assert report.problems == [f"no bfloat16 matmul in a bfloat16 program (matmuls: {report.dots})"]


def test_sharded_export_is_partitioned_over_the_abstract_mesh():
  from jax.sharding import NamedSharding
  from jax.sharding import PartitionSpec as P

  mesh = lowering.abstract_mesh({"data": 8})
  x = jax.ShapeDtypeStruct((16, 8), jnp.float32, sharding=NamedSharding(mesh, P("data")))
  w = jax.ShapeDtypeStruct((8, 8), jnp.float32, sharding=NamedSharding(mesh, P()))
  report = lowering.check(TOY, x, w)
  assert report.ok and report.devices == 8, report


def test_cost_counts_every_scan_iteration():
  """XLA's cost analysis counts a loop body once; lowering.cost counts nested scans at their
  lengths: 3 x 5 matmuls of 2 B D^2 FLOPs each (tanh is not a FLOP to XLA)."""

  def nested(x_BD, w_DD):
    def outer(h, _):
      return jax.lax.scan(lambda g, _: (jnp.tanh(g @ w_DD), None), h, None, length=5)[0], None

    return jax.lax.scan(outer, x_BD, None, length=3)[0]

  B, D = 64, 128
  c = lowering.cost(jax.jit(nested), jnp.ones((B, D)), jnp.ones((D, D)))
  assert c.flops == pytest.approx(15 * 2 * B * D * D, rel=0.01), c
  assert c.bytes >= 15 * 4 * D * D and c.while_loops == 0, c


@pytest.mark.parametrize("unroll", [1, 3, 4, 7, True])
def test_cost_counts_an_unrolled_scan_at_its_length(unroll):
  """An unrolled scan's lowered module holds several copies of its body (unroll in the loop,
  length % unroll after it): still 7 matmuls, whatever the unroll, for CUDA as for this CPU."""
  B, D = 16, 64
  f = lambda x, w: jax.lax.scan(lambda g, _: (g @ w, None), x, None, length=7, unroll=unroll)[0]
  for platform in ("cuda", None):
    c = lowering.cost(jax.jit(f), jnp.ones((B, D)), jnp.ones((D, D)), platform=platform)
    assert c.flops == pytest.approx(7 * 2 * B * D * D, rel=0.01), (unroll, platform, c)
