"""Issue 40: scanned layers and remat compute the Python loop's function (every released PaDIR
config's structure, logits within 1e-5); the chunked token loss is the plain one (loss and
gradients within 1e-6 relative); K micro-batches make the one-batch update; a run switches
layout or accumulation between the legs of a run and resumes to the uninterrupted run."""

import dataclasses
import glob
import importlib
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax._src.ad_checkpoint import (
  saved_residuals,
)  # public: jax.ad_checkpoint.print_saved_residuals
from padir_util import tiny_run_config

from padir.data import tokenizer as tokenizer_lib
from padir.decoding import ctc
from padir.jobs import train as train_job
from padir.model import layer_stack, losses, restore
from padir.model import transformer as model_lib
from padir.training import loop as training
from padir.training import optim

V = 60


def _released_structures() -> dict[tuple, list[str]]:
  """Each distinct structure of the configs/padir_*.py models (decoder kind, layer counts,
  heads, positional attention, CTC, length offsets, dtype, vocabulary padding) -> its configs."""
  out: dict[tuple, list[str]] = {}
  root = os.path.join(os.path.dirname(__file__), "..", "..", "configs")
  for path in sorted(glob.glob(os.path.join(root, "padir_*.py"))):
    name = os.path.basename(path)[:-3]
    config = importlib.import_module(f"configs.{name}").get_config()
    if "model" not in config:
      continue  # evaluation / translation configs: no model of their own
    m = config.model
    key = (
      m.decoder,
      m.num_encoder_layers,
      m.num_decoder_layers,
      m.num_heads,
      m.positional_attention,
      float(m.get("ctc_upsample", 0)),
      m.get("max_length_offset", 0),
      m.dtype,
      m.vocab_multiple,
    )
    out.setdefault(key, []).append(name)
  return out


STRUCTURES = _released_structures()


def _shrunk(key: tuple, **kw) -> model_lib.ModelConfig:
  """A released structure at width 4 per head (d_model = 4 x heads), FFN 32, V = 60, length 10."""
  dec, enc_layers, dec_layers, heads, pos, k, offset, dtype, multiple = key
  return model_lib.ModelConfig(
    vocab_size=V,
    max_source_length=10,
    max_target_length=10,
    num_encoder_layers=enc_layers,
    num_decoder_layers=dec_layers,
    num_heads=heads,
    d_model=4 * heads,
    d_ff=32,
    dropout_rate=0.1,
    decoder=dec,
    positional_attention=pos,
    ctc_upsample=k,
    max_length_offset=offset,
    dtype=dtype,
    vocab_multiple=multiple,
    **kw,
  )


def _batch(seed: int, B: int = 3, L: int = 10) -> dict[str, jax.Array]:
  """Random sources and targets of random lengths (EOS last, PAD after)."""
  rng = np.random.default_rng(seed)
  out = {}
  for name in ("inputs", "targets"):
    x = rng.integers(tokenizer_lib.NUM_SPECIAL, V, (B, L))
    n = rng.integers(2, L + 1, B)
    x[np.arange(B), n - 1] = tokenizer_lib.EOS_ID
    x[np.arange(L)[None] >= n[:, None]] = tokenizer_lib.PAD_ID
    out[name] = jnp.asarray(x, jnp.int32)
  return out


def _model(cfg: model_lib.ModelConfig, seed: int = 0) -> model_lib.Transformer:
  return model_lib.Transformer(
    cfg, rngs=nnx.Rngs(params=seed, dropout=jax.random.key(seed + 1, impl="rbg"))
  )


@pytest.mark.parametrize("key", list(STRUCTURES), ids=[v[0] for v in STRUCTURES.values()])
def test_every_released_structure_gives_the_loops_logits_when_scanned(key):
  """Logits (and the length head) of the scanned layers equal the Python loop's within 1e-5 on
  the same weights, for each released config's structure; the weights of one load into the
  other by stacking (the scan stores each layer kind's arrays stacked)."""
  loop = _model(_shrunk(key, scan_layers="loop"))
  scanned = _model(_shrunk(key, scan_layers="scan"), seed=1)  # other initial weights, replaced
  assert scanned.cfg.scanned and not loop.cfg.scanned
  assert isinstance(scanned.decoder_layers, layer_stack.LayerStack)
  # one run's weights into the other layout
  nnx.update(scanned, layer_stack.stack_layers(nnx.state(loop, nnx.Param)))
  batch = _batch(0)
  out = {}
  for name, m in (("loop", loop), ("scan", scanned)):
    m.eval()

    @nnx.jit
    def forward(m):
      enc_BSD, mask_BS = m.encode(batch["inputs"])
      if m.cfg.ctc_upsample:
        hyp = ctc.upsample(batch["inputs"], m.cfg.ctc_upsample)
      else:
        hyp = batch["targets"]
      return m.decode(hyp, enc_BSD, mask_BS), m.length_head_logits(enc_BSD)

    out[name] = forward(m)
  for a, b in zip(out["loop"], out["scan"]):
    a, b = np.asarray(a), np.asarray(b)
    finite = a > model_lib.NEG_INF / 2  # vocab_multiple's padding columns are NEG_INF in both
    np.testing.assert_array_equal(finite, b > model_lib.NEG_INF / 2)
    np.testing.assert_allclose(a[finite], b[finite], atol=1e-5, rtol=0)


@pytest.mark.parametrize("remat", ["none", "full", "dots_saveable"])
def test_scan_and_remat_give_the_loops_loss_and_gradients_with_dropout(remat):
  """Training mode, dropout 0.1: the multi-stage loss and its gradient under each remat policy,
  scanned (stacked storage, the same seed), equal the Python loop's without remat: the
  initial weights and the dropout masks do not depend on the layout."""
  key = ("nar", 2, 2, 2, True, 0.0, 0, "float32", 1)  # decoder, layers, heads, positional, ...
  batch = _batch(1)
  results = []
  for cfg in (_shrunk(key, scan_layers="loop"), _shrunk(key, scan_layers="scan", remat=remat)):
    m = _model(cfg)
    layer_stack.reseed_dropout(m, jax.random.key(7, impl="rbg"))

    @nnx.jit
    def value_and_grad(m):
      f = lambda m: losses.padir_loss(m, batch, jax.random.key(0), num_stages=1)[0]
      return nnx.value_and_grad(f)(m)

    loss, grads = value_and_grad(m)
    results.append((loss, layer_stack.unstack_layers(grads)))
  (l0, g0), (l1, g1) = results
  assert jax.tree.structure(g0) == jax.tree.structure(g1)
  np.testing.assert_allclose(l1, l0, rtol=1e-6)
  for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
  "num_stages, stage_input, chunk, ctc_upsample",
  [
    (3, "argmax", 0, 0),
    (3, "sample", 5, 0),
    (2, "argmax", 7, 0),
    (3, "", 0, 2),
  ],
)
def test_scanned_stages_give_the_loops_stages_gradients_and_dropout_streams(
  num_stages, stage_input, chunk, ctc_upsample
):
  """scan_stages, with scanned layers: the loss's stages run as one scan (the decoder traced
  once): per stage the same inputs, losses and accuracies as the loop's stages (the same weights
  and seed, dropout 0.1, remat full), the same gradient to float32 summation error, and the
  dropout streams advanced alike: a second call, on the advanced streams, agrees too. PaDIR's
  stages (argmax and sampled inputs, with and without the chunked token loss) and CTC's."""
  key = ("nar", 2, 2, 2, not ctc_upsample, ctc_upsample, 0, "float32", 1)
  batch = _batch(1)

  def loss(m):
    if ctc_upsample:
      return ctc.ctc_loss(m, batch, num_stages=num_stages, scan_stages=m.cfg.scanned)
    return losses.padir_loss(
      m,
      batch,
      jax.random.key(0),
      num_stages=num_stages,
      stage_input=stage_input,
      logits_chunk=chunk,
      scan_stages=m.cfg.scanned,
    )

  calls = []
  for cfg in (_shrunk(key, scan_layers="loop"), _shrunk(key, scan_layers="scan", remat="full")):
    m = _model(cfg)
    layer_stack.reseed_dropout(m, jax.random.key(7, impl="rbg"))
    value_and_grad = nnx.jit(nnx.value_and_grad(loss, has_aux=True))
    for _ in range(2):
      (_, aux), grads = value_and_grad(m)
      calls.append((aux, layer_stack.unstack_layers(grads)))
  for (aux0, g0), (aux1, g1) in zip(calls[:2], calls[2:]):
    assert sorted(aux0) == sorted(aux1)
    assert f"stage{num_stages}_loss" in aux0
    for name in aux0:
      if name == "stage_inputs":
        np.testing.assert_array_equal(aux1[name], aux0[name])
      else:
        np.testing.assert_allclose(aux1[name], aux0[name], rtol=1e-6, err_msg=name)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
      np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6 * float(jnp.abs(a).max()) + 1e-12)
  assert not np.allclose(calls[0][0]["token_loss"], calls[1][0]["token_loss"])  # streams moved


def test_an_unknown_remat_policy_is_refused():
  with pytest.raises(ValueError, match="remat"):
    _model(_shrunk(list(STRUCTURES)[0], remat="most")).encode(_batch(0)["inputs"])


@pytest.mark.parametrize("chunk", [4, 7, 64])
@pytest.mark.parametrize("multiple", [1, 16])
def test_chunked_token_loss_is_the_plain_loss_and_gradient(chunk, multiple):
  """chunked_token_loss against token_cross_entropy over output_logits (the whole [B, T, V]
  logits): loss, accuracy and the gradients with respect to the states and the embeddings within
  1e-6 relative; its prediction is next_stage_input's argmax. Chunks that do not divide B T
  (7), one chunk larger than B T (64), vocabulary padding (multiple 16) and a loss mask."""
  cfg = model_lib.ModelConfig(vocab_size=V, d_model=8, num_heads=2, vocab_multiple=multiple)
  kh, ke, km = jax.random.split(jax.random.key(3), 3)
  h_BTD = jax.random.normal(kh, (3, 10, 8))
  embed_VD = jax.random.normal(ke, (V, 8))
  targets_BT = _batch(2)["targets"]
  mask_BT = jax.random.bernoulli(km, 0.7, targets_BT.shape)

  def plain(h, e):
    logits = model_lib.output_logits(cfg, h, e)
    loss, acc = losses.token_cross_entropy(logits, targets_BT, mask_BT)
    return loss, (acc, losses.next_stage_input(None, logits, targets_BT))

  def chunked(h, e):
    loss, acc, pred = losses.chunked_token_loss(cfg, h, e, targets_BT, mask_BT, chunk=chunk)
    return loss, (acc, pred)

  (l0, (a0, p0)), g0 = jax.value_and_grad(plain, argnums=(0, 1), has_aux=True)(h_BTD, embed_VD)
  (l1, (a1, p1)), g1 = jax.jit(jax.value_and_grad(chunked, argnums=(0, 1), has_aux=True))(
    h_BTD, embed_VD
  )
  np.testing.assert_allclose(l1, l0, rtol=1e-6)
  assert float(a1) == float(a0)
  np.testing.assert_array_equal(p1, p0)
  for a, b in zip(g0, g1):
    scale = float(jnp.abs(a).max())
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-6 * scale)


def test_chunked_token_loss_keeps_no_vocabulary_sized_residual():
  """What the backward pass keeps (saved_residuals) holds no array with the
  vocabulary as a dimension: the logits are recomputed chunk by chunk."""
  Vbig = 1000
  cfg = model_lib.ModelConfig(vocab_size=Vbig, d_model=8, num_heads=2)
  h_BTD, embed_VD = jnp.ones((3, 10, 8)), jnp.ones((Vbig, 8)) * 0.01
  targets_BT = _batch(2)["targets"]
  f = lambda h, e: losses.chunked_token_loss(cfg, h, e, targets_BT, chunk=8)[0]
  saved = saved_residuals(f, h_BTD, embed_VD)
  assert saved and not [s for s, _ in saved if Vbig in s.shape and s.shape != (Vbig, 8)]
  plain = lambda h, e: losses.token_cross_entropy(model_lib.output_logits(cfg, h, e), targets_BT)[0]
  # The plain computation does keep them: the check sees what it looks for.
  assert [s for s, _ in saved_residuals(plain, h_BTD, embed_VD) if Vbig in s.shape[-1:]]


@pytest.mark.parametrize("decoder", ["nar", "ar"])
def test_multi_stage_loss_with_logits_chunk_is_the_plain_loss(decoder):
  """The whole loss (two stages, the second from the first's argmax; the AR loss) and its
  gradient with logits_chunk against without, within 1e-6 relative."""
  key = (decoder, 2, 2, 2, True, 0.0, 0, "float32", 1)
  m = _model(dataclasses.replace(_shrunk(key), dropout_rate=0.0))
  batch = _batch(4)
  out = []
  for chunk in (0, 8):

    @nnx.jit
    def value_and_grad(m):
      if decoder == "ar":
        f = lambda m: losses.ar_loss(m, batch, logits_chunk=chunk)[0]
      else:
        f = lambda m: losses.padir_loss(m, batch, jax.random.key(0), logits_chunk=chunk)[0]
      return nnx.value_and_grad(f)(m)

    out.append(value_and_grad(m))
  (l0, g0), (l1, g1) = out
  np.testing.assert_allclose(l1, l0, rtol=1e-6)
  for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1)):
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-6 * float(jnp.abs(a).max()) + 1e-12)


def _train_config(decoder="nar", ctc_upsample=0, **train):
  c = tiny_run_config("unused", 2, **train)
  c.model.update(decoder=decoder, num_encoder_layers=2, num_decoder_layers=2, dropout_rate=0.0)
  c.model.ctc_upsample = ctc_upsample
  c.loss.update(keep_rate=0.0, mask_rate=1.0)  # X(0) all [MASK]: the noise draws no difference
  c.train.update(batch_size=8, peak_lr=0.1, min_lr=0.1)
  return c


@pytest.mark.parametrize(
  "decoder,ctc_upsample,K",
  [("nar", 0, 4), pytest.param("ar", 0, 2, marks=pytest.mark.slow), ("nar", 2, 2)],
)
def test_k_micro_batches_make_the_one_batch_update(decoder, ctc_upsample, K):
  """The train step with grad_accum_steps = K against K = 1 on the same batch of 8 rows of
  unequal lengths: the reported loss and every updated parameter agree within float32
  summation error (rows are weighted by their share of the batch's tokens, not 1 / K)."""
  results = []
  for k in (1, K):
    config = _train_config(decoder, ctc_upsample, grad_accum_steps=k)
    cfg = model_lib.ModelConfig.from_run_config(config, V)
    model = _model(cfg)
    optimizer = nnx.Optimizer(model, optim.make_optimizer(config.train), wrt=nnx.Param)
    train_step, _ = training.make_steps(config)
    batch = _batch(5, B=8)
    key, dkey = jax.random.key(0), jax.random.key(1, impl="rbg")
    metrics = train_step(model, optimizer, batch, key, dkey, np.int32(0))
    results.append((metrics, nnx.state(model, nnx.Param)))
  (m1, p1), (mk, pk) = results
  np.testing.assert_allclose(mk["loss"], m1["loss"], rtol=1e-6)
  np.testing.assert_allclose(mk["grad_norm"], m1["grad_norm"], rtol=1e-5)
  init = jax.tree.leaves(nnx.state(_model(cfg), nnx.Param))
  moved = 0
  for p0, a, b in zip(init, jax.tree.leaves(p1), jax.tree.leaves(pk)):
    step_1, step_k = a - p0, b - p0  # the updates (learning rate 0.1: far above the tolerance)
    scale = float(jnp.abs(step_1).max())
    moved += scale > 1e-5
    np.testing.assert_allclose(step_k, step_1, rtol=0, atol=1e-4 * scale + 1e-9)
  # Not a comparison of unchanged states: all but the parameters a loss leaves alone (CTC's
  # length head) moved.
  assert moved >= len(init) - 2


def _metrics(workdir: str) -> list[dict]:
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    return [json.loads(line) for line in f if "train_loss" in line]


@pytest.mark.slow  # three short trainings, stopped and resumed (~1 CPU-min)
@pytest.mark.parametrize(
  "first,second",
  [
    ({"model.scan_layers": "loop"}, {"model.scan_layers": "scan"}),  # unrolled, resumed scanned
    # scanned (the stages too), resumed unrolled
    ({"model.scan_layers": "scan", "loss.scan_stages": True}, {"model.scan_layers": "loop"}),
    ({"train.grad_accum_steps": 2}, {"train.grad_accum_steps": 2}),  # accumulating, stopped
  ],
  ids=["unrolled_then_scanned", "scanned_then_unrolled", "accumulating"],
)
def test_a_run_stopped_and_resumed_with_these_options_matches_the_straight_run(
  toy_corpus, tmp_path, first, second
):
  """Stop at step 2 (a checkpoint), resume to 4 with `second`; the losses of steps 3-4 are the
  straight run's (with `first` throughout) within 1e-5: parameters and AdaFactor's state go
  through the checkpoint (written per layer in both layouts) into the other storage layout."""

  def config(options, stop):
    c = tiny_run_config(toy_corpus, 4, stop_at_step=stop)
    c.model.update(num_encoder_layers=2, num_decoder_layers=2)
    for k, v in options.items():
      section, name = k.split(".")
      c[section][name] = v
    return c

  legs, straight = str(tmp_path / "legs"), str(tmp_path / "straight")
  train_job.run(config(first, 2), legs)
  train_job.run(config(second, 0), legs)
  train_job.run(config(first, 0), straight)
  a = {r["step"]: r["train_loss"] for r in _metrics(legs)}
  b = {r["step"]: r["train_loss"] for r in _metrics(straight)}
  assert set(a) == set(b) == {2, 4}
  for step in (2, 4):
    assert a[step] == pytest.approx(b[step], rel=1e-5)
  if "model.scan_layers" in first:  # the trained model loads in either layout: the same logits
    logits = []
    for layout in ("loop", "scan"):
      with open(os.path.join(legs, "config.json"), encoding="utf-8") as f:
        c = json.load(f)
      c["model"]["scan_layers"] = layout
      with open(os.path.join(legs, "config.json"), "w", encoding="utf-8") as f:
        json.dump(c, f)
      model, _, _ = restore.load_model(legs)
      assert isinstance(model.decoder_layers, layer_stack.LayerStack) == (layout == "scan")
      enc_BSD, mask_BS = model.encode(_batch(0)["inputs"])
      logits.append(np.asarray(model.decode(_batch(0)["targets"], enc_BSD, mask_BS)))
    np.testing.assert_allclose(logits[1], logits[0], atol=1e-5, rtol=0)


def test_validate_refuses_accumulation_that_does_not_divide_the_batch():
  c = tiny_run_config("unused", 2, grad_accum_steps=3)
  with pytest.raises(training.checks.ConfigError, match="grad_accum_steps"):
    training.validate(c)


def test_auto_layout_is_the_scan_on_accelerators_and_the_loop_on_cpu(monkeypatch):
  """scan_layers="auto" resolves on the platform (the loop measured faster per step on CPU);
  True / False from configs written before "auto" keep their meaning; a bad value is one line."""
  key = next(iter(STRUCTURES))
  assert _shrunk(key, scan_layers="scan").scanned and not _shrunk(key, scan_layers="loop").scanned
  assert _shrunk(key, scan_layers=True).scanned and not _shrunk(key, scan_layers=False).scanned
  for backend, scanned in (("cpu", False), ("gpu", True), ("tpu", True)):
    monkeypatch.setattr(jax, "default_backend", lambda b=backend: b)
    assert _shrunk(key, scan_layers="auto").scanned is scanned
  c = tiny_run_config("unused", 2)
  c.model.scan_layers = "scanned"
  with pytest.raises(training.checks.ConfigError, match="scan_layers='scanned'.*'auto'"):
    training.validate(c)


def test_layer_stack_views_layouts_and_dropout_streams():
  """A LayerStack's views are its layers' slices; unstack_layers / stack_layers are inverse on a
  model's whole state (weights, dropout streams) and on an optimizer's; a model built scanned has
  the loop's weights for the same seed; reseed_dropout gives each layer its own stream (the
  masks of two layers differ) and the same streams in both layouts."""
  key = ("nar", 2, 3, 2, True, 0.0, 0, "float32", 1)
  loop, scanned = (_model(_shrunk(key, scan_layers=s)) for s in ("loop", "scan"))
  flat = nnx.state(loop)
  stacked = nnx.state(scanned)
  assert jax.tree.structure(layer_stack.unstack_layers(stacked)) == jax.tree.structure(flat)
  assert jax.tree.structure(layer_stack.stack_layers(flat)) == jax.tree.structure(stacked)
  for a, b in zip(jax.tree.leaves(flat), jax.tree.leaves(layer_stack.unstack_layers(stacked))):
    np.testing.assert_array_equal(
      jax.random.key_data(a) if jnp.issubdtype(a.dtype, jax.dtypes.prng_key) else a,
      jax.random.key_data(b) if jnp.issubdtype(b.dtype, jax.dtypes.prng_key) else b,
    )
  view = scanned.decoder_layers[-1]
  np.testing.assert_array_equal(view.ffn.up.kernel[...], loop.decoder_layers[2].ffn.up.kernel[...])
  assert view.ffn.up.kernel.get_metadata()["logical_axes"] == ("embed", "mlp")
  assert scanned.decoder_layers.stack.ffn.up.kernel.get_metadata()["logical_axes"] == (
    "layers",
    "embed",
    "mlp",
  )
  assert len(list(scanned.decoder_layers)) == 3
  with pytest.raises(IndexError):
    scanned.decoder_layers[3]
  k = jax.random.key(3, impl="rbg")
  for m in (loop, scanned):
    layer_stack.reseed_dropout(m, k)
  keys = lambda m: [
    np.asarray(jax.random.key_data(x))
    for x in jax.tree.leaves(layer_stack.unstack_layers(nnx.state(m, nnx.RngKey)))
  ]
  kl, ks = keys(loop), keys(scanned)
  assert len(kl) == len(ks) and all(np.array_equal(a, b) for a, b in zip(kl, ks))
  assert len({a.tobytes() for a in kl}) == len(kl)  # no two streams share a key
