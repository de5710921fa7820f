"""The learning-rate schedule and the optimizer of PaDIR training (paper App. L.2)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import optax


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
  """AdaFactor with T5X-like defaults (factored second moments, decay 0.8, update clipping 1.0);
  with cfg.optimizer_by_shape (default True) its update runs once per parameter shape
  (batched_over_equal_shapes): the same update, a smaller program."""
  tx = optax.adafactor(
    learning_rate=learning_rate_schedule(cfg),
    decay_rate=0.8,
    clipping_threshold=1.0,
    multiply_by_parameter_scale=True,
  )
  return batched_over_equal_shapes(tx) if cfg.get("optimizer_by_shape", True) else tx


def _layer_pattern(path) -> tuple:
  """A parameter's path with its list indices (the layer numbers) left out: the arrays of one
  pattern are one layer kind's copies of a parameter, in layer order, the stack that a scanned
  step builds (padir.model.transformer.run_layers), so XLA reads the gradient's stack as it is
  instead of slicing and stacking it again."""
  index = lambda k: (
    isinstance(k, jax.tree_util.SequenceKey) or isinstance(getattr(k, "key", None), int)
  )
  return tuple("*" if index(k) else str(k) for k in path)


def batched_over_equal_shapes(inner: optax.GradientTransformation) -> optax.GradientTransformation:
  """inner, with the layers' copies of each parameter (one path up to the layer number, one
  shape and dtype: _layer_pattern) updated by one jax.vmap of inner's update over their stack:
  the update is traced once per layer kind's parameter, not once per array (a 6+6-layer model
  has ~200 arrays and ~35 such groups), so the training step's program is smaller and compiles
  faster. The state is inner's own, stored per array as before (checkpoints do not
  change); the stacking happens inside the step. Equal to inner only when inner treats each
  array on its own (AdaFactor, Adam, per-array clipping; not a global-norm clip): make_optimizer's
  AdaFactor is, and tests/padir/test_padir_optim.py checks the updates agree."""

  def init(params):
    return inner.init(params)

  def update(updates, state, params=None):
    flat, treedef = jax.tree_util.tree_flatten_with_path(updates)
    leaves = [leaf for _, leaf in flat]
    groups: dict[tuple, list[int]] = {}
    for i, (path, leaf) in enumerate(flat):
      groups.setdefault((_layer_pattern(path), leaf.shape, jnp.dtype(leaf.dtype)), []).append(i)
    order = list(groups.values())
    if all(len(idx) == 1 for idx in order):
      return inner.update(updates, state, params)
    is_params = lambda x: jax.tree.structure(x) == treedef

    def part(tree, idx):  # a params-shaped tree's arrays of one group, stacked: [array]
      ls = treedef.flatten_up_to(tree)
      return [jnp.stack([ls[i] for i in idx]) if len(idx) > 1 else ls[idx[0]]]

    new_updates, new_states = [None] * len(leaves), []
    for idx in order:
      state_g = jax.tree.map(
        lambda x: part(x, idx) if is_params(x) else x, state, is_leaf=is_params
      )
      args = (part(updates, idx), state_g, None if params is None else part(params, idx))
      if len(idx) > 1:
        axes = jax.tree.map(lambda x: [0] if is_params(x) else None, state, is_leaf=is_params)
        p_axes = None if params is None else [0]
        u_g, s_g = jax.vmap(inner.update, in_axes=([0], axes, p_axes), out_axes=([0], axes))(*args)
      else:
        u_g, s_g = inner.update(*args)
      for j, i in enumerate(idx):
        new_updates[i] = u_g[0][j] if len(idx) > 1 else u_g[0]
      new_states.append(s_g)

    def combine(x, *pieces):  # the groups' pieces of one params-shaped tree, back per array
      if not is_params(x):
        return pieces[0]  # the step counts, equal in every group's update
      out = [None] * len(leaves)
      for idx, piece in zip(order, pieces):
        for j, i in enumerate(idx):
          out[i] = piece[0][j] if len(idx) > 1 else piece[0]
      return treedef.unflatten(out)

    new_state = jax.tree.map(combine, state, *new_states, is_leaf=is_params)
    return treedef.unflatten(new_updates), new_state

  return optax.GradientTransformation(init, update)
