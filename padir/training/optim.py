"""The learning-rate schedule and the optimizer of PaDIR training (paper App. L.2)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import optax

from padir.model import layer_stack


def learning_rate_schedule(cfg: ml_collections.ConfigDict) -> optax.Schedule:
  """Linear warm-up from min_lr to peak_lr, then cosine decay back to min_lr (paper App. L.2)."""
  return optax.warmup_cosine_decay_schedule(
    init_value=cfg.min_lr,
    peak_value=cfg.peak_lr,
    warmup_steps=cfg.warmup_steps,
    decay_steps=max(cfg.num_train_steps, cfg.warmup_steps + 1),
    end_value=cfg.min_lr,
  )


def make_optimizer(cfg: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """AdaFactor with T5X-like defaults (factored second moments, decay 0.8, update clipping 1.0),
  per layer (`per_layer`): on stacked layers (padir.model.layer_stack) it runs vmapped over the
  layer axis, so each layer's slice is updated as its own array; with cfg.optimizer_by_shape
  (default True) the per-layer arrays of one layer kind are updated likewise by one vmap: the
  same update, a smaller program."""
  tx = optax.adafactor(
    learning_rate=learning_rate_schedule(cfg),
    decay_rate=0.8,
    clipping_threshold=1.0,
    multiply_by_parameter_scale=True,
  )
  return per_layer(tx, group_lists=cfg.get("optimizer_by_shape", True))


def _layer_pattern(path) -> tuple:
  """A parameter's path with its list indices (the layer numbers) left out: the arrays of one
  pattern are one layer kind's copies of a parameter, in layer order."""
  index = lambda k: (
    isinstance(k, jax.tree_util.SequenceKey) or isinstance(getattr(k, "key", None), int)
  )
  return tuple("*" if index(k) else str(k) for k in path)


def _is_stacked(path) -> bool:
  """Whether a parameter is a LayerStack's: its leading axis is the layers'."""
  return any(getattr(k, "key", None) == layer_stack.STACK for k in path)


def per_layer(
  inner: optax.GradientTransformation, group_lists: bool = True
) -> optax.GradientTransformation:
  """inner applied to each layer's parameters as arrays of their own, whatever the storage:
  - a stacked parameter (padir.model.layer_stack; its leading axis the layers) is updated by
    jax.vmap of inner's update over that axis, its state stored stacked the same way (inner
    on the whole stack would be another optimizer: AdaFactor's parameter scale and update
    clipping take one RMS per array);
  - with group_lists, the per-layer copies of a parameter (one path up to the layer number, one
    shape and dtype: _layer_pattern) are stacked and updated by one vmap: traced once per layer
    kind's parameter, not once per array (a 6+6-layer model has ~200 arrays and ~35 groups),
    their state stored per array as inner stores it; and the stacked parameters of one
    per-layer shape (the attention's query, key and value projections of every layer kind...)
    are concatenated on the layer axis into one vmap (6 for the 36 stacked arrays of a 6+6-layer
    model), their state stored stacked per parameter as before; an array outside the layers
    (a final layer norm's) joins the stacks of its shape as one row, its state stored as its own.
  Equal to inner per array only when inner treats each array on its own (AdaFactor, Adam,
  per-array clipping; not a global-norm clip): make_optimizer's AdaFactor does, and
  tests/padir/test_padir_optim.py checks the updates and states agree across layouts."""

  def init(params):
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    if not any(_is_stacked(path) for path, _ in flat):
      return inner.init(params)
    # inner's state of each layer's arrays, stacked as the parameters are
    return layer_stack.stack_layers(inner.init(layer_stack.unstack_layers(params)))

  def update(updates, state, params=None):
    flat, treedef = jax.tree_util.tree_flatten_with_path(updates)
    leaves = [leaf for _, leaf in flat]
    groups: dict[tuple, list[int]] = {}
    any_stack = any(_is_stacked(path) for path, _ in flat)
    # arrays outside the layers that join the stacks of their shape as one row each (the final
    # layer norms beside the layers' norms): fewer updates to trace and compile
    single = [False] * len(flat)
    for i, (path, leaf) in enumerate(flat):
      if _is_stacked(path):  # with group_lists, joined with the stacks of its per-layer shape
        key = ("stacked", leaf.shape[1:], jnp.dtype(leaf.dtype)) if group_lists else ("s", i)
      elif group_lists and any_stack and "*" not in _layer_pattern(path):
        key, single[i] = ("stacked", leaf.shape, jnp.dtype(leaf.dtype)), True
      elif group_lists:
        key = ("list", _layer_pattern(path), leaf.shape, jnp.dtype(leaf.dtype))
      else:
        key = ("array", i)
      groups.setdefault(key, []).append(i)
    if all(k[0] == "array" for k in groups):
      return inner.update(updates, state, params)
    order = list(groups.values())
    stacks = [k[0] in ("stacked", "s") for k in groups]
    # the rows of the vmapped array each group's arrays take: a stack its layers, a list array
    # or a single one
    rows = [
      [leaves[i].shape[0] if st and not single[i] else 1 for i in idx]
      for idx, st in zip(order, stacks)
    ]
    starts = [[sum(r[:j]) for j in range(len(r))] for r in rows]
    batched = [len(idx) > 1 or (st and not single[idx[0]]) for idx, st in zip(order, stacks)]
    is_params = lambda x: jax.tree.structure(x) == treedef

    def part(tree, g):  # a params-shaped tree's arrays of group g as one array: [array]
      ls = [treedef.flatten_up_to(tree)[i] for i in order[g]]
      if len(ls) == 1:
        return [ls[0]]
      if stacks[g]:
        return [jnp.concatenate([x[None] if single[i] else x for x, i in zip(ls, order[g])])]
      return [jnp.stack(ls)]

    def piece(out, g, j):  # array j of group g back from the group's output
      if len(order[g]) == 1:
        return out[0]
      if stacks[g]:
        rows_gj = out[0][starts[g][j] : starts[g][j] + rows[g][j]]
        return rows_gj[0] if single[order[g][j]] else rows_gj
      return out[0][j]

    new_updates, new_states = [None] * len(leaves), []
    for g, idx in enumerate(order):
      state_g = jax.tree.map(lambda x: part(x, g) if is_params(x) else x, state, is_leaf=is_params)
      args = (part(updates, g), state_g, None if params is None else part(params, g))
      if batched[g]:
        axes = jax.tree.map(lambda x: [0] if is_params(x) else None, state, is_leaf=is_params)
        p_axes = None if params is None else [0]
        u_g, s_g = jax.vmap(inner.update, in_axes=([0], axes, p_axes), out_axes=([0], axes))(*args)
      else:
        u_g, s_g = inner.update(*args)
      for j, i in enumerate(idx):
        new_updates[i] = piece(u_g, g, j)
      new_states.append(s_g)

    def combine(x, *pieces):  # the groups' pieces of one params-shaped tree, back per array
      if not is_params(x):
        return pieces[0]  # the step counts, equal in every group's update
      out = [None] * len(leaves)
      for g, p in enumerate(pieces):
        for j, i in enumerate(order[g]):
          out[i] = piece(p, g, j)
      return treedef.unflatten(out)

    new_state = jax.tree.map(combine, state, *new_states, is_leaf=is_params)
    return treedef.unflatten(new_updates), new_state

  return optax.GradientTransformation(init, update)
