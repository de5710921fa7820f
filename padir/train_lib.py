"""Training loop: `train(config, workdir)` for PaDIR (NAR) and the AR baseline.

Reads a step top to bottom: corpus -> vocabulary -> tfds/grain batches -> model + AdaFactor ->
jitted step -> metrics.jsonl, evaluation (loss, SacreBLEU, stutter), orbax checkpoints.
Preemption-safe: a restarted run restores the last checkpoint (parameters, optimizer state, the
grain iterator position) and continues; the noise and dropout keys are fold_in(key(seed), step),
so a resumed run computes the same steps as an uninterrupted one.

Scaling out (both off by default): `config.mesh` places the model, the optimizer state and the
batches on a ("data", "model") device mesh (padir.sharding: logical axis rules or FSDP); the same
code runs on one device. `config.distributed` starts multi-host JAX (`jax.distributed.initialize`,
see `maybe_initialize_distributed`); each process then reads its rows of every global batch.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

import jax
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp
import tensorboardX
import tqdm
from flax import nnx

from padir import bible
from padir import curves
from padir import data
from padir import evaluate
from padir import losses
from padir import model as model_lib
from padir import sharding as sharding_lib
from padir import tokenizer as tokenizer_lib


def maybe_initialize_distributed(config: ml_collections.ConfigDict) -> bool:
  """Calls jax.distributed.initialize() once, before any other JAX call, when
  config.distributed is "on", or "auto" (the default) and the environment describes several
  processes (JAX_COORDINATOR_ADDRESS, or SLURM / Open MPI with more than one task). With no
  arguments, JAX reads the coordinator, process count and id from the cluster environment
  (SLURM, Open MPI, Cloud TPU, GKE); outside those set JAX_COORDINATOR_ADDRESS,
  JAX_NUM_PROCESSES and JAX_PROCESS_ID. Every process runs the same `train.py` command.
  Returns whether JAX is multi-process now.
  """
  mode = config.get("distributed", "auto")
  if mode not in ("auto", "on", "off"):
    raise ValueError(f"config.distributed must be 'auto', 'on' or 'off', got {mode!r}")
  env = os.environ
  several = ("JAX_COORDINATOR_ADDRESS" in env or int(env.get("SLURM_NTASKS", "1")) > 1
             or int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1)
  if (mode == "on" or (mode == "auto" and several)) and not jax.distributed.is_initialized():
    jax.distributed.initialize()
    logging.info("process %d of %d, %d local of %d devices", jax.process_index(),
                 jax.process_count(), jax.local_device_count(), jax.device_count())
  return jax.process_count() > 1


def make_mesh(config: ml_collections.ConfigDict) -> jax.sharding.Mesh | None:
  """config.mesh -> the ("data", "model") mesh over all devices; None (one device, no mesh)
  without config.mesh or with mesh.data = 0."""
  m = config.get("mesh")
  if not m or not m.get("data", -1):
    return None
  return sharding_lib.make_mesh(m.get("data", -1), m.get("model", 1))


def learning_rate_schedule(cfg: ml_collections.ConfigDict) -> optax.Schedule:
  """Linear warm-up from min_lr to peak_lr, then cosine decay back to min_lr (paper App. L.2)."""
  return optax.warmup_cosine_decay_schedule(
      init_value=cfg.min_lr, peak_value=cfg.peak_lr, warmup_steps=cfg.warmup_steps,
      decay_steps=max(cfg.num_train_steps, cfg.warmup_steps + 1), end_value=cfg.min_lr)


def make_optimizer(cfg: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """AdaFactor with T5X-like defaults (factored second moments, decay 0.8, update clipping 1.0)."""
  return optax.adafactor(learning_rate=learning_rate_schedule(cfg), decay_rate=0.8,
                         clipping_threshold=1.0, multiply_by_parameter_scale=True)


def vocabulary_path(config: ml_collections.ConfigDict) -> str:
  d = config.data
  return d.vocab_path or os.path.join(d.corpus_dir, f"spm{d.vocab_size}.model")


def prepare_vocabulary(config: ml_collections.ConfigDict) -> tokenizer_lib.Tokenizer:
  d = config.data
  path = vocabulary_path(config)
  if not os.path.isfile(path) and d.train_vocab:
    logging.info("training a %d-piece SentencePiece vocabulary on %s", d.vocab_size, d.corpus_dir)
    pairs = data.read_split(d.corpus_dir, "train", d.source_lang, d.target_lang)
    tokenizer_lib.train_tokenizer((s for pair in pairs for s in pair), path, d.vocab_size)
  return tokenizer_lib.Tokenizer(path)


def prepare_corpus(config: ml_collections.ConfigDict) -> None:
  d = config.data
  if d.get("prepare_bible") and not os.path.isfile(os.path.join(d.corpus_dir, "train.tsv")):
    logging.info("preparing the KJV / Reina-Valera corpus in %s", d.corpus_dir)
    bible.prepare(d.corpus_dir)


def model_config(config: ml_collections.ConfigDict, vocab_size: int) -> model_lib.ModelConfig:
  return model_lib.ModelConfig.from_dict({
      **config.model.to_dict(), "vocab_size": vocab_size,
      "max_source_length": config.data.max_source_length,
      "max_target_length": config.data.max_target_length})


Loaded = tuple[model_lib.Transformer, tokenizer_lib.Tokenizer, ml_collections.ConfigDict]


def load_model(workdir: str, step: int | None = None) -> Loaded:
  """The trained model of a run directory (its config.json, vocabulary and the parameters of
  checkpoint `step`, default the latest), in eval mode, on the default device."""
  config_path = os.path.join(workdir, "config.json")
  checkpoints = os.path.abspath(os.path.join(workdir, "checkpoints"))
  if not os.path.isfile(config_path):
    raise FileNotFoundError(f"{config_path} does not exist: {workdir!r} is not a training run "
                            f"directory (train.py writes config.json and checkpoints/ there)")
  with open(config_path, encoding="utf-8") as f:
    config = ml_collections.ConfigDict(json.load(f))
  manager = ocp.CheckpointManager(checkpoints) if os.path.isdir(checkpoints) else None
  steps = manager.all_steps() if manager else []
  if not steps or (step is not None and step not in steps):
    raise FileNotFoundError(
        f"no checkpoint {'at step %d ' % step if step is not None else ''}in {checkpoints} "
        f"(found steps {sorted(steps)}): train the model first, or resume its run")
  step = max(steps) if step is None else step
  tok = tokenizer_lib.Tokenizer(vocabulary_path(config))
  model = model_lib.Transformer(model_config(config, tok.vocab_size), rngs=nnx.Rngs(0))
  restored = manager.restore(step, args=ocp.args.Composite(
      params=ocp.args.StandardRestore(nnx.state(model, nnx.Param))))
  manager.close()
  nnx.update(model, restored["params"])
  model.eval()
  return model, tok, config


def loss_fn(model: model_lib.Transformer, batch: dict[str, jax.Array], key: jax.Array,
            config: ml_collections.ConfigDict) -> tuple[jax.Array, dict[str, jax.Array]]:
  if model.cfg.decoder == "ar":
    return losses.ar_loss(model, batch)
  c = config.loss
  loss, aux = losses.padir_loss(model, batch, key, keep_rate=c.keep_rate, mask_rate=c.mask_rate,
                                num_stages=c.num_stages, stage_input=c.stage_input,
                                stage_reduction=c.stage_reduction, length_weight=c.length_weight)
  aux.pop("stage_inputs")
  return loss, aux


def make_steps(config: ml_collections.ConfigDict, state_shardings: Any = None):
  """Jitted train and eval steps; keys derive from (seed, step) only. With state_shardings (of
  nnx.state((model, optimizer))), the updated state keeps those shardings."""

  @nnx.jit
  def train_step(model, optimizer, batch, key, dropout_key):
    nnx.reseed(model, dropout=dropout_key)
    (loss, aux), grads = nnx.value_and_grad(
        lambda m: loss_fn(m, batch, key, config), has_aux=True)(model)
    optimizer.update(model, grads)
    if state_shardings is not None:
      nnx.update((model, optimizer), jax.lax.with_sharding_constraint(
          nnx.state((model, optimizer)), state_shardings))
    return {"loss": loss, **aux, "grad_norm": optax.tree.norm(grads)}

  @nnx.jit
  def eval_step(model, batch, key):
    loss, aux = loss_fn(model, batch, key, config)
    return {"loss": loss, **aux}

  return train_step, eval_step


def _write_metrics(path: str, record: dict[str, Any], tb_writer=None) -> None:
  """Appends the record to metrics.jsonl and its numbers to the TensorBoard event file."""
  if jax.process_index() != 0:
    return
  record = {k: (float(v) if isinstance(v, (jax.Array, np.generic)) else v)
            for k, v in record.items()}
  with open(path, "a", encoding="utf-8") as f:
    f.write(json.dumps(record) + "\n")
  if tb_writer is not None:
    for k, v in record.items():
      if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
        tb_writer.add_scalar(k, v, record["step"])
    tb_writer.flush()


def _truncate_metrics(path: str, step: int) -> None:
  """Drops records past `step` (written after the checkpoint a resumed run restarts from), so
  metrics.jsonl holds one curve however often the run was killed; the file is replaced whole."""
  if not os.path.exists(path):
    return
  with open(path, encoding="utf-8") as f:
    lines = f.readlines()
  keep = [l for l in lines if l.strip() and json.loads(l).get("step", 0) <= step]
  if len(keep) == len(lines):
    return
  tmp = path + ".tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    f.writelines(keep)
  os.replace(tmp, path)
  logging.info("metrics.jsonl: dropped %d records past step %d", len(lines) - len(keep), step)


def evaluate_loss(eval_step, model, source, tok, config, place=lambda batch: batch
                  ) -> dict[str, float]:
  d = config.data
  ds, _ = data.make_dataset(source, tok, batch_size=config.train.batch_size // jax.process_count(),
                            max_source_length=d.max_source_length,
                            max_target_length=d.max_target_length, shuffle=False,
                            drop_remainder=True, name="valid", shard_index=jax.process_index(),
                            shard_count=jax.process_count())
  sums, n = {}, 0
  for i, batch in enumerate(ds):
    if i >= config.train.eval_batches:
      break
    metrics = eval_step(model, place(batch), jax.random.fold_in(jax.random.key(config.seed), i))
    for k, v in metrics.items():
      sums[k] = sums.get(k, 0.0) + float(v)
    n += 1
  if n == 0:
    raise data.CorpusError(f"the valid split has fewer than batch_size={config.train.batch_size} "
                           f"pairs within the maximum lengths: nothing to evaluate")
  return {f"valid_{k}": v / n for k, v in sums.items()}


def evaluate_translation(model, source, tok, config) -> dict[str, Any]:
  c, n = config.decode, config.decode.num_examples
  records = [source[i] for i in range(min(n, len(source)))]
  sources = [r["source"].decode() for r in records]
  references = [r["target"].decode() for r in records]
  hypotheses = evaluate.translate(model, tok, sources, jax.random.key(config.seed),
                                  batch_size=c.batch_size, num_steps=c.num_steps,
                                  num_lengths=c.num_lengths, remask_stutter=c.remask_stutter,
                                  beam_size=c.get("beam_size", 1),
                                  length_penalty=c.get("length_penalty", 0.6))
  score, signature = evaluate.bleu(hypotheses, references, config.data.target_lang)
  return {"valid_bleu": score, "bleu_signature": signature,
          "valid_stutter": evaluate.stutter_rate(hypotheses, references),
          "example": {"source": sources[0], "reference": references[0],
                      "hypothesis": hypotheses[0]}}


def train(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  """Trains (or resumes) in workdir; returns the last logged metrics."""
  multi_process = maybe_initialize_distributed(config)  # before any other JAX call
  if multi_process and config.decode.num_examples > 0:
    raise NotImplementedError("translation during multi-process training is not implemented: "
                              "set config.decode.num_examples=0 and translate afterwards")
  mesh = make_mesh(config)
  if multi_process and mesh is None:
    raise ValueError("multi-process training needs config.mesh (e.g. data=-1, model=1)")
  os.makedirs(workdir, exist_ok=True)
  if jax.process_index() == 0:
    with open(os.path.join(workdir, "config.json"), "w", encoding="utf-8") as f:
      f.write(config.to_json_best_effort(indent=2))
  metrics_path = os.path.join(workdir, "metrics.jsonl")
  # TensorBoard event files (tensorboardX, no TensorFlow): `tensorboard --logdir WORKDIR/tb`.
  tb_writer = (tensorboardX.SummaryWriter(os.path.join(workdir, "tb"))
               if jax.process_index() == 0 else None)

  # Data: each process reads its rows of every global batch.
  prepare_corpus(config)
  tok = prepare_vocabulary(config)
  d = config.data
  if config.train.batch_size % jax.process_count():
    raise ValueError(f"batch_size={config.train.batch_size} does not split over "
                     f"{jax.process_count()} processes")
  sources = data.local_data_sources(d.corpus_dir, d.source_lang, d.target_lang,
                                    data_dir=d.tfds_data_dir or None, splits=("train", "valid"))
  train_ds, report = data.make_dataset(
      sources["train"], tok, batch_size=config.train.batch_size // jax.process_count(),
      max_source_length=d.max_source_length, max_target_length=d.max_target_length,
      seed=config.seed, num_epochs=None, name="train",
      bucket_boundaries=tuple(d.get("bucket_boundaries", ())),
      shard_index=jax.process_index(), shard_count=jax.process_count())
  logging.info("train: kept %d of %d pairs (%d longer than the maximum lengths dropped)",
               report.kept, report.total, report.too_long)
  train_iter = iter(train_ds)

  # Model and optimizer, created in place on the mesh if there is one.
  cfg = model_config(config, tok.vocab_size)

  def make_model_and_optimizer():
    model = model_lib.Transformer(
        cfg, rngs=nnx.Rngs(params=config.seed, dropout=jax.random.key(config.seed, impl="rbg")))
    return model, nnx.Optimizer(model, make_optimizer(config.train), wrt=nnx.Param)

  if mesh is None:
    model, optimizer = make_model_and_optimizer()
    state_shardings, place = None, lambda batch: batch
  else:
    (model, optimizer), state_shardings = sharding_lib.create_sharded(
        make_model_and_optimizer, mesh, config.mesh.get("params", "logical"))
    batch_sharding = sharding_lib.batch_sharding(mesh)
    place = lambda batch: sharding_lib.put_batch(batch, batch_sharding)
    logging.info("mesh %s, parameters sharded by the %r rule", dict(mesh.shape),
                 config.mesh.get("params", "logical"))
  logging.info("model: %s, %d parameters", cfg, model_lib.count_params(model))
  train_step, eval_step = make_steps(config, state_shardings)

  # Checkpoints: restore the latest if there is one.
  t = config.train
  manager = ocp.CheckpointManager(
      os.path.abspath(os.path.join(workdir, "checkpoints")),
      options=ocp.CheckpointManagerOptions(max_to_keep=t.keep_checkpoints,
                                           save_interval_steps=t.checkpoint_every, create=True))
  step = 0
  if manager.latest_step() is not None:
    step = manager.latest_step()
    restored = manager.restore(step, args=ocp.args.Composite(
        params=ocp.args.StandardRestore(nnx.state(model, nnx.Param)),
        optimizer=ocp.args.StandardRestore(nnx.state(optimizer)),
        data=ocp.args.JsonRestore()))
    nnx.update(model, restored["params"])
    nnx.update(optimizer, restored["optimizer"])
    train_iter.set_state(restored["data"])
    logging.info("resumed from step %d", step)
    if jax.process_index() == 0:
      _truncate_metrics(metrics_path, step)

  def save(step: int, force: bool = False) -> None:
    manager.save(step, force=force, args=ocp.args.Composite(
        params=ocp.args.StandardSave(nnx.state(model, nnx.Param)),
        optimizer=ocp.args.StandardSave(nnx.state(optimizer)),
        data=ocp.args.JsonSave(train_iter.get_state())))

  base_key = jax.random.key(config.seed)  # noising and stage sampling
  # Dropout masks from XLA's RngBitGenerator: threefry masks cost ~25% of a CPU training step.
  dropout_key = jax.random.key(config.seed, impl="rbg")
  last: dict[str, Any] = {}
  sums, n_sum, t_start = {}, 0, time.time()
  stop_at = min(t.get("stop_at_step") or t.num_train_steps, t.num_train_steps)
  with tqdm.tqdm(total=t.num_train_steps, initial=step, desc="padir", unit="step",
                 disable=not t.progress_bar or jax.process_index() != 0) as bar:
    while step < stop_at:
      batch = place(next(train_iter))
      model.train()
      metrics = train_step(model, optimizer, batch, jax.random.fold_in(base_key, step),
                           jax.random.fold_in(dropout_key, step))
      step += 1
      bar.update(1)
      for k, v in metrics.items():
        sums[k] = sums.get(k, 0.0) + v
      n_sum += 1
      if step % t.log_every == 0 or step == stop_at:
        record = {"step": step, **{f"train_{k}": float(v) / n_sum for k, v in sums.items()},
                  "learning_rate": float(learning_rate_schedule(t)(step - 1)),
                  "steps_per_second": n_sum / (time.time() - t_start)}
        if not np.isfinite(record["train_loss"]):
          raise FloatingPointError(f"non-finite training loss at step {step}: {record}")
        bar.set_postfix(loss=f"{record['train_loss']:.3f}")
        _write_metrics(metrics_path, record, tb_writer)
        last.update(record)
        sums, n_sum, t_start = {}, 0, time.time()
      if step % t.eval_every == 0 or step == t.num_train_steps:
        model.eval()
        record = {"step": step,
                  **evaluate_loss(eval_step, model, sources["valid"], tok, config, place)}
        if config.decode.num_examples > 0:
          record.update(evaluate_translation(model, sources["valid"], tok, config))
        _write_metrics(metrics_path, record, tb_writer)
        last.update(record)
      if step % t.checkpoint_every == 0 or step == stop_at:
        save(step, force=True)
  manager.wait_until_finished()
  manager.close()
  if tb_writer is not None:
    tb_writer.close()
  if jax.process_index() == 0:
    try:  # the figure and report are a convenience: a failure must not fail a finished run
      curves.write_report(workdir)
    except Exception as e:  # pylint: disable=broad-except
      logging.warning("could not write %s/report.md and curves.png: %s", workdir, e)
  return last
