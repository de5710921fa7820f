"""`python sample.py --config configs/glauber_incompatibility.py --workdir DIR`: paper A's
theory-side measurements of one MLM, stage by stage: the rectangle test (protocol 1, with causal
controls), influence and contraction (2, with ΔR against α_ij), score margins (3) and the drift
certificate (4).

The job is a list of `Stage`s run in order. Each stage's results are computed inside
`RunDir.cell(stage.name, ...)`, so a killed run resumes after its last finished stage (and
inside a stage after its last finished cell: the rectangle stage stores each model's test on
its own); each stage contributes one section of report.md, rendered from its stored results;
results.json holds every stage's results under its name and is written last.

Adding a stage: write `compute(ctx) -> dict` (JSON-able; `ctx` holds the config, the run
directory, the loaded model and tokenizer, the passages and the earlier stages' results),
`section(results, run) -> str` (markdown; figures through run.savefig) and, for its own config
keys, `validate(config)`; then append `Stage("name", compute, section, validate)` to STAGES and
its name to the config's default `stages`.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Callable

import numpy as np

from glauber import chains, drift, influence, margins, rectangle
from glauber.jobs import finished
from glauber.oracle import load_mlm, model_name, validate_model
from gmlm import checks
from gmlm.checks import UserError
from gmlm.runs import RunDir

ENTRY_POINT = "sample.py"


@dataclasses.dataclass
class Context:
  """What a stage reads: the config, the run directory, the MLM and its tokenizer, the passages
  (`texts`), the allowed tokens (allowed_V: candidates of a site) and `results`, the finished
  stages' results by name. `progress` is the shared progress bar (tqdm)."""

  config: Any
  run: RunDir
  model: Any
  tokenizer: Any
  texts: list[str]
  allowed_V: np.ndarray
  progress: Any
  results: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Stage:
  name: str
  compute: Callable[[Context], dict]
  section: Callable[[dict, RunDir], str]
  validate: Callable[[Any], None] = lambda config: None
  work: Callable[[Any], int] = lambda config: 0  # units of the progress bar it advances


# --------------------------------------------------------------------------------------------
# The rectangle stage


def control_names(config) -> list[str]:
  return [c.strip() for c in config.controls.split(",") if c.strip()]


def validate_rectangle(config) -> None:
  checks.check_int(config, "num_rectangles", lo=1)
  checks.check_int(config, "control_rectangles", lo=1)
  checks.check_int(config, "replacement_top_k", lo=2)  # a candidate set of size 1 has no b != a
  checks.check_int(config, "batch_size", lo=1)
  checks.check_int(config, "max_tokens", lo=4)
  controls = checks.get(config, "controls")
  checks.check(isinstance(controls, str), "controls", controls, "must be a string")
  for name in control_names(config):
    checks.check(
      name in rectangle.CONTROLS or os.path.exists(name),
      "controls",
      controls,
      f"a comma-separated list of {', '.join(rectangle.CONTROLS)} or causal checkpoint "
      "directories / .gguf files ('' = no control)",
    )


def rectangle_work(config) -> int:
  return config.num_rectangles + config.control_rectangles * len(control_names(config))


def _cell_name(name: str) -> str:
  return "rectangle_" + re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def compute_rectangle(ctx: Context) -> dict:
  """The MLM's rectangle test, then each causal control's (each in its own cell)."""
  c = ctx.config
  common = dict(
    top_k=c.replacement_top_k, batch_size=c.batch_size, max_tokens=c.max_tokens, seed=c.seed
  )
  models = [
    ctx.run.cell(
      _cell_name("mlm"),
      lambda: rectangle.measure(
        ctx.model,
        ctx.tokenizer,
        ctx.texts,
        name=model_name(c.model),
        num_rectangles=c.num_rectangles,
        allowed_V=ctx.allowed_V,
        progress=ctx.progress.update,
        **common,
      ),
    )
  ]
  for name in control_names(c):

    def control(name=name):
      model, tokenizer, label = rectangle.load_control(name, ctx.tokenizer, c.seed)
      return rectangle.measure(
        model,
        tokenizer,
        ctx.texts,
        name=label,
        num_rectangles=c.control_rectangles,
        allowed_V=allowed_tokens(tokenizer, model.config.vocab_size, c.exclude_pattern),
        progress=ctx.progress.update,
        **common,
      )

    models.append(ctx.run.cell(_cell_name(name), control))
  return {"text": text_name(c.text), "models": models}


# --------------------------------------------------------------------------------------------
# Influence and contraction (with Fig. 6: rectangles drawn on the seed sentence itself, so each
# rectangle's sites index the measured α_ij), score margins, the drift certificate


def candidates(ctx: Context) -> np.ndarray:
  return np.flatnonzero(ctx.allowed_V)


def validate_influence(config) -> None:
  influence.validate(config, "influence.")
  checks.check_int(config, "influence.num_rectangles", lo=0)


def compute_influence(ctx: Context) -> dict:
  c = ctx.config
  results = influence.from_config(
    ctx.model, ctx.tokenizer, c, "influence.", candidates=candidates(ctx)
  )
  if c.influence.num_rectangles:
    results["seed_rectangles"] = rectangle.measure(
      ctx.model,
      ctx.tokenizer,
      [c.influence.seed_text],
      name=model_name(c.model),
      num_rectangles=c.influence.num_rectangles,
      top_k=c.replacement_top_k,
      batch_size=c.batch_size,
      max_tokens=c.max_tokens,
      allowed_V=ctx.allowed_V,
      seed=c.seed,
    )
  return results


def section_influence(results: dict, run: RunDir) -> str:
  text = influence.section(results, run)
  if "seed_rectangles" not in results:
    return text
  temps = results["temperatures"]
  t1 = int(np.argmin(np.abs(np.log(np.asarray(temps)))))  # the grid T nearest 1
  alpha_NN = np.asarray(results["alpha_max"][t1])
  rects = results["seed_rectangles"]
  a_X, d_X = rectangle.influence_pairs(rects, alpha_NN)
  run.savefig(rectangle.distance_figure([rects], alpha_NN), "rectangle_influence.png")
  corr = float(np.corrcoef(a_X, d_X)[0, 1]) if len(a_X) > 2 and a_X.std() > 0 else float("nan")
  return (
    text
    + f"\nΔR against pairwise influence (Fig. 6's claim): {len(d_X)} rectangles drawn on the seed "
    f"sentence itself, each set beside (α_ij + α_ji)/2 at T = {temps[t1]:g}; Pearson "
    f"correlation {corr:.3f}, mean ΔR {float(np.mean(d_X)):.3f}.\n\n"
    "![ΔR against distance and influence](rectangle_influence.png)\n"
  )


def compute_margins(ctx: Context) -> dict:
  return margins.from_config(
    ctx.model, ctx.tokenizer, ctx.config, "margins.", candidates=candidates(ctx)
  )


def compute_drift(ctx: Context) -> dict:
  return drift.from_config(
    ctx.model, ctx.tokenizer, ctx.config, "drift.", candidates=candidates(ctx)
  )


STAGES: tuple[Stage, ...] = (
  Stage("rectangle", compute_rectangle, rectangle.section, validate_rectangle, rectangle_work),
  Stage("influence", compute_influence, section_influence, validate_influence),
  Stage("margins", compute_margins, margins.section, lambda c: margins.validate(c, "margins.")),
  Stage("drift", compute_drift, drift.section, lambda c: drift.validate(c, "drift.")),
)


# --------------------------------------------------------------------------------------------
# The job


def allowed_tokens(tokenizer, vocab_size: int, exclude_pattern: str) -> np.ndarray:
  """allowed_V: the tokens a replacement may be (no special token, none matching the pattern)."""
  allowed_V = np.zeros(vocab_size, bool)
  allowed_V[
    chains.candidate_ids(tokenizer, vocab_size, exclude_pattern=exclude_pattern or None)
  ] = 1
  return allowed_V


def stage_names(config) -> list[str]:
  return [s.strip() for s in config.stages.split(",") if s.strip()]


def text_name(text: str) -> str:
  return "the held-out offline English text" if text == "english" else f"`{text}`"


def read_passages(text: str, max_passages: int) -> list[str]:
  """ "english": the held-out sentences of glauber/mlm/english.py; else a UTF-8 file, one
  passage per line (blank lines skipped). The first max_passages (0 = all)."""
  if text == "english":
    from glauber.mlm import english

    try:
      passages = [s for doc in english.corpus("held_out") for s in doc]
    except FileNotFoundError as e:
      raise UserError(str(e)) from None
  else:
    passages = [line.strip() for line in checks.read_lines(text) if line.strip()]
  if not passages:
    raise UserError(f"{text}: no passages (one per line)")
  return passages[:max_passages] if max_passages else passages


def validate(config) -> None:
  """Checks every key the job reads; loads nothing and writes nothing."""
  validate_model(config)
  stages = checks.get(config, "stages")
  known = [s.name for s in STAGES]
  checks.check(
    isinstance(stages, str)
    and bool(stage_names(config))
    and set(stage_names(config)) <= set(known),
    "stages",
    stages,
    f"a comma-separated list of the stages {', '.join(known)}",
  )
  text = checks.get(config, "text")
  checks.check(
    text == "english" or (isinstance(text, str) and os.path.isfile(text)),
    "text",
    text,
    "'english' (the offline English text) or a text file, one passage per line",
  )
  checks.check_int(config, "max_passages", lo=0)
  pattern = checks.get(config, "exclude_pattern")
  checks.check(isinstance(pattern, str), "exclude_pattern", pattern, "must be a regular expression")
  try:
    re.compile(pattern)
  except re.error as e:
    raise checks.ConfigError("exclude_pattern", pattern, f"not a regular expression: {e}") from e
  checks.check_int(config, "seed", lo=0)
  for stage in STAGES:
    stage.validate(config)


def run(config, workdir: str) -> dict:
  validate(config)
  if (stored := finished(config, workdir)) is not None:
    return stored
  from tqdm import tqdm

  model, tokenizer = load_mlm(config.model, config.dtype, config.allow_pickle)
  allowed_V = allowed_tokens(tokenizer, model.config.vocab_size, config.exclude_pattern)
  rd = RunDir(workdir, config)
  stages = [s for s in STAGES if s.name in stage_names(config)]
  bar = tqdm(total=sum(s.work(config) for s in stages), desc="incompatibility", unit="rect")
  ctx = Context(
    config, rd, model, tokenizer, read_passages(config.text, config.max_passages), allowed_V, bar
  )
  for stage in stages:  # compute every stage, then render (a section may use another's results)
    bar.set_postfix(stage=stage.name)
    ctx.results[stage.name] = rd.cell(stage.name, lambda: stage.compute(ctx))
  bar.close()
  sections = [stage.section(ctx.results[stage.name], rd) for stage in stages]
  results = {"model": model_name(config.model), **ctx.results}
  rd.write_report(
    f"# Incompatibility and mixing diagnostics: {model_name(config.model)}\n\n"
    + "\n".join(sections)
  )
  rd.write_results(results)  # last: a run with results.json is finished
  return results
