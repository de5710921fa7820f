"""`python sample.py --config configs/glauber_coupling.py --workdir DIR`: coupling times.

On a grid of (T, n), pairs of chains start from two different passages (truncated to n free
tokens after the prefix), update the same site each step and draw the two new tokens from a
maximal coupling of their conditionals (`glauber.coupling`). Reports, per (T, n), the fraction
of pairs coupled within the budget and the median coupling time, and plots the latter.
"""

from __future__ import annotations

import jax
import numpy as np

from glauber import chains, coupling, init_states
from glauber.jobs.sample import load_model
from gmlm.runs import RunDir, markdown_table

ENTRY_POINT = "sample.py"


def run(config, workdir: str) -> dict:
  rd = RunDir(workdir, config)
  model, tokenizer = load_model(config.model, config.get("dtype", "float32"))
  vocab_size = model.config.vocab_size
  candidates = chains.candidate_ids(tokenizer, vocab_size, exclude_pattern=config.exclude_pattern
                                    or None)
  max_length = init_states.max_sequence_length(model)
  rows, table = [], {}
  for n in config.num_sites:
    lay = init_states.layout(tokenizer, n, config.prefix, max_length)
    x_BL = init_states.from_text(tokenizer, lay, [config.text_x], config.num_pairs)
    y_BL = init_states.from_text(tokenizer, lay, [config.text_y], config.num_pairs)
    for T in config.temperatures:
      spec = chains.make_spec(candidates, vocab_size, lay.mask_id, lay.offset, n, T)
      _, _, meet_B, distance_RB = coupling.run(jax.random.key(config.seed), model, spec, x_BL,
                                               y_BL, config.num_steps // config.record_every,
                                               config.record_every)
      meet_B = np.asarray(meet_B)
      coupled = float(np.mean(meet_B >= 0))
      median = float(np.median(np.where(meet_B >= 0, meet_B, np.inf)))
      table[(n, T)] = median
      rows.append([n, T, coupled, median if np.isfinite(median) else f"> {config.num_steps}",
                   float(np.asarray(distance_RB)[-1].mean())])
      rd.log_metrics(0, {"n": n, "T": T, "coupled": coupled, "median_meet": str(median)})
  header = ["n", "T", "fraction coupled", "median coupling time", "final mean Hamming distance"]
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(6, 3.5))
  for n in config.num_sites:
    med = [table[(n, T)] for T in config.temperatures]
    ax.plot(config.temperatures, np.minimum(med, config.num_steps), "o-", label=f"n = {n}")
  ax.axhline(config.num_steps, color="gray", ls=":", label="budget (not coupled)")
  ax.set_xscale("log")
  ax.set_xlabel("temperature T")
  ax.set_ylabel("median coupling time (steps)")
  ax.legend()
  rd.savefig(fig, "coupling_time.png")
  plt.close(fig)
  results = {"rows": [dict(zip(header, r)) for r in rows]}
  rd.write_results(results)
  rd.write_report(f"# Maximal coupling times: {config.model or 'SPLADE-tiny (default)'}\n\n"
                  f"{config.num_pairs} pairs per cell, {config.num_steps} steps, passages "
                  f"{config.text_x!r} vs {config.text_y!r}.\n\n" + markdown_table(header, rows)
                  + "\n![coupling time](coupling_time.png)\n")
  return results
