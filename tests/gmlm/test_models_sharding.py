"""masked_logits shards over a mesh's data axis (params replicated) without changing a number.

The device count is fixed when jax is imported, so each count runs in its own interpreter
(conftest's `run_on_devices`).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_on_devices

pytest.importorskip("torch")

_SCRIPT = r"""
import sys, numpy as np, jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from gmlm import nn as gm
directory, out, expected_devices = sys.argv[1], sys.argv[2], int(sys.argv[3])
assert jax.device_count() == expected_devices, jax.devices()
model, _ = gm.load(directory)
rng = np.random.default_rng(0)
tokens = rng.integers(3, model.config.vocab_size, (16, 20)).astype(np.int32)
mask = np.ones((16, 20), np.int32); mask[3, 11:] = 0
positions = rng.integers(0, 20, (16, 2)).astype(np.int32)
mesh = Mesh(np.array(jax.devices()), ("data",))
data = NamedSharding(mesh, P("data"))
model = jax.device_put(model, NamedSharding(mesh, P()))  # every device holds all the weights
args = [jax.device_put(x, data) for x in (tokens, positions, mask)]
logits = jax.jit(gm.masked_logits, out_shardings=data)(model, *args)
assert len(logits.sharding.device_set) == expected_devices
assert len({s.data.shape for s in logits.addressable_shards}) == 1
# The same computation one device-sized slice at a time, to compare bit for bit.
per_slice = [jax.jit(gm.masked_logits)(model, tokens[i:i + 2], positions[i:i + 2], mask[i:i + 2])
             for i in range(0, 16, 2)]
np.save(out, np.stack([np.asarray(logits), np.concatenate([np.asarray(x) for x in per_slice])]))
"""


def _run(directory, out, devices: int) -> np.ndarray:
  run_on_devices(_SCRIPT, devices, directory, out, devices, timeout=240)
  return np.load(out)


@pytest.mark.slow  # an interpreter with 8 devices compiling the models
def test_one_and_eight_devices_give_identical_logits(tiny_checkpoint, tmp_path):
  bert = tiny_checkpoint("BertForMaskedLM")
  one, one_sliced = _run(bert, tmp_path / "one.npy", 1)
  eight, _ = _run(bert, tmp_path / "eight.npy", 8)
  assert one.shape == (16, 2, 97)
  # Each of 8 devices computes exactly what one device computes on its 2-sequence slice ...
  np.testing.assert_array_equal(eight, one_sliced)
  # ... which differs from one batch of 16 only by float32 rounding (matmul blocking).
  np.testing.assert_allclose(eight, one, atol=2e-6 * np.abs(one).max(), rtol=0)
