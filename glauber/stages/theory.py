"""Paper A, part 1 as stages (`glauber.stages`): the rectangle test (protocol 1, with causal
controls), influence and contraction (2, with ΔR against α_ij), score margins (3) and the drift
certificate (4). Each stage wraps its protocol module's `measure` and `section`; the config
keys are those of configs/glauber_incompatibility.py (nested `influence.`, `margins.`,
`drift.`).
"""

from __future__ import annotations

import os
import re

import numpy as np

from glauber import stages
from glauber.measures import drift, influence, margins, rectangle
from glauber.oracle import model_name
from glauber.stages import Context, Stage
from gmlm import checks
from gmlm.runs import RunDir

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


def rectangle_needs(config) -> list[stages.Need]:
  if "smollm2" not in control_names(config):
    return []
  rest = ",".join(n for n in control_names(config) if n != "smollm2")
  return [
    stages.Need(
      rectangle.SMOLLM2_WHEEL,
      lambda: rectangle.smollm2_path(),
      "the SmolLM2 control",
      f"--config.controls={rest or repr('')}",
    )
  ]


def _cell_name(name: str) -> str:
  return "rectangle_" + re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def compute_rectangle(ctx: Context) -> dict:
  """The MLM's rectangle test, then each causal control's (each in its own cell)."""
  c = ctx.config
  common = dict(
    top_k=c.replacement_top_k, batch_size=c.batch_size, max_tokens=c.max_tokens, seed=c.seed
  )
  total = c.num_rectangles + c.control_rectangles * len(control_names(c))
  progress = stages.bar(total, "rectangles", "rect")
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
        progress=progress.update,
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
        allowed_V=stages.allowed_tokens(tokenizer, model.config.vocab_size, c.exclude_pattern),
        progress=progress.update,
        **common,
      )

    models.append(ctx.run.cell(_cell_name(name), control))
  progress.close()
  return {"text": stages.text_name(c.text), "models": models}


# --------------------------------------------------------------------------------------------
# Influence and contraction (with Fig. 6: rectangles drawn on the seed sentence itself, so each
# rectangle's sites index the measured α_ij), score margins, the drift certificate


def validate_influence(config) -> None:
  influence.validate(config, "influence.")
  checks.check_int(config, "influence.num_rectangles", lo=0)


def compute_influence(ctx: Context) -> dict:
  c = ctx.config
  results = influence.from_config(
    ctx.model, ctx.tokenizer, c, "influence.", candidates=ctx.candidates()
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
  run.savefig(
    rectangle.distance_figure([rects], alpha_NN, "the seed sentence"), "rectangle_influence.png"
  )
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
    ctx.model, ctx.tokenizer, ctx.config, "margins.", candidates=ctx.candidates()
  )


def compute_drift(ctx: Context) -> dict:
  return drift.from_config(
    ctx.model, ctx.tokenizer, ctx.config, "drift.", candidates=ctx.candidates()
  )


STAGES: tuple[Stage, ...] = (
  Stage(
    "rectangle",
    compute_rectangle,
    rectangle.section,
    validate_rectangle,
    needs=rectangle_needs,
  ),
  Stage("influence", compute_influence, section_influence, validate_influence),
  Stage("margins", compute_margins, margins.section, lambda c: margins.validate(c, "margins.")),
  Stage("drift", compute_drift, drift.section, lambda c: drift.validate(c, "drift.")),
)
