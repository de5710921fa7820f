"""padir.training.flops: the hand count of a training step's FLOPs, option by option, against
the program the step really is (nothing is compiled: each step is traced and lowered for
"cuda" on this CPU, as gmlm.lowering.cost counts on every platform):
  - exactly every matmul: the hand count equals 2 x the multiply-adds of every dot_general in
    the step's jaxpr (gmlm.lowering.matmul_flops), optimizer update included;
  - the lowered module: XLA's analysis of the lowered step (matmuls plus elementwise ops,
    softmax, the optimizer) within 5% above the hand count at d = 512.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from flax import nnx

from gmlm import lowering
from padir.data import tokenizer as tok_lib
from padir.model import transformer as model_lib
from padir.training import flops, loop

BASE = dict(
  vocab_size=4096, num_encoder_layers=1, num_decoder_layers=1, num_heads=4, d_model=512,
  d_ff=2048, max_source_length=32, max_target_length=32,
)  # fmt: skip
B, S, T = 16, 32, 32


def run_config(num_stages: int = 2, glancing: float = 0.0, accum: int = 1):
  return ml_collections.ConfigDict(
    dict(
      loss=dict(
        keep_rate=0.15, mask_rate=0.0, num_stages=num_stages, stage_input="argmax",
        stage_reduction="mean", length_weight=1.0, glancing_ratio=glancing,
      ),
      train=dict(grad_accum_steps=accum),
    )
  )  # fmt: skip


def batch(V: int, rows: int, S: int, T: int) -> dict:
  rng = np.random.default_rng(0)
  words = lambda n: np.concatenate(
    [rng.integers(tok_lib.NUM_SPECIAL, V, (rows, n - 1)), np.full((rows, 1), tok_lib.EOS_ID)], 1
  )
  return {"inputs": jnp.asarray(words(S), jnp.int32), "targets": jnp.asarray(words(T), jnp.int32)}


def train_step(cfg: model_lib.ModelConfig, config, accum: int = 1, slots: int = 0):
  """(jitted step(state, batch, key), state): the loop's loss (loop.loss_fn) and an AdaFactor
  update; with accum = K, the gradients of K micro-batches summed in a lax.scan, one update;
  slots: a CTC or DAG batch's slot positions, as the loop trims them (0: all)."""
  model = model_lib.Transformer(cfg, rngs=nnx.Rngs(0))
  tx = optax.adafactor(learning_rate=1e-3, multiply_by_parameter_scale=True)
  graphdef, state = nnx.split((model, nnx.Optimizer(model, tx, wrt=nnx.Param)))

  def step(state, batch, key):
    model, opt = nnx.merge(graphdef, state)
    grad = nnx.value_and_grad(
      lambda m, b: loop.loss_fn(m, b, key, config, jnp.int32(0), slots), has_aux=True
    )
    if accum == 1:
      (loss, _), grads = grad(model, batch)
    else:
      micro = jax.tree.map(lambda x: x.reshape(accum, -1, *x.shape[1:]), batch)
      model_def, params, rest = nnx.split(model, nnx.Param, ...)
      loss_of = lambda p, b: loop.loss_fn(nnx.merge(model_def, p, rest), b, key, config, 0)[0]

      def body(carry, b):
        loss, g = jax.value_and_grad(loss_of)(params, b)
        return jax.tree.map(jnp.add, carry, g), loss

      grads, loss = jax.lax.scan(body, jax.tree.map(jnp.zeros_like, params), micro)
    opt.update(model, grads)
    return nnx.state((model, opt)), loss

  return jax.jit(step), state


OPTIONS = {
  "padir 2 stages": (dict(), run_config()),
  "padir 3 stages": (dict(), run_config(num_stages=3)),
  "glancing": (dict(), run_config(glancing=0.5)),
  "length offsets, padded vocabulary": (dict(max_length_offset=4, vocab_multiple=1000), run_config()),
  "no positional attention": (dict(positional_attention=False), run_config()),
  "ctc k=2": (dict(ctc_upsample=2), run_config()),
  "ctc k=1.5, glancing": (dict(ctc_upsample=1.5), run_config(glancing=0.3)),
  "ar": (dict(decoder="ar"), run_config(num_stages=1)),
  "dag k=2": (dict(dag_upsample=2), run_config(num_stages=1)),
  "dag k=2.5, glancing": (dict(dag_upsample=2.5), run_config(num_stages=1, glancing=0.5)),
  "accumulation K=2": (dict(dropout_rate=0.0), run_config(accum=2)),  # no RNG in the scan
}  # fmt: skip


@pytest.mark.parametrize("name", list(OPTIONS))
def test_hand_count_is_the_step_s_matmuls_and_the_lowered_module_s_flops(name):
  over, config = OPTIONS[name]
  cfg = model_lib.ModelConfig(**{**BASE, **over})
  # CTC, the DAG: k x the source's slots cover the target
  src = S // 2 if cfg.ctc_upsample or cfg.dag_upsample else S
  b = batch(cfg.vocab_size, B, src, T)
  accum = config.train.grad_accum_steps
  step, state = train_step(cfg, config, accum)
  hand = flops.step_flops(cfg, flops.run_step(config, b["inputs"].shape, b["targets"].shape))
  key = jax.random.key(0)
  assert lowering.matmul_flops(step, state, b, key) == pytest.approx(hand, rel=1e-4), name
  lowered = lowering.cost(step, state, b, key, platform="cuda").flops
  assert hand <= lowered <= 1.05 * hand, (name, lowered / hand)


def test_options_change_the_count_as_their_passes_say():
  """Relations the formula must keep whatever its terms: a third stage adds one decoder pass
  (trained: 3x), glancing one forward-only pass, and accumulation splits the rows without
  adding matmuls but the positional scores every call shares."""
  cfg = model_lib.ModelConfig(**BASE)
  step = lambda **kw: flops.step_flops(cfg, flops.Step(B, S, T, **kw))
  one_pass = B * flops.decoder_flops(cfg, T, S) + flops.positional_shared_flops(cfg, T)
  losses = 2 * B * flops.loss_flops(cfg, T)
  assert step(num_stages=3) - step(num_stages=2) == pytest.approx(3 * one_pass + losses)
  assert step(glancing=True) - step() == pytest.approx(one_pass)
  shared = 3 * 2 * flops.positional_shared_flops(cfg, T)  # two stages, trained
  assert step(grad_accum_steps=4) - step() == pytest.approx(3 * shared)
  with pytest.raises(ValueError, match="grad_accum_steps=3"):
    step(grad_accum_steps=3)


@pytest.mark.parametrize("upsample", ["ctc_upsample", "dag_upsample"])
def test_a_batch_whose_slots_the_loop_trims_is_counted_over_those_slots(upsample):
  """The loop runs a CTC or DAG batch's decoder over the slot positions its rows use
  (loop.slot_count, a multiple of train.slot_bucket): the count of a trimmed step is its
  jaxpr's matmuls, fewer than the full width's."""
  cfg = model_lib.ModelConfig(**{**BASE, upsample: 2})
  config = run_config(num_stages=1)
  b = batch(cfg.vocab_size, B, S // 2, T)
  b["inputs"] = b["inputs"].at[:, 12:].set(tok_lib.PAD_ID)  # 12 source tokens: 24 of 32 slots
  config.train.slot_bucket = 8
  config.model = {upsample: 2}
  slots = loop.slot_count(config, jax.tree.map(np.asarray, b))
  assert slots == 24
  step, state = train_step(cfg, config, slots=slots)
  hand = flops.step_flops(cfg, flops.run_step(config, b["inputs"].shape, b["targets"].shape, slots))
  key = jax.random.key(0)
  assert lowering.matmul_flops(step, state, b, key) == pytest.approx(hand, rel=1e-4)
  full = flops.step_flops(cfg, flops.run_step(config, b["inputs"].shape, b["targets"].shape))
  assert hand < full
