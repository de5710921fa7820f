"""`python sample.py --config configs/padir_eval.py --config.checkpoints=DIR1,DIR2 --workdir DIR`.

A checkpoint entry is a training run directory (its latest checkpoint), RUN@STEP (that step) or
RUN@STEP+STEP+... (the average of those checkpoints' parameters: padir.model.restore.average).

config.decoder chooses the rows (padir.decoding.decoders.choose): "auto" gives each checkpoint
the rows its kind decodes with (below: CTC, refinement, AR greedy and beam), so one command
evaluates any mix of runs; "ctc", "padir", "greedy" or "beam" keeps that kind's rows only, and a
checkpoint that cannot decode it is refused in one line before anything is loaded or written.

For each checkpoint (a PaDIR or AR training run directory), on its corpus's held-out split:
- quality of each decoder (PaDIR: padir.decoding.refinement's paper defaults, each of padir_passes with
  num_lengths candidates, stutter reset and dropped as the paper does, and each of
  padir_variants (refinement.VARIANTS) beside it; a CTC model (padir.decoding.ctc): at most each of
  padir_passes passes, on sources trimmed to multiples of `trim`, the blank's logit lowered by
  ctc_blank_penalty, or chosen on the valid split from ctc_blank_penalty_grid; a DAG model
  (padir.decoding.dag): its greedy, lookahead and Viterbi paths, no length scores, and its beam
  joined by an n-gram model at the setting the run's validation picked, the config's own, or one
  chosen on the whole valid split from dag_beam_grid; AR: greedy and beam_size beams): SacreBLEU and
  chrF with their signatures, word-level stutter (padir.evaluation.metrics), mean decoder passes;
- speed (padir.evaluation.latency.measure): p50 / p99 latency at batch 1 over the first latency_sentences,
  compilation apart, and throughput at batch_size; PaDIR decodes at trimmed widths
  (decoding.Trimmed, multiples of `trim`; 0: max_target_length), which changes no token;
- for PaDIR (not CTC), the attention analyses (padir.evaluation.stutter_attention: Tables 4-5) of the first padir_passes
  decoder's outputs, decoded again with stutter kept, over the first attention_sentences.
Each checkpoint is one resumable cell (cells/); its hypotheses go to hypotheses/ (one line per
sentence: K_NAME.DECODER.txt, the references as K_NAME.reference.txt, K the checkpoint's place
in the list). results.json holds them all, report.md renders them (Table L.1 format, the two
attention tables, figures) with paired-bootstrap comparisons (padir.evaluation.metrics.paired_bootstrap,
bootstrap_resamples resamples) of rows decoded on the same sentences: every row against the
baseline (the first AR greedy row, else the first row), and each model's row against the same
decoder of the first model that has it.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import ml_collections
import numpy as np

from gmlm import checks
from gmlm.checks import UserError
from gmlm.runs import RunDir, markdown_table
from padir.data import corpus as data
from padir.decoding import decoders as decoding
from padir.decoding import ngram, refinement
from padir.evaluation import latency as speed
from padir.evaluation import metrics
from padir.evaluation import stutter_attention as attention
from padir.evaluation import translation as evaluate
from padir.model import restore

ENTRY_POINT = "sample.py"
SPLITS = ("test", "valid")


def checkpoint_dirs(config: ml_collections.ConfigDict) -> list[str]:
  return [p.strip() for p in str(config.checkpoints).split(",")]


def split_step(entry: str) -> tuple[str, int | tuple[int, ...] | None]:
  """ "RUN@STEP" -> (RUN, STEP): that checkpoint of the run; "RUN@S1+S2+..." -> (RUN, (S1, S2,
  ...)): the average of those distinct checkpoints; "RUN" -> (RUN, None): its latest. A
  malformed step -> (entry, -1), which no run has."""
  run, at, step = entry.rpartition("@")
  if not at:
    return entry, None
  parts = step.split("+")
  if not all(p.isdigit() for p in parts) or len(set(map(int, parts))) != len(parts):
    return entry, -1
  return (run, int(step)) if len(parts) == 1 else (run, tuple(int(p) for p in parts))


def _steps(step: int | tuple[int, ...]) -> tuple[int, ...]:
  return step if isinstance(step, tuple) else (step,)


def validate(config: ml_collections.ConfigDict) -> None:
  """Checks every key the job reads; reads no file and loads nothing."""
  value = checks.get(config, "checkpoints")
  dirs = checkpoint_dirs(config) if isinstance(value, str) else []
  checks.check(
    isinstance(value, str) and all(dirs) and len(set(dirs)) == len(dirs),
    "checkpoints",
    value,
    "must be comma-separated distinct training run directories, e.g. "
    "'runs/padir_synthetic,runs/padir_synthetic_ar'",
  )
  checks.check_choice(config, "decoder", decoding.CHOICES)
  checks.check_choice(config, "split", SPLITS)
  checks.check_int(config, "max_sentences", lo=0)
  checks.check_ints(config, "padir_passes", lo=1)
  variants = checks.get(config, "padir_variants")
  checks.check(
    isinstance(variants, (tuple, list))
    and len(variants) > 0
    and all(v in refinement.VARIANTS for v in variants),
    "padir_variants",
    variants,
    f"must be a non-empty tuple of {tuple(refinement.VARIANTS)}",
  )
  for key in ("num_lengths", "beam_size", "batch_size", "latency_sentences", "attention_sentences"):
    checks.check_int(config, key, lo=1)
  checks.check_int(config, "seed", lo=0)
  checks.check_int(config, "trim", lo=0)
  checks.check_float(config, "ctc_blank_penalty", lo=0)
  grid = checks.get(config, "ctc_blank_penalty_grid")
  checks.check(
    isinstance(grid, (tuple, list)), "ctc_blank_penalty_grid", grid, "must be a tuple of numbers"
  )
  if grid:
    checks.check_floats(config, "ctc_blank_penalty_grid", lo=0)
  checks.check_int(config, "bootstrap_resamples", lo=0)
  checks.check_int(config, "dag_lm_order", lo=0)
  checks.check_float(config, "dag_lm_weight", lo=0)
  checks.check_float(config, "dag_length_norm", lo=0)
  checks.check_bool(config, "dag_beam_from_run")
  grid = evaluate.check_beam_grid(config)
  checks.check(
    not grid or config.dag_lm_order > 0,
    "dag_beam_grid",
    grid,
    "weighs an n-gram model: needs dag_lm_order > 0 (or '' for no sweep)",
  )


def check_checkpoints(config: ml_collections.ConfigDict) -> None:
  """Every directory holds a training run with a checkpoint: refused before any model loads."""
  entries = [(e, *split_step(e)) for e in checkpoint_dirs(config)]
  bad = [e for e, d, _ in entries if not restore.checkpoint_steps(d)]
  bad += [
    e for e, d, _ in entries if e not in bad and not os.path.isfile(os.path.join(d, "config.json"))
  ]
  if bad:
    raise UserError(
      f"config.checkpoints: {bad} hold no trained run (config.json and checkpoints/): train "
      "them first, e.g. from a fresh clone `python -m padir.data.synthetic --out data/synthetic "
      "&& python train.py --config configs/padir_synthetic_ctc_2x1.py --workdir DIR`"
    )
  if config.decoder != decoding.AUTO:
    for entry, run_dir, _ in entries:
      model = restore.trained_config(run_dir).get("model", {})
      try:
        decoding.choose(config.decoder, model)
      except ValueError as e:
        raise UserError(
          f"config.decoder={config.decoder!r}: {e}; {entry} is {decoding.model_name(model)}: "
          "leave it out of config.checkpoints, or set config.decoder='auto' (each run's own)"
        ) from None
  missing = [
    f"{e} (steps {restore.checkpoint_steps(d)})"
    for e, d, step in entries
    if step is not None and not set(_steps(step)) <= set(restore.checkpoint_steps(d))
  ]
  if missing:
    raise UserError(
      f"config.checkpoints: no such checkpoint step in {missing}: RUN@STEP names one of the "
      "run's saved steps, RUN@STEP+STEP distinct saved steps to average"
    )


def decoders(
  config: ml_collections.ConfigDict,
  kind: str,
  ctc: bool = False,
  blank_penalty: float | None = None,
  dag: bool = False,
  lm: ngram.NgramLM | None = None,
) -> list[decoding.Decoder]:
  """The rows one model gets: PaDIR's passes x variants, a CTC model's passes (source trim as
  config.trim, the blank penalty `blank_penalty`, else config.ctc_blank_penalty), a DAG model's
  strategies (greedy, lookahead, Viterbi, beam; source trim as config.trim; with lm, also the
  beam joined by that n-gram model at config.dag_lm_weight and config.dag_length_norm), or AR
  greedy and beam; only those
  of config.decoder's kind unless it is "auto"."""
  if dag:
    rows = decoding.dag_decoders(trims=(config.trim,))
    if lm is not None:
      rows.append(
        decoding.Decoder(
          f"dag-beam-lm-trim{config.trim}" if config.trim else "dag-beam-lm",
          "dag",
          trim=config.trim,
          dag_strategy="beam",
          dag_lm=lm,
          dag_lm_weight=config.dag_lm_weight,
          dag_length_norm=config.dag_length_norm,
        )
      )
  elif ctc:
    penalty = config.ctc_blank_penalty if blank_penalty is None else blank_penalty
    rows = [
      decoding.Decoder(f"ctc-{p}", "ctc", passes=p, trim=config.trim, blank_penalty=penalty)
      for p in config.padir_passes
    ]
  elif kind == "nar":
    rows = [
      decoding.Decoder(
        f"padir-{p}" + ("" if v == "paper" else f"-{v}"),
        "padir",
        refinement.RefineOptions(
          num_steps=p, num_lengths=config.num_lengths, **refinement.VARIANTS[v]
        ),
        trim=config.trim,
      )
      for p in config.padir_passes
      for v in config.padir_variants
    ]
  else:
    rows = [
      decoding.Decoder("ar-greedy", "greedy"),
      decoding.Decoder(f"ar-beam{config.beam_size}", "beam", beam_size=config.beam_size),
    ]
  chosen = config.get("decoder", decoding.AUTO)
  return rows if chosen == decoding.AUTO else [d for d in rows if d.kind == chosen]


def _batches(inputs_PS: np.ndarray, batch_size: int):
  """(start, rows, [batch_size, S] inputs): a short last batch repeats its last row."""
  for start in range(0, len(inputs_PS), batch_size):
    rows = inputs_PS[start : start + batch_size]
    pad = np.repeat(rows[-1:], batch_size - len(rows), axis=0)
    yield start, len(rows), np.concatenate([rows, pad])


def translate(
  fn, inputs_PS: np.ndarray, tok, batch_size: int, key: jax.Array
) -> tuple[list[str], float]:
  """Hypotheses and the mean number of decoder passes."""
  hyps, passes = [], []
  for start, n, x_BS in _batches(inputs_PS, batch_size):
    tokens_BT, steps = fn(x_BS, jax.random.fold_in(key, start))
    tokens_BT = np.asarray(tokens_BT)[:n]
    passes += [float(steps)] * n
    hyps += [tok.decode(t) for t in tokens_BT]
  return hyps, float(np.mean(passes))


HYPOTHESES = "hypotheses"


def hypotheses_file(index: int, name: str, decoder: str) -> str:
  """Where the job writes a row's hypotheses ("reference" for the references), run-relative."""
  return f"{HYPOTHESES}/{index}_{name}.{decoder}.txt"


def _write_lines(rd: RunDir, name: str, lines: list[str]) -> None:
  """One sentence per line (a line break inside a sentence becomes a space)."""
  rd.write_text(name, "".join(" ".join(line.splitlines()) + "\n" for line in lines))


def _read_lines(rd: RunDir, name: str) -> list[str] | None:
  if not rd.exists(name):
    return None
  with open(rd.file(name), encoding="utf-8", newline="") as f:
    return f.read().split("\n")[:-1]


def evaluate_checkpoint(
  config: ml_collections.ConfigDict, workdir: str, rd: RunDir, index: int
) -> dict[str, Any]:
  """The quality, speed and (PaDIR) attention results of one training run directory; its
  hypotheses and references go to rd's hypotheses/ (hypotheses_file)."""
  run_dir, step = split_step(workdir)
  name = os.path.basename(os.path.normpath(run_dir))
  name += "" if step is None else "@" + "+".join(map(str, _steps(step)))
  model, tok, tconf = restore.load_model(run_dir, step)
  d = tconf.data
  pairs = data.read_split(d.corpus_dir, config.split, d.source_lang, d.target_lang)
  pairs = pairs[: config.max_sentences or None]
  sources, references = [s for s, _ in pairs], [t for _, t in pairs]
  inputs_PS = evaluate.encode_batch(tok, sources, len(sources), model.cfg.max_source_length)
  key = jax.random.key(config.seed)
  kind = model.cfg.decoder
  rows, attention_stats = [], None
  _write_lines(rd, hypotheses_file(index, name, "reference"), references)
  is_ctc = bool(model.cfg.ctc_upsample)
  penalty = choice = None
  if is_ctc:
    penalty = float(config.ctc_blank_penalty)
    if config.ctc_blank_penalty_grid:  # chosen on the valid split, then used on `split`
      choice = evaluate.choose_blank_penalty(
        model,
        tok,
        *evaluate.valid_pairs(d, config.max_sentences),
        d.target_lang,
        config.ctc_blank_penalty_grid,
        batch_size=config.batch_size,
        num_passes=config.padir_passes[0],
      )
      penalty = choice["chosen"]
  is_dag = bool(model.cfg.dag_upsample)
  lm = ngram.from_corpus(d, tok, config.dag_lm_order) if is_dag and config.dag_lm_order else None
  beam = None
  if lm is not None:
    at = beam_choice = None
    if config.dag_beam_grid.strip():  # chosen on the whole valid split, then used on `split`
      config, beam_choice = evaluate.with_valid_beam(
        config, model, tok, d, lm, max_sentences=config.max_sentences
      )
    elif config.dag_beam_from_run:  # the run's validation's pick, if it made one
      config, at = evaluate.with_chosen_beam(
        config, run_dir, None if step is None else max(_steps(step))
      )
    beam = {
      "used": [float(config.dag_lm_weight), float(config.dag_length_norm)],
      "chosen_on_valid": beam_choice,
      "chosen_at_step": at,  # the run's validation's pick at that step (None: not the run's)
    }
  for i, dec in enumerate(decoders(config, kind, is_ctc, penalty, dag=is_dag, lm=lm)):
    fn = decoding.decode_fn(model, dec)
    hyps, passes = translate(fn, inputs_PS, tok, config.batch_size, key)
    _write_lines(rd, hypotheses_file(index, name, dec.name), hyps)
    bleu = metrics.bleu(hyps, references, d.target_lang)
    chrf = metrics.chrf(hyps, references)
    timing = speed.measure(
      model,
      dec,
      inputs_PS[: config.latency_sentences],
      seed=config.seed,
      throughput_batch=config.batch_size,
      throughput_batches=1,
    )
    rows.append(
      {
        "decoder": dec.name,
        "hypotheses": dec.hypotheses,
        "passes": passes,
        "bleu": bleu.score,
        "bleu_signature": bleu.signature,
        "chrf": chrf.score,
        "chrf_signature": chrf.signature,
        "stutter": metrics.stutter_rate(hyps, references),
        "timing": timing,
        "examples": [
          {"source": s, "reference": r, "hypothesis": h}
          for s, r, h in list(zip(sources, references, hyps))[:3]
        ],
      }
    )
    if kind == "nar" and i == 0 and not is_ctc and not is_dag:
      attention_stats = analyse_attention(model, dec, inputs_PS, config, key)
  lengths = None
  if kind == "nar" and not is_dag:  # a DAG model's length is its path's: no length head to score
    lengths = evaluate.length_accuracy(
      model,
      tok,
      sources,
      references,
      config.batch_size,
      max(config.padir_passes),
      penalty if is_ctc else 0.0,
    )
  return {
    "workdir": workdir,
    "name": name,
    "index": index,
    "target_lang": d.target_lang,
    "kind": kind,
    "sentences": len(sources),
    "split": config.split,
    "rows": rows,
    "attention": attention_stats,
    "length_accuracy": lengths,
    "blank_penalty": None if penalty is None else {"used": penalty, "chosen_on_valid": choice},
    "dag_beam": beam,
  }


def analyse_attention(model, decoder, inputs_PS, config, key) -> dict[str, Any]:
  """padir.evaluation.stutter_attention's statistics of the first attention_sentences outputs of `decoder` run
  with stutter kept (options stutter="keep", drop="none"): the paper's rule resets a stutter
  to its noise token and drops it, leaving no stutter for the analysis to find."""
  options = dataclasses.replace(decoder.options, stutter="keep", drop="none")
  fn = decoding.decode_fn(model, dataclasses.replace(decoder, options=options))
  parts = []
  for start, m, x_BS in _batches(inputs_PS[: config.attention_sentences], config.batch_size):
    y_BT, _ = fn(x_BS, jax.random.fold_in(key, start))
    self_BNTT, cross_BNTS = attention.last_layer_attention(model, x_BS, y_BT)
    parts.append((np.asarray(y_BT)[:m], self_BNTT[:m], cross_BNTS[:m]))
  return attention.merge_statistics(parts)


def run(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  validate(config)
  check_checkpoints(config)
  rd = RunDir(workdir, config)
  try:
    models = [
      rd.cell(f"checkpoint_{i}", lambda d=d, i=i: evaluate_checkpoint(config, d, rd, i))
      for i, d in enumerate(checkpoint_dirs(config))
    ]
    results = {"models": models, "significance": significance(rd, models, config)}
    rd.write_results(results)
    render(rd, results)
    return results
  finally:
    rd.close()


def comparisons(models: list[dict]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
  """(row A, row B) pairs as (model index, row index), A compared against B: every row against
  the baseline (the first "ar-greedy" row, else the first row), then each model's row against
  the row of the same decoder in the first model that has it. Rows of different sentences are
  filtered out later (paired needs the same references)."""
  rows = [(m, r) for m, model in enumerate(models) for r in range(len(model["rows"]))]
  decoder = {(m, r): models[m]["rows"][r]["decoder"] for m, r in rows}
  greedy = [x for x in rows if decoder[x] == "ar-greedy"]
  baseline = (greedy or rows)[0]
  pairs = [(x, baseline) for x in rows if x != baseline]
  for x in rows:
    first = next(y for y in rows if decoder[y] == decoder[x])
    if first[0] != x[0] and (x, first) not in pairs:
      pairs.append((x, first))
  return pairs


def significance(rd: RunDir, models: list[dict], config) -> list[dict[str, Any]]:
  """Paired bootstrap of each comparisons() pair whose two rows' hypotheses are on disk and
  were decoded on the same references (a cell from before hypotheses/ existed has none)."""
  if not config.bootstrap_resamples:
    return []

  def lines(m: int, decoder: str) -> list[str] | None:
    model = models[m]
    return _read_lines(rd, hypotheses_file(model.get("index", m), model["name"], decoder))

  out = []
  for (ma, ra), (mb, rb) in comparisons(models):
    a, b = models[ma]["rows"][ra], models[mb]["rows"][rb]
    refs_a, refs_b = lines(ma, "reference"), lines(mb, "reference")
    hyps_a, hyps_b = lines(ma, a["decoder"]), lines(mb, b["decoder"])
    if None in (refs_a, hyps_a, hyps_b) or refs_a != refs_b:
      continue
    res = metrics.paired_bootstrap(
      hyps_a,
      hyps_b,
      refs_a,
      models[ma].get("target_lang", "en"),
      resamples=config.bootstrap_resamples,
      seed=config.seed,
    )
    out.append(
      {
        "a": f"{models[ma]['name']}: {a['decoder']}",
        "b": f"{models[mb]['name']}: {b['decoder']}",
        **dataclasses.asdict(res),
      }
    )
  return out


# ----------------------------------------------------------------------------- report


def _pm(v: list[float | str]) -> str:
  """mean ± sd; a group without pairs has NaNs, which results.json stores as "nan"."""
  return f"{float(v[0]):.3g} ± {float(v[1]):.2g}"


QUALITY_HEADER = [
  "model",
  "decoder",
  "# hyp.",
  "passes",
  "BLEU",
  "chrF",
  "stutter",
  "p50 ms",
  "p99 ms",
]


def quality_rows(models: list[dict]) -> list[list[Any]]:
  return [
    [
      m["name"],
      r["decoder"],
      r["hypotheses"],
      r["passes"],
      r["bleu"],
      r["chrf"],
      r["stutter"],
      r["timing"]["p50_ms"],
      r["timing"]["p99_ms"],
    ]
    for m in models
    for r in m["rows"]
  ]


def attention_tables(name: str, stats: dict[str, Any]) -> str:
  self_rows = [
    [g, s["pairs"], _pm(s["min"]), _pm(s["avg"]), _pm(s["max"]), s["top1"], s["top2"]]
    for g, s in stats["self"].items()
  ]
  cross_rows = [
    [g, s["pairs"]]
    + [_pm(s[f"{d}_{a}"]) for d in ("tv", "cos") for a in ("min", "avg", "max")]
    + [s["top1"], s["top2"]]
    for g, s in stats["cross"].items()
  ]
  return "\n\n".join(
    [
      f"### {name}: last-layer decoder self-attention between adjacent positions (Table 4)",
      markdown_table(["pairs", "n", "min", "avg", "max", "P{top-1}", "P{top-2}"], self_rows, 3),
      f"### {name}: last-layer cross-attention distances of adjacent positions (Table 5)",
      markdown_table(
        ["pairs", "n", "TV min", "TV avg", "TV max", "cos min", "cos avg", "cos max"]
        + ["P{top-1}", "P{top-2}"],
        cross_rows,
        3,
      ),
    ]
  )


def render(rd: RunDir, results: dict[str, Any]) -> None:
  """report.md and figures from results (redrawable from results.json alone)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  models = results["models"]
  parts = [
    "# PaDIR / AR evaluation",
    "Quality and batch-1 latency (Table L.1 format; compilation excluded, reported in "
    "results.json as compile_s). Timings are meaningful on a quiet machine only.",
    markdown_table(QUALITY_HEADER, quality_rows(models), digits=4),
  ]
  signatures = {r["bleu_signature"] for m in models for r in m["rows"]}
  signatures |= {r["chrf_signature"] for m in models for r in m["rows"]}
  parts.append("Signatures: " + "; ".join(f"`{s}`" for s in sorted(signatures)))
  tests = results.get("significance") or []
  if tests:
    parts.append(
      f"Paired bootstrap (Koehn 2004; {tests[0]['resamples']} resamples of the sentences, "
      "padir.evaluation.metrics.paired_bootstrap): BLEU(A) - BLEU(B) on the same sentences, its "
      f"{tests[0]['level']:.0%} percentile interval and the two-sided p-value of no difference."
    )
    parts.append(
      markdown_table(
        ["A", "B", "BLEU A", "BLEU B", "A - B", "interval", "p"],
        [
          [t["a"], t["b"], t["bleu_a"], t["bleu_b"], t["delta"]]
          + [f"[{t['low']:.3g}, {t['high']:.3g}]", t["p_value"]]
          for t in tests
        ],
        digits=4,
      )
    )
  measured = [m for m in models if m.get("length_accuracy")]
  if measured:
    parts.append(
      "Length predictor (PaDIR): how often its argmax is the reference's token length (EOS "
      "included), exact and within 1 / 2 tokens."
    )
    parts.append(
      markdown_table(
        ["model", "exact", "within 1", "within 2", "sentences"],
        [
          [m["name"]]
          + [m["length_accuracy"][k] for k in ("exact", "within1", "within2")]
          + [m["length_accuracy"]["sentences"]]
          for m in measured
        ],
        digits=3,
      )
    )
  for m in models:
    choice = (m.get("blank_penalty") or {}).get("chosen_on_valid")
    if choice:
      parts.append(
        f"{m['name']} (CTC): blank penalty chosen on {choice['sentences']} valid pairs "
        f"(highest BLEU, ties to the smaller): **{choice['chosen']:g}**. Length ratio = the "
        "hypotheses' words over the references'."
      )
      parts.append(
        markdown_table(
          ["penalty", "valid BLEU", "length ratio"],
          [[r["penalty"], r["bleu"], r["length_ratio"]] for r in choice["sweep"]],
          digits=4,
        )
      )
    choice = (m.get("dag_beam") or {}).get("chosen_on_valid")
    if choice:
      w, b = choice["chosen"]
      parts.append(
        f"{m['name']} (DAG): beam's n-gram weight : length exponent chosen on "
        f"{choice['sentences']} valid pairs (highest BLEU, ties to the first): **{w:g}:{b:g}**. "
        "Length ratio = the hypotheses' words over the references'."
      )
      parts.append(
        markdown_table(
          ["weight : exponent", "valid BLEU", "length ratio"],
          [
            [f"{r['lm_weight']:g}:{r['length_norm']:g}", r["bleu"], r["length_ratio"]]
            for r in choice["sweep"]
          ],
          digits=4,
        )
      )
  # A legend, not labels at the points: decoders of one model often sit on top of each other.
  fig, ax = plt.subplots(figsize=(7, 3.5))
  for k, m in enumerate(models):
    for r in m["rows"]:
      ax.scatter(
        r["timing"]["p50_ms"],
        r["bleu"],
        marker="osD^v<>"[k % 7],
        alpha=0.8,
        label=f"{m['name']}: {r['decoder']}",
      )
  ax.set(xlabel="p50 latency at batch 1 (ms)", ylabel="BLEU", xscale="log")
  ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
  rd.savefig(fig, "quality_speed.png")
  parts.append("![BLEU vs latency](quality_speed.png)")
  analysed = [m for m in models if m["attention"]]
  for m in analysed:
    parts.append(attention_tables(m["name"], m["attention"]))
  if analysed:
    fig, axes = plt.subplots(1, 3, figsize=(10, 3))
    for ax, (table, stat, label) in zip(
      axes,
      (
        ("self", "avg", "self-attention (avg over heads)"),
        ("cross", "tv_avg", "cross-attention TV (avg)"),
        ("cross", "cos_avg", "cross-attention cosine dist. (avg)"),
      ),
    ):
      for j, group in enumerate(("stutter", "other")):
        means = [float(m["attention"][table][group][stat][0]) for m in analysed]
        errs = [float(m["attention"][table][group][stat][1]) for m in analysed]
        x = np.arange(len(analysed)) + 0.4 * j
        ax.bar(x, means, 0.4, yerr=errs, label=group)
      ax.set_xticks(np.arange(len(analysed)) + 0.2, [m["name"] for m in analysed], fontsize=7)
      ax.set_title(label, fontsize=8)
    axes[0].legend(fontsize=7)
    rd.savefig(fig, "attention.png")
    parts.append("![stutter vs other adjacent pairs](attention.png)")
  rd.write_report("\n\n".join(parts) + "\n")
