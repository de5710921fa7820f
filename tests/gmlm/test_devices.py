"""gmlm.devices: the peak an MFU is measured against. Published peaks by device kind (the most
specific table name wins), and on a device the table does not know (a CPU) the measured one."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import pytest

from gmlm import devices


@pytest.mark.parametrize(
  "kind,dtype,tflops",
  [
    ("NVIDIA H100 80GB HBM3", "bfloat16", 989.4),
    ("NVIDIA H100 80GB HBM3", "float32", 494.7),
    ("NVIDIA H100 PCIe", "bfloat16", 756.0),
    ("NVIDIA H200", "float32", 494.7),
    ("NVIDIA A100-SXM4-80GB", "bfloat16", 312.0),
    ("NVIDIA L40S", "bfloat16", 362.0),
    ("NVIDIA L40", "bfloat16", 181.0),
    ("TPU v5 lite", "bfloat16", 197.0),
    ("TPU v4", "float32", 275.0),
  ],
)
def test_published_peaks_by_the_most_specific_device_kind(kind, dtype, tflops):
  assert devices.published_peak(kind, dtype) == pytest.approx(tflops * 1e12)


def test_a_device_the_table_does_not_know_gets_its_measured_peak():
  assert devices.published_peak("cpu", "float32") is None
  with pytest.raises(ValueError, match="float16"):
    devices.published_peak("NVIDIA H100", "float16")
  peak, source = devices.peak_flops("float32", jax.devices("cpu")[0])
  assert source == "measured" and devices.measured_peak("float32") == peak  # once per process
  # An independent timing of the same product: the best of 3 calls, within 10x either way.
  n = 512
  a = jnp.ones((n, n), jnp.float32)
  dot = jax.jit(jnp.dot)
  dot(a, a).block_until_ready()
  best = float("inf")
  for _ in range(3):
    t0 = time.perf_counter()
    dot(a, a).block_until_ready()
    best = min(best, time.perf_counter() - t0)
  assert 0.1 < peak / (2 * n**3 / best) < 10
  assert devices.mfu(peak, 2.0, "float32", jax.devices("cpu")[0]) == pytest.approx(0.5)
