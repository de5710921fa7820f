"""The peak FLOP/s of a device, the denominator of MFU (model FLOPs utilisation).

  peak_flops("bfloat16")            # this process's first device: published, or measured (CPU)
  mfu(flops_per_step, step_s, "float32")

PEAKS holds published dense peaks (no 2:4 sparsity) per device kind, in TFLOP/s per chip, for
bfloat16 and for float32 as jax computes it by default there (TF32 tensor cores on NVIDIA
Ampere and later; bf16 passes on TPUs, whose default float32 matmul precision is bf16). A device
kind is matched by the longest table name it contains (jax's device_kind: "NVIDIA H100 80GB
HBM3", "NVIDIA H100 PCIe", "TPU v5 lite", ...). A device not in the table, a CPU among them,
gets its measured peak: the best of a few jitted n x n matmuls, measured once per process and
dtype and cached.

Sources (datasheets, dense): NVIDIA H100 SXM5 989.4 bf16 / 494.7 TF32, H100 PCIe 756 / 378,
H100 NVL 835 / 418 (per GPU), H200 SXM (the H100 SXM's tensor cores) 989.4 / 494.7, A100
312 / 156 (SXM and PCIe), L4 121 / 60, L40 181 / 90.5, L40S 362 / 183; Google Cloud TPU docs: v4 275,
v5e ("TPU v5 lite") 197, v5p 459, v6e ("TPU v6 lite", Trillium) 918 bf16 per chip.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp

# device kind (a substring of jax's device_kind) -> {dtype: dense peak TFLOP/s}
PEAKS: dict[str, dict[str, float]] = {
  "H100": {"bfloat16": 989.4, "float32": 494.7},  # SXM5; the names below refine it
  "H100 PCIe": {"bfloat16": 756.0, "float32": 378.0},
  "H100 NVL": {"bfloat16": 835.0, "float32": 418.0},
  "H200": {"bfloat16": 989.4, "float32": 494.7},
  "A100": {"bfloat16": 312.0, "float32": 156.0},
  "L40S": {"bfloat16": 362.0, "float32": 183.0},
  "L40": {"bfloat16": 181.0, "float32": 90.5},
  "L4": {"bfloat16": 121.0, "float32": 60.0},
  "TPU v4": {"bfloat16": 275.0, "float32": 275.0},
  "TPU v5 lite": {"bfloat16": 197.0, "float32": 197.0},
  "TPU v5e": {"bfloat16": 197.0, "float32": 197.0},
  "TPU v5p": {"bfloat16": 459.0, "float32": 459.0},
  "TPU v5": {"bfloat16": 459.0, "float32": 459.0},  # jax names a v5p "TPU v5"
  "TPU v6 lite": {"bfloat16": 918.0, "float32": 918.0},
  "TPU v6e": {"bfloat16": 918.0, "float32": 918.0},
}
DTYPES = ("bfloat16", "float32")


def published_peak(device_kind: str, dtype: str) -> float | None:
  """The table's peak FLOP/s of a device kind (the longest matching name), or None."""
  if dtype not in DTYPES:
    raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
  names = [name for name in PEAKS if name.lower() in device_kind.lower()]
  if not names:
    return None
  return 1e12 * PEAKS[max(names, key=len)][dtype]


@functools.cache
def measured_peak(dtype: str, n: int = 512, repeats: int = 5) -> float:
  """FLOP/s of the best of `repeats` jitted n x n x n matmuls on the default device (compiled
  and warmed first), measured once per process and dtype."""
  if dtype not in DTYPES:
    raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
  key_a, key_b = jax.random.split(jax.random.key(0))
  a = jax.random.normal(key_a, (n, n), jnp.dtype(dtype))
  b = jax.random.normal(key_b, (n, n), jnp.dtype(dtype))
  dot = jax.jit(jnp.dot)
  jax.block_until_ready(dot(a, b))
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(dot(a, b))
    best = min(best, time.perf_counter() - t0)
  return 2 * n**3 / best


def peak_flops(dtype: str, device: jax.Device | None = None) -> tuple[float, str]:
  """(peak FLOP/s, where it comes from: "published" or "measured") of `device` (default: the
  first one) in `dtype`."""
  device = device or jax.devices()[0]
  published = published_peak(device.device_kind, dtype)
  if published is not None:
    return published, "published"
  return measured_peak(dtype), "measured"


def mfu(flops: float, seconds: float, dtype: str, device: jax.Device | None = None) -> float:
  """Model FLOPs utilisation: flops done in `seconds`, over the device's peak in dtype."""
  return flops / seconds / peak_flops(dtype, device)[0]
