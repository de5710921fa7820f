"""Training: `fit(config, rd)` trains PaDIR (NAR) or the AR baseline in a run directory.

Reads a step top to bottom: corpus -> vocabulary -> tfds/grain batches -> model + AdaFactor ->
jitted step -> metrics (rd.log_metrics: metrics.jsonl and TensorBoard), evaluation (loss,
SacreBLEU, stutter), checkpoints (gmlm.checkpoints). Preemption-safe: a restarted run restores
the newest intact checkpoint (parameters, optimizer state, the grain iterator position; a damaged
one is skipped, saying so), drops the metrics
written after it and continues; the noise and dropout keys are fold_in(key(seed), step), so a
resumed run computes the same steps as an uninterrupted one.

Scaling out (both off by default): `config.mesh` places the model, the optimizer state and the
batches on a ("data", "model") device mesh (padir.training.sharding: logical axis rules or FSDP); the same
code runs on one device. `config.distributed` starts multi-host JAX (`open_run`, before any other
JAX call); process 0 makes the missing data files (vocabulary, tfds cache) before the others read
them, and each process reads its rows of every global batch.

`validate(config)` checks every key of the training config without loading anything.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from typing import Any, Callable

import jax
import ml_collections
import numpy as np
import optax
import tqdm
from flax import nnx

from gmlm import checks
from gmlm import runs as runs_lib
from gmlm.checkpoints import Checkpoints, Json
from gmlm.core import mesh as mesh_lib
from gmlm.runs import RunDir
from padir.data import bible, grammar, vocab
from padir.data import corpus as data
from padir.data import tokenizer as tokenizer_lib
from padir.decoding import ctc, refinement
from padir.evaluation import curves
from padir.evaluation import translation as evaluate
from padir.model import dag, layer_stack, losses, restore
from padir.model import transformer as model_lib
from padir.training import early_stopping, optim, throughput, warm_start
from padir.training import sharding as sharding_lib


def _check_str(config: Any, key: str, *, empty_ok: bool = True) -> None:
  v = checks.get(config, key)
  checks.check(
    isinstance(v, str) and (empty_ok or bool(v)),
    key,
    v,
    "must be a string" if empty_ok else "must be a non-empty string",
  )


def _has(config: Any, key: str) -> bool:
  """Whether an optional dotted key is present."""
  node = config
  for part in key.split("."):
    if not hasattr(node, "keys") or part not in node:
      return False
    node = node[part]
  return True


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises gmlm.checks.ConfigError naming the first key of the training config that is
  missing or out of range; reads no file and loads nothing."""
  checks.check_int(config, "seed", lo=0)
  for key in ("data.corpus_dir", "data.source_lang", "data.target_lang"):
    _check_str(config, key, empty_ok=False)
  for key in ("data.vocab_path", "data.tfds_data_dir"):
    _check_str(config, key)
  for key in (
    "data.train_vocab",
    "model.positional_attention",
    "train.progress_bar",
    "decode.remask_stutter",
  ):
    checks.check_bool(config, key)
  if _has(config, "decode.decoder"):
    checks.check_choice(config, "decode.decoder", (*refinement.VARIANTS, "legacy"))
  if _has(config, "data.prepare_bible"):
    checks.check_bool(config, "data.prepare_bible")
  if _has(config, "data.grammar_task"):
    checks.check_choice(config, "data.grammar_task", ("", *grammar.FAMILY))
    for key, lo in (("data.grammar_seed", 0), ("data.grammar_pairs", 1)):
      if _has(config, key):
        checks.check_int(config, key, lo=lo)
  checks.check_int(config, "data.vocab_size", lo=tokenizer_lib.NUM_SPECIAL + 1)
  checks.check_int(config, "data.max_source_length", lo=1)
  checks.check_int(config, "data.max_target_length", lo=1)
  if _has(config, "data.bucket_boundaries") and not (
    isinstance(config.data.bucket_boundaries, (list, tuple))
    and len(config.data.bucket_boundaries) == 0
  ):  # () = no buckets
    checks.check_ints(config, "data.bucket_boundaries", lo=1)
  checks.check_choice(config, "model.decoder", ("nar", "ar"))
  for key in ("model.num_encoder_layers", "model.num_decoder_layers"):
    checks.check_int(config, key, lo=0)
  heads = checks.check_int(config, "model.num_heads", lo=1)
  d_model = checks.check_int(config, "model.d_model", lo=1)
  checks.check(
    d_model % heads == 0, "model.d_model", d_model, f"must be divisible by model.num_heads={heads}"
  )
  checks.check_int(config, "model.d_ff", lo=1)
  if _has(config, "model.dtype"):
    checks.check_choice(config, "model.dtype", ("float32", "bfloat16"))
  if _has(config, "model.vocab_multiple"):
    checks.check_int(config, "model.vocab_multiple", lo=1)
  checks.check_float(config, "model.dropout_rate", lo=0, hi=1, hi_open=True)
  checks.check_float(config, "loss.keep_rate", lo=0, hi=1)
  checks.check_float(config, "loss.mask_rate", lo=0, hi=1)
  checks.check_int(config, "loss.num_stages", lo=1)
  checks.check_choice(config, "loss.stage_input", ("argmax", "sample"))
  checks.check_choice(config, "loss.stage_reduction", ("mean", "sum"))
  checks.check_float(config, "loss.length_weight", lo=0)
  for key in (
    "train.batch_size",
    "train.num_train_steps",
    "train.log_every",
    "train.eval_every",
    "train.eval_batches",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "decode.batch_size",
    "decode.num_steps",
    "decode.num_lengths",
  ):
    checks.check_int(config, key, lo=1)
  for key in ("train.warmup_steps", "decode.num_examples"):
    checks.check_int(config, key, lo=0)
  if _has(config, "train.stop_at_step"):
    checks.check_int(config, "train.stop_at_step", lo=0)
  if _has(config, early_stopping.KEY) and checks.check_int(config, early_stopping.KEY, lo=0):
    checks.check(
      config.decode.num_examples > 0,
      "decode.num_examples",
      config.decode.num_examples,
      f"early stopping ({early_stopping.KEY} > 0) reads the validation BLEU: must be > 0",
    )
  checks.check_float(config, "train.peak_lr", lo=0, lo_open=True)
  checks.check_float(config, "train.min_lr", lo=0)
  if _has(config, "decode.beam_size"):
    checks.check_int(config, "decode.beam_size", lo=1)
  if _has(config, "decode.length_penalty"):
    checks.check_float(config, "decode.length_penalty")
  if _has(config, "train.grad_accum_steps"):
    K = checks.check_int(config, "train.grad_accum_steps", lo=1)
    # the processes a multi-host run will join, read from the environment: jax.process_count()
    # would start the backend before jax.distributed.initialize (open_run) may run
    processes = int(os.environ.get("JAX_NUM_PROCESSES", "1") or 1)
    checks.check(
      config.train.batch_size % (K * processes) == 0,
      "train.grad_accum_steps",
      K,
      f"must divide train.batch_size={config.train.batch_size} (per process)",
    )
  if _has(config, "model.scan_layers"):
    v = config.model.scan_layers
    checks.check(
      v is True or v is False or v in ("auto", "scan", "loop"),
      "model.scan_layers",
      v,
      "must be 'scan', 'loop' or 'auto' (the scan on an accelerator, the loop on a CPU)",
    )
  if _has(config, "train.optimizer_by_shape"):
    checks.check_bool(config, "train.optimizer_by_shape")
  if _has(config, "model.remat"):
    checks.check_choice(config, "model.remat", tuple(model_lib.REMAT_POLICIES))
  if _has(config, "model.dropout_draw"):
    checks.check_choice(config, "model.dropout_draw", model_lib.DROPOUT_DRAWS)
  if _has(config, "model.dropout_rng"):
    checks.check_choice(config, "model.dropout_rng", model_lib.DROPOUT_RNGS)
  if _has(config, "loss.logits_chunk"):
    checks.check_int(config, "loss.logits_chunk", lo=0)
  if _has(config, "loss.scan_stages"):
    checks.check_bool(config, "loss.scan_stages")
  if _has(config, "mesh.data"):
    checks.check_int(config, "mesh.data", lo=-1)
  if _has(config, "mesh.model"):
    checks.check_int(config, "mesh.model", lo=1)
  if _has(config, "mesh.params"):
    checks.check_choice(config, "mesh.params", ("logical", "fsdp"))
  if _has(config, "distributed"):
    checks.check_choice(config, "distributed", ("auto", "on", "off"))
  validate_recipe(config)


def validate_recipe(config: ml_collections.ConfigDict) -> None:
  """The training-recipe options (issue 26), each optional and off when absent: length
  offsets, CTC, glancing, warm start."""
  if _has(config, "model.max_length_offset"):
    M = checks.check_int(config, "model.max_length_offset", lo=0)
    if M:
      checks.check(
        config.decode.num_lengths <= 2 * M + 1,
        "decode.num_lengths",
        config.decode.num_lengths,
        f"must be at most the 2 x model.max_length_offset + 1 = {2 * M + 1} offset classes",
      )
  if _has(config, "model.ctc_upsample"):
    k = checks.check_float(config, "model.ctc_upsample", lo=0)
    checks.check(
      k == 0 or k >= 1,
      "model.ctc_upsample",
      config.model.ctc_upsample,
      "must be 0 (no CTC) or a number >= 1 (slots per source token, e.g. 2 or 1.5)",
    )
    if k:
      checks.check(
        config.model.decoder == "nar",
        "model.ctc_upsample",
        k,
        "CTC is for a PaDIR model (model.decoder='nar'); set model.ctc_upsample=0 for the AR one",
      )
      checks.check(
        not config.model.get("max_length_offset", 0),
        "model.max_length_offset",
        config.model.get("max_length_offset", 0),
        "a CTC model (model.ctc_upsample > 0) predicts no length: set it to 0",
      )
  if _has(config, "model.dag_upsample") and checks.check_float(config, "model.dag_upsample", lo=0):
    checks.check(
      config.model.dag_upsample >= 2
      and config.model.decoder == "nar"
      and not config.model.get("ctc_upsample", 0)
      and not config.model.get("max_length_offset", 0),
      "model.dag_upsample",
      config.model.dag_upsample,
      "a DAG decoder needs k >= 2 vertices per source token (2.5 allowed), model.decoder='nar', no CTC "
      "(model.ctc_upsample=0) and no length head (model.max_length_offset=0)",
    )
  if _has(config, "decode.dag_decoder"):
    checks.check_choice(config, "decode.dag_decoder", ("greedy", "lookahead", "viterbi", "beam"))
  if _has(config, "decode.dag_lm_weight"):
    checks.check_float(config, "decode.dag_lm_weight", lo=0)
  for key, what in (
    ("dag_length_norm", "length normalisation ranks"),
    ("dag_lm_order", "an n-gram model joins"),
  ):
    if _has(config, f"decode.{key}"):
      check = checks.check_float if key == "dag_length_norm" else checks.check_int
      value = check(config, f"decode.{key}", lo=0)
      checks.check(
        value == 0 or config.decode.get("dag_decoder") == "beam",
        f"decode.{key}",
        value,
        f"{what} the DAG's beam search only: set decode.dag_decoder='beam' or decode.{key}=0",
      )
  if _has(config, "decode.dag_beam_grid"):
    grid = checks.get(config, "decode.dag_beam_grid")
    checks.check(isinstance(grid, str), "decode.dag_beam_grid", grid, "must be a string")
    try:
      parsed = evaluate.parse_beam_grid(grid)
    except ValueError as e:
      raise checks.ConfigError(
        "decode.dag_beam_grid", grid, f"must be 'w:b,w:b,...' or '' (none): {e}"
      ) from None
    checks.check(
      not parsed or config.decode.get("dag_decoder") == "beam",
      "decode.dag_beam_grid",
      grid,
      "settings of the DAG's beam search: set decode.dag_decoder='beam' or decode.dag_beam_grid=''",
    )
  if _has(config, "model.ctc_upsample_max"):
    k_max = checks.check_float(config, "model.ctc_upsample_max", lo=0)
    checks.check(
      k_max == 0 or config.model.get("ctc_upsample", 0) >= 1,
      "model.ctc_upsample",
      config.model.get("ctc_upsample", 0),
      f"must be at least 1 with model.ctc_upsample_max={k_max} (a CTC model's per-batch ratio "
      f"starts there); or set model.ctc_upsample_max=0",
    )
    checks.check(
      k_max == 0 or k_max >= config.model.get("ctc_upsample", 0) >= 1,
      "model.ctc_upsample_max",
      k_max,
      "must be 0 (a fixed ratio) or at least model.ctc_upsample (a CTC model's)",
    )
  if _has(config, "train.slot_bucket"):
    checks.check_int(config, "train.slot_bucket", lo=0)
  if _has(config, "decode.blank_penalty"):
    checks.check_float(config, "decode.blank_penalty", lo=0)
  if _has(config, "loss.glancing_ratio"):
    checks.check_float(config, "loss.glancing_ratio", lo=0, hi=1)
  if _has(config, "loss.glancing_ratio_end"):
    checks.check_float(config, "loss.glancing_ratio_end", lo=0, hi=1)
  if _has(config, "loss.glancing_anneal_steps"):
    checks.check_int(config, "loss.glancing_anneal_steps", lo=0)
  if _has(config, warm_start.KEY):
    _check_str(config, warm_start.KEY)
    checks.check(
      not config.get(warm_start.KEY) or config.model.decoder == "nar",
      warm_start.KEY,
      config.get(warm_start.KEY),
      "a warm start from an AR run is for a PaDIR model (model.decoder='nar')",
    )


def glancing_schedule(config: ml_collections.ConfigDict) -> tuple[float, float, int] | None:
  """(start ratio, end ratio, anneal steps) of glancing training, or None when it is off."""
  c = config.loss
  start = c.get("glancing_ratio", 0.0)
  if not start:
    return None
  return start, c.get("glancing_ratio_end", start), c.get("glancing_anneal_steps", 0)


def check_warm_start(config: ml_collections.ConfigDict, vocab_path: str | None = None) -> Any:
  """With config.init_from: warm_start.check against this run's vocabulary (default the
  config's); refuses a mismatched run before anything is written. None without init_from."""
  if not config.get(warm_start.KEY):
    return None
  return warm_start.check(config, vocab_path or vocab.vocabulary_path(config))


# Keys that may change between the legs of one run: stop at step s, rerun with a later s; how
# the layers, the loss and the optimizer run (the same function, the same checkpoints), and the
# number of micro-batches of a step (the same update).
RESUMABLE_KEYS = (
  "train.stop_at_step",
  "train.progress_bar",
  "model.scan_layers",
  "model.remat",
  "loss.logits_chunk",
  "loss.scan_stages",
  "train.grad_accum_steps",
  "train.optimizer_by_shape",
)
# Options added after runs had begun -> the value that computes as before them: a run begun
# before resumes so (gmlm.runs.as_begun), bit for bit the run it was.
ADDED_KEYS = {"model.dropout_draw": "site", "model.dropout_rng": "xla_default"}


def open_run(config: ml_collections.ConfigDict, workdir: str) -> RunDir:
  """Joins the processes of a multi-host run (config.distributed, before any other JAX call),
  then opens the run directory: the config guard, config.json, metrics.jsonl and TensorBoard
  scalars in tb/ (`tensorboard --logdir WORKDIR/tb`), written by process 0 only."""
  mesh_lib.initialize_distributed(config.get("distributed", "auto"))
  for key, value in runs_lib.as_begun(workdir, config, ADDED_KEYS).items():
    logging.info("%s: a run begun before %s resumes as it began (%r)", workdir, key, value)
  return RunDir(
    workdir,
    config,
    tensorboard=True,
    writer=jax.process_index() == 0,
    resumable=RESUMABLE_KEYS,
    added=ADDED_KEYS,
  )


def loss_fn(
  model: model_lib.Transformer,
  batch: dict[str, jax.Array],
  key: jax.Array,
  config: ml_collections.ConfigDict,
  step: jax.Array | None = None,
  slots: int = 0,
) -> tuple[jax.Array, dict[str, jax.Array]]:
  """The training loss; step (training only) drives the glancing ratio's schedule, and without
  it (evaluation) there is no glancing: validation loss measures the plain task. slots (a CTC or
  DAG model; static): the slot positions the batch uses (ctc.batch_slots; 0: all)."""
  c = config.loss
  chunk = c.get("logits_chunk", 0)
  scan_stages = c.get("scan_stages", False)
  if model.cfg.decoder == "ar":
    return losses.ar_loss(model, batch, logits_chunk=chunk)
  schedule = glancing_schedule(config)
  glancing = None
  if schedule is not None and step is not None:
    glancing = losses.glancing_ratio(step, *schedule)
  if model.cfg.dag_upsample:
    return dag.dag_loss(model, batch, glancing=glancing, key=key, num_slots_used=slots or None)
  if model.cfg.ctc_upsample:
    return ctc.ctc_loss(
      model,
      batch,
      num_stages=c.num_stages,
      stage_reduction=c.stage_reduction,
      glancing=glancing,
      key=key,
      num_slots_used=slots or None,
      scan_stages=scan_stages,
    )
  loss, aux = losses.padir_loss(
    model,
    batch,
    key,
    keep_rate=c.keep_rate,
    mask_rate=c.mask_rate,
    num_stages=c.num_stages,
    stage_input=c.stage_input,
    stage_reduction=c.stage_reduction,
    length_weight=c.length_weight,
    glancing=glancing,
    logits_chunk=chunk,
    scan_stages=scan_stages,
  )
  aux.pop("stage_inputs")
  aux.pop("revealed", None)
  return loss, aux


def token_counts(batch: dict[str, jax.Array], model_cfg: model_lib.ModelConfig) -> jax.Array:
  """[R] the denominator of the token loss of each row's own batch, known before the loss runs:
  its non-PAD target tokens (with CTC, those of the rows an alignment can produce). Glancing
  leaves revealed positions out of it, a count known only after its first pass: these counts
  include them (`accumulated_grads`)."""
  targets_RT = batch["targets"]
  tokens_R = (targets_RT != tokenizer_lib.PAD_ID).sum(-1)
  if model_cfg.decoder == "nar" and model_cfg.ctc_upsample:
    slots_R = (ctc.upsample(batch["inputs"], model_cfg.ctc_upsample) != tokenizer_lib.PAD_ID).sum(
      -1
    )
    tokens_R = tokens_R * (ctc.needed_slots(targets_RT) <= slots_R)
  return tokens_R.astype(jax.numpy.float32)


def accumulated_grads(
  model: model_lib.Transformer,
  batch: dict[str, jax.Array],
  key: jax.Array,
  config: ml_collections.ConfigDict,
  step: jax.Array,
  num_micro: int,
  slots: int = 0,
) -> tuple[dict[str, jax.Array], Any]:
  """(metrics, gradient) of the loss over `batch` as num_micro micro-batches run one after the
  other in a jax.lax.scan, the gradients summed: one micro-batch's activations at a time
  (config.train.grad_accum_steps). Micro-batch k holds rows k, k + K, ... (each spread over a
  data mesh axis as the batch is). Each micro-batch's token loss is weighted by its share of the
  batch's tokens and the rest (the length loss: a mean over rows) by 1 / K, so the sum is the
  one-batch loss and its gradient, up to float32 summation (with glancing, whose denominator
  leaves out the revealed tokens, the weights are the shares of the target tokens). Micro-batch
  k draws its noise from fold_in(key, k); the dropout streams run on through the micro-batches."""
  K = num_micro
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  micro = jax.tree.map(
    lambda a: jax.numpy.swapaxes(a.reshape(a.shape[0] // K, K, *a.shape[1:]), 0, 1), batch
  )
  counts_K = jax.vmap(lambda b: token_counts(b, model.cfg).sum())(micro)
  shares_K = counts_K / jax.numpy.maximum(counts_K.sum(), 1.0)

  def micro_loss(params, rest, mb, k):
    # New Variables at this trace level (merge would reuse the scan carry's: not mutable here).
    m = nnx.merge(graphdef, params, jax.tree.map(lambda x: x, rest))
    loss, aux = loss_fn(m, mb, jax.random.fold_in(key, k), config, step, slots)
    weighted = shares_K[k] * aux["token_loss"] + (loss - aux["token_loss"]) / K
    return weighted, (aux, nnx.split(m, nnx.Param, ...)[2])

  grad_fn = jax.value_and_grad(micro_loss, has_aux=True)

  def body(carry, xs):
    grads, rest = carry
    mb, k = xs
    (weighted, (aux, rest)), g = grad_fn(params, rest, mb, k)
    return (jax.tree.map(jax.numpy.add, grads, g), rest), (weighted, aux)

  zeros = jax.tree.map(jax.numpy.zeros_like, params)
  (grads, rest), (weighted_K, aux_K) = jax.lax.scan(
    body, (zeros, rest), (micro, jax.numpy.arange(K))
  )
  nnx.update(model, rest)
  metrics = {k: v.mean(0) for k, v in aux_K.items()}
  metrics["token_loss"] = (shares_K * aux_K["token_loss"]).sum()
  metrics["token_count"] = aux_K["token_count"].sum()
  return {"loss": weighted_K.sum(), **metrics}, grads


def slot_count(config: ml_collections.ConfigDict, batch: dict[str, np.ndarray]) -> int:
  """A CTC or DAG model's slot (vertex) positions for this host batch (ctc.batch_slots, rounded
  up to a multiple of config.train.slot_bucket): the decoder runs over these only, which is
  exact (every position past them is PAD in every row). 0 (all positions) for other models,
  with the bucket 0, and with several processes (each holds part of the batch; the program
  must be the same on all)."""
  m, bucket = config.model, config.train.get("slot_bucket", 16)
  if not bucket or jax.process_count() > 1:
    return 0
  if m.get("ctc_upsample", 0):
    k, k_max = m.ctc_upsample, m.get("ctc_upsample_max", 0)
  elif m.get("dag_upsample", 0):
    k, k_max = m.dag_upsample, 0
  else:
    return 0
  return ctc.batch_slots(batch["inputs"], batch["targets"], k, k_max, bucket)


def make_steps(config: ml_collections.ConfigDict, state_shardings: Any = None):
  """Jitted train and eval steps; keys derive from (seed, step) only. With state_shardings (of
  nnx.state((model, optimizer))), the updated state keeps those shardings. With
  config.train.grad_accum_steps = K > 1 the train step runs K micro-batches
  (`accumulated_grads`) before its one update. train_step's static `slots`: a CTC or DAG
  batch's slot positions (`slot_count`; 0: all)."""
  num_micro = config.train.get("grad_accum_steps", 1)

  @functools.partial(nnx.jit, static_argnames="slots")
  def train_step(model, optimizer, batch, key, dropout_key, step=0, slots=0):
    layer_stack.reseed_dropout(model, dropout_key)
    if num_micro > 1:
      aux, grads = accumulated_grads(model, batch, key, config, step, num_micro, slots)
      loss = aux.pop("loss")
    else:
      (loss, aux), grads = nnx.value_and_grad(
        lambda m: loss_fn(m, batch, key, config, step, slots), has_aux=True
      )(model)
    aux.pop("token_count", None)
    optimizer.update(model, grads)
    if state_shardings is not None:
      nnx.update(
        (model, optimizer),
        jax.lax.with_sharding_constraint(nnx.state((model, optimizer)), state_shardings),
      )
    return {"loss": loss, **aux, "grad_norm": optax.tree.norm(grads)}

  @nnx.jit
  def eval_step(model, batch, key):
    loss, aux = loss_fn(model, batch, key, config)
    aux.pop("token_count", None)
    return {"loss": loss, **aux}

  return train_step, eval_step


def check_data(
  config: ml_collections.ConfigDict,
  rd: RunDir,
  report: data.FilterReport,
  valid_source: Any,
  tok: tokenizer_lib.Tokenizer,
) -> None:
  """Before the first step: says (WARNING, data.json, report.md) how many training pairs are
  dropped as too long, and refuses a valid split with fewer pairs within the maximum lengths
  than one batch (evaluation would fail at its first batch)."""
  d, batch_size = config.data, config.train.batch_size
  limits = (
    f"max_source_length={d.max_source_length} / max_target_length={d.max_target_length} tokens"
  )
  counts = {
    "total": report.total,
    "kept": report.kept,
    "too_long": report.too_long,
    "max_source_length": d.max_source_length,
    "max_target_length": d.max_target_length,
  }
  rd.write_json(curves.DATA_REPORT, {"train": counts})
  if report.too_long:
    logging.warning(
      "train: %s (EOS included); raise the limits to keep them", curves.dropped_line(counts)
    )
  _, valid = data.filter_by_length(valid_source, tok, d.max_source_length, d.max_target_length)
  if valid.kept < batch_size:
    raise data.CorpusError(
      f"the valid split of {d.corpus_dir} has {valid.kept} pairs within {limits} ({valid.total}"
      f" in all), fewer than train.batch_size={batch_size}: evaluation needs one full batch; "
      "add validation pairs, raise the maximum lengths or lower train.batch_size"
    )


def process_zero_first(make: Callable[[], Any], name: str) -> Any:
  """make() on process 0, then, once it has returned, on the other processes: files that make()
  writes when they are missing (corpus, vocabulary, tfds cache) are written by one process and
  read by the others, never raced. If it raises on process 0, every process raises. One
  process: make()."""
  if jax.process_count() == 1:
    return make()
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top

  out, error = None, None
  if jax.process_index() == 0:
    try:
      out = make()
    except Exception as e:  # pylint: disable=broad-except (re-raised below, after the others know)
      error = e
  failed = multihost_utils.broadcast_one_to_all(np.int32(error is not None))  # also a barrier
  if error is not None:
    raise error
  if failed:
    raise RuntimeError(f"{name} failed on process 0; its error says why")
  return out if jax.process_index() == 0 else make()


def prepare_data(config: ml_collections.ConfigDict) -> tuple[tokenizer_lib.Tokenizer, dict]:
  """The vocabulary and the train / valid data sources, each made first if it is missing (the
  Bible corpus with data.prepare_bible, the vocabulary with data.train_vocab, the tfds cache)."""
  d = config.data
  if d.get("prepare_bible"):
    bible.prepare_if_missing(d.corpus_dir, d.source_lang, d.target_lang)
  if d.get("grammar_task"):
    grammar.prepare_if_missing(
      d.corpus_dir, d.grammar_task, d.get("grammar_seed", 0), d.get("grammar_pairs", 60_000)
    )
  tok = vocab.prepare_vocabulary(config)
  from padir.data import tfds_corpus  # pylint: disable=g-import-not-at-top (loads tfds: here only)

  sources = tfds_corpus.local_data_sources(
    d.corpus_dir,
    d.source_lang,
    d.target_lang,
    data_dir=d.tfds_data_dir or None,
    splits=("train", "valid"),
  )
  return tok, sources


def fit(config: ml_collections.ConfigDict, rd: RunDir) -> dict[str, Any]:
  """Trains (or resumes) in rd (opened with `open_run`); returns the last logged metrics."""
  clock = throughput.RunClock()  # the run's wall and CPU seconds in every record, over its legs
  multi_process = jax.process_count() > 1
  if multi_process and config.decode.num_examples > 0:
    raise NotImplementedError(
      "translation during multi-process training is not implemented: "
      "set config.decode.num_examples=0 and translate afterwards"
    )
  mesh = sharding_lib.mesh_of(config)
  if multi_process and mesh is None:
    raise ValueError("multi-process training needs config.mesh (e.g. data=-1, model=1)")

  # Data: each process reads its rows of every global batch.
  d = config.data
  if config.train.batch_size % jax.process_count():
    raise ValueError(
      f"batch_size={config.train.batch_size} does not split over {jax.process_count()} processes"
    )
  tok, sources = process_zero_first(lambda: prepare_data(config), "padir_prepare_data")
  train_ds, report = data.make_dataset(
    sources["train"],
    tok,
    batch_size=config.train.batch_size // jax.process_count(),
    max_source_length=d.max_source_length,
    max_target_length=d.max_target_length,
    seed=config.seed,
    num_epochs=None,
    name="train",
    bucket_boundaries=tuple(d.get("bucket_boundaries", ())),
    shard_index=jax.process_index(),
    shard_count=jax.process_count(),
  )
  check_data(config, rd, report, sources["valid"], tok)
  train_iter = iter(train_ds)

  # Model and optimizer, created in place on the mesh if there is one.
  cfg = model_lib.ModelConfig.from_run_config(config, tok.vocab_size)

  def make_model_and_optimizer():
    model = model_lib.Transformer(
      cfg, rngs=nnx.Rngs(params=config.seed, dropout=jax.random.key(config.seed, impl="rbg"))
    )
    return model, nnx.Optimizer(model, optim.make_optimizer(config.train), wrt=nnx.Param)

  if mesh is None:
    model, optimizer = make_model_and_optimizer()
    state_shardings, place = None, lambda batch: batch
  else:
    (model, optimizer), state_shardings = sharding_lib.create_sharded(
      make_model_and_optimizer, mesh, config.mesh.get("params", "logical")
    )
    batch_sharding = sharding_lib.batch_sharding(mesh)
    place = lambda batch: sharding_lib.put_batch(batch, batch_sharding)
    logging.info(
      "mesh %s, parameters sharded by the %r rule",
      dict(mesh.shape),
      config.mesh.get("params", "logical"),
    )
  logging.info("model: %s, %d parameters", cfg, model_lib.count_params(model))
  train_step, eval_step = make_steps(config, state_shardings)
  meter = throughput.StepMeter(config, cfg)  # step seconds, tokens/s, FLOPs and MFU in the log

  # Checkpoints: restore the latest if there is one.
  t = config.train
  ckpt = Checkpoints(
    rd.file(restore.CHECKPOINTS),
    max_to_keep=t.keep_checkpoints,
    save_interval_steps=t.checkpoint_every,
  )
  # Checkpoints hold the layers per layer in both storage layouts (padir.model.layer_stack):
  # a run resumes in either layout.
  stored = lambda: layer_stack.unstack_layers(
    {"params": nnx.state(model, nnx.Param), "optimizer": nnx.state(optimizer)}
  )
  latest = ckpt.restore_latest({**stored(), "data": Json()})
  step = latest[0] if latest is not None else 0
  if not step and config.get(warm_start.KEY):
    record = warm_start.apply(model, check_warm_start(config, vocab.vocabulary_path(config)))
    rd.write_json(warm_start.RECORD, record)
    logging.info(
      "warm start from %s step %d: %d parameters copied, %d fresh",
      record["run"],
      record["step"],
      len(record["copied"]),
      len(record["fresh"]),
    )
  if step:
    restored = latest[1]
    if model.cfg.scanned:
      restored.update(layer_stack.stack_layers({k: restored[k] for k in ("params", "optimizer")}))
    nnx.update(model, restored["params"])
    nnx.update(optimizer, restored["optimizer"])
    train_iter.set_state(restored["data"])
    logging.info("resumed from step %d", step)
  # Also with no checkpoint (step 0): a run killed before its first one logged lines already.
  clock.resume(rd.metrics(), step)
  dropped = rd.truncate_metrics(step)
  if dropped:
    logging.info("metrics.jsonl: dropped %d records past step %d", dropped, step)

  def save(step: int) -> None:
    ckpt.save(
      step,
      {**stored(), "data": Json(train_iter.get_state())},
      force=True,
      wait=False,
    )

  base_key = jax.random.key(config.seed)  # noising and stage sampling
  # Dropout masks from XLA's RngBitGenerator seeded by this rbg key's data (model.dropout_rng
  # picks the op's algorithm); JAX's own threefry masks cost ~25% of a CPU training step.
  dropout_key = jax.random.key(config.seed, impl="rbg")
  schedule = optim.learning_rate_schedule(t)
  last: dict[str, Any] = {}
  sums, n_sum, t_start, t_aside = {}, 0, time.time(), 0.0
  stop_at = min(t.get("stop_at_step") or t.num_train_steps, t.num_train_steps)
  patience = t.get("early_stopping_patience", 0)
  bleus = early_stopping.history(rd.metrics()) if patience else []  # resumed: the logged ones
  valid_lm = functools.cache(lambda: evaluate.validation_lm(config, tok))  # fitted once a run
  stopped = early_stopping.state(bleus, patience).stop
  with tqdm.tqdm(
    total=t.num_train_steps,
    initial=step,
    desc="padir",
    unit="step",
    disable=not t.progress_bar or jax.process_index() != 0,
  ) as bar:
    while step < stop_at and not stopped:
      host_batch = next(train_iter)
      slots = slot_count(config, host_batch)
      meter.add(host_batch, slots)
      batch = place(host_batch)
      model.train()
      metrics = train_step(
        model,
        optimizer,
        batch,
        jax.random.fold_in(base_key, step),
        jax.random.fold_in(dropout_key, step),
        np.int32(step),
        slots=slots,
      )
      step += 1
      bar.update(1)
      for k, v in metrics.items():
        sums[k] = sums.get(k, 0.0) + v
      n_sum += 1
      if step % t.log_every == 0 or step == stop_at:
        record = {
          **{f"train_{k}": float(v) / n_sum for k, v in sums.items()},
          "learning_rate": float(schedule(step - 1)),
          "steps_per_second": n_sum / (time.time() - t_start),  # wall clock, evaluations in
          **meter.window(time.time() - t_start - t_aside),  # the training steps alone
          **clock.now(),
        }
        if not np.isfinite(record["train_loss"]):
          raise FloatingPointError(f"non-finite training loss at step {step}: {record}")
        bar.set_postfix(loss=f"{record['train_loss']:.3f}")
        rd.log_metrics(step, record)
        last.update(step=step, **record)
        sums, n_sum, t_start, t_aside = {}, 0, time.time(), 0.0
      t_eval = time.time()
      if step % t.eval_every == 0 or step == t.num_train_steps:
        model.eval()
        record = evaluate.validation_loss(eval_step, model, sources["valid"], tok, config, place)
        if config.decode.num_examples > 0:
          record.update(
            evaluate.validation_translation(model, sources["valid"], tok, config, valid_lm())
          )
        if patience:
          bleus.append(record[early_stopping.METRIC])
          es = early_stopping.state(bleus, patience)
          record.update(early_stopping_wait=es.wait, early_stopped=es.stop)
          stopped = es.stop
        record.update(clock.now())
        rd.log_metrics(step, record)
        last.update(step=step, **record)
      if step % t.checkpoint_every == 0 or step == stop_at or stopped:
        save(step)
      t_aside += time.time() - t_eval  # validation and checkpoints: not in step_seconds or MFU
  ckpt.close()
  if rd.writer:
    try:  # the figure and report are a convenience: a failure must not fail a finished run
      curves.write_report(rd)
    except Exception as e:  # pylint: disable=broad-except
      logging.warning("could not write %s/report.md and curves.png: %s", rd.path, e)
  return last
