"""PaDIR's shardings of parameters, optimizer state and batches on a ("data", "model") mesh
(gmlm.core.mesh.make_mesh; `mesh_of(config)` reads config.mesh).

Batches split their first dimension over "data". Parameters are placed by one of two rules:
- "logical": each parameter names its dimensions (`logical_axes` metadata, padir.model.transformer) and
  LOGICAL_RULES maps names to mesh axes: vocabulary, heads and FFN hidden units over "model"
  (Megatron-style tensor parallelism), the rest replicated;
- "fsdp": each parameter splits its largest dimension divisible by the "model" axis size over
  "model" (FSDP/ZeRO-3 style: XLA all-gathers weights where they are used).
A dimension that the mesh axis size does not divide stays whole; optimizer state whose shape
differs from its parameter's (AdaFactor's factored moments) follows the "fsdp" rule. On a 1x1
mesh every sharding is the single device; XLA's SPMD partitioner inserts the collectives, so
the math is the same on any mesh up to float reassociation.
"""

from __future__ import annotations

from typing import Any, Callable, Literal, Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from gmlm.core import mesh as mesh_lib

LogicalRules = Sequence[tuple[str, str | None]]

# Logical dimension name -> mesh axis (None: replicated).
LOGICAL_RULES: LogicalRules = (
  ("batch", "data"),
  ("vocab", "model"),
  ("heads", "model"),
  ("mlp", "model"),
  ("embed", None),
  ("head_dim", None),
  ("length", None),
  ("length_classes", None),
  ("layers", None),  # a LayerStack's leading axis (padir.model.layer_stack)
)


def mesh_of(config: Any) -> Mesh | None:
  """config.mesh -> the ("data", "model") mesh over all devices (gmlm.core.mesh.make_mesh);
  None (one device, no mesh) without config.mesh or with mesh.data = 0."""
  m = config.get("mesh")
  if not m or not m.get("data", -1):
    return None
  return mesh_lib.make_mesh(m.get("data", -1), m.get("model", 1))


def logical_spec(
  names: Sequence[str | None], shape: Sequence[int], mesh: Mesh, rules: LogicalRules = LOGICAL_RULES
) -> P:
  """Maps dimension names to mesh axes; an axis is used once and only where it divides."""
  table, used, spec = dict(rules), set(), []
  for name, size in zip(names, shape):
    axis = table.get(name) if name is not None else None
    if axis is None or axis in used or size % mesh.shape[axis]:
      spec.append(None)
    else:
      spec.append(axis)
      used.add(axis)
  return P(*spec)


def fsdp_spec(shape: Sequence[int], mesh: Mesh, axis: str = "model") -> P:
  """Splits the largest dimension that mesh.shape[axis] divides (the first among equals)."""
  n = mesh.shape[axis]
  spec = [None] * len(shape)
  if n > 1:
    for i in sorted(range(len(shape)), key=lambda i: -shape[i]):
      if shape[i] % n == 0:
        spec[i] = axis
        break
  return P(*spec)


def _variable_spec(v: nnx.Variable, mesh: Mesh, params: str, rules: LogicalRules) -> P:
  shape = getattr(v.get_value(), "shape", ())
  names = v.get_metadata().get("logical_axes")
  if params == "logical" and names is not None and len(names) == len(shape):
    return logical_spec(names, shape, mesh, rules)
  if params not in ("logical", "fsdp"):
    raise ValueError(f"params sharding must be 'logical' or 'fsdp', got {params!r}")
  return fsdp_spec(shape, mesh)


def state_shardings(
  state: Any,
  mesh: Mesh,
  params: Literal["logical", "fsdp"] = "logical",
  rules: LogicalRules = LOGICAL_RULES,
) -> Any:
  """The NamedSharding of every Variable in an nnx state (same tree, shardings as values)."""
  return jax.tree.map(
    lambda v: v.replace(NamedSharding(mesh, _variable_spec(v, mesh, params, rules))),
    state,
    is_leaf=lambda x: isinstance(x, nnx.Variable),
  )


def batch_sharding(mesh: Mesh, rules: LogicalRules = LOGICAL_RULES) -> NamedSharding:
  return NamedSharding(mesh, P(dict(rules).get("batch")))


def create_sharded(
  make: Callable[[], Any],
  mesh: Mesh,
  params: Literal["logical", "fsdp"] = "logical",
  rules: LogicalRules = LOGICAL_RULES,
) -> tuple[Any, Any]:
  """Builds the nnx objects `make()` returns with every array created in place, already
  sharded (no device holds the whole model). Returns (objects, their state's shardings)."""
  graphdef, abstract_state = nnx.split(nnx.eval_shape(make))
  shardings = state_shardings(abstract_state, mesh, params, rules)
  state = jax.jit(lambda: nnx.split(make())[1], out_shardings=shardings)()
  return nnx.merge(graphdef, state), shardings


def put_batch(batch: dict[str, np.ndarray], sharding: NamedSharding) -> dict[str, jax.Array]:
  """This process's rows of a global batch -> global arrays split over the data axis."""
  for k, v in batch.items():
    n = sharding.mesh.shape["data"]
    if (v.shape[0] * jax.process_count()) % n:
      raise ValueError(
        f"global batch size {v.shape[0] * jax.process_count()} ({k}) is not "
        f"divisible by the data axis size {n}"
      )
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}
