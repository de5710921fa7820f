"""`python sample.py --config configs/glauber_coupling.py --workdir DIR`: coupling times.

On a grid of (T, n), pairs of chains start from two different passages (truncated to n free
tokens after the prefix), update the same site each step and draw the two new tokens from a
maximal coupling of their conditionals (`glauber.coupling`). Reports, per (T, n), the fraction
of pairs coupled within the budget and the median coupling time, and plots the latter. A
progress bar counts the coupled steps of all cells; a rerun of a finished run returns its
stored results.
"""

from __future__ import annotations

import jax
import numpy as np

from glauber import chains, coupling, init_states, oracle
from glauber.jobs import finished
from glauber.layout import Layout, max_sequence_length
from glauber.oracle import load_mlm, model_name, validate_model
from gmlm import checks
from gmlm.runs import RunDir, markdown_table

ENTRY_POINT = "sample.py"

HEADER = ["n", "T", "fraction coupled", "median coupling time", "final mean Hamming distance"]


def validate(config) -> None:
  """Checks every key the job reads; loads nothing and writes nothing."""
  validate_model(config)
  for key in ("exclude_pattern", "prefix"):
    checks.check(isinstance(checks.get(config, key), str), key, config[key], "must be a string")
  for key in ("text_x", "text_y"):
    text = checks.get(config, key)
    checks.check(
      isinstance(text, str) and bool(text.strip()), key, text, "must be a non-empty passage"
    )
  checks.check_ints(config, "num_sites", lo=1)
  oracle.check_sites(config, "num_sites")
  checks.check_floats(config, "temperatures", lo=0, inf_ok=True)
  checks.check_int(config, "num_pairs", lo=1)
  num_steps = checks.check_int(config, "num_steps", lo=1)
  checks.check_int(config, "record_every", lo=1, hi=num_steps)
  checks.check_multiple(config, "num_steps", "record_every")  # was rounded down silently
  checks.check_int(config, "seed", lo=0)


def run(config, workdir: str) -> dict:
  validate(config)
  if (stored := finished(config, workdir)) is not None:
    return stored
  model, tokenizer = load_mlm(config.model, config.dtype, config.allow_pickle)
  rd = RunDir(workdir, config)
  rows = measure(config, model, tokenizer, rd)
  rd.savefig(figure(config, rows), "coupling_time.png")
  results = {"rows": [dict(zip(HEADER, r)) for r in rows]}
  rd.write_report(
    f"# Maximal coupling times: {model_name(config.model)}\n\n"
    f"{config.num_pairs} pairs per cell, {config.num_steps} steps, passages "
    f"{config.text_x!r} vs {config.text_y!r}.\n\n"
    + markdown_table(HEADER, rows)
    + "\n![coupling time](coupling_time.png)\n"
  )
  rd.write_results(results)  # last: a run with results.json is finished
  return results


def measure(config, model, tokenizer, rd: RunDir) -> list[list]:
  """One row per (n, T) cell: [n, T, fraction coupled, median coupling time (or "> budget"),
  final mean Hamming distance]."""
  from tqdm import tqdm

  vocab_size = model.config.vocab_size
  candidates = chains.candidate_ids(
    tokenizer, vocab_size, exclude_pattern=config.exclude_pattern or None
  )
  max_length = max_sequence_length(model)
  num_records = config.num_steps // config.record_every
  cells = len(config.num_sites) * len(config.temperatures)
  bar = tqdm(total=cells * num_records * config.record_every, desc="coupled steps", unit="step")
  rows = []
  for n in config.num_sites:
    lay = Layout.from_tokenizer(tokenizer, n, config.prefix, max_length)
    x0_BL = init_states.from_text(tokenizer, lay, [config.text_x], config.num_pairs)
    y0_BL = init_states.from_text(tokenizer, lay, [config.text_y], config.num_pairs)
    for T in config.temperatures:
      bar.set_postfix(n=n, T=T)
      spec = chains.make_spec(candidates, vocab_size, lay, T)
      key, x_BL, y_BL, meet_B, distance_RB = jax.random.key(config.seed), x0_BL, y0_BL, None, None
      for r in range(num_records):  # one record per call: the same draws as one long call
        x_BL, y_BL, meet_B, distance_RB = coupling.run(
          key,
          model,
          spec,
          x_BL,
          y_BL,
          1,
          config.record_every,
          start_step=r * config.record_every,
          meet_B=meet_B,
        )
        bar.update(config.record_every)
      meet_B = np.asarray(meet_B)
      coupled = float(np.mean(meet_B >= 0))
      median = float(np.median(np.where(meet_B >= 0, meet_B, np.inf)))
      rows.append(
        [
          n,
          T,
          coupled,
          median if np.isfinite(median) else f"> {config.num_steps}",
          float(np.asarray(distance_RB)[-1].mean()),
        ]
      )
      rd.log_metrics(0, {"n": n, "T": T, "coupled": coupled, "median_meet": str(median)})
  bar.close()
  return rows


def figure(config, rows: list[list]):
  """Median coupling time against T (log axis, one tick per measured T), one line per n."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  median = {(r[0], r[1]): r[3] if not isinstance(r[3], str) else np.inf for r in rows}
  fig, ax = plt.subplots(figsize=(6, 3.5))
  for n in config.num_sites:
    med = [median[(n, T)] for T in config.temperatures]
    ax.plot(config.temperatures, np.minimum(med, config.num_steps), "o-", label=f"n = {n}")
  ax.axhline(config.num_steps, color="gray", ls=":", label="budget (not coupled)")
  ax.set_xscale("log")
  ax.set_xticks(config.temperatures, [f"{T:g}" for T in config.temperatures])
  ax.minorticks_off()
  ax.set(xlabel="temperature T", ylabel="median coupling time (steps)")
  ax.set_title(
    f"Maximally coupled Glauber chains: {model_name(config.model)}, {config.num_pairs} pairs",
    fontsize=10,
  )
  ax.legend()
  return fig
