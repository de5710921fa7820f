"""A layer's dropout masks from one draw of random bits (model.dropout_draw = "layer",
padir.model.transformer.draw_dropout) are the dropout nnx.Dropout applies site by site: each
element kept with probability 1 - rate, independently of the other sites and of the next draw,
and the training loss has the same distribution under both draws, with either bit generator
(model.dropout_rng: XLA's ThreeFry, or its default algorithm as runs before the key drew).
Tolerances are z-scores of the sample sizes."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from padir.model import layer_stack
from padir.model import transformer as model_lib

Z = 5.0  # a z-score no correct implementation reaches but with probability ~6e-7


def _within(observed: float, p: float, n: int) -> bool:
  return abs(observed - p) <= Z * np.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("rng", model_lib.DROPOUT_RNGS)
@pytest.mark.parametrize("impl", ["rbg", "threefry2x32"])  # the training loop's stream; nnx's
@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_one_draw_keeps_each_element_with_probability_one_minus_rate_independently(rate, impl, rng):
  drop = nnx.Dropout(rate, rngs=nnx.Rngs(dropout=jax.random.key(0, impl=impl)))
  shapes = ((64, 50), (3, 7, 11), (64, 50))
  first = [np.asarray(m) for m in model_lib.draw_dropout(drop, *shapes, rng=rng)]
  second = [np.asarray(m) for m in model_lib.draw_dropout(drop, *shapes, rng=rng)]
  keep = 1 - rate
  for got, shape in zip(first, shapes):
    assert got.shape == shape and got.dtype == bool
    assert _within(got.mean(), keep, got.size), (shape, got.mean())
  # two sites of one draw, and one site in two draws: independent (both kept: keep^2)
  n = first[0].size
  assert _within((first[0] & first[2]).mean(), keep**2, n)
  assert _within((first[0] & second[0]).mean(), keep**2, n)
  # neighbours in one mask: independent too (a generator whose words repeated or alternated
  # would fail here)
  flat = first[0].reshape(-1)
  assert _within((flat[1:] & flat[:-1]).mean(), keep**2, n - 1)


def test_the_default_generator_draws_the_bits_of_runs_before_the_option():
  """dropout_rng "xla_default" is jax.random.bits of the stream's key, as every run drew before
  the key (so a resumed run is bit for bit the run it was); "threefry" draws other bits from
  the same key, and the same ones again from the same key."""
  key = jax.random.key(7, impl="rbg")
  bits = np.asarray(jax.random.bits(key, (1000,), jnp.uint32))
  np.testing.assert_array_equal(np.asarray(model_lib.dropout_bits(key, 1000, "xla_default")), bits)
  threefry = np.asarray(model_lib.dropout_bits(key, 1000, "threefry"))
  assert (threefry != bits).mean() > 0.99
  np.testing.assert_array_equal(np.asarray(model_lib.dropout_bits(key, 1000, "threefry")), threefry)
  drop = nnx.Dropout(0.1, rngs=nnx.Rngs(dropout=key))
  twin = nnx.Dropout(0.1, rngs=nnx.Rngs(dropout=key))  # its stream's first key, drawn by hand
  expected = np.asarray(jax.random.bits(twin.rngs(), (1000,), jnp.uint32))
  (mask,) = model_lib.draw_dropout(drop, (1000,), rng="xla_default")
  np.testing.assert_array_equal(np.asarray(mask), expected < np.uint32(round(0.9 * 2**32)))
  with pytest.raises(ValueError, match="dropout_rng"):
    model_lib.dropout_bits(key, 4, "philox")


def test_no_masks_in_eval_mode_or_at_rate_zero_and_a_kept_element_is_scaled():
  assert model_lib.draw_dropout(nnx.Dropout(0.0, rngs=nnx.Rngs(dropout=0)), (4,)) is None
  drop = nnx.Dropout(0.25, rngs=nnx.Rngs(dropout=0), deterministic=True)
  assert model_lib.draw_dropout(drop, (4,)) is None
  drop = nnx.Dropout(0.25, rngs=nnx.Rngs(dropout=0))
  x = jnp.arange(1.0, 9.0)
  keep = jnp.array([True, False] * 4)
  np.testing.assert_allclose(
    model_lib.dropped(drop, x, keep), np.where(np.asarray(keep), np.arange(1.0, 9.0) / 0.75, 0)
  )


def _cfg(draw: str, positional: bool, rng: str = "threefry") -> model_lib.ModelConfig:
  return model_lib.ModelConfig(
    vocab_size=40,
    max_source_length=8,
    max_target_length=8,
    num_encoder_layers=2,
    num_decoder_layers=2,
    num_heads=2,
    d_model=16,
    d_ff=32,
    dropout_rate=0.3,
    positional_attention=positional,
    dropout_draw=draw,
    dropout_rng=rng,
  )


@pytest.mark.parametrize(
  "positional, generator", [(True, "threefry"), (False, "threefry"), (True, "xla_default")]
)
def test_the_layer_draw_gives_the_per_site_draws_loss_distribution(positional, generator):
  """The decoder's token cross-entropy in training mode over 256 dropout seeds, one draw a layer
  against one a site (nnx.Dropout), the same weights: equal means (two-sample z-test) and
  spreads (their ratio within the sampling error of a standard deviation); and in eval mode
  the two models are the same function."""
  rng = np.random.default_rng(0)
  inputs = jnp.asarray(rng.integers(6, 40, (8, 8)), jnp.int32)
  targets = jnp.asarray(rng.integers(6, 40, (8, 8)), jnp.int32)
  seeds = jax.random.split(jax.random.key(1), 256)
  samples, evals = {}, {}
  for draw in ("layer", "site"):
    cfg = _cfg(draw, positional, generator)
    model = model_lib.Transformer(cfg, rngs=nnx.Rngs(params=0, dropout=0))
    graphdef, state = nnx.split(model)

    def loss(key, state, graphdef=graphdef):
      m = nnx.merge(graphdef, state)
      layer_stack.reseed_dropout(m, key)
      enc, mask = m.encode(inputs)
      logp = jax.nn.log_softmax(m.decode(targets, enc, mask), -1)
      return -jnp.take_along_axis(logp, targets[..., None], -1).mean()

    samples[draw] = np.asarray(jax.jit(jax.vmap(loss, in_axes=(0, None)))(seeds, state))
    model.eval()
    enc, mask = model.encode(inputs)
    evals[draw] = np.asarray(model.decode(targets, enc, mask))
  a, b = samples["layer"], samples["site"]
  n = len(a)
  assert a.std() > 0 and not np.allclose(a, b)  # dropout acts, and the masks differ
  assert abs(a.mean() - b.mean()) <= Z * np.sqrt((a.var() + b.var()) / n), (a.mean(), b.mean())
  assert abs(np.log(a.std() / b.std())) <= Z * np.sqrt(1 / (n - 1)), (a.std(), b.std())
  np.testing.assert_array_equal(evals["layer"], evals["site"])


def test_without_dropout_both_draws_are_one_function_in_training():
  """The released configs train with dropout 0: their training step is the same either way."""
  rng = np.random.default_rng(1)
  inputs = jnp.asarray(rng.integers(6, 40, (4, 8)), jnp.int32)
  out = {}
  for draw in ("layer", "site"):
    cfg = dataclasses.replace(_cfg(draw, True), dropout_rate=0.0)
    model = model_lib.Transformer(cfg, rngs=nnx.Rngs(params=0, dropout=0))
    enc, mask = model.encode(inputs)
    out[draw] = np.asarray(model.decode(inputs, enc, mask))
  np.testing.assert_array_equal(out["layer"], out["site"])


def test_an_unknown_draw_or_generator_is_refused():
  with pytest.raises(ValueError, match="dropout_draw"):
    model_lib.Transformer(_cfg("block", True), rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="dropout_rng"):
    model_lib.Transformer(_cfg("layer", True, "philox"), rngs=nnx.Rngs(0))


def test_a_run_begun_before_the_options_resumes_with_its_draw_and_generator(tmp_path):
  """A run directory from before model.dropout_draw (the family's AR: dropout 0.1, no such key in
  its config.json) resumes drawing its masks as it began, a draw a site, through the entry
  point's checks; one from before model.dropout_rng, with XLA's default generator; a run begun
  with the options keeps its own."""
  from configs import padir_family
  from gmlm import cli
  from gmlm.runs import dumps

  config = padir_family.get_config("sov,ar")
  assert config.model.dropout_rate > 0 and config.model.dropout_draw == "layer"
  old = json.loads(dumps(config))
  del old["model"]["dropout_draw"], old["model"]["dropout_rng"]
  (tmp_path / "config.json").write_text(json.dumps(old))
  cli.prepare(config, str(tmp_path), "train.py")
  assert config.model.dropout_draw == "site" and config.model.dropout_rng == "xla_default"
  layered = padir_family.get_config("sov,ar")
  old = json.loads(dumps(layered))
  del old["model"]["dropout_rng"]
  (tmp_path / "config.json").write_text(json.dumps(old))
  cli.prepare(layered, str(tmp_path), "train.py")
  assert layered.model.dropout_draw == "layer" and layered.model.dropout_rng == "xla_default"
  fresh = padir_family.get_config("sov,ar")
  (tmp_path / "config.json").write_text(dumps(fresh))
  cli.prepare(fresh, str(tmp_path), "train.py")
  assert fresh.model.dropout_draw == "layer" and fresh.model.dropout_rng == "threefry"
