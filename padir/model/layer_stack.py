"""Layers stored stacked (config.model.scan_layers = "scan"): one layer kind's parameters and
dropout streams as arrays with a leading layer axis, run by one jax.lax.scan.

The training step then takes, differentiates and updates each stacked array as it is: no
stacking of the per-layer arrays into the scan and no slicing of the gradient back out of it
(the HLO that per-layer storage costs a scanned step, forward, backward and optimizer).

The two layouts are one model: `LayerStack(layers)` stacks the per-layer modules' state as
built (the same initial weights and dropout streams for the same seed in both layouts), and
`unstack_layers` / `stack_layers` convert any nnx state (parameters, the optimizer's state, a
whole model's state) between the per-layer paths `encoder_layers/3/ffn/...` and the stacked
`encoder_layers/stack/ffn/...`. Checkpoints are written per layer in both layouts (the form
every earlier checkpoint has), so a run trained in one layout restores into the other.

`reseed_dropout` reseeds every dropout stream from one key by its path with the layer index
taken out, then the layer index: the same masks in both layouts.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

STACK = "stack"  # LayerStack's attribute holding the stacked layer: a path key of stacked arrays
LAYER_LISTS = ("encoder_layers", "decoder_layers")  # the Transformer's attributes that stack
LAYERS_AXIS = "layers"  # the logical name of the leading axis (padir.training.sharding)


def _axes(var: nnx.Variable) -> tuple | None:
  return var.get_metadata().get("logical_axes")


class LayerStack(nnx.Module):
  """Layers of one kind stored as one module whose arrays have a leading layer axis.

  `stack` is that module: calling it as a layer is wrong (its arrays are L deep); run_layers
  scans it. Indexing or iterating gives read-only per-layer views (the decoding paths that
  read one layer's weights at a time); a view's writes (sown values, advanced streams) do not
  reach the stack."""

  def __init__(self, layers: Sequence[nnx.Module]):
    if not layers:
      raise ValueError("a LayerStack needs at least one layer")
    splits = [nnx.split(layer) for layer in layers]
    graphdef = splits[0][0]
    if any(g != graphdef for g, _ in splits[1:]):
      raise ValueError("a LayerStack's layers must have one structure")
    self.stack = nnx.merge(graphdef, _stack([state for _, state in splits]))
    self.num_layers = len(layers)

  def __len__(self) -> int:
    return self.num_layers

  def __getitem__(self, i: int) -> nnx.Module:
    if not -self.num_layers <= i < self.num_layers:
      raise IndexError(f"layer {i} of {self.num_layers}")
    graphdef, state = nnx.split(self.stack)
    return nnx.merge(graphdef, _slice(state, i % self.num_layers))

  def __iter__(self) -> Iterator[nnx.Module]:
    graphdef, state = nnx.split(self.stack)
    for i in range(self.num_layers):
      yield nnx.merge(graphdef, _slice(state, i))


def _slice(tree: Any, i: int) -> Any:
  """Layer i of a stacked state: each array's row i, the "layers" axis name dropped."""

  def one(x):
    if isinstance(x, nnx.Variable):
      axes = _axes(x)
      out = x.replace(x.get_value()[i])
      if axes is not None and axes[:1] == (LAYERS_AXIS,):
        out.set_metadata(logical_axes=axes[1:])
      return out
    return x[i]

  return jax.tree.map(one, tree, is_leaf=lambda x: isinstance(x, nnx.Variable))


def _stack(trees: Sequence[Any]) -> Any:
  """The per-layer states stacked on a new leading axis, named "layers"."""

  def one(*xs):
    if isinstance(xs[0], nnx.Variable):
      axes = _axes(xs[0])
      out = xs[0].replace(jnp.stack([x.get_value() for x in xs]))
      if axes is not None:
        out.set_metadata(logical_axes=(LAYERS_AXIS, *axes))
      return out
    return jnp.stack(xs)

  return jax.tree.map(one, *trees, is_leaf=lambda x: isinstance(x, nnx.Variable))


def _is_node(x: Any) -> bool:
  return isinstance(x, Mapping) and not isinstance(x, nnx.Variable)


def _rebuild(node: Mapping, items: dict) -> Any:
  return nnx.State(items) if isinstance(node, nnx.State) else type(node)(items)


def _items(node: Mapping) -> Any:
  """A mapping's entries as stored (a State's nested mappings are dicts; indexing wraps them)."""
  return (node.raw_mapping if isinstance(node, nnx.State) else node).items()


def _convert(tree: Any, level: Any) -> Any:
  def walk(node):
    if not _is_node(node):
      return node
    items = {}
    for k, v in _items(node):
      if k in LAYER_LISTS and _is_node(v):
        v = level(v)
      items[k] = walk(v)
    return _rebuild(node, items)

  return jax.tree.map(walk, tree, is_leaf=_is_node)


def unstack_layers(tree: Any) -> Any:
  """Any pytree holding nnx states (a model's, its parameters', an optimizer's) with the
  stacked layers' entries `encoder_layers/stack/...` replaced by per-layer entries
  `encoder_layers/i/...`; a tree already per layer is returned as it is."""

  def level(v):
    if set(v.keys()) != {STACK}:
      return v
    sub = dict(_items(v))[STACK]
    n = jax.tree.leaves(sub)[0].shape[0]
    return _rebuild(v, {i: _slice(sub, i) for i in range(n)})

  return _convert(tree, level)


def stack_layers(tree: Any) -> Any:
  """unstack_layers' inverse: per-layer entries `encoder_layers/i/...` stacked into
  `encoder_layers/stack/...`; a tree already stacked (or with no layers) is returned as it is."""

  def level(v):
    keys = list(v.keys())
    if not keys or not all(isinstance(k, int) for k in keys):
      return v
    entries = dict(_items(v))
    return _rebuild(v, {STACK: _stack([entries[i] for i in sorted(keys)])})

  return _convert(tree, level)


def _stream_id(path: tuple) -> tuple[int, int | None]:
  """(a stable id of a stream's path with the layer index or STACK key left out, the layer
  index: None for a stacked stream or one outside the layers)."""
  index, names = None, []
  for k in path:
    if isinstance(k, int):
      index = k
    elif k != STACK:
      names.append(str(k))
  return zlib.crc32("/".join(names).encode()), index


def reseed_dropout(model: nnx.Module, key: jax.Array) -> None:
  """Every dropout stream of the model restarted from `key`: stream s of layer i gets
  fold_in(fold_in(key, id(s)), i), a stream outside the layers fold_in(key, id(s)), a stacked
  stream the keys of its layers. So the masks do not depend on the storage layout (nnx.reseed
  draws one key per stream in graph order, which the layouts do not share)."""
  for path, node in nnx.iter_graph(model):
    if not isinstance(node, nnx.RngStream) or node.key.tag != "dropout":
      continue
    sid, index = _stream_id(path)
    base = jax.random.fold_in(key, sid)
    shape = node.key.get_value().shape
    if shape:  # stacked: one key per layer
      new = jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.arange(shape[0]))
    elif index is not None:
      new = jax.random.fold_in(base, index)
    else:
      new = base
    node.key.set_value(new)
    node.count.set_value(jnp.zeros(shape, dtype=jnp.uint32))
