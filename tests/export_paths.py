"""Every hot path of the project at small shapes, ready to be lowered for the accelerators.

Each `ExportPath` builds (jitted fn, args, static kwargs) for `gmlm.lowering.check`; args are
arrays, or ShapeDtypeStructs whose shardings name an abstract mesh where the path runs
sharded (Glauber and Ising chains over a "data" axis of 8 devices, PaDIR training on a 4 x 2
("data", "model") mesh), so the sharded program is lowered without the devices.
tests/test_export.py exports every one for ("cuda", "tpu"); `python tests/export_paths.py`
prints docs/accelerators.md's table of them.

The lists, one per area (PATHS is their concatenation, in the table's order):
  GLAUBER_PATHS, ISING_PATHS, MODEL_PATHS, PADIR_PATHS, UNMASKING_PATHS.
A new hot path is one builder added to its area's list with the `path` decorator:

  @path(UNMASKING_PATHS, "unmasking: NAME (module.function)", dtype="float32", mesh=DATA)
  def _():
    return jitted_fn, (arg, ...), dict(static=...)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from gmlm import lowering


@dataclasses.dataclass(frozen=True)
class ExportPath:
  name: str  # "area: what (module.function)"
  build: Callable[[], tuple[Callable, tuple, dict]]
  dtype: str = "float32"  # the compute dtype the path asks for
  mesh: dict | None = None  # the abstract mesh its arguments are sharded over, if any

  @property
  def devices(self) -> int:
    return int(np.prod(list(self.mesh.values()))) if self.mesh else 1


GLAUBER_PATHS: list[ExportPath] = []
ISING_PATHS: list[ExportPath] = []
MODEL_PATHS: list[ExportPath] = []
PADIR_PATHS: list[ExportPath] = []
UNMASKING_PATHS: list[ExportPath] = []  # issue 29's samplers go here

DATA = {"data": 8}  # chains over 8 devices
DATA_MODEL = {"data": 4, "model": 2}  # PaDIR training


def path(into: list, name: str, dtype: str = "float32", mesh: dict | None = None):
  def register(build):
    into.append(ExportPath(name, build, dtype, mesh))
    return build

  return register


def _sharding(mesh: dict, *spec) -> NamedSharding:
  return NamedSharding(lowering.abstract_mesh(mesh), P(*spec))


def replicated(tree: Any, mesh: dict | None) -> Any:
  """tree as ShapeDtypeStructs replicated over the mesh (as it is, without one)."""
  if mesh is None:
    return tree
  return lowering.shaped(tree, jax.tree.map(lambda _: _sharding(mesh), tree))


def split(x, mesh: dict | None, axis: int = 0) -> Any:
  """x as a ShapeDtypeStruct with `axis` over "data" (as it is, without a mesh)."""
  if mesh is None:
    return x
  spec = [None] * np.ndim(x)
  spec[axis] = "data"
  return lowering.shaped(x, _sharding(mesh, *spec))


def key(seed: int = 0):
  return jax.random.key(seed)


# ----------------------------------------------------------------------------- Glauber


@functools.cache
def _glauber():
  """The tiny MLM of tests/glauber_util, its spec and 16 chains (2 per device of DATA)."""
  from glauber_util import ALL_STATES, sequences, spec, tiny_mlm

  return tiny_mlm(), spec(1.0), np.asarray(sequences(ALL_STATES[:: len(ALL_STATES) // 16][:16]))


def _chains(method: str, k: int = 1, dtype: str = "float32", mesh=DATA, **static):
  from glauber import chains

  model, spec, x0 = _glauber()
  if dtype == "bfloat16":
    from gmlm import nn as gm

    model = gm.with_dtype(model, jnp.bfloat16)
  state = chains.init_state(x0)
  state = chains.ChainState(
    split(state.tokens_BL, mesh), split(state.steps_B, mesh), replicated(state.t, mesh)
  )
  kwargs = dict(num_records=2, record_every=2, method=method, k=k, record_logprobs=False)
  kwargs.update(static, sharding=None if mesh is None else _sharding(mesh, "data"))
  args = (replicated(key(), mesh), replicated(model, mesh), spec, state)
  return chains._run_kept, args, kwargs


for _method, _k in (("glauber", 1), ("sweep", 2), ("block", 2), ("parallel", 1)):
  path(GLAUBER_PATHS, f"glauber: {_method} steps, k={_k} (chains.run)", mesh=DATA)(
    functools.partial(_chains, _method, _k)
  )
path(GLAUBER_PATHS, "glauber: plain steps in bf16 (chains.run)", "bfloat16", DATA)(
  functools.partial(_chains, "glauber", 1, "bfloat16")
)
path(GLAUBER_PATHS, "glauber: the recording scan with log-probs (chains.run)", mesh=DATA)(
  functools.partial(_chains, "glauber", 1, record_logprobs=True)
)


@path(GLAUBER_PATHS, "glauber: rejection-free iterations with the memo (rejection_free)", mesh=DATA)
def _():
  from glauber import rejection_free as rf

  model, spec, x0 = _glauber()
  B, R, n = x0.shape[0], 2, spec.num_sites
  memo = rf.Memo.empty(B, 2, spec, jnp.int32)
  memo = jax.tree.map(lambda x: split(x, DATA), memo)
  steps = np.zeros(B, np.int32)
  args = (
    replicated(key(), DATA),
    replicated(model, DATA),
    spec,
    split(jnp.asarray(x0), DATA),
    split(steps, DATA),
    replicated(jnp.int32(0), DATA),
    split(steps, DATA),
    split(steps + 4, DATA),
    split(np.zeros((R, B, n), np.int32), DATA, 1),
    split(np.zeros((R, B, n), np.float32), DATA, 1),
    split(steps, DATA),
    memo,
  )
  return rf._iterate, args, dict(record_every=2, max_iterations=8, sharding=_sharding(DATA, "data"))


@path(GLAUBER_PATHS, "glauber: maximally coupled pairs (coupling.run)", mesh=DATA)
def _():
  from glauber import coupling

  model, spec, x0 = _glauber()
  y0 = x0[::-1].copy()
  args = (
    replicated(key(), DATA),
    replicated(model, DATA),
    spec,
    split(jnp.asarray(x0), DATA),
    split(jnp.asarray(y0), DATA),
    replicated(jnp.int32(0), DATA),
    split(np.full(len(x0), -1, np.int32), DATA),
  )
  return coupling._run, args, dict(num_records=2, record_every=2, sharding=_sharding(DATA, "data"))


@path(GLAUBER_PATHS, "glauber: Metropolis-Hastings steps (metropolis.run)", mesh=DATA)
def _():
  from glauber import metropolis

  model, spec, x0 = _glauber()
  state = metropolis.init_state(model, spec, x0, "pll")
  state = jax.tree.map(lambda x: split(x, DATA) if np.ndim(x) else replicated(x, DATA), state)
  args = (replicated(key(), DATA), replicated(model, DATA), spec, state)
  kwargs = dict(energy="pll", num_records=2, record_every=2)
  return metropolis._run_jit, args, dict(kwargs, sharding=_sharding(DATA, "data"))


@path(GLAUBER_PATHS, "glauber: rectangle edges, masked LM (rectangle.masked_edges)")
def _():
  from glauber.measures import rectangle

  model, spec, x0 = _glauber()
  X = 4
  i, j = np.full(X, spec.offset, np.int32), np.full(X, spec.offset + 2, np.int32)
  b = np.full(X, 6, np.int32)
  args = (model, jnp.asarray(x0[:X]), jnp.ones_like(x0[:X]), i, j, b, b + 1, spec.mask_id)
  return rectangle.masked_edges, args, {}


@path(
  GLAUBER_PATHS, "glauber: rectangle edges after proposals (rectangle.masked_edges_after_proposals)"
)
def _():
  from glauber.measures import rectangle

  model, spec, x0 = _glauber()
  X, V = 4, model.config.vocab_size
  i, j = np.full(X, spec.offset, np.int32), np.full(X, spec.offset + 2, np.int32)
  b = np.full(X, 6, np.int32)
  logits = np.zeros((X, 2, V), np.float32)
  args = (model, jnp.asarray(x0[:X]), jnp.ones_like(x0[:X]), i, j, b, b + 1, logits, spec.mask_id)
  return rectangle.masked_edges_after_proposals, args, {}


@path(GLAUBER_PATHS, "glauber: rectangle edges, causal control (rectangle.causal_edges)")
def _():
  from glauber.measures import rectangle

  model = _family("GPT2LMHeadModel", "float32")
  tokens = np.random.default_rng(0).integers(3, 97, (4, 12)).astype(np.int32)
  i, j = np.full(4, 3, np.int32), np.full(4, 7, np.int32)
  b = np.full(4, 9, np.int32)
  return rectangle.causal_edges, (model, tokens, np.ones_like(tokens), i, j, b, b + 1), {}


@path(GLAUBER_PATHS, "glauber: influence of site j on site i (influence.group_influence)")
def _():
  from glauber.measures import influence

  model, spec, x0 = _glauber()
  G, M = 4, 3
  values = np.tile(np.asarray(spec.candidates_C)[:M], (G, 1))
  groups = np.arange(G, dtype=np.int32)
  i, j = groups % spec.num_sites, (groups + 1) % spec.num_sites
  args = (model, spec, jnp.asarray(x0[:G]), groups, i, j, values)
  return influence.group_influence, args, dict(temperatures=(0.5, 1.0))


# ----------------------------------------------------------------------------- Unmasking


def _unmasking(order: str, counts: tuple, remask: tuple, mesh=DATA):
  """The whole sampler (glauber.unmasking._run): reveal steps by `counts` in `order`, then
  remask rounds, 16 chains of the tiny MLM split over the mesh."""
  from glauber import chains, unmasking

  model, spec, _ = _glauber()
  state = unmasking.all_masked(spec, 16)
  n = spec.num_sites
  state = chains.ChainState(
    split(state.tokens_BL, mesh), split(state.steps_B, mesh), replicated(state.t, mesh)
  )
  plan = (unmasking._segments(counts, n, order), remask[0])
  kwargs = dict(plan=plan, order=order, remask=(remask[1], remask[2]), record=False)
  kwargs.update(sharding=None if mesh is None else _sharding(mesh, "data"))
  args = (replicated(key(), mesh), replicated(model, mesh), spec, state)
  return unmasking._run_jit, args, kwargs


path(UNMASKING_PATHS, "unmasking: ancestral, random order (unmasking.run)", mesh=DATA)(
  functools.partial(_unmasking, "random", (1, 1, 1, 1), (0, 1, "random"))
)
path(UNMASKING_PATHS, "unmasking: ancestral, confidence order (unmasking.run)", mesh=DATA)(
  functools.partial(_unmasking, "confidence", (1, 1, 1, 1), (0, 1, "random"))
)
path(
  UNMASKING_PATHS,
  "unmasking: parallel S=2, left to right, then 2 confidence remask rounds (unmasking.run)",
  mesh=DATA,
)(functools.partial(_unmasking, "left_to_right", (2, 2), (2, 2, "confidence")))
path(
  UNMASKING_PATHS,
  "unmasking: parallel S=2, random, then random remasking (unmasking.run)",
  mesh=DATA,
)(functools.partial(_unmasking, "random", (2, 2), (2, 1, "random")))


@path(UNMASKING_PATHS, "unmasking: scores at every masked state (unmasking.masked_scores)")
def _():
  from glauber import unmasking

  model, spec, _ = _glauber()
  return (
    jax.jit(unmasking.masked_scores),
    (model, spec, unmasking.all_masked(spec, 8).tokens_BL),
    {},
  )


# ----------------------------------------------------------------------------- Ising


def _ising(n: int, method: str, k: int):
  from ising import model as ising_model
  from ising import samplers

  m = ising_model.clique_model(n, min(4, n), 1.0, 1.0)
  x0 = np.asarray(samplers.random_states(key(), 16, n))
  args = (
    replicated(key(1), DATA),
    replicated(m, DATA),
    split(x0, DATA),
    replicated(jnp.int32(0), DATA),
  )
  kwargs = dict(num_steps=4, method=method, k=k, mesh=lowering.abstract_mesh(DATA))
  return samplers._run, args, kwargs


for _n, _method, _k, _what in (
  (10, "gibbs", 1, "Glauber, packed bits and table (N <= 16)"),
  (24, "gibbs", 1, "Glauber, dense"),
  (10, "gibbs", 3, "k-Gibbs, k = 3"),
  (10, "parallel", 1, "independent parallel sampler"),
):
  path(ISING_PATHS, f"ising: {_what} (samplers.sample)", mesh=DATA)(
    functools.partial(_ising, _n, _method, _k)
  )


# ----------------------------------------------------------------------------- models


@functools.cache
def _family(arch: str, dtype: str):
  """A tiny random model of the family from models_util.TINY, computing in dtype."""
  from models_util import TINY

  from gmlm import nn as gm

  model = gm.from_config({**TINY[arch][1], "architectures": [arch]}, rngs=nnx.Rngs(0))
  return model if dtype == "float32" else gm.with_dtype(model, jnp.bfloat16)


def _forward(arch: str, dtype: str):
  from gmlm import nn as gm

  rng = np.random.default_rng(0)
  tokens = rng.integers(5, 97, (4, 12)).astype(np.int32)
  mask = np.ones_like(tokens)
  mask[1, 9:] = 0
  model = _family(arch, dtype)
  if arch in ("GPT2LMHeadModel", "LlamaForCausalLM"):
    return gm.causal_logits, (model, tokens, mask), {}
  positions = np.array([[2, 5]] * 4, np.int32)
  return gm.masked_logits, (model, tokens, positions, mask), {}


for _arch, _fn in (
  ("BertForMaskedLM", "masked_logits"),
  ("RobertaForMaskedLM", "masked_logits"),
  ("ModernBertForMaskedLM", "masked_logits"),
  ("GPT2LMHeadModel", "causal_logits"),
  ("LlamaForCausalLM", "causal_logits"),
):
  for _dtype in ("float32", "bfloat16"):
    path(MODEL_PATHS, f"models: {_arch} forward in {_dtype} (nn.{_fn})", _dtype)(
      functools.partial(_forward, _arch, _dtype)
    )


# ----------------------------------------------------------------------------- PaDIR


def _pure(fn: Callable, *models, static: tuple[str, ...] = ()):
  """(jitted g(states, *args), states): fn(*models, *args) over the models' split states."""
  graphdefs, states = zip(*(nnx.split(m) for m in models))

  def g(states, *args, **kwargs):
    return fn(*(nnx.merge(d, s) for d, s in zip(graphdefs, states)), *args, **kwargs)

  return jax.jit(g, static_argnames=static), states


def _sources(cfg, B: int = 3) -> np.ndarray:
  from padir.data import tokenizer as tok

  x = np.random.default_rng(0).integers(tok.NUM_SPECIAL, cfg.vocab_size, (B, cfg.max_source_length))
  x[:, -1] = tok.EOS_ID
  x[1, 3:] = tok.PAD_ID
  x[1, 2] = tok.EOS_ID
  return x.astype(np.int32)


def _train_config(dtype: str):
  from configs import padir_bible_en_es

  c = padir_bible_en_es.get_config()
  c.data.update(vocab_size=40, max_source_length=8, max_target_length=8)
  c.model.update(num_encoder_layers=1, num_decoder_layers=1, num_heads=2, d_model=16, d_ff=32)
  c.model.dtype = dtype
  return c


def training_step(config, mesh: dict | None, params: str = "logical"):
  """padir.training.loop's jitted step as a pure function of (state, batch, key, dropout_key), its
  arguments (ShapeDtypeStructs sharded by padir.training.sharding's `params` rule on an abstract mesh).
  The dropout key is an rbg key, as the loop's (its data seeds XLA's bit generator)."""
  from padir.model import transformer as model_lib
  from padir.training import loop as training
  from padir.training import optim
  from padir.training import sharding as sharding_lib

  cfg = model_lib.ModelConfig.from_run_config(config, config.data.vocab_size)

  def make():
    model = model_lib.Transformer(
      cfg, rngs=nnx.Rngs(params=0, dropout=jax.random.key(0, impl="rbg"))
    )
    return model, nnx.Optimizer(model, optim.make_optimizer(config.train), wrt=nnx.Param)

  graphdef, state = nnx.split(nnx.eval_shape(make))
  shardings = None
  if mesh is not None:
    shardings = sharding_lib.state_shardings(state, lowering.abstract_mesh(mesh), params)
    state = jax.tree.map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), state, shardings
    )
  train_step, _ = training.make_steps(config, shardings)

  def step(state, batch, key, dropout_key):
    model, optimizer = nnx.merge(graphdef, state)
    metrics = train_step(model, optimizer, batch, key, dropout_key)
    return nnx.state((model, optimizer)), metrics

  B, S, T = config.train.batch_size, config.data.max_source_length, config.data.max_target_length
  batch = {
    "inputs": jax.ShapeDtypeStruct((B, S), jnp.int32),
    "targets": jax.ShapeDtypeStruct((B, T), jnp.int32),
  }
  if mesh is not None:
    batch = {k: split(v, mesh) for k, v in batch.items()}
  keys = tuple(jax.ShapeDtypeStruct((), k.dtype) for k in (key(), jax.random.key(0, impl="rbg")))
  if mesh is not None:
    keys = tuple(lowering.shaped(k, _sharding(mesh)) for k in keys)
  return jax.jit(step, donate_argnums=0), (state, batch, *keys), {}


for _dtype in ("float32", "bfloat16"):
  for _params in ("logical", "fsdp"):
    path(
      PADIR_PATHS,
      f"padir: multi-stage training step, {_params} sharding, {_dtype} (training.make_steps)",
      _dtype,
      DATA_MODEL,
    )(lambda d=_dtype, p=_params: training_step(_train_config(d), DATA_MODEL, p))


def _ar_dropout_config():
  """The AR baseline's step as the family trains it: dropout 0.1, a layer's masks from one draw
  of XLA's bit generator at its ThreeFry algorithm (model.dropout_rng)."""
  c = _train_config("bfloat16")
  c.model.update(decoder="ar", dropout_rate=0.1, dropout_rng="threefry")
  return c


path(
  PADIR_PATHS,
  "padir: AR training step, dropout 0.1 (ThreeFry masks), logical sharding, bfloat16",
  "bfloat16",
  DATA_MODEL,
)(lambda: training_step(_ar_dropout_config(), DATA_MODEL))


@functools.cache
def _padir(decoder: str):
  from padir_util import tiny_model

  return tiny_model(decoder)


def _refine(options: dict, width: int | None = None):
  from padir.decoding import refinement

  nar = _padir("nar")
  opts = refinement.RefineOptions(**options)
  if opts.rerank == "ar":
    fn, states = _pure(
      lambda m, a, x, k: refinement.refine(m, x, k, opts, ar_model=a, width=width),
      nar,
      _padir("ar"),
    )
  else:
    fn, states = _pure(lambda m, x, k: refinement.refine(m, x, k, opts, width=width), nar)
  return fn, (states, _sources(nar.cfg), key()), {}


path(PADIR_PATHS, "padir: refinement, the paper's decoder (refinement.refine)")(
  functools.partial(_refine, {})
)
path(PADIR_PATHS, "padir: refinement at a trimmed width (speed.Trimmed, refine(width=))")(
  functools.partial(_refine, {}, 4)
)
path(
  PADIR_PATHS,
  "padir: refinement, sampled + top-k + remasking + length prior + AR rerank (refinement.refine)",
)(
  functools.partial(
    _refine,
    dict(temperature=0.5, top_k=5, remask="confidence", length_prior=True, rerank="ar"),
  )
)


@path(PADIR_PATHS, "padir: AR greedy with the KV cache (decode.greedy_ar)")
def _():
  from padir.decoding import autoregressive as decode

  ar = _padir("ar")
  fn, states = _pure(decode.greedy_ar, ar)
  return fn, (states, _sources(ar.cfg)), {}


@path(PADIR_PATHS, "padir: AR beam search, 3 beams (decode.beam_search)")
def _():
  from padir.decoding import autoregressive as decode

  ar = _padir("ar")
  fn, states = _pure(lambda m, x: decode.beam_search(m, x, 3), ar)
  return fn, (states, _sources(ar.cfg)), {}


@path(PADIR_PATHS, "padir: distillation's batch translation, 2 beams (distill.translate_sources)")
def _():
  from padir.training import distill

  ar = _padir("ar")
  fn, states = _pure(lambda m, x: distill._beam_tokens(m, x, 2, 0.6), ar)
  return fn, (states, _sources(ar.cfg)), {}


# ----------------------------------------------------------------------------- all of them

PATHS: list[ExportPath] = GLAUBER_PATHS + ISING_PATHS + MODEL_PATHS + PADIR_PATHS + UNMASKING_PATHS


def table(reports: dict[str, lowering.Lowering]) -> str:
  """docs/accelerators.md's table: each path, its dtype and mesh, and what lowering it found."""
  lines = [
    "| path | dtype | mesh | cuda + tpu | matmuls |",
    "|---|---|---|---|---|",
  ]
  for p in PATHS:
    r = reports[p.name]
    mesh = " x ".join(f"{k}={v}" for k, v in p.mesh.items()) if p.mesh else "-"
    status = "lowers; no host callback, no float64" if r.ok else "; ".join(r.problems)
    dots = ", ".join(f"{v} {k}" for k, v in sorted(r.dots.items())) or "-"
    lines.append(f"| {p.name} | {p.dtype} | {mesh} | {status} | {dots} |")
  return "\n".join(lines)


if __name__ == "__main__":
  import sys
  import time

  out = {}
  for p in PATHS:
    t0 = time.perf_counter()
    fn, args, kwargs = p.build()
    out[p.name] = lowering.check(fn, *args, dtype=p.dtype, **kwargs)
    print(f"{time.perf_counter() - t0:6.1f} s  {p.name}: {out[p.name].problems}", file=sys.stderr)
  print(table(out))
