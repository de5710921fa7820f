"""CTC's upsampling ratio per batch (padir.decoding.ctc.batch_ratio, model.ctc_upsample_max): the
smallest ratio on the grid that fits every target of the batch, by enumeration; its slots laid
out as `upsample` lays out a fixed ratio; and the loss with it equals the loss of a model whose
fixed ratio is the one chosen, with no row left out."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from padir_util import tiny_model, tiny_run_config

from gmlm.checks import ConfigError
from padir.data import tokenizer as tok
from padir.decoding import ctc
from padir.training import loop as training


@pytest.mark.parametrize("r", [1.0, 1.5, 2.0, 2.5, 3.0])
def test_the_traced_ratio_lays_out_the_slots_as_upsample_does(r):
  inputs = np.array([[7, 8, 9, 10, tok.EOS_ID], [7, 9, tok.EOS_ID, 0, 0]])
  A = ctc.num_slots(5, 3.0)
  got = np.asarray(ctc.upsample_ratio(jnp.asarray(inputs), jnp.float32(r), A))
  want = np.asarray(ctc.upsample(jnp.asarray(inputs), r))
  assert got[:, : want.shape[1]].tolist() == want.tolist()
  assert (got[:, want.shape[1] :] == tok.PAD_ID).all()


def _needed(target):
  """Slots an alignment needs, by hand: tokens, plus a blank between equal neighbours."""
  t = [x for x in target if x]
  return len(t) + sum(a == b for a, b in zip(t, t[1:]))


@pytest.mark.parametrize("k, k_max", [(1.0, 3.0), (1.5, 2.5), (2.0, 2.0)])
def test_the_batch_ratio_is_the_smallest_grid_ratio_that_fits_every_row(k, k_max):
  rng = np.random.default_rng(0)
  for _ in range(20):
    n = rng.integers(1, 6, 4)
    inputs = np.zeros((4, 6), np.int32)
    targets = np.zeros((4, 12), np.int32)
    for b in range(4):
      inputs[b, : n[b]] = 7
      m = rng.integers(1, 12)
      targets[b, :m] = rng.integers(7, 9, m)  # two words: repeats are likely
    grid = [k + 0.5 * g for g in range(int(round((k_max - k) / 0.5)) + 1)]
    fits = [r for r in grid if all(int(r * n[b]) >= _needed(targets[b]) for b in range(4))]
    want = fits[0] if fits else grid[-1]
    assert float(ctc.batch_ratio(jnp.asarray(inputs), jnp.asarray(targets), k, k_max)) == want


def test_the_loss_at_the_chosen_ratio_is_the_fixed_ratio_models_and_leaves_no_row_out():
  # Targets of 5 and 6 tokens from sources of 3 and 4 tokens: ratio 1 leaves both out, 1.5
  # fits the second only (6 >= 6, 4.5 < 5), 2 fits both.
  inputs = jnp.asarray([[7, 8, tok.EOS_ID, 0], [7, 8, 9, tok.EOS_ID]])
  targets = jnp.asarray([[9, 10, 11, 12, tok.EOS_ID, 0], [9, 10, 11, 12, 13, tok.EOS_ID]])
  batch = {"inputs": inputs, "targets": targets}
  size = dict(vocab_size=24, max_source_length=4, max_target_length=8)
  per_batch = tiny_model(ctc_upsample=1.0, ctc_upsample_max=3.0, **size)
  fixed = tiny_model(ctc_upsample=2.0, **size, seed=1)
  assert per_batch.cfg.decoder_length == 12 and fixed.cfg.decoder_length == 8
  loss_fixed, aux_fixed = ctc.ctc_loss(fixed, batch, num_stages=1)
  # The same parameters in the per-batch model (its position table is longer: its first 8 rows).
  params = nnx.state(fixed, nnx.Param)
  pos = nnx.state(per_batch, nnx.Param)["target_pos_TD"][...]
  params["target_pos_TD"] = nnx.Param(jnp.concatenate([params["target_pos_TD"][...], pos[8:]]))
  nnx.update(per_batch, params)
  loss, aux = ctc.ctc_loss(per_batch, batch, num_stages=1)
  assert float(aux["ctc_ratio"]) == 2.0 and float(aux["ctc_infeasible"]) == 0.0
  assert float(aux_fixed["ctc_infeasible"]) == 0.0
  np.testing.assert_allclose(loss, loss_fixed, rtol=1e-5)
  base, aux_base = ctc.ctc_loss(tiny_model(ctc_upsample=1.0, **size), batch, num_stages=1)
  assert float(aux_base["ctc_infeasible"]) == 1.0


def test_a_maximum_ratio_below_the_ratio_is_refused(toy_corpus):
  c = tiny_run_config(toy_corpus, steps=2)
  c.model.update(ctc_upsample=2.0, ctc_upsample_max=1.5)
  with pytest.raises(ConfigError, match="model.ctc_upsample_max"):
    training.validate(c)
  c.model.ctc_upsample_max = 3.0
  training.validate(c)
