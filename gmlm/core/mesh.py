"""Device meshes and the shardings every domain uses: chains or batches over "data".

`make_mesh(data, model)` builds the ("data", "model") mesh over all devices; `data_mesh(n)` the
1-D mesh a batch of n chains splits over (None on one device or when the devices do not divide
n); `batch_sharding(mesh, ndim)` splits the leading axis over "data" and replicates the rest;
`constrain` pins an intermediate's sharding inside a jitted function.
`initialize_distributed(mode)` joins the processes of a multi-host run (JAX's own
`jax.distributed.initialize`, reading the cluster environment).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

MESH_AXES = ("data", "model")


def make_mesh(data: int = -1, model: int = 1, devices: Sequence[Any] | None = None) -> Mesh:
  """A data x model mesh over `devices` (default: all); -1 for data takes what model leaves."""
  devices = list(jax.devices() if devices is None else devices)
  if data == -1:
    if len(devices) % model:
      raise ValueError(f"{len(devices)} devices do not split into model={model} groups")
    data = len(devices) // model
  if data * model != len(devices):
    raise ValueError(
      f"mesh data={data} x model={model} needs {data * model} devices, found {len(devices)}"
    )
  # Auto axes: shardings are constraints that XLA's partitioner propagates through the model
  # (explicit axes would make every op that mixes shardings say how to shard its output).
  return jax.make_mesh(
    (data, model), MESH_AXES, devices=devices, axis_types=(jax.sharding.AxisType.Auto,) * 2
  )


def data_mesh(num_chains: int) -> Mesh | None:
  """A 1-D ("data",) mesh over all devices for num_chains chains; None on a single device or
  when the device count does not divide num_chains (the chains then run unsharded)."""
  devices = jax.devices()
  if len(devices) == 1 or num_chains % len(devices):
    return None
  return Mesh(np.array(devices), ("data",))


def batch_sharding(mesh: Mesh | None, ndim: int = 1, axis: str = "data") -> NamedSharding | None:
  """The leading axis split over `axis`, the other ndim - 1 axes replicated."""
  return None if mesh is None else NamedSharding(mesh, P(axis, *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def constrain(x, sharding: NamedSharding | None):
  return x if sharding is None else jax.lax.with_sharding_constraint(x, sharding)


def initialize_distributed(mode: str = "auto") -> bool:
  """Calls jax.distributed.initialize() once, before any other JAX call, when mode is "on",
  or "auto" and the environment describes several processes (JAX_COORDINATOR_ADDRESS, or
  SLURM / Open MPI with more than one task). With no arguments, JAX reads the coordinator,
  process count and id from the cluster environment (SLURM, Open MPI, Cloud TPU, GKE); outside
  those set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID. Every process runs
  the same command. Returns whether JAX is multi-process now.
  """
  if mode not in ("auto", "on", "off"):
    raise ValueError(f"distributed must be 'auto', 'on' or 'off', got {mode!r}")
  env = os.environ
  several = (
    "JAX_COORDINATOR_ADDRESS" in env
    or int(env.get("SLURM_NTASKS", "1")) > 1
    or int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1
  )
  if (mode == "on" or (mode == "auto" and several)) and not jax.distributed.is_initialized():
    # jax 0.10 reads JAX_COORDINATOR_ADDRESS itself but not the process count and id.
    count, index = env.get("JAX_NUM_PROCESSES"), env.get("JAX_PROCESS_ID")
    jax.distributed.initialize(
      num_processes=None if count is None else int(count),
      process_id=None if index is None else int(index),
    )
    logging.info(
      "process %d of %d, %d local of %d devices",
      jax.process_index(),
      jax.process_count(),
      jax.local_device_count(),
      jax.device_count(),
    )
  return jax.process_count() > 1
