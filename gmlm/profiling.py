"""Where a jitted step spends its device time: a `jax.profiler` trace of a few calls, read back
with `jax.profiler.ProfileData`, and the costliest XLA ops with their shares.

  ops = profiling.top_ops(lambda: step(...), calls=3, directory="trace/", k=5)
  # {"ops": [{"op": "fusion.12", "share": 0.31, "ms_per_call": ..., "kind": "fusion"}, ...],
  #  "device_ms_per_call": ..., "wall_ms_per_call": ..., "busy": ..., "plane": "/device:GPU:0"}

On a GPU the ops are the device plane's "XLA Ops" line (one event per HLO op launched, cuBLAS
calls included); on a CPU, the host threads' events that carry an `hlo_op` stat. `busy` is the
device time over the wall time of the traced calls: far under 1 means the step waits on
launches or the host. The trace directory stays for TensorBoard / Perfetto.
"""

from __future__ import annotations

import collections
import glob
import os
import re
import time
from collections.abc import Callable
from typing import Any

import jax


def _kind(op: str) -> str:
  """The op's family from its HLO name: 'fusion.12' -> 'fusion', 'custom-call.3' -> ..."""
  return re.sub(r"[._]\d+$", "", op) or op


CONTAINERS = ("while", "conditional", "call")  # ops whose events span their bodies' ops


def _detail(e) -> str:
  """What an op event computes, as far as its stats say (the HLO text, or the kernel's name)."""
  stats = dict(e.stats)
  for key in ("long_name", "tf_op", "hlo_category"):
    if key in stats:
      return str(stats[key])[:200]
  return str(e.name)[:200]


def _events(data) -> tuple[str, list[tuple[str, float, str]]]:
  """(plane name, [(op, duration ns, detail)]) of the device ops in a ProfileData: a GPU / TPU plane's
  "XLA Ops" line where the trace has one, else the events that carry an `hlo_op` stat (a
  kernel's op on a device plane; a thunk's on the CPU's host plane), device planes first."""
  planes = list(data.planes)
  device = [p for p in planes if p.name.startswith("/device:")]
  for plane in device:
    lines = list(plane.lines)
    for line in lines:
      if line.name != "XLA Ops":
        continue
      ops = [(e.name, e.duration_ns, _detail(e)) for e in line.events]
      graphs = sum(ns for name, ns, _ in ops if _kind(name) == "command_buffer")
      if graphs <= 0.5 * sum(ns for _, ns, _ in ops):
        return plane.name, ops
      # XLA ran the step as CUDA graphs ("command_buffer" ops): the kernels inside them are on
      # the stream lines, by kernel name (set XLA_FLAGS=--xla_gpu_enable_command_buffer= to
      # see HLO ops instead)
      kernels = [
        (e.name[:120], e.duration_ns, _detail(e))
        for line in lines
        if line.name.startswith("Stream")
        for e in line.events
        if e.duration_ns > 0
      ]
      return plane.name, kernels or ops
  for group in (device, [p for p in planes if p.name.startswith("/host:CPU")]):
    out = []
    for plane in group:
      for line in plane.lines:
        for e in line.events:
          stats = dict(e.stats)
          if "hlo_op" in stats and e.duration_ns > 0:
            out.append((str(stats["hlo_op"]), e.duration_ns, _detail(e)))
    if out:
      return group[0].name, out
  return "", []


def summarize(trace_dir: str, calls: int, wall_s: float, k: int = 5) -> dict:
  """The k costliest ops of the newest trace under trace_dir, over `calls` traced calls that
  took wall_s in all."""
  files = sorted(glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True))
  if not files:
    raise FileNotFoundError(f"no *.xplane.pb under {trace_dir}: did the trace run?")
  data = jax.profiler.ProfileData.from_file(max(files, key=os.path.getmtime))
  plane, events = _events(data)
  per_op, details = collections.Counter(), {}
  for name, ns, detail in events:
    if _kind(name) in CONTAINERS:  # its body's ops are counted on their own
      continue
    per_op[name] += ns
    details.setdefault(name, detail)
  total_ns = sum(per_op.values())
  if not total_ns:
    raise ValueError(f"the trace under {trace_dir} holds no XLA op events")
  ops = [
    dict(
      op=name,
      kind=_kind(name),
      share=ns / total_ns,
      ms_per_call=ns / 1e6 / calls,
      detail=details[name],
    )
    for name, ns in per_op.most_common(k)
  ]
  kinds = collections.Counter()
  for name, ns in per_op.items():
    kinds[_kind(name)] += ns
  return dict(
    plane=plane,
    calls=calls,
    ops=ops,
    kinds=[dict(kind=n, share=ns / total_ns) for n, ns in kinds.most_common(k)],
    device_ms_per_call=total_ns / 1e6 / calls,
    wall_ms_per_call=1e3 * wall_s / calls,
    busy=(total_ns / 1e9) / wall_s if wall_s > 0 else None,
    trace_dir=trace_dir,
  )


def top_ops(fn: Callable[[], Any], calls: int, directory: str, k: int = 5) -> dict:
  """Trace `calls` calls of fn (already compiled: call it once before) and summarize them."""
  os.makedirs(directory, exist_ok=True)
  jax.profiler.start_trace(directory)
  try:
    t0 = time.perf_counter()
    out = None
    for _ in range(calls):
      out = fn()
    jax.block_until_ready(out)
    wall = time.perf_counter() - t0
  finally:
    jax.profiler.stop_trace()
  return summarize(directory, calls, wall, k)
