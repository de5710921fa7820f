"""Issue 26's training recipe: length as an offset from the source length (class <-> length,
the induced length distribution, decoding's candidate lengths), glancing training (GLAT: the
revealed count, positions and tokens, the loss on the others, no gradient through the first
pass) and the warm start from an AR run (copied bitwise, fresh parts the seed's, mismatches
refused before anything is written). Every check against a numpy enumeration."""

from __future__ import annotations

import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from padir_util import tiny_model, tiny_run_config

from configs import padir_bible_en_es
from gmlm import cli
from gmlm.checks import ConfigError
from padir.data import tokenizer as tok_lib
from padir.decoding import refinement
from padir.jobs import train as train_job
from padir.model import losses, restore
from padir.model import transformer as model_lib
from padir.training import loop as training
from padir.training import warm_start

PAD, EOS = tok_lib.PAD_ID, tok_lib.EOS_ID


def _tiny(max_length_offset=0, T=8, S=8, V=30):
  return tiny_model(
    vocab_size=V, max_source_length=S, max_target_length=T, max_length_offset=max_length_offset
  )


def _source(length: int, S: int) -> np.ndarray:
  """One source of `length` tokens (EOS last), PAD-padded to S."""
  row = np.full((S,), PAD, np.int32)
  row[: length - 1] = 7
  row[length - 1] = EOS
  return row


# ----------------------------------------------------------------------------- length offsets


def test_offset_classes_round_trip_to_lengths_inside_the_range_and_clip_at_its_edges():
  M, T = 3, 10
  for s in range(1, 12):
    for n in range(1, T + 1):
      c = int(model_lib.offset_classes(jnp.array([s]), jnp.array([n]), M)[0])
      assert c == min(max(n - s, -M), M) + M
      back = int(model_lib.offset_lengths(jnp.array([s]), M, T)[0, c])
      if abs(n - s) <= M:
        assert back == n  # inside the range: the class names the length exactly
      else:
        assert back == min(max(s + np.sign(n - s) * M, 1), T)  # the nearest reachable length
  np.testing.assert_array_equal(model_lib.offset_lengths(jnp.array([1]), 2, 5)[0], [1, 1, 1, 2, 3])
  np.testing.assert_array_equal(model_lib.offset_lengths(jnp.array([5]), 2, 5)[0], [3, 4, 5, 5, 5])


def test_the_length_distribution_of_offsets_adds_the_offsets_that_clip_to_one_length():
  M, T = 3, 6
  logits = np.random.default_rng(0).normal(size=(4, 2 * M + 1)).astype(np.float32)
  sources = np.array([1, 3, 6, 8])
  got = np.asarray(model_lib.offsets_to_lengths(jnp.asarray(logits), jnp.asarray(sources), T))
  p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
  want = np.zeros((4, T + 1))
  for b, s in enumerate(sources):
    for k, o in enumerate(range(-M, M + 1)):
      want[b, min(max(s + o, 1), T)] += p[b, k]
  np.testing.assert_allclose(np.exp(got), want, atol=1e-6)
  assert np.all(np.isneginf(got[want == 0]))


def _set_length_head(model, bias):
  head = model.length_head
  head.kernel[...] = jnp.zeros_like(head.kernel[...])
  head.bias[...] = jnp.asarray(bias, jnp.float32)


@pytest.mark.parametrize("source_length", [5, 7, 2])  # middle, top edge, bottom edge (T = 8)
def test_decoding_takes_the_top_offsets_clipped_to_the_valid_lengths(source_length):
  M, T, S, k = 3, 8, 8, 3
  model = _tiny(max_length_offset=M, T=T, S=S)
  bias = np.array([0.1, 0.9, 0.3, 0.5, 2.0, 1.5, 1.0])  # offsets -3..3: +1, +2, +3, -2, 0, ...
  _set_length_head(model, bias)
  x = jnp.asarray(_source(source_length, S)[None])
  # refine()'s candidates: candidate_lengths of model.length_logits(states, mask)
  longest, (enc, mask) = refinement.longest_candidate(
    model, x, refinement.RefineOptions(num_lengths=k)
  )
  got = np.asarray(
    refinement.candidate_lengths(
      model.length_logits(enc, mask), refinement.RefineOptions(num_lengths=k), T
    )[0]
  )
  assert int(longest) == got.max()
  # Enumeration: each offset's probability goes to its clipped length; the top k lengths.
  p = np.exp(bias) / np.exp(bias).sum()
  mass = {}
  for o, q in zip(range(-M, M + 1), p):
    n = min(max(source_length + o, 1), T)
    mass[n] = mass.get(n, 0.0) + q
  want = sorted(mass, key=lambda n: -mass[n])[:k]
  np.testing.assert_array_equal(got, want)
  assert got.min() >= 1 and got.max() <= T
  if source_length == 5:  # nothing clips: the lengths of the top offsets +1, +2, +3
    np.testing.assert_array_equal(got, source_length + np.array([1, 2, 3]))


def test_offset_length_loss_and_accuracies_match_an_enumeration():
  M, T, S = 2, 8, 8
  model = _tiny(max_length_offset=M, T=T, S=S)
  inputs = np.stack([_source(n, S) for n in (3, 4, 6, 2)])
  tlens = np.array([5, 4, 8, 1])  # offsets +2, 0, +2, -1 (8 - 6 = 2)
  targets = np.stack([_source(n, T) for n in tlens])
  enc, mask = model.encode(jnp.asarray(inputs))
  loss, aux = losses.length_loss(model, enc, mask, jnp.asarray(targets))
  head = np.asarray(model.length_head_logits(enc))
  logp = head - np.log(np.exp(head).sum(-1, keepdims=True))
  classes = np.clip(tlens - np.array([3, 4, 6, 2]), -M, M) + M
  np.testing.assert_allclose(float(loss), -logp[np.arange(4), classes].mean(), rtol=1e-5)
  predicted = np.asarray(jnp.argmax(model.length_logits(enc, mask), -1))
  err = np.abs(predicted - tlens)
  for key, tol in (("length_accuracy", 0), ("length_within1", 1), ("length_within2", 2)):
    assert float(aux[key]) == pytest.approx((err <= tol).mean())


def test_absolute_lengths_stay_the_default_parameter_tree_and_loss():
  model = _tiny()
  assert model.length_head.kernel.shape == (16, 9)  # d_model x lengths 0..8
  enc, mask = model.encode(jnp.asarray(_source(4, 8)[None]))
  np.testing.assert_array_equal(model.length_logits(enc), model.length_logits(enc, mask))


def test_test_set_length_accuracy_counts_the_argmax_against_the_reference_token_lengths():
  from padir.evaluation import translation as evaluate

  class WordTokenizer:  # one id per word
    def encode(self, text):
      return [7] * len(text.split())

  M, T, S = 3, 8, 8
  model = _tiny(max_length_offset=M, T=T, S=S)
  _set_length_head(model, [0, 0, 0, 0, 3.0, 0, 0])  # offset +1: one token longer than the source
  sources = ["a b", "a b c", "a", "a b c d e f g h i j"]  # 3, 4, 2 and (truncated) 8 tokens
  references = ["x y z", "x", "x y z w", "x y z w v u t s r"]  # 4, 2, 5, 10 -> 8 tokens
  got = evaluate.length_accuracy(model, WordTokenizer(), sources, references, batch_size=3)
  predicted, wanted = np.array([4, 5, 3, 8]), np.array([4, 2, 5, 8])  # source + 1, clipped to T
  error = np.abs(predicted - wanted)
  assert got == {
    "exact": (error == 0).mean(),
    "within1": (error <= 1).mean(),
    "within2": (error <= 2).mean(),
    "sentences": 4,
  }


# ----------------------------------------------------------------------------- glancing


def _one_hot_logits(pred_BT, V):
  return jnp.asarray(np.eye(V, dtype=np.float32)[pred_BT] * 10.0)


@pytest.mark.parametrize("ratio", [0.0, 0.3, 0.5, 1.0])
def test_glancing_reveals_ratio_times_the_hamming_distance_of_reference_tokens(ratio):
  V = 20
  targets = np.array(
    [[7, 8, 9, 10, 11, EOS, PAD, PAD], [12, 13, EOS, PAD, PAD, PAD, PAD, PAD], [7] * 7 + [EOS]]
  )
  pred = targets.copy()
  pred[0, [0, 2, 3, 5]] = 15  # Hamming distance 4
  pred[1, [1]] = 16  # 1
  pred[2, :] = 17  # 8
  pred[targets == PAD] = 18  # PAD positions never count
  distance = np.array([4, 1, 8])
  x = np.where(targets == PAD, PAD, 5)  # the noised input
  for seed in range(5):
    new, revealed = losses.glance(
      jax.random.key(seed), _one_hot_logits(pred, V), jnp.asarray(targets), jnp.asarray(x), ratio
    )
    new, revealed = np.asarray(new), np.asarray(revealed)
    np.testing.assert_array_equal(revealed.sum(-1), np.floor(ratio * distance))
    np.testing.assert_array_equal(new[revealed], targets[revealed])  # reference tokens
    np.testing.assert_array_equal(new[~revealed], x[~revealed])  # the rest untouched
    assert not revealed[targets == PAD].any()


def test_glanced_positions_are_uniform_over_the_sentence():
  """Over many keys each of the 6 non-PAD positions is revealed in floor(0.5 x 6) / 6 of the
  draws; the tolerance is 5 binomial standard deviations of n = 2000 draws."""
  V, n = 20, 2000
  targets = np.array([[7, 8, 9, 10, 11, EOS, PAD, PAD]])
  pred = np.full_like(targets, 15)
  counts = np.zeros(8)
  glance = jax.jit(
    lambda k: losses.glance(k, _one_hot_logits(pred, V), jnp.asarray(targets), targets * 0, 0.5)
  )
  for seed in range(n):
    counts += np.asarray(glance(jax.random.key(seed))[1][0])
  p = 3 / 6
  assert np.all(np.abs(counts[:6] / n - p) < 5 * np.sqrt(p * (1 - p) / n))
  assert counts[6:].sum() == 0


def test_glancing_ratio_anneals_linearly_then_holds():
  r = lambda step: float(losses.glancing_ratio(step, 0.5, 0.3, 100))
  assert [r(0), r(50), r(100), r(500)] == pytest.approx([0.5, 0.4, 0.3, 0.3])
  assert float(losses.glancing_ratio(1000, 0.5, 0.3, 0)) == pytest.approx(0.5)


@pytest.mark.slow  # compiles a gradient / a tiny AR training (the module's AR run)
def test_glancing_loss_skips_the_revealed_positions_and_no_gradient_crosses_the_first_pass():
  model = _tiny(T=8, S=8)
  inputs = jnp.asarray(np.stack([_source(5, 8), _source(3, 8)]))
  targets = jnp.asarray(np.array([[9, 10, 11, 12, 13, EOS, PAD, PAD], [14, 15, EOS] + [PAD] * 5]))
  key = jax.random.key(3)
  x0 = losses.initial_hypothesis(jax.random.key(1), targets, vocab_size=30)
  fn = lambda m: losses.multi_stage_loss(m, inputs, targets, x0, key, glancing=0.8)
  grad = nnx.jit(lambda m: nnx.value_and_grad(fn, has_aux=True)(m))
  (loss, aux), grads = grad(model)
  revealed = np.asarray(aux["revealed"])
  stage1 = np.asarray(aux["stage_inputs"][0])
  # The noising rule composes: the unrevealed positions hold X(0), the revealed the reference.
  np.testing.assert_array_equal(stage1[~revealed], np.asarray(x0)[~revealed])
  np.testing.assert_array_equal(stage1[revealed], np.asarray(targets)[revealed])
  assert revealed.sum() > 0
  # Each stage's token loss: numpy CE over the non-PAD, unrevealed positions of its logits.
  enc, mask = nnx.jit(lambda m: m.encode(inputs))(model)
  total = 0.0
  decode = nnx.jit(lambda m, x: m.decode(x, enc, mask))
  for s in (0, 1):
    logits = np.asarray(decode(model, aux["stage_inputs"][s]))
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
    logp -= logits.max(-1, keepdims=True)
    nll = -np.take_along_axis(logp, np.asarray(targets)[..., None], -1)[..., 0]
    w = (np.asarray(targets) != PAD) & ~revealed
    ce = (nll * w).sum() / w.sum()
    assert float(aux[f"stage{s + 1}_loss"]) == pytest.approx(ce, rel=1e-4)
    total += ce / 2
  assert float(aux["token_loss"]) == pytest.approx(total, rel=1e-4)
  # No gradient through the first pass: the gradient equals that of the same loss with the
  # glanced input given as a constant (the first pass's logits replaced by a fixed array).
  real_glance = losses.glance
  const = lambda *args: (jnp.asarray(stage1), jnp.asarray(revealed))
  losses.glance = const
  try:
    _, want = nnx.jit(lambda m: nnx.value_and_grad(fn, has_aux=True)(m))(model)
  finally:
    losses.glance = real_glance
  for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(want)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ----------------------------------------------------------------------------- warm start


def _config(corpus_dir, steps=2):
  return tiny_run_config(corpus_dir, steps, warmup_steps=1, eval_every=2)


@pytest.fixture(scope="module")
def ar_run(tiny_ar_run):
  """A tiny trained AR run (2 steps) on the toy corpus: the session's (tests/conftest.py)."""
  return tiny_ar_run


def _padir_from(toy_corpus, ar_run):
  c = _config(toy_corpus)
  c.init_from = ar_run
  c.model.max_length_offset = 4
  return c


@pytest.mark.slow  # compiles a gradient / a tiny AR training (the module's AR run)
def test_warm_start_copies_the_shared_parameters_bitwise_and_leaves_the_new_ones_the_seeds(
  toy_corpus, ar_run
):
  config = _padir_from(toy_corpus, ar_run)
  source = training.check_warm_start(config)
  cfg = model_lib.ModelConfig.from_run_config(config, 40)
  make = lambda: model_lib.Transformer(cfg, rngs=nnx.Rngs(params=config.seed, dropout=0))
  model, fresh_model = make(), make()
  record = warm_start.apply(model, source)
  ar_model, _, _ = restore.load_model(ar_run)
  ours = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
  seed = dict(nnx.to_flat_state(nnx.state(fresh_model, nnx.Param)))
  theirs = dict(nnx.to_flat_state(nnx.state(ar_model, nnx.Param)))
  copied = {p for p in ours if "/".join(map(str, p)) in record["copied"]}
  for path, var in ours.items():
    want = theirs[path] if path in copied else seed[path]
    np.testing.assert_array_equal(np.asarray(var[...]), np.asarray(want[...]), err_msg=str(path))
  names = {str(x) for p in ours if p not in copied for x in p}
  assert {"positional_attention", "norm_positional", "length_head"} <= names
  shared = {"embed_VD", "encoder_layers", "self_attention", "cross_attention", "ffn"}
  assert shared <= {str(x) for p in copied for x in p}
  assert not any(str(x) in warm_start.FRESH for p in copied for x in p)


@pytest.mark.slow  # compiles a gradient / a tiny AR training (the module's AR run)
def test_a_warm_started_run_records_what_it_copied(toy_corpus, ar_run, tmp_path):
  import json

  train_job.run(_padir_from(toy_corpus, ar_run), str(tmp_path / "run"))
  record = json.loads((tmp_path / "run" / warm_start.RECORD).read_text())
  assert record["step"] == 2 and record["run"] == os.path.abspath(ar_run)
  assert "length_head/kernel" in record["fresh"] and "embed_VD" in record["copied"]


@pytest.mark.slow  # compiles a gradient / a tiny AR training (the module's AR run)
@pytest.mark.parametrize(
  "change, match",
  [
    (lambda c: c.model.update(d_ff=64), r"another backbone: its model\.d_ff=32, this run's 64"),
    (lambda c: c.data.update(max_target_length=12), r"data\.max_target_length=16"),
    (lambda c: c.data.update(vocab_size=41), r"data\.vocab_size=40, this run's 41"),
    ("other_vocab", r"another vocabulary"),
    ("nar_run", r"model\.decoder='nar' run; a warm start needs an AR run"),
    ("nowhere", r"holds no trained run"),
  ],
)
def test_a_mismatched_warm_start_is_refused_in_one_line_before_anything_is_written(
  toy_corpus, ar_run, tmp_path, change, match
):
  config = _padir_from(toy_corpus, ar_run)
  if change == "other_vocab":
    path = str(tmp_path / "other.model")
    shutil.copyfile(os.path.join(toy_corpus, "spm40.model"), path)
    with open(path, "ab") as f:
      f.write(b"\0")  # another file (a different SHA-256)
    config.data.vocab_path = path
  elif change == "nar_run":
    src = tmp_path / "nar"
    shutil.copytree(ar_run, src)
    text = (src / "config.json").read_text().replace('"decoder": "ar"', '"decoder": "nar"')
    (src / "config.json").write_text(text)
    config.init_from = str(src)
  elif change == "nowhere":
    config.init_from = str(tmp_path / "nowhere")
  else:
    change(config)
  workdir = tmp_path / "run"
  with pytest.raises(ConfigError, match=rf"^config\.init_from=.*{match}") as e:
    cli.run(config, str(workdir), "train.py")
  assert "\n" not in str(e.value)
  assert not workdir.exists()


def test_recipe_options_are_checked_before_the_workdir_exists(tmp_path):
  for key, value, match in (
    ("model.max_length_offset", -1, "must be an integer >= 0"),
    ("loss.glancing_ratio", 1.5, ""),
  ):
    config = padir_bible_en_es.get_config()
    section, name = key.split(".")
    config[section][name] = value
    with pytest.raises(ConfigError, match=rf"config\.{key}={value!r}.*{match}"):
      cli.run(config, str(tmp_path / "run"), "train.py")
  config = padir_bible_en_es.get_config()
  config.model.max_length_offset, config.decode.num_lengths = 1, 5
  with pytest.raises(ConfigError, match=r"config\.decode\.num_lengths=5: must be at most"):
    cli.run(config, str(tmp_path / "run"), "train.py")
  assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------- curves


def test_bleu_against_wall_clock_minutes_sums_the_logged_intervals(tmp_path):
  import json

  from padir.evaluation import curves

  records = [
    {"step": 100, "train_loss": 5.0, "steps_per_second": 2.0},  # 50 s
    {"step": 200, "train_loss": 4.0, "steps_per_second": 0.5},  # 200 s (an evaluation inside)
    {"step": 200, "valid_loss": 3.0, "valid_bleu": 7.0, "valid_length_accuracy": 0.2},
    {"step": 300, "train_loss": 3.5, "steps_per_second": 1.0},  # 100 s
    {"step": 300, "valid_loss": 2.0, "valid_bleu": 9.0, "valid_length_accuracy": 0.3},
  ]
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  np.testing.assert_allclose(curves.bleu_by_minutes(str(tmp_path)), [(250 / 60, 7), (350 / 60, 9)])
  out = curves.plot([str(tmp_path)], str(tmp_path / "minutes.png"), minutes=True)
  assert os.path.getsize(out) > 1000
  # A run whose records carry its clock (padir.training.throughput.RunClock: over its legs) is
  # read off it, each evaluation at its own record's (written after the step's training one).
  for r, wall in zip(records, (50, 300, 330, 430, 460)):
    r["wall_seconds"] = float(wall)
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  np.testing.assert_allclose(curves.bleu_by_minutes(str(tmp_path)), [(330 / 60, 7), (460 / 60, 9)])


def test_bleu_against_cpu_minutes_reads_the_run_clocks_cpu_seconds_and_refuses_a_run_without(
  tmp_path,
):
  """The CPU axis (the issue's "no more training CPU than the AR") is the records' own
  cpu_seconds, each evaluation at its record's, never the wall clock; a run whose records lack
  it (begun before the clock) is refused with a line naming the first such step."""
  import json
  import subprocess
  import sys

  from padir.evaluation import curves

  records = [
    {"step": 100, "train_loss": 5.0, "steps_per_second": 2.0, "wall_seconds": 50.0},
    {"step": 200, "train_loss": 4.0, "steps_per_second": 0.5, "wall_seconds": 300.0},
    {"step": 200, "valid_loss": 3.0, "valid_bleu": 7.0, "wall_seconds": 330.0},
    {"step": 300, "train_loss": 3.5, "steps_per_second": 1.0, "wall_seconds": 430.0},
    {"step": 300, "valid_loss": 2.0, "valid_bleu": 9.0, "wall_seconds": 460.0},
  ]
  for r, cpu in zip(records, (90, 540, 600, 780, 840)):  # ~1.8 cores busy: not the wall clock
    r["cpu_seconds"] = float(cpu)
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  np.testing.assert_allclose(
    curves.bleu_by_minutes(str(tmp_path), curves.CPU), [(600 / 60, 7), (840 / 60, 9)]
  )
  np.testing.assert_allclose(curves.bleu_by_minutes(str(tmp_path)), [(330 / 60, 7), (460 / 60, 9)])
  out = curves.plot([str(tmp_path)], str(tmp_path / "cpu.png"), minutes=True, clock=curves.CPU)
  assert os.path.getsize(out) > 1000
  with pytest.raises(ValueError, match="clock='gpu'"):
    curves.timed_evaluations(str(tmp_path), "gpu")
  del records[3]["cpu_seconds"]
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
  with pytest.raises(ValueError, match=r"1 records \(the first at step 300\) carry no cpu_seconds"):
    curves.bleu_by_minutes(str(tmp_path), curves.CPU)
  cli = [sys.executable, "-m", "padir.evaluation.curves", "--cpu", str(tmp_path)]
  done = subprocess.run([*cli, "--out", str(tmp_path / "x.png")], capture_output=True, text=True)
  assert done.returncode == 2 and "carry no cpu_seconds" in done.stderr.strip().splitlines()[-1]
  assert not (tmp_path / "x.png").exists()
  done = subprocess.run([*cli, "--labels", "a,b"], capture_output=True, text=True)
  assert done.returncode == 2 and "--labels='a,b': 2 labels for 1 runs" in done.stderr
