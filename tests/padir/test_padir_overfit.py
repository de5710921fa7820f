"""A tiny PaDIR model memorizes a tiny corpus: refinement from random tokens reproduces targets."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from padir.data import tokenizer as tok_lib
from padir.decoding import refinement
from padir.model import losses
from padir.model import transformer as model_lib

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


@pytest.fixture(scope="module")
def memorized():
  """(model, sources, targets, tokens the untrained model refines to): 150 Adam steps on 8
  pairs."""
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

  model.eval()
  untrained = refinement.refine_jit(model, batch["inputs"], jax.random.key(1), KEEP)["tokens"]
  model.train()
  for k in jax.random.split(jax.random.key(0), 150):
    train_step(model, optimizer, k)
  model.eval()
  return model, batch["inputs"], tgt, untrained


# The targets hold legitimate repeats (token maps collide): the stutter rule would remove them.
KEEP = refinement.RefineOptions(num_steps=4, num_lengths=2, stutter="keep", drop="reset")


@pytest.mark.slow  # a model trained to memorize its targets (module fixture)
def test_nar_refinement_from_random_tokens_reproduces_memorized_targets(memorized):
  model, src, tgt, untrained = memorized
  assert not (np.asarray(untrained) == tgt).all()  # before training, refinement does not
  for seed in (1, 2):  # different random initial hypotheses
    out = refinement.refine_jit(model, src, jax.random.key(seed), KEEP)
    np.testing.assert_array_equal(np.asarray(out["lengths"]), (tgt != 0).sum(1))
    np.testing.assert_array_equal(np.asarray(out["tokens"]), tgt)


@pytest.mark.slow  # a model trained to memorize its targets (module fixture)
@pytest.mark.parametrize("remask", ["none", "confidence"])
def test_the_papers_rules_drop_repeats_and_tokens_equal_to_their_noise(memorized, remask):
  """Default options (stutter reset to the noise, positions still at their noise dropped), with
  and without Mask-Predict re-noising: the memorised target less its adjacent repeats and the
  positions whose target token equals the chosen candidate's noise token."""
  model, src, tgt, _ = memorized
  options = refinement.RefineOptions(num_lengths=2, remask=remask)
  out = refinement.refine_jit(model, src, jax.random.key(3), options)
  tokens, noise = np.asarray(out["tokens"]), np.asarray(out["noise"])
  for b in range(len(tgt)):
    n = int((tgt[b] != 0).sum())
    kept = [
      int(t)
      for i, t in enumerate(tgt[b, :n])
      if not (i > 0 and t == tgt[b, i - 1]) and t != noise[b, i]
    ]
    np.testing.assert_array_equal(tokens[b], kept + [0] * (L - len(kept)))
