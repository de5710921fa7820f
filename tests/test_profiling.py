"""gmlm.profiling: the costliest ops of a traced jitted call, read back from the trace."""

import jax
import jax.numpy as jnp
import numpy as np

from gmlm import profiling


def test_the_matmul_is_the_costliest_op(tmp_path):
  """A 768^3 matmul (9.1e8 FLOPs) beside a 64-element elementwise op: the matmul's op holds
  most of the device time, the shares of the ops listed sum to at most 1, and each op's time
  per call is within the traced wall time (one host thread runs a CPU op)."""
  a = jax.random.normal(jax.random.key(0), (768, 768))
  b = jax.random.normal(jax.random.key(1), (64,))
  f = jax.jit(lambda a, b: (a @ a, jnp.cos(b) + 1.0))
  jax.block_until_ready(f(a, b))
  p = profiling.top_ops(lambda: f(a, b), calls=4, directory=str(tmp_path), k=5)
  assert p["calls"] == 4 and p["ops"], p
  top = p["ops"][0]
  assert top["share"] > 0.5, p  # 7,000x the elementwise op's FLOPs; its launch is not free
  assert sum(o["share"] for o in p["ops"]) <= 1 + 1e-9
  assert all(o["ms_per_call"] <= p["wall_ms_per_call"] * 1.01 for o in p["ops"]), p
  # the reference: the matmul alone, timed on the host, is the same order as the top op
  g = jax.jit(lambda a: a @ a)
  jax.block_until_ready(g(a))
  t = [profiling.time.perf_counter()]
  for _ in range(4):
    jax.block_until_ready(g(a))
    t.append(profiling.time.perf_counter())
  alone_ms = 1e3 * float(np.median(np.diff(t)))
  assert 0.2 * alone_ms < top["ms_per_call"] < 5 * alone_ms, (top, alone_ms)


def test_an_empty_trace_directory_is_one_clear_error(tmp_path):
  try:
    profiling.summarize(str(tmp_path), calls=1, wall_s=1.0)
  except FileNotFoundError as e:
    assert "xplane" in str(e)
  else:
    raise AssertionError("summarize read a trace that is not there")
