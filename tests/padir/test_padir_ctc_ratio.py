"""CTC's upsampling ratio per batch (padir.decoding.ctc.batch_ratio, model.ctc_upsample_max): the
smallest ratio on the grid that fits every target of the batch, by enumeration; its slots laid
out as `upsample` lays out a fixed ratio; and the loss with it equals the loss of a model whose
fixed ratio is the one chosen, with no row left out."""

import jax
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


def _batch(rng, B=6, S=8, T=14):
  """Sources of 1..S tokens (EOS last, PAD after) and targets of 1..T tokens from 3 words, so
  some need more slots than the ratio k gives."""
  inputs = np.zeros((B, S), np.int32)
  targets = np.zeros((B, T), np.int32)
  for b in range(B):
    n, m = rng.integers(1, S + 1), rng.integers(1, T + 1)
    inputs[b, : n - 1] = rng.integers(7, 20, n - 1)
    inputs[b, n - 1] = tok.EOS_ID
    targets[b, : m - 1] = rng.integers(7, 10, m - 1)
    targets[b, m - 1] = tok.EOS_ID
  return inputs, targets


@pytest.mark.parametrize("k, k_max", [(2.0, 3.0), (1.5, 2.5), (2.0, 0.0), (1.5, 0.0)])
def test_batch_slots_is_the_most_slots_a_row_of_the_batch_fills(k, k_max):
  """Against the traced layout: the largest count of non-PAD slots of any row of the full-width
  upsampling (at the batch's ratio, or k), rounded up to the bucket, never past the full width."""
  rng = np.random.default_rng(1)
  for _ in range(25):
    inputs, targets = _batch(rng)
    S = inputs.shape[1]
    if k_max:
      r = ctc.batch_ratio(jnp.asarray(inputs), jnp.asarray(targets), k, k_max)
      x = np.asarray(ctc.upsample_ratio(jnp.asarray(inputs), r, ctc.num_slots(S, k_max)))
    else:
      x = np.asarray(ctc.upsample(jnp.asarray(inputs), k))
    used = int((x != tok.PAD_ID).sum(-1).max())
    assert ctc.batch_slots(inputs, targets, k, k_max, bucket=1) == used
    got = ctc.batch_slots(inputs, targets, k, k_max, bucket=4)
    assert got == min(x.shape[1], -(-used // 4) * 4) and got >= used
    assert (x[:, got:] == tok.PAD_ID).all()  # what the trimmed loss leaves out is PAD


@pytest.mark.parametrize("k, k_max", [(2.0, 3.0), (1.5, 0.0)])
def test_the_loss_over_the_used_slots_is_the_full_width_loss(k, k_max):
  """The decoder over the batch's used slot positions only gives the full-width loss, every
  stage's, and the same gradient (float32 summation order aside)."""
  size = dict(vocab_size=24, max_source_length=8, max_target_length=14)
  model = tiny_model(ctc_upsample=k, ctc_upsample_max=k_max, **size)
  rng = np.random.default_rng(2)
  inputs, targets = _batch(rng)
  inputs[:, 5:] = tok.PAD_ID  # sources of at most 5 tokens: a third of the width unused
  inputs[:, 4] = np.where(inputs[:, 4] != tok.PAD_ID, tok.EOS_ID, tok.PAD_ID)
  batch = {"inputs": jnp.asarray(inputs), "targets": jnp.asarray(targets)}
  A = ctc.batch_slots(inputs, targets, k, k_max, bucket=1)
  assert A < ctc.num_slots(8, max(k, k_max))

  def loss(m, slots):
    total, aux = ctc.ctc_loss(m, batch, num_stages=2, num_slots_used=slots)
    return total, aux

  # compiled (op by op, the two-stage loss and its gradient took most of a minute)
  grad = nnx.jit(nnx.value_and_grad(loss, has_aux=True), static_argnums=1)
  (full, aux_full), g_full = grad(model, None)
  (part, aux_part), g_part = grad(model, A)
  np.testing.assert_allclose(part, full, rtol=1e-5)
  for key in ("stage1_loss", "stage2_loss", "ctc_infeasible", "length_accuracy"):
    np.testing.assert_allclose(aux_part[key], aux_full[key], rtol=1e-5, atol=1e-7)
  for a, b in zip(jax.tree.leaves(g_part), jax.tree.leaves(g_full)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_the_training_step_runs_over_the_batch_s_slots(toy_corpus):
  """slot_count: a CTC run's batches get ctc.batch_slots at train.slot_bucket (0 turns it
  off), other models and the bucket 0 get 0 (every position); a bad bucket is one line."""
  c = tiny_run_config(toy_corpus, steps=2)
  inputs, targets = _batch(np.random.default_rng(3), S=c.data.max_source_length)
  host = {"inputs": inputs, "targets": targets}
  assert training.slot_count(c, host) == 0  # a refinement model
  c.model.update(ctc_upsample=2.0, ctc_upsample_max=3.0)
  c.train.slot_bucket = 4
  assert training.slot_count(c, host) == ctc.batch_slots(inputs, targets, 2.0, 3.0, 4)
  c.train.slot_bucket = 0
  assert training.slot_count(c, host) == 0
  c.train.slot_bucket = -1
  with pytest.raises(ConfigError, match="train.slot_bucket"):
    training.validate(c)
