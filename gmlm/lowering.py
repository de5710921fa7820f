"""What a jitted function becomes on an accelerator, found on any host (no GPU or TPU needed).

  report = check(jax.jit(f), *args, dtype="float32", **static_kwargs)   # for ("cuda", "tpu")
  report.problems        # [] when the program is fit for the accelerator (see below)
  c = cost(jax.jit(f), *args, platform="cuda", **static_kwargs)         # FLOPs, bytes, loops
  matmul_flops(jax.jit(f), *args)        # the jaxpr's matmuls alone: what hand counts check

`check` exports the function with `jax.export.export(fn, platforms=("cuda", "tpu"))`: JAX lowers
it for each platform without the hardware. Arguments may be arrays or `jax.ShapeDtypeStruct`s;
a struct's sharding may name an `AbstractMesh` of any size (`abstract_mesh`), so a program
sharded over 8 or 64 devices is lowered on one CPU. A report's problems:
  - the lowering failed (an op with no GPU/TPU lowering, a custom call without compatibility
    guarantees, a shape error): the exception, named;
  - a host callback (pure_callback, io_callback, jax.debug.print / callback) anywhere in the
    program, nested scans and conds included: a round trip to the host per call or per step;
  - a float64 (or complex128) value in the program, or in the lowered module, while the path asks
    for bfloat16 or float32 (TPUs have no float64; GPUs run it at a fraction of the speed);
  - a bfloat16 path whose lowered module has no bfloat16 matmul (the compute dtype is ignored).

`cost` is XLA's cost analysis of the *lowered* program (the module before compilation: every
matmul is still a dot, on every platform; the analysis of a compiled GPU program does not count
the matmuls lowered to cuBLAS calls, e.g. -1e-9 GFLOP for an 8192^3 dot on an H100), for the
default backend or any `platform` (lowered for "cuda" or "tpu" on this CPU, the same count).
Its bytes are the unfused ops' operands and results: an upper bound on memory traffic. One fix:
XLA counts a loop body once, whatever its trip count, so each `lax.scan` (and `lax.map`) body is
costed apart and counted `length` times (recursively). A `while_loop`'s trip count is data
dependent: its body is counted once, and `Cost.while_loops` says how many there are.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any, Callable, Iterator

import jax
import jax.extend.core as jcore
import numpy as np

PLATFORMS = ("cuda", "tpu")
_CUSTOM_CALL = re.compile(r"stablehlo\.custom_call @([\w.$-]+)")
_DOT = re.compile(
  r"stablehlo\.dot_general[^\n]*:\s*\(tensor<[0-9x?]*x?(\w+)>, tensor<[0-9x?]*x?(\w+)>"
)
_F64 = re.compile(r"(?<![\w.])(?:f64|complex<f64>)(?![\w])")


def abstract_mesh(shape: dict[str, int]) -> jax.sharding.AbstractMesh:
  """A device mesh of any size without the devices (auto axes, as gmlm.core.mesh.make_mesh)."""
  return jax.sharding.AbstractMesh(
    tuple(shape.values()),
    tuple(shape),
    axis_types=(jax.sharding.AxisType.Auto,) * len(shape),
  )


def shaped(tree: Any, shardings: Any = None) -> Any:
  """The arrays of a pytree as ShapeDtypeStructs (with the matching leaf of `shardings`)."""
  if shardings is None:
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(*_shape_dtype(x)), tree)
  return jax.tree.map(
    lambda x, s: jax.ShapeDtypeStruct(*_shape_dtype(x), sharding=s), tree, shardings
  )


def _shape_dtype(x) -> tuple:
  if hasattr(x, "shape") and hasattr(x, "dtype"):
    return tuple(x.shape), x.dtype
  x = np.asarray(x)
  return x.shape, x.dtype


# ----------------------------------------------------------------------------- the jaxpr walk


def _sub_jaxprs(eqn) -> Iterator[Any]:
  """The jaxprs an equation holds (scan / while bodies, cond branches, nested jit calls)."""
  for value in eqn.params.values():
    for v in value if isinstance(value, (tuple, list)) else (value,):
      if isinstance(v, jcore.ClosedJaxpr):
        yield v.jaxpr
      elif isinstance(v, jcore.Jaxpr):
        yield v


def _eqns(jaxpr) -> Iterator[Any]:
  for eqn in jaxpr.eqns:
    yield eqn
    for sub in _sub_jaxprs(eqn):
      yield from _eqns(sub)


def _on_host(primitive: str) -> bool:
  """pure_callback, io_callback, debug_callback (jax.debug.callback), debug_print."""
  return "callback" in primitive or primitive == "debug_print"


def _is_wide(var) -> bool:
  dtype = getattr(var.aval, "dtype", None)
  return str(dtype) in ("float64", "complex128")


def _wide_values(jaxpr) -> list[str]:
  """'primitive: dtype' of every equation that makes a float64 / complex128 value (and the
  inputs that are one)."""
  found = [f"input: {v.aval.dtype}" for v in jaxpr.invars if _is_wide(v)]
  for eqn in _eqns(jaxpr):
    found += [f"{eqn.primitive.name}: {v.aval.dtype}" for v in eqn.outvars if _is_wide(v)]
  return found


# ----------------------------------------------------------------------------- the check


@dataclasses.dataclass
class Lowering:
  """What exporting one path for the accelerator platforms found."""

  platforms: tuple[str, ...]
  dtype: str  # the compute dtype the path asks for
  error: str | None = None  # the lowering failed
  callbacks: tuple[str, ...] = ()  # host-callback primitives in the program
  wide: tuple[str, ...] = ()  # float64 / complex128 values (primitive: dtype)
  module_f64: int = 0  # float64 types in the lowered module
  custom_calls: tuple[str, ...] = ()  # custom-call targets of the lowered module
  dots: dict = dataclasses.field(default_factory=dict)  # matmul operand dtype -> count
  devices: int = 1  # the devices the program is partitioned over

  @property
  def problems(self) -> list[str]:
    out = []
    if self.error:
      out.append(f"lowering failed: {self.error}")
    if self.callbacks:
      out.append(f"host callback: {', '.join(sorted(set(self.callbacks)))}")
    if self.wide or self.module_f64:
      where = ", ".join(sorted(set(self.wide))[:5]) or f"{self.module_f64} f64 types in the module"
      out.append(f"float64 in a {self.dtype} program: {where}")
    if self.dtype == "bfloat16" and not self.error and not self.dots.get("bf16"):
      out.append(f"no bfloat16 matmul in a bfloat16 program (matmuls: {self.dots})")
    return out

  @property
  def ok(self) -> bool:
    return not self.problems


def check(
  fn: Callable, *args, dtype: str = "float32", platforms: tuple[str, ...] = PLATFORMS, **kwargs
) -> Lowering:
  """Exports jitted `fn` at (*args, **kwargs) (static arguments by keyword) for `platforms`;
  see the module docstring for what the returned report checks."""
  if dtype not in ("float32", "bfloat16"):
    raise ValueError(f"dtype must be 'float32' or 'bfloat16', got {dtype!r}")
  report = Lowering(tuple(platforms), dtype)
  try:
    jaxpr = fn.trace(*args, **kwargs).jaxpr.jaxpr
  except Exception as e:  # noqa: BLE001 - reported, the check's whole point
    report.error = f"tracing: {type(e).__name__}: {e}"[:600]
    return report
  report.callbacks = tuple(e.primitive.name for e in _eqns(jaxpr) if _on_host(e.primitive.name))
  report.wide = tuple(_wide_values(jaxpr))
  try:
    exported = jax.export.export(fn, platforms=tuple(platforms))(*args, **kwargs)
  except Exception as e:  # noqa: BLE001
    report.error = f"{type(e).__name__}: {e}"[:600]
    return report
  text = "\n".join(ln for ln in exported.mlir_module().splitlines() if not ln.startswith("#loc"))
  text = re.sub(r"loc\([^)]*\)", "", text)
  report.module_f64 = len(_F64.findall(text))
  report.custom_calls = tuple(sorted(set(_CUSTOM_CALL.findall(text))))
  report.dots = dict(
    collections.Counter(a if a == b else f"{a}x{b}" for a, b in _DOT.findall(text))
  )
  report.devices = exported.nr_devices
  return report


# ----------------------------------------------------------------------------- the cost


@dataclasses.dataclass(frozen=True)
class Cost:
  flops: float
  bytes: float  # bytes accessed by the unfused lowered ops (an upper bound on memory traffic)
  while_loops: int = 0  # data-dependent loops whose body is counted once

  def __add__(self, other: "Cost") -> "Cost":
    return Cost(
      self.flops + other.flops, self.bytes + other.bytes, self.while_loops + other.while_loops
    )

  def __mul__(self, k: float) -> "Cost":
    return Cost(self.flops * k, self.bytes * k, int(self.while_loops * k))


def _analysis(stage) -> Cost:
  """FLOPs and bytes of XLA's cost analysis of a Lowered (or Compiled) stage. A Lowered stage's
  HLO module is analysed by the host's CPU client: the analysis of an unoptimised module
  depends on the module alone, and a backend behind the PJRT C API (the CUDA plugin) has none
  (jax's `Lowered.cost_analysis` returns None there: every count on a GPU machine was 0)."""
  if isinstance(stage, jax.stages.Lowered):
    from jax._src import xla_bridge
    from jax._src.lib import _jax

    module = stage._lowering.hlo().as_hlo_module()  # jax's own Lowered.cost_analysis input
    analysis = _jax.hlo_module_cost_analysis(xla_bridge.get_backend("cpu"), module)
  else:
    analysis = stage.cost_analysis()
  analysis = analysis[0] if isinstance(analysis, (list, tuple)) else (analysis or {})
  return Cost(float(analysis.get("flops", 0.0)), float(analysis.get("bytes accessed", 0.0)))


def _lowered(fn: Callable, platform: str | None, *args, **kwargs):
  """fn lowered (not compiled) at these arguments, for `platform` (None: the default backend)."""
  traced = fn.trace(*args, **kwargs)
  if platform is None:
    return traced, traced.lower()
  return traced, traced.lower(lowering_platforms=(platform,))


def _lowered_cost(closed, platform: str | None) -> Cost:
  """The lowered cost of a closed jaxpr (its loops once)."""
  fn = jcore.jaxpr_as_fun(closed)
  avals = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in closed.in_avals]
  return _analysis(_lowered(jax.jit(fn), platform, *avals)[1])


def _scans(jaxpr) -> Iterator[Any]:
  """The scan equations of a jaxpr that are not inside another scan."""
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "scan":
      yield eqn
    else:
      for sub in _sub_jaxprs(eqn):
        yield from _scans(sub)


def _copies(length: int, unroll: int | bool) -> int:
  """How many copies of a scan's body its lowered module holds: the `unroll` steps of the loop
  body and the length % unroll left over after the loop (all `length` when unroll >= length)."""
  unroll = length if unroll is True else max(1, int(unroll))
  return length if unroll >= length else unroll + length % unroll


def _with_scans(counted: Cost, jaxpr, platform: str | None) -> Cost:
  """XLA's cost `counted` of a jaxpr (each scan's lowered copies of its body once) -> with each
  outermost scan body's own true cost counted `length` times instead:
  T = X + sum_s (length_s T(body_s) - copies_s X(body_s))."""
  for eqn in _scans(jaxpr):
    body, length = eqn.params["jaxpr"], eqn.params["length"]
    once = _lowered_cost(body, platform)
    copies = _copies(length, eqn.params.get("unroll", 1))
    counted = counted + _with_scans(once, body.jaxpr, platform) * length + once * -copies
  return counted


def cost(fn: Callable, *args, platform: str | None = None, **kwargs) -> Cost:
  """FLOPs and bytes accessed of one call of jitted `fn`, from its lowered module for `platform`
  ("cuda", "tpu", "cpu"; None: the default backend), every scan counted at its length (module
  docstring). Nothing is compiled, so the count is the same on every platform."""
  traced, lowered = _lowered(fn, platform, *args, **kwargs)
  jaxpr = traced.jaxpr.jaxpr
  total = _with_scans(_analysis(lowered), jaxpr, platform)
  whiles = sum(e.primitive.name == "while" for e in _eqns(jaxpr))
  return Cost(total.flops, total.bytes, whiles)


def matmul_flops(fn: Callable, *args, **kwargs) -> float:
  """2 x the multiply-adds of every dot_general in the jaxpr of jitted `fn` at these arguments,
  scan bodies counted at their lengths (while bodies once): the matmul inventory a hand count of
  a model's FLOPs is checked against, exactly, on any platform."""
  return float(_dot_flops(fn.trace(*args, **kwargs).jaxpr.jaxpr))


def _dot_flops(jaxpr) -> int:
  total = 0
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "dot_general":
      (contract, _), _ = eqn.params["dimension_numbers"]
      lhs, out = eqn.invars[0].aval, eqn.outvars[0].aval
      total += 2 * int(np.prod(out.shape)) * int(np.prod([lhs.shape[i] for i in contract]))
    times = eqn.params["length"] if eqn.primitive.name == "scan" else 1
    total += times * sum(_dot_flops(sub) for sub in _sub_jaxprs(eqn))
  return total
