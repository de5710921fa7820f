"""What each PaDIR training option (issue 26) costs per step and buys in BLEU, side by side in one
process: the training counterpart of benchmarks/padir_options.py.

  python benchmarks/padir_training.py --config configs/padir_synthetic.py \
      --ar runs/padir_synthetic_ar [--steps 300] [--sentences 256] [--dag-upsample 2,2.5,3] \
      [--only "paper,ctc"] [--json OUT]
  python benchmarks/padir_training.py --tiny        # a tiny model on a tiny corpus: a smoke run

Each option trains PaDIR from the same seed for --steps steps (padir.training.loop.fit in a
temporary run directory, --config's model, data and optimizer, the schedule shortened to the
steps) and decodes the first --sentences validation pairs at the end (the config's decoder):
- paper: the config as it is (the paper's recipe);
- offset: the length as an offset from the source length (model.max_length_offset = --offset);
- glancing: GLAT, ratio 0.5 -> 0.3 over the steps;
- warm start: the shared parameters from the AR run --ar (skipped without it);
- recipe: the three together (configs/padir_bible_en_es_recipe.with_recipe);
- ctc: item 4, CTC over a decoder upsampled 2x (configs/padir_bible_en_es_ctc_distill.with_ctc:
  one stage, one decoding pass, no length head; --blank-penalty when decoding), from scratch;
- ctc + glancing: the same with glancing over the best alignment, 0.5 -> 0.3 over the steps;
- dag k=K + glancing (with --dag-upsample K,...): DA-Transformer's graph over K vertices a
  source token in place of CTC's slots (model.dag_upsample, fractional allowed), glancing on the
  best path, validated by its lookahead path;
- paper, again: the first row repeated last, so the gap between the two shows the timing
  noise of the run.
--only NAMES (comma-separated option names) trains those rows alone, the paper's row and its
repeat always among them (the ratios are to it).
Per option: seconds per step (the median logged interval after the first, which holds the
compilation; evaluations are outside the intervals measured), target tokens per second (the
mean non-PAD target tokens of a training batch, counted on the batches themselves, over the
seconds per step), the FLOPs of a training step (padir.training.flops: the matmul hand count
every run logs, nothing compiled to count them) as a share of this CPU's float32 matmul peak measured in the same process (the best of
repeated 1024^3 matmuls, in the row "matmul peak"), the validation BLEU after the steps, and
the ratios to the paper's row. Time it on a quiet machine only; the first row's compilation
warms caches the later rows share, so each row's first interval is left out.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_collections  # noqa: E402

from configs import padir_bible_en_es_ctc_distill, padir_bible_en_es_recipe  # noqa: E402
from gmlm.runs import markdown_table  # noqa: E402
from padir.data import corpus as data
from padir.evaluation import curves
from padir.model import transformer as model_lib  # noqa: E402
from padir.training import flops  # noqa: E402
from padir.training import loop as training  # noqa: E402

HEADER = [
  "option",
  "s/step",
  "target tok/s",
  "GFLOP/step",
  "share of peak",
  "valid BLEU",
  "length exact",
  "length ±2",
  "time vs paper",
  "dBLEU",
]


def options(
  offset: int, ar: str | None, dag_ratios: tuple[float, ...] = ()
) -> list[tuple[str, dict]]:
  rows = [
    ("paper", {}),
    ("offset", {"offset": offset}),
    ("glancing", {"glancing": True}),
  ]
  if ar:
    rows += [("warm start", {"init_from": ar})]
  rows += [("recipe", {"offset": offset, "glancing": True, "init_from": ar or ""})]
  rows += [("ctc", {"ctc": True}), ("ctc + glancing", {"ctc": True, "glancing": True})]
  rows += [(f"dag k={k:g} + glancing", {"dag": k, "glancing": True}) for k in dag_ratios]
  return rows + [("paper, again", {})]  # the first row's work again: this run's timing noise


def chosen(rows: list[tuple[str, dict]], only: str) -> list[tuple[str, dict]]:
  """The rows `--only` names (comma-separated; empty: all), with the paper's row and its
  repeat; an unknown name is one line naming it and the choices."""
  names = [n.strip() for n in only.split(",") if n.strip()]  # "paper, again" is always run
  known = [n for n, _ in rows if n != "paper, again"]
  for n in names:
    if n not in known:
      raise SystemExit(f"--only: no option {n!r}; choose from {', '.join(known)}")
  if not names:
    return rows
  return [r for r in rows if r[0] in {"paper", "paper, again", *names}]


def option_config(
  base: ml_collections.ConfigDict, opts: dict, blank_penalty: float = 0.0
) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict(base.to_dict())
  if opts.get("ctc") or opts.get(
    "dag"
  ):  # with_ctc's model and loss; the base's schedule, data and evaluations
    config = padir_bible_en_es_ctc_distill.with_ctc(config, init_from=opts.get("init_from", ""))
    config.train.update(base.train.to_dict())
    config.data.bucket_boundaries = base.data.bucket_boundaries
    config.decode.blank_penalty = blank_penalty
  if opts.get("dag"):  # the same, with DA-Transformer's graph over k vertices a source token
    config.model.update(ctc_upsample=0, dag_upsample=float(opts["dag"]))
    config.decode.dag_decoder = "lookahead"  # validated by its path: no n-gram model to fit
  if opts.get("offset") and opts.get("glancing") and "init_from" in opts:
    return padir_bible_en_es_recipe.with_recipe(config, opts["init_from"], opts["offset"])
  if opts.get("offset"):
    config.model.max_length_offset = opts["offset"]
  if opts.get("glancing"):
    config.loss.glancing_ratio, config.loss.glancing_ratio_end = 0.5, 0.3
    config.loss.glancing_anneal_steps = config.train.num_train_steps
  if opts.get("init_from"):
    config.init_from = opts["init_from"]
  return config


def matmul_peak(n: int = 1024, repeats: int = 10) -> float:
  """This CPU's float32 matmul FLOP/s: the best of `repeats` timed n x n x n products."""
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  best = min(_timed(lambda: f(a).block_until_ready()) for _ in range(repeats))
  return 2 * n**3 / best


def _timed(fn) -> float:
  t = time.perf_counter()
  fn()
  return time.perf_counter() - t


def step_cost(config: ml_collections.ConfigDict) -> tuple[float, float]:
  """(FLOPs of a training step by the hand count the runs log, padir.training.flops, over the
  shapes of the first 8 batches; mean non-PAD target tokens of a training batch)."""
  tok, sources = training.prepare_data(config)
  d = config.data
  ds, _ = data.make_dataset(
    sources["train"],
    tok,
    batch_size=config.train.batch_size,
    max_source_length=d.max_source_length,
    max_target_length=d.max_target_length,
    seed=config.seed,
    num_epochs=1,
    name="train",
  )
  batches = [b for _, b in zip(range(8), ds)]
  tokens = float(np.mean([(b["targets"] != 0).sum() for b in batches]))
  cfg = model_lib.ModelConfig.from_run_config(config, tok.vocab_size)
  shapes = [(b["inputs"].shape, b["targets"].shape) for b in batches]
  hand = [flops.step_flops(cfg, flops.run_step(config, *shape)) for shape in shapes]
  return float(np.mean(hand)), tokens


def run_option(
  base: ml_collections.ConfigDict, name: str, opts: dict, root: str, blank_penalty: float = 0.0
) -> dict:
  config = option_config(base, opts, blank_penalty)
  step_flops, tokens = step_cost(config)
  workdir = os.path.join(root, "".join(c if c.isalnum() else "_" for c in name))
  training.check_warm_start(config)
  rd = training.open_run(config, workdir)
  try:
    training.fit(config, rd)
  finally:
    rd.close()
  train, evals = curves.read_metrics(workdir)
  intervals = [1.0 / r["steps_per_second"] for r in train[1:]] or [
    1.0 / train[0]["steps_per_second"]
  ]
  last = evals[-1] if evals else {}
  seconds = float(np.median(intervals))
  return {
    "option": name,
    "seconds_per_step": seconds,
    "target_tokens_per_second": tokens / seconds,
    "flops_per_step": step_flops,
    "valid_bleu": last.get("valid_bleu", float("nan")),
    "length_accuracy": last.get("valid_length_accuracy", float("nan")),
    "length_within2": last.get("valid_length_within2", float("nan")),
  }


def base_config(path: str, steps: int, sentences: int) -> ml_collections.ConfigDict:
  spec = importlib.util.spec_from_file_location("bench_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config()
  t = config.train
  t.num_train_steps, t.stop_at_step = steps, 0
  t.warmup_steps = min(t.warmup_steps, max(1, steps // 10))
  t.log_every = max(1, steps // 5)
  t.eval_every = t.checkpoint_every = steps
  t.progress_bar = False
  config.decode.num_examples = sentences
  return config


def tiny_setup(root: str) -> tuple[ml_collections.ConfigDict, str]:
  """A 2-layer PaDIR config on a small synthetic corpus, and a 4-step AR run to warm-start from."""
  from padir.data import synthetic

  corpus = os.path.join(root, "corpus")
  synthetic.write_corpus(corpus, {"train": 400, "valid": 64, "test": 8}, seed=0)
  path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
  config = base_config(os.path.join(path, "padir_synthetic.py"), steps=4, sentences=16)
  config.data.update(corpus_dir=corpus, vocab_size=120, max_source_length=36)
  config.model.update(num_encoder_layers=1, num_decoder_layers=1, d_model=32, d_ff=64)
  config.train.update(batch_size=16, log_every=1)
  config.decode.update(batch_size=16, num_lengths=3)
  ar = ml_collections.ConfigDict(config.to_dict())
  ar.model.decoder = "ar"
  ar_dir = os.path.join(root, "ar")
  rd = training.open_run(ar, ar_dir)
  try:
    training.fit(ar, rd)
  finally:
    rd.close()
  return config, ar_dir


def table(rows: list[dict], peak: float) -> str:
  ref = rows[0]
  body = [
    [
      r["option"],
      f"{r['seconds_per_step']:.3f}",
      f"{r['target_tokens_per_second']:.0f}",
      f"{r['flops_per_step'] / 1e9:.2f}",
      f"{r['flops_per_step'] / r['seconds_per_step'] / peak:.1%}",
      f"{r['valid_bleu']:.2f}",
      f"{r['length_accuracy']:.3f}",
      f"{r['length_within2']:.3f}",
      f"{r['seconds_per_step'] / ref['seconds_per_step']:.2f}x",
      f"{r['valid_bleu'] - ref['valid_bleu']:+.2f}",
    ]
    for r in rows
  ]
  return markdown_table(HEADER, body)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--config", default="configs/padir_synthetic.py")
  parser.add_argument("--ar", default=None, help="an AR run of the same backbone (warm start)")
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--sentences", type=int, default=256)
  parser.add_argument("--offset", type=int, default=8, help="max_length_offset of the offset rows")
  parser.add_argument(
    "--blank-penalty", type=float, default=0.0, help="the CTC rows' decode.blank_penalty"
  )
  parser.add_argument(
    "--dag-upsample",
    default="",
    help="DAG rows at these vertex ratios, e.g. 2,2.5,3 (the graph's size against its step cost)",
  )
  parser.add_argument(
    "--only", default="", help="comma-separated option names (the paper's row is always run)"
  )
  parser.add_argument("--tiny", action="store_true", help="a tiny model and corpus: a smoke run")
  parser.add_argument("--json", default=None)
  args = parser.parse_args(argv)
  dag_ratios = tuple(float(k) for k in args.dag_upsample.split(",") if k)
  # checked before any corpus or training: a misspelt name is one line, not minutes later
  names = {n for n, _ in chosen(options(args.offset, args.tiny or args.ar, dag_ratios), args.only)}
  with tempfile.TemporaryDirectory() as root:
    if args.tiny:
      base, ar = tiny_setup(root)
    else:
      base, ar = base_config(args.config, args.steps, args.sentences), args.ar
    peak = matmul_peak(256 if args.tiny else 1024)
    print(f"matmul peak: {peak / 1e9:.1f} GFLOP/s (float32, best of 10, this process)")
    rows = []
    for name, opts in (r for r in options(args.offset, ar, dag_ratios) if r[0] in names):
      rows.append(run_option(base, name, opts, root, args.blank_penalty))  # same seed, same batches
      print(f"done {name}: {rows[-1]['seconds_per_step']:.3f} s/step", flush=True)
  print(table(rows, peak))
  for r in rows[1:]:
    ratio = r["seconds_per_step"] / rows[0]["seconds_per_step"]
    print(f"ratio vs paper  {r['option']:<11} time {ratio:.2f}x")
  peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  print(f"peak RSS {peak_rss:.0f} MiB")
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump({"matmul_peak_flops": peak, "rows": rows}, f, indent=2)
  return 0


if __name__ == "__main__":
  sys.exit(main())
