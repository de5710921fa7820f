"""`python train.py --config configs/mlm_minilm.py --workdir DIR`: MLM fine-tuning (LoRA or full).

k-pseudolikelihood training of config.model (`glauber.mlm.training`). Writes to the run
directory: config.json, metrics.jsonl (loss and accuracy every log_every steps, validation
every eval_every), checkpoints/ (a killed run restarts from its newest intact checkpoint; the
metrics past it are dropped), model/ (config.json + model.safetensors + tokenizer, loadable by
`gmlm.nn.load` and by transformers), delta/ (LoRA runs), report.md and results.json. A rerun
of a finished run returns its stored results.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from glauber.jobs import finished
from glauber.mlm import training
from glauber.oracle import validate_model
from gmlm import checks
from gmlm.checkpoints import Checkpoints
from gmlm.nn import bert, export
from gmlm.runs import RunDir

ENTRY_POINT = "train.py"

EVAL_KEY = 12345  # validation masks: the same for every evaluation and every run


def validate(config) -> None:
  """Checks every key the job reads; loads nothing and writes nothing."""
  validate_model(config)
  for key in ("k", "seq_len", "batch_size", "num_steps", "log_every", "checkpoint_every"):
    checks.check_int(config, key, lo=1)
  checks.check_int(config, "warmup_steps", lo=0)
  checks.check_int(config, "seed", lo=0)
  checks.check_float(config, "learning_rate", lo=0, lo_open=True)
  checks.check_float(config, "weight_decay", lo=0)
  checks.check_float(config, "grad_clip", lo=0, lo_open=True)
  for key in ("eval_every", "lora_rank"):  # optional: 0 = off
    if key in config:
      checks.check_int(config, key, lo=0)
  if "lora_alpha" in config:
    checks.check_float(config, "lora_alpha", lo=0)  # 0 = the rank
  if checks.get(config, "data.path") != "english":
    checks.check_file(config, "data.path")
  else:
    from glauber.mlm import english
    from glauber.stages import Need, require

    require(
      [Need(english.GENSIM_WHEEL, english.data_dir, "the English text", "--config.data.path=FILE")]
    )
  checks.check_int(config, "data.min_chars", lo=0)
  checks.check_int(config, "data.max_lines", lo=0)
  checks.check_float(config, "data.eval_fraction", lo=0, hi=1, lo_open=True, hi_open=True)


def run(config, workdir: str) -> dict[str, float]:
  validate(config)
  if (stored := finished(config, workdir)) is not None:
    return stored
  model, tokenizer = training.load_for_training(config)
  rd = RunDir(workdir, config)
  special_ids = jnp.asarray(sorted(set(tokenizer.all_special_ids)), jnp.int32)
  mask_id = int(tokenizer.mask_token_id)

  train_lines, eval_lines = training.training_texts(config, tokenizer)
  train_tokens, train_mask = training.tokenize(tokenizer, train_lines, config.seq_len)
  eval_tokens, eval_mask = training.tokenize(tokenizer, eval_lines, config.seq_len)

  def evaluate():
    return training.evaluate(
      model,
      eval_tokens,
      eval_mask,
      jax.random.key(EVAL_KEY),
      1,
      mask_id,
      special_ids,
      config.batch_size,
    )

  wrt = training.trainable(config)
  optimizer = nnx.Optimizer(model, training.make_optimizer(config), wrt=wrt)
  ckpt = Checkpoints(
    rd.file("checkpoints"), max_to_keep=2, save_interval_steps=config.checkpoint_every
  )
  state = lambda: {
    "model": nnx.state(model, nnx.Any(nnx.Param, bert.LoRA)),
    "opt": nnx.state(optimizer),
  }
  latest = ckpt.restore_latest(state())  # the newest intact checkpoint of a killed run
  start = latest[0] if latest is not None else 0
  if start:
    restored = latest[1]
    nnx.update(model, restored["model"])
    nnx.update(optimizer, restored["opt"])
  rd.truncate_metrics(start)  # the records a killed run wrote past its checkpoint

  key = jax.random.key(config.seed)
  rng = np.random.default_rng(config.seed)
  epochs = config.num_steps * config.batch_size // len(train_tokens) + 1
  order = np.concatenate([rng.permutation(len(train_tokens)) for _ in range(epochs)])
  t0 = time.time()
  from tqdm import tqdm

  bar = tqdm(
    range(start, config.num_steps),
    initial=start,
    total=config.num_steps,
    desc="MLM training",
    unit="step",
    smoothing=0.05,
  )
  eval_every = config.get("eval_every", 0)
  for step in bar:
    idx = order[step * config.batch_size : (step + 1) * config.batch_size]
    loss, aux = training.train_step(
      model,
      optimizer,
      train_tokens[idx],
      train_mask[idx],
      jax.random.fold_in(key, step),
      config.k,
      mask_id,
      special_ids,
      wrt,
    )
    if (step + 1) % config.log_every == 0 or step + 1 == config.num_steps:
      row = {"loss": float(loss), "accuracy": float(aux["accuracy"]), "seconds": time.time() - t0}
      if eval_every and (step + 1) % eval_every == 0:
        row.update(evaluate())
        bar.set_postfix(loss=f"{row['loss']:.2f}", val_acc=f"{row['eval_accuracy']:.3f}")
      rd.log_metrics(step + 1, row)
    if (step + 1) % config.checkpoint_every == 0:
      ckpt.save(step + 1, state())
  ckpt.close()

  results = evaluate()
  results.update(steps=config.num_steps, k=config.k, train_seconds=time.time() - t0)
  lora = ""
  if config.get("lora_rank", 0):
    from gmlm.nn import delta

    delta.save_delta(model, rd.file("delta"), base=config.model, trainable=wrt)
    model.merge_lora()
    lora = (
      f"LoRA rank {config.lora_rank} on every projection (+ head, biases, norms); delta "
      f"`{rd.file('delta')}`.\n\n"
    )
  export.save_pretrained(model, rd.file("model"), tokenizer)
  rd.write_report(
    f"# MLM fine-tuning of {config.model}\n\n"
    f"k = {config.k} masked positions per sequence, {config.num_steps} steps of batch "
    f"{config.batch_size} x {config.seq_len} tokens on {config.data.path}.\n\n{lora}"
    f"Validation (k = 1): loss {results['eval_loss']:.3f} nats, top-1 accuracy "
    f"{100 * results['eval_accuracy']:.1f}% over {int(results['eval_masked'])} masked tokens.\n\n"
    f"Model: `{rd.file('model')}` (load with `gmlm.nn.load`).\n"
  )
  rd.write_results(results)  # last: a run with results.json is finished
  return results
