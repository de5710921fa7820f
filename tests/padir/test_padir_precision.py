"""PaDIR's accelerator settings, on CPU: bfloat16 activations over float32 master weights train
like float32 (a step's loss within 2%), and a vocabulary padded to a multiple of 128 inside the
output matmul changes no loss, no gradient step and no decision (the padding is never chosen)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import padir_bible_en_es
from padir.data import corpus as data
from padir.data import vocab
from padir.model import transformer as model_lib
from padir.training import loop as training


@pytest.fixture(scope="module")
def setup(toy_corpus, tmp_path_factory):
  """(config, a batch of the toy corpus, the float32 model config)."""
  c = padir_bible_en_es.get_config()
  c.data.update(
    corpus_dir=toy_corpus,
    prepare_bible=False,
    vocab_size=40,
    vocab_path=str(tmp_path_factory.mktemp("vocab") / "spm40.model"),
    max_source_length=16,
    max_target_length=16,
  )
  c.model.update(num_encoder_layers=1, num_decoder_layers=1, num_heads=2, d_model=32, d_ff=64)
  tok = vocab.prepare_vocabulary(c)
  pairs = [{"source": s, "target": t} for s, t in data.read_split(toy_corpus, "train", "en", "es")]
  ds, _ = data.make_dataset(pairs, tok, batch_size=16, max_source_length=16, max_target_length=16)
  batch = {k: jnp.asarray(v) for k, v in next(iter(ds)).items()}
  return c, batch, model_lib.ModelConfig.from_run_config(c, tok.vocab_size)


def make(cfg: model_lib.ModelConfig, **changes) -> model_lib.Transformer:
  """The model of cfg with changes, initialised from the same seed (the parameters do not
  depend on the compute dtype or the vocabulary padding)."""
  return model_lib.Transformer(
    dataclasses.replace(cfg, **changes),
    rngs=nnx.Rngs(params=0, dropout=jax.random.key(0, impl="rbg")),
  )


def train_step(config, model, batch):
  """One training step; (loss, the updated parameters)."""
  from padir.training import optim

  optimizer = nnx.Optimizer(model, optim.make_optimizer(config.train), wrt=nnx.Param)
  train, _ = training.make_steps(config)
  model.train()
  metrics = train(model, optimizer, batch, jax.random.key(1), jax.random.key(2, impl="rbg"))
  return float(metrics["loss"]), nnx.state(model, nnx.Param)


def test_bf16_step_keeps_float32_master_weights_and_a_close_loss(setup):
  config, batch, cfg = setup
  loss32, params32 = train_step(config, make(cfg), batch)
  loss16, params16 = train_step(config, make(cfg, dtype="bfloat16"), batch)
  assert np.isfinite(loss16) and abs(loss16 - loss32) <= 0.02 * abs(loss32)
  assert {x.dtype for x in jax.tree.leaves(params16)} == {jnp.dtype(jnp.float32)}
  # Logits and length logits (what the losses and decoders read) come out float32.
  model = make(cfg, dtype="bfloat16")
  enc_BSD, mask_BS = model.encode(batch["inputs"])
  assert enc_BSD.dtype == jnp.bfloat16
  assert model.decode(batch["targets"], enc_BSD, mask_BS).dtype == jnp.float32
  assert model.length_logits(enc_BSD).dtype == jnp.float32


def test_padded_vocabulary_changes_no_loss_step_or_decision(setup):
  config, batch, cfg = setup
  plain, padded = make(cfg), make(cfg, vocab_multiple=128)
  V = cfg.vocab_size
  assert padded.cfg.padded_vocab_size == 128 > V and padded.embed_VD.shape == (V, cfg.d_model)
  for m in (plain, padded):
    m.eval()
  enc_BSD, mask_BS = plain.encode(batch["inputs"])
  logits_BTV = plain.decode(batch["targets"], enc_BSD, mask_BS)
  padded_BTV = padded.decode(batch["targets"], enc_BSD, mask_BS)
  assert logits_BTV.shape[-1] == V and padded_BTV.shape[-1] == 128
  np.testing.assert_allclose(padded_BTV[..., :V], logits_BTV, rtol=1e-5, atol=1e-5)
  assert (padded_BTV[..., V:] == model_lib.NEG_INF).all()
  assert (jnp.argmax(padded_BTV, -1) == jnp.argmax(logits_BTV, -1)).all()
  # The training loss and one optimizer step are those of the unpadded model.
  loss, params = train_step(config, plain, batch)
  loss_padded, params_padded = train_step(config, padded, batch)
  assert loss_padded == pytest.approx(loss, rel=1e-5)
  jax.tree.map(
    lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), params, params_padded
  )


def test_decode_step_keeps_the_real_vocabulary_with_padding(setup):
  """The incremental AR path returns vocab_size columns (what beam search reshapes by)."""
  _, batch, cfg = setup
  model = make(cfg, decoder="ar", vocab_multiple=128)
  enc_BSD, mask_BS = model.encode(batch["inputs"])
  cache = model.init_cache(enc_BSD, mask_BS, 4)
  logits_BV, _ = model.decode_step(
    jnp.full(batch["inputs"].shape[:1], 1, jnp.int32), jnp.int32(0), cache
  )
  assert logits_BV.shape == (batch["inputs"].shape[0], cfg.vocab_size)
