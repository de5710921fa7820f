"""Filling a model's parameters from checkpoint tensors, with a shape check on every one.

Our kernels are stored input-axes-first (`q_DNH`, `o_NHD`) so each einsum reads as a plain
contraction; a PyTorch `nn.Linear.weight` is `[out, in]`, hence `linear` transposes.
"""

from __future__ import annotations

import math
import warnings
from typing import Iterable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from gmlm.nn._checkpoint import Tensors


def _check(tensors: Tensors, name: str, got: tuple, expected: tuple) -> None:
  if tuple(got) != tuple(expected):
    raise ValueError(
      f"Tensor {name!r} in {tensors.source} has shape {tuple(got)}, but the config "
      f"implies {tuple(expected)}. The weights and config.json disagree: load the "
      "config.json saved with these weights."
    )


def _store(param: nnx.Param, value: np.ndarray) -> None:
  param.set_value(jnp.asarray(value, dtype=param.dtype))  # e.g. bfloat16 file -> float32 params


def copy(tensors: Tensors, name: str, param: nnx.Param, flat: bool = False) -> None:
  """param <- tensor; `flat`: the tensor is param flattened (a bias [N*H] for param [N, H])."""
  w = tensors.get(name)
  _check(tensors, name, w.shape, (math.prod(param.shape),) if flat else param.shape)
  _store(param, w.reshape(param.shape))


def linear(tensors: Tensors, name: str, param: nnx.Param, n_in: int = 1) -> None:
  """param[in..., out...] <- torch Linear weight [out, in], `n_in` leading axes of param are in."""
  w = tensors.get(name)
  in_shape, out_shape = param.shape[:n_in], param.shape[n_in:]
  _check(tensors, name, w.shape, (math.prod(out_shape), math.prod(in_shape)))
  _store(param, w.T.reshape(param.shape))


def conv1d(tensors: Tensors, name: str, param: nnx.Param, n_in: int = 1) -> None:
  """param[in..., out...] <- GPT-2 Conv1D weight [in, out]."""
  w = tensors.get(name)
  in_shape, out_shape = param.shape[:n_in], param.shape[n_in:]
  _check(tensors, name, w.shape, (math.prod(in_shape), math.prod(out_shape)))
  _store(param, w.reshape(param.shape))


def finish(model: nnx.Module, tensors: Tensors, ignore: Iterable[str] = ()) -> nnx.Module:
  """Checks every parameter got a value and warns about checkpoint tensors nobody read."""
  for path, value in nnx.to_flat_state(nnx.state(model, nnx.Param)):
    if isinstance(value.get_value(), jax.ShapeDtypeStruct):
      raise ValueError(
        f"Parameter {'.'.join(map(str, path))} was not filled from "
        f"{tensors.source}; the checkpoint lacks it."
      )
  ignore = tuple(ignore)
  unused = [n for n in tensors.unused() if not any(pat in n for pat in ignore)]
  if unused:
    warnings.warn(
      f"{len(unused)} tensors of {tensors.source} were not used, e.g. {unused[:5]}.", stacklevel=3
    )
  return model
