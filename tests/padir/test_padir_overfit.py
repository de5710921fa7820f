"""A tiny PaDIR model memorizes a tiny corpus: refinement from random tokens reproduces targets."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from padir import decode, losses
from padir import model as model_lib
from padir import tokenizer as tok_lib

V, P, L = 32, 8, 8


def _corpus() -> tuple[np.ndarray, np.ndarray]:
  """8 pairs; the target is the reversed source through a fixed token map, lengths 4..7 + EOS."""
  rng = np.random.default_rng(0)
  src, tgt = np.zeros((P, L), np.int32), np.zeros((P, L), np.int32)
  for i in range(P):
    n = rng.integers(3, L)
    s = rng.integers(tok_lib.NUM_SPECIAL, V, n)
    src[i, :n], src[i, n] = s, tok_lib.EOS_ID
    tgt[i, :n] = (s[::-1] * 3) % (V - tok_lib.NUM_SPECIAL) + tok_lib.NUM_SPECIAL
    tgt[i, n] = tok_lib.EOS_ID
  return src, tgt


def test_nar_refinement_from_random_tokens_reproduces_memorized_targets():
  src, tgt = _corpus()
  cfg = model_lib.ModelConfig(
    vocab_size=V,
    max_source_length=L,
    max_target_length=L,
    num_encoder_layers=1,
    num_decoder_layers=1,
    num_heads=4,
    d_model=64,
    d_ff=128,
    dropout_rate=0.0,
  )
  model = model_lib.Transformer(cfg, rngs=nnx.Rngs(0))
  optimizer = nnx.Optimizer(model, optax.adam(3e-3), wrt=nnx.Param)
  batch = {"inputs": jnp.asarray(src), "targets": jnp.asarray(tgt)}

  @nnx.jit
  def train_step(model, optimizer, key):
    grads = nnx.grad(lambda m: losses.padir_loss(m, batch, key, num_stages=2)[0])(model)
    optimizer.update(model, grads)

  @nnx.jit
  def refine(model, key):
    return decode.refine(model, batch["inputs"], key, num_steps=4, num_lengths=2)

  # Before training, refinement does not produce the targets.
  model.eval()
  assert not (np.asarray(refine(model, jax.random.key(1))["tokens"]) == tgt).all()
  model.train()
  for k in jax.random.split(jax.random.key(0), 150):
    train_step(model, optimizer, k)
  model.eval()
  for seed in (1, 2):  # different random initial hypotheses
    out = refine(model, jax.random.key(seed))
    np.testing.assert_array_equal(np.asarray(out["lengths"]), (tgt != 0).sum(1))
    np.testing.assert_array_equal(np.asarray(out["tokens"]), tgt)
