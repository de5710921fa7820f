"""CTC over an upsampled decoder (padir.decoding.ctc, issue 26 item 4): the collapse rule and the loss
against brute-force enumeration of every alignment, infeasible targets left out, the decoding
loop against its passes done by hand, batch invariance, source trimming that changes no token,
the training job end to end (deterministic, resumed = uninterrupted, warm start), and the config
checks before anything is written."""

from __future__ import annotations

import itertools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from padir_util import tiny_model, tiny_run_config

from configs import padir_bible_en_es
from gmlm import cli
from gmlm.checks import ConfigError
from padir.data import tokenizer as tok_lib
from padir.decoding import ctc, decoders
from padir.jobs import train as train_job
from padir.training import loop as training

PAD, EOS, BLANK = tok_lib.PAD_ID, tok_lib.EOS_ID, ctc.BLANK_ID


def _collapse_by_hand(alignment) -> list[int]:
  """The CTC rule in plain Python: merge runs of equal slots, drop blanks (and PAD), cut after
  the first EOS."""
  out = []
  for i, a in enumerate(alignment):
    if a in (BLANK, PAD) or (i and alignment[i - 1] == a):
      continue
    out.append(a)
    if a == EOS:
      break
  return out


def test_collapse_merges_runs_then_drops_blanks_and_cuts_after_eos():
  rng = np.random.default_rng(0)
  choices = np.array([PAD, EOS, BLANK, 7, 8, 9])
  align_BA = rng.choice(choices, size=(500, 9)).astype(np.int32)
  align_BA[:3] = [
    [7, 7, BLANK, 7, 8, 8, EOS, 9, PAD],  # 7 _ 7: two sevens; 8 8: one
    [BLANK] * 9,  # nothing
    [9, 9, 9, 9, 9, 9, 9, 9, 9],  # one nine, no EOS
  ]
  got = np.asarray(ctc.collapse(jnp.asarray(align_BA), 6))
  for row, a in zip(got, align_BA):
    want = _collapse_by_hand(list(a))[:6]
    assert list(row) == want + [PAD] * (6 - len(want))
  assert list(got[0]) == [7, 7, 8, EOS, PAD, PAD]


def _nll_by_enumeration(logits_AV, target) -> float:
  """-log of the summed probability of every alignment whose collapse (runs merged, blanks
  dropped) is the target, over all V^A alignments."""
  logp_AV = np.asarray(jax.nn.log_softmax(jnp.asarray(logits_AV, jnp.float32), -1), np.float64)
  A, V = logp_AV.shape
  total = 0.0
  for a in itertools.product(range(V), repeat=A):
    merged = [x for i, x in enumerate(a) if not i or a[i - 1] != x]
    if [x for x in merged if x != BLANK] == list(target):
      total += np.exp(sum(logp_AV[i, x] for i, x in enumerate(a)))
  return -np.log(total)


@pytest.mark.parametrize("target", [[6, EOS], [6, 6, EOS], [7, 6, 7], [EOS]])
def test_ctc_loss_is_minus_log_of_the_alignments_that_collapse_to_the_target(target):
  A, V, T = 5, 8, 4
  logits_BAV = jax.random.normal(jax.random.key(len(target) + sum(target)), (1, A, V)) * 2
  targets_BT = np.full((1, T), PAD, np.int32)
  targets_BT[0, : len(target)] = target
  slots_BA = jnp.ones((1, A), bool)
  loss, feasible_B, nll_B = ctc.stage_loss(logits_BAV, slots_BA, jnp.asarray(targets_BT))
  want = _nll_by_enumeration(np.asarray(logits_BAV[0]), target)
  np.testing.assert_allclose(float(nll_B[0]), want, rtol=1e-5)
  np.testing.assert_allclose(float(loss), want / len(target), rtol=1e-5)
  assert bool(feasible_B[0])


def test_padded_slots_are_not_alignment_positions():
  """A row with 3 live slots of 5 has the loss of its first 3 slots alone."""
  logits_BAV = jax.random.normal(jax.random.key(1), (1, 5, 8))
  slots_BA = jnp.asarray([[True, True, True, False, False]])
  targets_BT = jnp.asarray([[6, EOS, PAD]])
  _, _, nll_B = ctc.stage_loss(logits_BAV, slots_BA, targets_BT)
  want = _nll_by_enumeration(np.asarray(logits_BAV[0, :3]), [6, EOS])
  np.testing.assert_allclose(float(nll_B[0]), want, rtol=1e-5)


def test_a_target_no_alignment_can_produce_is_left_out_and_counted():
  # 3 slots: [6, EOS] needs 2, [6, 6, EOS] needs 4 (a blank between the sixes).
  targets_BT = jnp.asarray([[6, EOS, PAD], [6, 6, EOS]])
  np.testing.assert_array_equal(ctc.needed_slots(targets_BT), [2, 4])
  logits_BAV = jax.random.normal(jax.random.key(2), (2, 3, 8))
  loss, feasible_B, nll_B = ctc.stage_loss(logits_BAV, jnp.ones((2, 3), bool), targets_BT)
  np.testing.assert_array_equal(feasible_B, [True, False])
  np.testing.assert_allclose(float(loss), float(nll_B[0]) / 2, rtol=1e-6)


def _ctc_model(k=2, **kw):
  return tiny_model(vocab_size=24, max_source_length=6, max_target_length=8, ctc_upsample=k, **kw)


def _sources(B=5, S=6, seed=0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  x = np.full((B, S), PAD, np.int32)
  for b in range(B):
    n = rng.integers(1, S + 1)
    x[b, : n - 1] = rng.integers(tok_lib.NUM_SPECIAL, 24, n - 1)
    x[b, n - 1] = EOS
  return x


@pytest.mark.parametrize("k", [1, 1.5, 2, 2.5, 3])
def test_upsampling_gives_n_tokens_floor_k_n_slots_each_token_in_order(k):
  """Against a loop by hand: position i repeated floor((i+1)k) - floor(ik) times (k times for an
  integer k, as jnp.repeat), so a source of n tokens (then PAD) fills floor(k n) slots."""
  x_BS = _sources(B=6, S=6, seed=3)
  got = np.asarray(ctc.upsample(jnp.asarray(x_BS), k))
  want = []
  for row in x_BS:
    out = []
    for i, tok in enumerate(row):
      out += [tok] * (int(np.floor((i + 1) * k + 1e-9)) - int(np.floor(i * k + 1e-9)))
    want.append(out)
  np.testing.assert_array_equal(got, np.asarray(want))
  assert got.shape[1] == ctc.num_slots(6, k) == int(np.floor(6 * k + 1e-9))
  for row_x, row_a in zip(x_BS, got):
    n = int((row_x != PAD).sum())
    assert int((row_a != PAD).sum()) == int(np.floor(n * k + 1e-9))
  if float(k).is_integer():
    np.testing.assert_array_equal(got, np.repeat(x_BS, int(k), axis=1))


def test_a_fractional_upsampling_model_decodes_and_scores_over_its_slots():
  """k = 1.5: the decoder's positions cover floor(1.5 S) slots, decoding's alignment has that
  many (PAD beyond each row's floor(1.5 n)), and the loss is finite and equals -log of the
  alignments of the upsampled slots (the same stage_loss on the same logits)."""
  model = _ctc_model(k=1.5)
  assert model.cfg.decoder_length == max(8, 9)
  x_BS = jnp.asarray(_sources())
  out = ctc.decode(model, x_BS, num_passes=1)
  assert out["alignment"].shape == (5, 9)
  n_B = np.asarray((x_BS != PAD).sum(-1))
  live_B = np.asarray((out["alignment"] != PAD).sum(-1))
  np.testing.assert_array_equal(live_B, np.floor(1.5 * n_B + 1e-9).astype(int))
  targets_BT = jnp.asarray(_sources(seed=1)[:, :4])
  loss, _ = ctc.ctc_loss(model, {"inputs": x_BS, "targets": targets_BT}, num_stages=1)
  enc_BSD, mask_BS = model.encode(x_BS)
  x_BA = ctc.upsample(x_BS, 1.5)
  want, _, _ = ctc.stage_loss(model.decode(x_BA, enc_BSD, mask_BS), x_BA != PAD, targets_BT)
  np.testing.assert_allclose(float(loss), float(want), rtol=1e-5)


def test_decoding_is_its_passes_done_by_hand_and_stops_at_a_fixed_point():
  model = _ctc_model()
  x_BS = jnp.asarray(_sources())
  enc_BSD, mask_BS = model.encode(x_BS)
  x_BA = jnp.repeat(x_BS, 2, axis=1)
  slots_BA = x_BA != PAD
  alignments = []
  for _ in range(3):
    logits_BAV = model.decode(x_BA, enc_BSD, mask_BS)
    banned = np.isin(np.arange(24), [PAD, tok_lib.BOS_ID, tok_lib.LEN_ID])
    x_BA = jnp.where(slots_BA, jnp.argmax(jnp.where(banned, -jnp.inf, logits_BAV), -1), PAD)
    alignments.append(np.asarray(x_BA))
  out = ctc.decode(model, x_BS, num_passes=3)
  np.testing.assert_array_equal(out["alignment"], alignments[-1])
  want = [_collapse_by_hand(list(a))[:8] for a in alignments[-1]]
  assert [list(r[r != PAD]) for r in np.asarray(out["tokens"])] == want
  # A row's passes: until one left its alignment unchanged (or 3).
  for b, p in enumerate(np.asarray(out["passes"])):
    changed = [not np.array_equal(alignments[t][b], alignments[t - 1][b]) for t in (1, 2)]
    assert p == (2 if not changed[0] else 3)
  one = ctc.decode(model, x_BS, num_passes=1)
  np.testing.assert_array_equal(one["alignment"], alignments[0])
  np.testing.assert_array_equal(one["passes"], 1)
  # Slots never hold PAD, BOS or [LEN]; the blank is allowed.
  live = alignments[0][np.asarray(slots_BA)]
  assert not np.isin(live, [PAD, tok_lib.BOS_ID, tok_lib.LEN_ID]).any()


def test_the_blank_penalty_lowers_only_the_blanks_logit():
  model = _ctc_model()
  x_BS = jnp.asarray(_sources(seed=7))
  enc_BSD, mask_BS = model.encode(x_BS)
  x_BA = jnp.repeat(x_BS, 2, axis=1)
  logits_BAV = model.decode(x_BA, enc_BSD, mask_BS)
  logits_BAV = logits_BAV.at[:, :, BLANK].add(0.5)  # make blanks common
  slots_BA = x_BA != PAD
  for penalty in (0.0, 0.3, 1e9):
    shifted_BAV = logits_BAV.at[:, :, BLANK].add(-penalty)
    want = ctc.slot_argmax(shifted_BAV, slots_BA)
    np.testing.assert_array_equal(ctc.slot_argmax(logits_BAV, slots_BA, penalty), want)
  assert not (np.asarray(ctc.slot_argmax(logits_BAV, slots_BA, 1e9)) == BLANK).any()
  out = ctc.decode(model, x_BS, 1, blank_penalty=1e9)
  assert not (np.asarray(out["alignment"]) == BLANK).any()


def test_the_eval_length_table_of_a_ctc_model_counts_its_outputs_at_the_blank_penalty():
  from padir.evaluation import translation as evaluate

  class WordTokenizer:  # one id per word, ids the tiny model knows
    def encode(self, text):
      return [7 + i % 5 for i in range(len(text.split()))]

  model = _ctc_model()
  sources = ["a b c", "a b", "a b c d e", "a"]
  references = ["x y z w", "x", "x y z w v", "x y"]
  want = np.array([len(r.split()) + 1 for r in references])
  x_BS = evaluate.encode_batch(WordTokenizer(), sources, 4, model.cfg.max_source_length)
  seen = set()
  for penalty in (0.0, -50.0):  # the random model's blank rarely wins; -50: it wins every slot
    got = evaluate.length_accuracy(
      model, WordTokenizer(), sources, references, batch_size=4, blank_penalty=penalty
    )
    out = ctc.decode(model, jnp.asarray(x_BS), 1, blank_penalty=penalty)["tokens"]
    error = np.abs(np.asarray(ctc.output_lengths(out)) - want)
    assert got == {
      "exact": (error == 0).mean(),
      "within1": (error <= 1).mean(),
      "within2": (error <= 2).mean(),
      "sentences": 4,
    }
    seen.add(tuple(np.asarray(ctc.output_lengths(out))))
  assert len(seen) == 2  # the penalty changed the lengths, so the check above tells them apart


def test_a_row_decodes_the_same_alone_and_in_a_padded_batch():
  model = _ctc_model()
  x_BS = _sources(B=6, seed=3)
  batch = np.asarray(ctc.decode(model, jnp.asarray(x_BS), 2)["tokens"])
  for b in range(6):
    alone = np.asarray(ctc.decode(model, jnp.asarray(x_BS[b : b + 1]), 2)["tokens"])
    np.testing.assert_array_equal(alone[0], batch[b])


def test_source_trimming_changes_no_token_and_compiles_each_width_once():
  model = _ctc_model()
  x_BS = _sources(B=8, seed=4)
  full = decoders.decode_fn(model, decoders.Decoder("ctc", "ctc", passes=2))
  trimmed = decoders.decode_fn(model, decoders.Decoder("ctc-trim2", "ctc", passes=2, trim=2))
  assert isinstance(trimmed, decoders.SourceTrimmed) and trimmed.widths == [2, 4, 6]
  key = jax.random.key(0)
  for b in range(8):
    row = x_BS[b : b + 1]
    assert trimmed.width(row) == -(-int((row != PAD).sum()) // 2) * 2
    np.testing.assert_array_equal(trimmed(row, key)[0], full(row, key)[0])
  np.testing.assert_array_equal(trimmed(x_BS, key)[0], full(x_BS, key)[0])


def test_the_ctc_decoder_refuses_a_model_of_the_other_kind():
  with pytest.raises(ValueError, match="needs a CTC model"):
    decoders.decode_fn(tiny_model(), decoders.Decoder("ctc", "ctc"))
  with pytest.raises(ValueError, match="cannot decode a CTC model"):
    decoders.decode_fn(_ctc_model(), decoders.Decoder("padir", "padir"))


def test_stage_two_reads_stage_ones_argmax_and_no_gradient_crosses_it():
  model = _ctc_model(k=2)
  x_BS = _sources(B=4, seed=5)
  targets_BT = jnp.asarray(_sources(B=4, S=8, seed=6))
  batch = {"inputs": jnp.asarray(x_BS), "targets": targets_BT}
  total, aux = ctc.ctc_loss(model, batch, num_stages=2)
  one, _ = ctc.ctc_loss(model, batch, num_stages=1)
  np.testing.assert_allclose(float(aux["stage1_loss"]), float(one), rtol=1e-6)
  # Stage 2 by hand: the decoder on stage 1's argmax alignment.
  enc_BSD, mask_BS = model.encode(batch["inputs"])
  x_BA = jnp.repeat(batch["inputs"], 2, axis=1)
  slots_BA = x_BA != PAD
  first = ctc.slot_argmax(model.decode(x_BA, enc_BSD, mask_BS), slots_BA)
  second, _, _ = ctc.stage_loss(model.decode(first, enc_BSD, mask_BS), slots_BA, targets_BT)
  np.testing.assert_allclose(float(aux["stage2_loss"]), float(second), rtol=1e-5)
  np.testing.assert_allclose(float(total), (float(one) + float(second)) / 2, rtol=1e-5)
  from flax import nnx

  grads = nnx.grad(lambda m: ctc.ctc_loss(m, batch)[0])(model)
  assert all(bool(jnp.isfinite(g).all()) for g in jax.tree.leaves(grads))


def _best_by_enumeration(logits_AV, target, slots):
  """(the largest summed slot log-probability of an alignment of the first `slots` slots that
  collapses to the target, the set of alignments that reach it), over all of them; the banned
  tokens (PAD, BOS, [LEN]) at -inf as slot_argmax bans them."""
  A, V = logits_AV.shape
  bias = np.where(np.isin(np.arange(V), ctc.NEVER_AT_SLOT), -np.inf, 0.0)
  logp = np.asarray(jax.nn.log_softmax(jnp.asarray(logits_AV + bias, jnp.float32), -1), np.float64)
  best, arg = -np.inf, []
  for a in itertools.product(range(V), repeat=slots):
    if not np.isfinite(logp[np.arange(slots), a]).all():
      continue
    merged = [x for i, x in enumerate(a) if not i or a[i - 1] != x]
    if [x for x in merged if x != BLANK] != list(target):  # exactly, as the loss counts
      continue
    score = sum(logp[i, x] for i, x in enumerate(a))
    if score > best + 1e-9:
      best, arg = score, [a]
    elif abs(score - best) <= 1e-9:
      arg.append(a)
  return best, arg


@pytest.mark.parametrize(
  "target, slots",
  [([6, EOS], 5), ([6, 6, EOS], 5), ([7, 6, 7], 4), ([EOS], 3), ([6, 6, 6], 5), ([6, 7], 2)],
)
def test_the_best_alignment_is_the_most_probable_one_that_collapses_to_the_target(target, slots):
  A, V, T = 5, 8, 4
  logits_AV = np.asarray(jax.random.normal(jax.random.key(sum(target) + slots), (A, V))) * 2
  targets_BT = np.full((1, T), PAD, np.int32)
  targets_BT[0, : len(target)] = target
  slots_BA = jnp.asarray(np.arange(A)[None] < slots)
  align_BA, score_B = ctc.best_alignment(jnp.asarray(logits_AV)[None], slots_BA, targets_BT)
  want, argmaxes = _best_by_enumeration(logits_AV, target, slots)
  np.testing.assert_allclose(float(score_B[0]), want, rtol=1e-5)
  got = tuple(int(x) for x in np.asarray(align_BA[0]))
  assert got[:slots] in argmaxes and set(got[slots:]) <= {PAD}


def test_a_target_too_long_for_its_slots_has_no_best_alignment():
  logits_BAV = jax.random.normal(jax.random.key(0), (1, 4, 8))
  targets_BT = jnp.asarray([[6, 6, 7, EOS]])  # 4 tokens + a blank between the sixes: 5 slots
  align_BA, score_B = ctc.best_alignment(logits_BAV, jnp.ones((1, 4), bool), targets_BT)
  assert float(score_B[0]) == -np.inf and (np.asarray(align_BA) == BLANK).all()


def test_ctc_glancing_reveals_ratio_times_the_hamming_distance_from_the_best_alignment():
  rng = np.random.default_rng(0)
  B, A, V, T = 64, 10, 9, 4
  logits_BAV = jnp.asarray(rng.normal(size=(B, A, V)) * 3, jnp.float32)
  targets_BT = rng.choice([6, 7, 8], size=(B, T)).astype(np.int32)
  targets_BT[:, -1] = EOS
  targets_BT[::3, 2:] = [EOS, PAD]
  slots_B = rng.integers(5, A + 1, size=B)
  slots_BA = jnp.asarray(np.arange(A)[None] < slots_B[:, None])
  x_BA = jnp.where(slots_BA, 9, PAD).astype(jnp.int32)  # a token no slot predicts: 9 >= V
  best_BA, score_B = ctc.best_alignment(logits_BAV, slots_BA, jnp.asarray(targets_BT))
  pred_BA = ctc.slot_argmax(logits_BAV, slots_BA)
  for ratio in (0.0, 0.3, 0.5, 1.0):
    new_BA, revealed_BA = ctc.glance(
      jax.random.key(1), logits_BAV, slots_BA, jnp.asarray(targets_BT), x_BA, ratio
    )
    distance_B = np.asarray(((pred_BA != best_BA) & slots_BA).sum(-1))
    distance_B = np.where(np.isfinite(np.asarray(score_B)), distance_B, 0)
    np.testing.assert_array_equal(
      np.asarray(revealed_BA).sum(-1), np.floor(ratio * distance_B).astype(int)
    )
    rev = np.asarray(revealed_BA)
    assert not (rev & ~np.asarray(slots_BA)).any()
    np.testing.assert_array_equal(np.asarray(new_BA)[rev], np.asarray(best_BA)[rev])
    np.testing.assert_array_equal(np.asarray(new_BA)[~rev], np.asarray(x_BA)[~rev])
  assert (distance_B > 0).sum() > B // 2  # the check above is not vacuous


def test_no_gradient_flows_through_the_glancing_pass():
  from flax import nnx

  model = _ctc_model(k=2)
  x_BS = _sources(B=4, seed=5)
  batch = {"inputs": jnp.asarray(x_BS), "targets": jnp.asarray(_sources(B=4, S=6, seed=6))}
  key = jax.random.key(3)
  total, aux = ctc.ctc_loss(model, batch, num_stages=1, glancing=0.5, key=key)
  assert float(aux["glance_revealed"]) > 0
  # By hand: the input the glance gives, then one plain stage from it.
  enc_BSD, mask_BS = model.encode(batch["inputs"])
  x_BA = jnp.repeat(batch["inputs"], 2, axis=1)
  slots_BA = x_BA != PAD
  first = model.decode(x_BA, enc_BSD, mask_BS)
  glanced, _ = ctc.glance(key, first, slots_BA, batch["targets"], x_BA, 0.5)
  want, _, _ = ctc.stage_loss(model.decode(glanced, enc_BSD, mask_BS), slots_BA, batch["targets"])
  np.testing.assert_allclose(float(total), float(want), rtol=1e-5)

  # The gradient is the second pass's alone: with the glanced input held fixed, the same.
  def held(m):
    enc, mask = m.encode(batch["inputs"])
    return ctc.stage_loss(m.decode(glanced, enc, mask), slots_BA, batch["targets"])[0]

  g_glance = nnx.grad(lambda m: ctc.ctc_loss(m, batch, num_stages=1, glancing=0.5, key=key)[0])
  for a, b in zip(jax.tree.leaves(g_glance(model)), jax.tree.leaves(nnx.grad(held)(model))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


def _ctc_config(corpus_dir, steps=4, **train):
  c = tiny_run_config(corpus_dir, steps, **train)
  c.model.ctc_upsample = 2
  c.decode.num_steps = 2
  return c


@pytest.mark.slow  # three tiny trainings with translation (CTC step and decode compiles)
@pytest.mark.parametrize("glancing", [0.0, 0.5])
def test_a_ctc_run_trains_translates_and_resumes_exactly(
  toy_corpus, tmp_path, monkeypatch, glancing
):
  config = _ctc_config(toy_corpus, steps=4)
  config.decode.num_examples = 4
  config.decode.blank_penalty = 0.5
  if glancing:
    config.loss.glancing_ratio = glancing
    config.loss.glancing_ratio_end = 0.3
    config.loss.glancing_anneal_steps = 4

  class Killed(Exception):
    pass

  class KilledAfterStep2(training.Checkpoints):
    def save(self, step, items, **kwargs):
      saved = super().save(step, items, **{**kwargs, "wait": True})
      if step == 2:
        raise Killed
      return saved

  interrupted, straight = str(tmp_path / "a"), str(tmp_path / "b")
  with monkeypatch.context() as m:
    m.setattr(training, "Checkpoints", KilledAfterStep2)
    with pytest.raises(Killed):
      train_job.run(config, interrupted)
  last = train_job.run(config, interrupted)
  train_job.run(config, straight)
  read = lambda w: [json.loads(x) for x in open(os.path.join(w, "metrics.jsonl"))]
  a = [r for r in read(interrupted) if r["step"] == 4 and "train_loss" in r][0]
  b = [r for r in read(straight) if r["step"] == 4 and "train_loss" in r][0]
  assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-6)
  assert {"train_stage1_loss", "train_stage2_loss", "train_ctc_infeasible"} <= set(a)
  assert ("train_glance_revealed" in a) == bool(glancing)
  for step in (1, 2, 3, 4):  # every logged step, not only the last
    ra = [r for r in read(interrupted) if r["step"] == step and "train_loss" in r]
    rb = [r for r in read(straight) if r["step"] == step and "train_loss" in r]
    assert [r["train_loss"] for r in ra[-1:]] == pytest.approx([r["train_loss"] for r in rb[-1:]])
  assert 0 <= last["valid_length_accuracy"] <= last["valid_length_within2"] <= 1
  assert 0 <= last["valid_bleu"] <= 100 and np.isfinite(last["valid_loss"])


@pytest.mark.slow  # a CTC model warm-started from the session's tiny AR run
def test_a_ctc_warm_start_copies_the_backbone_and_starts_the_slot_positions_fresh(
  toy_corpus, tiny_ar_run
):
  from flax import nnx

  from padir.model import restore
  from padir.model import transformer as model_lib
  from padir.training import warm_start

  config = _ctc_config(toy_corpus)
  config.init_from = tiny_ar_run
  cfg = model_lib.ModelConfig.from_run_config(config, 40)
  assert cfg.decoder_length == 32  # 2 x 16 slots, more than the 16 target positions
  model = model_lib.Transformer(cfg, rngs=nnx.Rngs(params=0, dropout=0))
  record = warm_start.apply(model, training.check_warm_start(config))
  assert "target_pos_TD" in record["fresh"] and "embed_VD" in record["copied"]
  ar_model, _, _ = restore.load_model(tiny_ar_run)
  np.testing.assert_array_equal(
    np.asarray(model.decoder_layers[0].cross_attention.w_q_DNH[...]),
    np.asarray(ar_model.decoder_layers[0].cross_attention.w_q_DNH[...]),
  )


@pytest.mark.parametrize(
  "change, key, match",
  [
    (lambda c: c.model.update(ctc_upsample=-1), "model.ctc_upsample", "must be a number in"),
    (
      lambda c: c.model.update(ctc_upsample=0.5),
      "model.ctc_upsample",
      r"0 \(no CTC\) or a number >= 1",
    ),
    (lambda c: c.model.update(decoder="ar"), "model.ctc_upsample", "for a PaDIR model"),
    (lambda c: c.model.update(max_length_offset=4), "model.max_length_offset", "no length"),
    (lambda c: c.loss.update(glancing_ratio=1.5), "loss.glancing_ratio", r"in \[0"),
  ],
)
def test_bad_ctc_settings_are_refused_in_one_line_before_the_workdir_exists(
  tmp_path, change, key, match
):
  config = padir_bible_en_es.get_config()
  config.model.ctc_upsample = 2.0  # a float field: 1.5 is a valid value
  change(config)
  with pytest.raises(ConfigError, match=rf"^config\.{key}=.*{match}") as e:
    cli.run(config, str(tmp_path / "run"), "train.py")
  assert "\n" not in str(e.value)
  assert not (tmp_path / "run").exists()
