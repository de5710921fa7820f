"""AdaFactor run once per parameter shape (padir.training.optim.per_layer) makes
the per-array update: the same parameters and state over several steps on a model whose layers
repeat shapes, the state stored exactly as the per-array optimizer's (checkpoints unchanged), and
a smaller program. An inner transformation that mixes arrays (a global-norm clip) is not
per-array, and the test shows the batched form then differs: the comparison can fail."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx

from padir.model import layer_stack
from padir.model import transformer as model_lib
from padir.training import optim


def _params(encoder_layers=2, decoder_layers=3, scan_layers="loop"):
  cfg = model_lib.ModelConfig(
    vocab_size=50,
    d_model=32,
    num_heads=2,
    d_ff=64,
    num_encoder_layers=encoder_layers,
    num_decoder_layers=decoder_layers,
    scan_layers=scan_layers,
  )
  model = model_lib.Transformer(cfg, rngs=nnx.Rngs(0))
  return nnx.as_pure(nnx.state(model, nnx.Param))


def _grads(params, key):
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(key, len(leaves))
  return treedef.unflatten([jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)])


def _run(tx, params, steps=4):
  state = tx.init(params)
  update = jax.jit(tx.update)
  for t in range(steps):
    updates, state = update(_grads(params, jax.random.key(t)), state, params)
    params = optax.apply_updates(params, updates)
  return params, state


def _max_rel(a, b):
  return max(
    float(jnp.max(jnp.abs(x - y)) / (jnp.max(jnp.abs(x)) + 1e-30))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
  )


def _train_cfg():
  return ml_collections.ConfigDict(
    {"min_lr": 1e-5, "peak_lr": 3e-3, "warmup_steps": 2, "num_train_steps": 10}
  )


def test_by_shape_is_the_per_array_adafactor():
  params = _params()
  shapes = {x.shape for x in jax.tree.leaves(params)}
  assert len(shapes) < len(jax.tree.leaves(params)) / 2  # shapes repeat: batching happens
  cfg = _train_cfg()
  plain = optim.make_optimizer(ml_collections.ConfigDict({**cfg, "optimizer_by_shape": False}))
  batched = optim.make_optimizer(cfg)  # the default
  p1, s1 = _run(plain, params)
  p2, s2 = _run(batched, params)
  # the same state layout: a checkpoint of one restores into the other
  assert jax.tree.structure(s1) == jax.tree.structure(s2)
  assert [x.shape for x in jax.tree.leaves(s1)] == [x.shape for x in jax.tree.leaves(s2)]
  # float32 rounding of reductions in another order: a few ulps of each array's scale
  assert _max_rel(p1, p2) < 1e-6
  assert _max_rel(s1, s2) < 1e-5
  moved = _max_rel(p1, params)
  assert moved > 1e-4  # the steps did move the parameters


def test_by_shape_program_does_not_grow_with_the_layers():
  """The per-array update is traced once per array, so its program grows with the layer count;
  the batched one is traced once per layer kind's parameter, so 6+6 layers cost what 2+2 do."""
  cfg = _train_cfg()
  sizes = {}
  for layers in (2, 6):
    params = _params(layers, layers)
    g = _grads(params, jax.random.key(0))
    for by_shape in (False, True):
      c = ml_collections.ConfigDict({**cfg, "optimizer_by_shape": by_shape})
      tx = optim.make_optimizer(c)
      text = jax.jit(tx.update).lower(g, tx.init(params), params).as_text()
      sizes[layers, by_shape] = text.count("\n")
  assert sizes[6, False] > 2.5 * sizes[2, False], sizes  # ~3x the arrays
  # the batched program adds only the stacking of the new layers' arrays (a few lines each),
  # the per-array one a traced AdaFactor update for each (~30 lines each): 6x less growth
  grown = lambda by_shape: sizes[6, by_shape] - sizes[2, by_shape]
  assert grown(True) < 0.25 * grown(False), sizes


def test_a_transformation_across_arrays_is_not_batched_equal():
  """The batched form is exact only for per-array transformations: a global-norm clip sees each
  slice's norm under vmap, so the comparison above would catch an optimizer that is not."""
  params = _params()
  inner = optax.chain(optax.clip_by_global_norm(1e-3), optax.sgd(1.0))
  p1, _ = _run(inner, params, steps=1)
  p2, _ = _run(optim.per_layer(inner), params, steps=1)
  assert _max_rel(p1, p2) > 1e-2


def test_optimizer_by_shape_is_checked_and_resumable():
  from padir.training import loop as training

  assert "train.optimizer_by_shape" in training.RESUMABLE_KEYS
  # a lone array per shape: the inner update unchanged
  lone = {"a": jnp.ones((2, 3)), "b": jnp.ones((4,))}
  tx = optim.per_layer(optax.adafactor(1e-2))
  u, _ = tx.update(lone, tx.init(lone), lone)
  ref, _ = optax.adafactor(1e-2).update(lone, optax.adafactor(1e-2).init(lone), lone)
  np.testing.assert_array_equal(u["a"], ref["a"])


def test_stacked_layers_get_the_per_array_adafactor():
  """Layers stored stacked (padir.model.layer_stack): make_optimizer's update of each stacked
  array is the per-array AdaFactor of each layer's slice, over several steps with the same
  gradients, and its state is the per-array state stacked (a checkpoint, written per layer,
  restores into either layout). AdaFactor over a whole stack would differ: its parameter scale
  and update clipping take one RMS per array (the last assertion shows the check can fail)."""
  stacked = _params(scan_layers="scan")
  flat = layer_stack.unstack_layers(stacked)
  ref = _params()
  assert jax.tree.structure(flat) == jax.tree.structure(ref)
  assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(flat), jax.tree.leaves(ref)))
  cfg = _train_cfg()
  plain = optim.make_optimizer(ml_collections.ConfigDict({**cfg, "optimizer_by_shape": False}))
  ours = optim.make_optimizer(cfg)
  whole = optax.adafactor(1e-2, decay_rate=0.8, clipping_threshold=1.0)  # no per-layer vmap
  runs = []
  for tx, params, stack in ((plain, flat, False), (ours, stacked, True), (whole, stacked, True)):
    state, update = tx.init(params), jax.jit(tx.update)
    for t in range(4):
      g = _grads(flat, jax.random.key(t))
      updates, state = update(layer_stack.stack_layers(g) if stack else g, state, params)
      params = optax.apply_updates(params, updates)
    runs.append((layer_stack.unstack_layers(params), layer_stack.unstack_layers(state)))
  (p1, s1), (p2, s2), (p3, _) = runs
  assert jax.tree.structure(s1) == jax.tree.structure(s2)
  assert [x.shape for x in jax.tree.leaves(s1)] == [x.shape for x in jax.tree.leaves(s2)]
  assert _max_rel(p1, p2) < 1e-6
  assert _max_rel(s1, s2) < 1e-5
  assert _max_rel(p1, flat) > 1e-4
  assert _max_rel(p1, p3) > 1e-3
