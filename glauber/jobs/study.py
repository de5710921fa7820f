"""`python sample.py --config configs/glauber_study.py --workdir DIR --config.model=...`: paper A
on one MLM in one command: part 1's stages (`glauber.stages.theory`: rectangle test, influence,
margins, drift certificate) then part 2's (`glauber.stages.dynamics`: traps, semantic drift,
coupling phase diagram, semantic basins, prefix attractors, Metropolis-Hastings inside the
traps), one report.md and results.json.

`scale`: "default" keeps the config's sizes (about half an hour on 2 CPU cores on the default
MLM); "paper" sets the paper's sizes (PAPER_SIZES) for an accelerator, on every key still at
its default value (a key given on the command line keeps the given value). A killed study
resumes after its last finished stage, and inside the trap and basin chains after their last
written chunk.
"""

from __future__ import annotations

import json

import jax
from flax import nnx

from glauber import stages
from glauber.jobs import finished
from glauber.oracle import model_name
from glauber.stages import dynamics, theory
from gmlm import checks
from gmlm.runs import markdown_table

ENTRY_POINT = "sample.py"

STAGES = theory.STAGES + dynamics.STAGES
SCALES = ("default", "paper")

# The sizes of configs/glauber_study.py that scale="paper" replaces.
DEFAULT_SIZES = {
  "num_rectangles": 100,
  "traps.num_chains": 8,
  "traps.num_steps": 3_000,
  "basins.seeds_per_topic": 4,
  "basins.num_steps": 2_000,
  "basins.record_every": 100,
  "semantic_drift.num_chains": 8,
  "semantic_drift.num_steps": 300,
  "semantic_drift.num_sites": (8, 16, 32, 48),
  "semantic_drift.temperatures": (0.5, 1.0, 2.0, 4.0),
  "coupling.num_pairs": 16,
  "coupling.num_steps": 400,
  "coupling.num_sites": (4, 8, 12),
  "coupling.temperatures": (0.5, 1.0, 2.0, 4.0),
  "attractors.num_chains": 8,
  "attractors.num_steps": 1_000,
  "mh_traps.num_traps": 5,
  "mh_traps.num_steps": 300,
}

# The paper's sizes (Appendix A.1: 30 chains x 10^4 steps for traps; B.5: 5 topics x 10 seeds
# x 10^4 steps for basins; Table 1: 300 rectangles).
PAPER_SIZES = {
  "num_rectangles": 300,
  "traps.num_chains": 30,
  "traps.num_steps": 10_000,
  "basins.seeds_per_topic": 10,
  "basins.num_steps": 10_000,
  "basins.record_every": 200,
  "semantic_drift.num_chains": 16,
  "semantic_drift.num_steps": 3_000,
  "semantic_drift.num_sites": (8, 16, 32, 64),
  "semantic_drift.temperatures": (0.5, 1.0, 2.0, 4.0, 8.0),
  "coupling.num_pairs": 32,
  "coupling.num_steps": 4_000,
  "coupling.num_sites": (4, 8, 16, 32),
  "coupling.temperatures": (0.5, 1.0, 2.0, 4.0, 8.0),
  "attractors.num_chains": 20,
  "attractors.num_steps": 5_000,
  "mh_traps.num_traps": 10,
  "mh_traps.num_steps": 1_000,
}


def _get(config, key: str):
  for part in key.split("."):
    config = config[part]
  return config


def _set(config, key: str, value) -> None:
  *path, last = key.split(".")
  for part in path:
    config = config[part]
  config[last] = value


def scaled(config):
  """The config with scale="paper" applied (a copy): each PAPER_SIZES key still at its
  default-scale value (DEFAULT_SIZES, those of configs/glauber_study.py) takes the paper's."""
  if checks.check_choice(config, "scale", SCALES) == "default":
    return config
  out = config.copy_and_resolve_references()
  with out.unlocked():
    for key, value in PAPER_SIZES.items():
      if _get(out, key) == DEFAULT_SIZES[key]:
        _set(out, key, value)
  return out


def validate(config) -> None:
  """Checks every key the job reads; loads nothing and writes nothing."""
  checks.check_choice(config, "scale", SCALES)
  stages.validate(config, STAGES)
  for key in ("embedding_model", "topic_scorer"):
    checks.check(isinstance(checks.get(config, key), str), key, config[key], "must be a string")


def _seconds(s) -> str:
  return "" if s is None else f"{s:.0f}"


CONFIG_FILE = "configs/glauber_study.py"


def _leaves(config, prefix: str = "") -> dict:
  """{dotted key: value} of a ConfigDict's fields."""
  out = {}
  for k, v in config.items():
    if hasattr(v, "items"):
      out.update(_leaves(v, f"{prefix}{k}."))
    else:
      out[prefix + k] = v
  return out


def _flag_value(v) -> str | None:
  """v as ml_collections parses an override (None: no override can give it)."""
  if isinstance(v, str):
    return v
  if isinstance(v, (bool, int, float)):
    return repr(v)
  if isinstance(v, (tuple, list)) and all(isinstance(x, (str, bool, int, float)) for x in v):
    items = [json.dumps(x, ensure_ascii=False) if isinstance(x, str) else repr(x) for x in v]
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"  # a Python literal
  return None


def command(config, workdir) -> str:
  """The report's Command line: `python sample.py --config configs/glauber_study.py --workdir
  DIR` and one override per key whose value differs from that file's, which reproduces the run
  (the study's `scale` is applied by the job, so `config` is the one given, unscaled); where
  no command line from that file can give this config (other keys, a value no override can
  write), says so instead of naming a command that would run another config."""
  import importlib
  import shlex

  try:
    base = importlib.import_module(CONFIG_FILE[:-3].replace("/", ".")).get_config()
  except ImportError as e:
    return f"Command: not shown ({CONFIG_FILE} cannot be imported: {e}); the config is below."
  given, default = _leaves(config), _leaves(base)
  extra, missing = sorted(set(given) - set(default)), sorted(set(default) - set(given))
  changed = [k for k in given if k in default and given[k] != default[k]]
  unwritable = [k for k in changed if _flag_value(given[k]) is None]
  if extra or missing or unwritable:
    why = "; ".join(
      f"{what} {', '.join(keys)}"
      for what, keys in (
        ("keys it lacks:", extra),
        ("keys it has and this config does not:", missing),
        ("values no override can write:", unwritable),
      )
      if keys
    )
    return (
      f"Command: no command line from {CONFIG_FILE} reproduces this run ({why}); rerun it "
      "with its own config file. The full config is below (and in config.json)."
    )
  lines = [f"python sample.py --config {CONFIG_FILE} --workdir {shlex.quote(str(workdir))}"]
  lines += [shlex.quote(f"--config.{k}={_flag_value(given[k])}") for k in sorted(changed)]
  return (
    f"Command (reproduces this run: every key that differs from {CONFIG_FILE}, "
    f"{len(changed)} overrides):\n\n```sh\n" + " \\\n  ".join(lines) + "\n```"
  )


def preamble(ctx, command_line: str) -> str:
  """The model's identity, the command, the wall time of each stage and the config."""
  c, model = ctx.config, ctx.model
  params = sum(x.size for x in jax.tree.leaves(nnx.state(model)))
  rows = [
    [name, f"{res.get('seconds', float('nan')):.0f}", _seconds(res.get("seconds_chains"))]
    for name, res in ctx.results.items()
  ]
  total = sum(res.get("seconds", 0.0) for res in ctx.results.values())
  return "\n".join(
    [
      f"Model: `{model_name(c.model)}` ({type(model).__name__}, {params / 1e6:.1f}M parameters, "
      f"vocabulary {model.config.vocab_size}); dtype {c.dtype}; scale {c.scale}.\n",
      command_line + "\n",
      "Wall time per stage (seconds, as first computed; a resumed stage keeps its time):\n",
      markdown_table(
        ["stage", "seconds", "of which the recorded chains"], rows + [["total", f"{total:.0f}", ""]]
      ),
      "<details><summary>config</summary>\n\n```json\n"
      + json.dumps(c.to_dict(), indent=1, default=str)
      + "\n```\n</details>\n",
    ]
  )


def run(config, workdir: str) -> dict:
  command_line = command(config, workdir)  # of the config as given (the job scales it)
  config = scaled(config)
  validate(config)
  if (stored := finished(config, workdir)) is not None:
    return stored
  title = "Paper A study: incompatibility, mixing and the semantic landscape"
  return stages.run(
    config,
    workdir,
    STAGES,
    title,
    desc="study",
    preamble=lambda ctx: preamble(ctx, command_line),
  )
