"""padir.model.losses: the noising rule's fractions and the multi-stage loss, against hand computations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from padir.data import tokenizer as tok_lib
from padir.model import losses
from padir.model import transformer as model_lib

V = 40


def _targets(B: int, T: int, seed: int = 0) -> np.ndarray:
  """Random EOS-terminated targets with random lengths (1..T), PAD after."""
  rng = np.random.default_rng(seed)
  out = np.zeros((B, T), np.int32)
  for b in range(B):
    n = rng.integers(1, T + 1)
    out[b, : n - 1] = rng.integers(tok_lib.NUM_SPECIAL, V, n - 1)
    out[b, n - 1] = tok_lib.EOS_ID
  return out


@pytest.mark.parametrize("keep_rate,mask_rate", [(0.15, 0.0), (0.15, 1.0), (0.4, 0.5)])
def test_noising_fractions(keep_rate, mask_rate):
  targets = _targets(256, 64)
  x0 = np.asarray(
    losses.initial_hypothesis(
      jax.random.key(3),
      jnp.asarray(targets),
      vocab_size=V,
      keep_rate=keep_rate,
      mask_rate=mask_rate,
    )
  )
  pad = targets == tok_lib.PAD_ID
  assert (x0[pad] == tok_lib.PAD_ID).all()  # PAD stays PAD
  x, t = x0[~pad], targets[~pad]
  n = x.size
  n_regular = V - tok_lib.NUM_SPECIAL
  # P(token is correct) = keep + (1 - keep)(1 - mask) P(random draw hits it). EOS targets can only be
  # kept (random draws are regular tokens): handle them separately.
  regular = t != tok_lib.EOS_ID
  p_correct = keep_rate + (1 - keep_rate) * (1 - mask_rate) / n_regular
  p_mask = (1 - keep_rate) * mask_rate
  for observed, p, m in (
    ((x == t)[regular].mean(), p_correct, regular.sum()),
    ((x == t)[~regular].mean(), keep_rate, (~regular).sum()),
    ((x == tok_lib.MASK_ID).mean(), p_mask, n),
  ):
    assert abs(observed - p) < 5 * np.sqrt(p * (1 - p) / m) + 1e-9, (observed, p)
  replaced = x[(x != t) & (x != tok_lib.MASK_ID)]
  if mask_rate < 1:
    # Random replacements are uniform over the regular vocabulary, never special ids.
    assert replaced.min() >= tok_lib.NUM_SPECIAL and replaced.max() < V
    counts = np.bincount(replaced - tok_lib.NUM_SPECIAL, minlength=n_regular)
    expected = replaced.size / n_regular
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < n_regular - 1 + 5 * np.sqrt(2 * (n_regular - 1))
  else:
    assert replaced.size == 0


def _tiny_model(decoder="nar", seed=0) -> model_lib.Transformer:
  cfg = model_lib.ModelConfig(
    vocab_size=V,
    max_source_length=6,
    max_target_length=5,
    num_encoder_layers=1,
    num_decoder_layers=1,
    num_heads=2,
    d_model=16,
    d_ff=32,
    dropout_rate=0.0,
    decoder=decoder,
  )
  return model_lib.Transformer(cfg, rngs=nnx.Rngs(seed))


@pytest.fixture(scope="module")
def model():
  return _tiny_model()


INPUTS = np.array([[7, 8, 9, 1, 0, 0], [10, 11, 12, 13, 14, 1]], np.int32)
TARGETS = np.array([[20, 21, 22, 1, 0], [23, 24, 1, 0, 0]], np.int32)
X0 = np.array([[20, 33, 34, 35, 0], [36, 24, 37, 0, 0]], np.int32)


def _np_ce(logits: np.ndarray, targets: np.ndarray) -> float:
  """Mean CE over non-PAD positions, written out with numpy in float64."""
  logits = logits.astype(np.float64)
  logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
  nll = logz - np.take_along_axis(logits, targets[..., None], -1)[..., 0]
  w = targets != tok_lib.PAD_ID
  return float((nll * w).sum() / w.sum())


def test_two_stage_loss_equals_hand_computation_and_stage2_sees_stage1_predictions(model):
  loss_fn = nnx.jit(
    losses.multi_stage_loss,
    static_argnames=("num_stages", "stage_input", "stage_reduction", "length_weight"),
  )
  loss, aux = loss_fn(
    model,
    jnp.asarray(INPUTS),
    jnp.asarray(TARGETS),
    jnp.asarray(X0),
    jax.random.key(0),
    num_stages=2,
    length_weight=0.5,
  )
  # By hand: encoder once, decoder on X0, argmax (PAD kept), decoder again on that.
  encode, decode = nnx.jit(lambda m, x: m.encode(x)), nnx.jit(lambda m, *a: m.decode(*a))
  enc, enc_mask = encode(model, jnp.asarray(INPUTS))
  logits1 = np.asarray(decode(model, jnp.asarray(X0), enc, enc_mask))
  allowed = logits1.copy()
  allowed[..., list(tok_lib.NEVER_PREDICTED)] = -np.inf  # PAD, BOS, [MASK], [LEN] never predicted
  x1 = np.where(TARGETS == tok_lib.PAD_ID, tok_lib.PAD_ID, allowed.argmax(-1)).astype(np.int32)
  logits2 = np.asarray(decode(model, jnp.asarray(x1), enc, enc_mask))
  length_logits = np.asarray(nnx.jit(lambda m, e: m.length_logits(e))(model, enc))
  lengths = (TARGETS != tok_lib.PAD_ID).sum(-1)
  length_ce = _np_ce(length_logits[:, None, :], lengths[:, None])
  expected = (_np_ce(logits1, TARGETS) + _np_ce(logits2, TARGETS)) / 2 + 0.5 * length_ce
  np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
  np.testing.assert_allclose(float(aux["stage2_loss"]), _np_ce(logits2, TARGETS), rtol=1e-5)
  # Stage 2's input is stage 1's prediction, not the target (an untrained model is mostly wrong).
  np.testing.assert_array_equal(np.asarray(aux["stage_inputs"][1]), x1)
  assert (x1 != TARGETS).any()
  # ... and feeding the targets instead would give a different stage-2 loss.
  logits_teacher = np.asarray(decode(model, jnp.asarray(TARGETS), enc, enc_mask))
  assert abs(_np_ce(logits_teacher, TARGETS) - float(aux["stage2_loss"])) > 1e-3
  # "sum" drops the 1/S of the paper's average.
  loss_sum, _ = loss_fn(
    model,
    jnp.asarray(INPUTS),
    jnp.asarray(TARGETS),
    jnp.asarray(X0),
    jax.random.key(0),
    num_stages=2,
    stage_reduction="sum",
    length_weight=0.5,
  )
  np.testing.assert_allclose(
    float(loss_sum),
    _np_ce(logits1, TARGETS) + _np_ce(logits2, TARGETS) + 0.5 * length_ce,
    rtol=1e-5,
  )


@pytest.mark.slow  # two gradient compilations: ~10 s on an idle 2-core CPU
def test_gradient_does_not_flow_through_the_stage_input(model):
  """grad of the 2-stage loss == grad of the same loss with X(1) frozen as a constant."""
  args = (jnp.asarray(INPUTS), jnp.asarray(TARGETS), jnp.asarray(X0))
  _, aux = losses.multi_stage_loss(model, *args, jax.random.key(0), num_stages=2)
  x1 = aux["stage_inputs"][1]

  def frozen(model):
    enc, enc_mask = model.encode(args[0])
    l1, _ = losses.token_cross_entropy(model.decode(args[2], enc, enc_mask), args[1])
    l2, _ = losses.token_cross_entropy(model.decode(x1, enc, enc_mask), args[1])
    ll, _ = losses.length_cross_entropy(model.length_logits(enc), losses.target_lengths(args[1]))
    return (l1 + l2) / 2 + ll

  g = nnx.jit(
    nnx.grad(lambda m: losses.multi_stage_loss(m, *args, jax.random.key(0), num_stages=2)[0])
  )(model)
  g_frozen = nnx.jit(nnx.grad(frozen))(model)
  for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_frozen)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_sampled_stage_inputs_are_regular_draws_and_keep_pad(model):
  _, aux = losses.multi_stage_loss(
    model,
    jnp.asarray(INPUTS),
    jnp.asarray(TARGETS),
    jnp.asarray(X0),
    jax.random.key(1),
    num_stages=3,
    stage_input="sample",
  )
  stage_inputs = np.asarray(aux["stage_inputs"])
  assert stage_inputs.shape == (3, 2, 5)
  pad = TARGETS == tok_lib.PAD_ID
  assert (stage_inputs[:, pad] == tok_lib.PAD_ID).all()
  assert not np.isin(stage_inputs[1:, ~pad], tok_lib.NEVER_PREDICTED).any()
  assert (stage_inputs[1] != stage_inputs[2]).any()


def test_ar_loss_is_teacher_forced_next_token_ce():
  model = _tiny_model(decoder="ar")
  loss, _ = losses.ar_loss(model, {"inputs": jnp.asarray(INPUTS), "targets": jnp.asarray(TARGETS)})
  dec_in = np.array([[2, 20, 21, 22, 0], [2, 23, 24, 0, 0]], np.int32)  # BOS + target[:-1]
  np.testing.assert_array_equal(np.asarray(losses.shift_right(jnp.asarray(TARGETS))), dec_in)
  enc, enc_mask = model.encode(jnp.asarray(INPUTS))
  logits = np.asarray(model.decode(jnp.asarray(dec_in), enc, enc_mask))
  np.testing.assert_allclose(float(loss), _np_ce(logits, TARGETS), rtol=1e-5)
