"""Sampling experiments on Ising testbeds (run through `sample.py`).

`hitting_times`: PaDIR Figure L.3 / Appendix L.7 — steps for k-Gibbs (every k) and the
independent parallel sampler to reach the large mode R_1 (eq. 6) from the small mode R_-1
(eq. 7) on the clique model of eq. (5), across a grid of couplings J, with the exact law of
the hitting time from the transition matrix beside the simulated one.
"""

from __future__ import annotations

import time

import jax
import matplotlib
import matplotlib.ticker
import numpy as np
from tqdm import tqdm

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ising import exact, samplers  # noqa: E402
from ising.model import MAX_ENUMERATION_N, all_states, clique_model, exact_distribution  # noqa: E402
from gmlm.runs import RunDir, markdown_table  # noqa: E402

ENTRY_POINT = "sample.py"

VARIANTS = {
    # name: (field inside C, field outside C) as multiples of config.field
    "all_fields": (1.0, 1.0),      # h_i = h for every site (the paper's figure)
    "clique_fields": (1.0, 0.0),   # Assumption 5 variant: fields only inside C
}


def _start_states(key, model, n, c, num_chains):
  """Chains start in R_-1: clique spins -1, the other sites from p conditioned on R_-1
  (exact when N is enumerable; otherwise uniform)."""
  if n > MAX_ENUMERATION_N:
    return samplers.mode_states(num_chains, n, c, -1, key=key), None
  states = all_states(n)
  in_minus = np.all(states[:, :c] == -1, axis=1)
  start = exact_distribution(model) * in_minus
  start /= start.sum()
  idx = jax.random.choice(key, start.shape[0], (num_chains,), p=start)
  return states[np.asarray(idx)], start


def _validate(config) -> None:
  if not 1 <= config.clique_size <= config.n:
    raise ValueError(f"config.clique_size={config.clique_size} must be in [1, n={config.n}]")
  bad = [k for k in config.ks if not 1 <= k <= config.n]
  if bad:
    raise ValueError(f"config.ks contains {bad}: block sizes must be in [1, n={config.n}]")
  if config.num_chains < 1:
    raise ValueError(f"config.num_chains={config.num_chains} must be >= 1")
  if config.budget < 1:
    raise ValueError(f"config.budget={config.budget} must be >= 1")
  unknown = [v for v in config.variants if v not in VARIANTS]
  if unknown:
    raise ValueError(f"config.variants has unknown {unknown}; choose from {list(VARIANTS)}")


def run(config, workdir) -> dict:
  _validate(config)
  run = RunDir(workdir, config)
  n, c, B = config.n, config.clique_size, config.budget
  samplers_ = [("gibbs", k) for k in config.ks] + ([("parallel", 1)] if config.include_parallel else [])
  do_exact = config.exact and n <= exact.MAX_DENSE_N
  key = jax.random.key(config.seed)
  results = {"budget": B, "num_chains": config.num_chains, "variants": {}}
  jobs = [(v, J) for v in config.variants for J in config.couplings]
  t0 = time.time()
  bar = tqdm(total=len(jobs) * len(samplers_), desc="hitting times", unit="run")
  for variant, J in jobs:
    fin, fout = VARIANTS[variant]
    model = clique_model(n, c, J, config.field * fin, config.field * fout)
    x0, start = _start_states(jax.random.fold_in(key, 0), model, n, c, config.num_chains)
    target = np.all(all_states(n)[:, :c] == 1, axis=1) if do_exact else None
    for method, k in samplers_:
      name = f"k={k}" if method == "gibbs" else "parallel"
      hits = np.asarray(samplers.hitting_times_to_mode(
          jax.random.fold_in(key, 1 + k + 100 * (method == "parallel")), model, x0, c, B,
          method=method, k=k))
      steps = np.where(hits < 0, B, hits).astype(float)  # unreached counts as the budget
      entry = {"mean_steps": float(steps.mean()), "std_steps": float(steps.std()),
               "frac_reached": float(np.mean(hits > 0))}
      if do_exact:
        surv = exact.hitting_time_survival(exact.transition_matrix(model, method, k), start, target, B)
        entry["exact_mean_steps"] = float(surv[:-1].sum())  # E[min(tau, B)] = sum_{t<B} P(tau > t)
        entry["exact_prob_reached"] = float(1.0 - surv[-1])
      results["variants"].setdefault(variant, {}).setdefault(f"{J:g}", {})[name] = entry
      bar.update()
  bar.close()
  results["seconds"] = time.time() - t0
  run.write_results(results)
  render(run, config, results)
  return results


def render(run: RunDir, config, results: dict) -> None:
  """Figure and report from results.json alone (re-render without re-running)."""
  samplers_ = [("gibbs", k) for k in config.ks] + ([("parallel", 1)] if config.include_parallel else [])
  _plot(run, config, results, samplers_)
  run.write_report(_report(config, results))


def _plot(run, config, results, samplers_) -> None:
  variants = list(results["variants"])
  fig, axes = plt.subplots(1, len(variants), figsize=(6.5 * len(variants), 4.8), squeeze=False)
  cmap = plt.get_cmap("viridis")
  Js = np.array(config.couplings, float)
  for ax, variant in zip(axes[0], variants):
    res = results["variants"][variant]
    for method, k in samplers_:
      name = f"k={k}" if method == "gibbs" else "parallel"
      color = "black" if method == "parallel" else cmap((k - 1) / max(1, config.n - 1))
      mean = np.array([res[f"{J:g}"][name]["mean_steps"] for J in Js])
      std = np.array([res[f"{J:g}"][name]["std_steps"] for J in Js])
      ax.errorbar(Js, mean, yerr=0.5 * std, color=color, marker="o", ms=3, capsize=2, lw=1,
                  ls=":" if method == "parallel" else "-", label=name)
      if "exact_mean_steps" in res[f"{Js[0]:g}"][name]:
        ax.plot(Js, [res[f"{J:g}"][name]["exact_mean_steps"] for J in Js], color=color, lw=0.8,
                ls="--", alpha=0.7)
    ax.axhline(config.budget, color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(Js, [f"{J:g}" for J in Js])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("coupling J")
    ax.set_ylabel(f"steps to reach R_1 (budget {config.budget})")
    fields = "h_i = %g on all sites" % config.field if variant == "all_fields" else \
        "h_i = %g inside C only (Assumption 5)" % config.field
    ax.set_title(f"N={config.n}, |C|={config.clique_size}, {fields}", fontsize=9)
  axes[0][-1].legend(fontsize=7, ncol=2, title="markers: simulated ± 0.5 sd\ndashed: exact", title_fontsize=7)
  fig.suptitle("Steps from R_-1 to R_1: k-Gibbs vs the independent parallel sampler (PaDIR Fig. L.3)")
  run.savefig(fig, "hitting_times.png")
  plt.close(fig)


def _report(config, results) -> str:
  hmax = config.field
  md = ["# Hitting times of R_1 from R_-1 (PaDIR Figure L.3)\n",
        f"N = {config.n}, |C| = {config.clique_size}, field {config.field}, budget {config.budget} steps, "
        f"{config.num_chains} chains (repetitions) per point, seed {config.seed}; "
        f"{results['seconds']:.0f} s. Chains start in R_-1 with the other sites drawn from p | R_-1.\n",
        "Unreached chains count as the budget. `exact` columns come from the exact transition matrix "
        "(E[min(tau, budget)] and P(tau <= budget)), an independent check of the simulation.\n",
        "![hitting times](hitting_times.png)\n",
        "Couplings with J >= max|h_i| (marked *) satisfy Assumption 5's J >= ||h||_inf: there the "
        "independent parallel sampler is predicted to stay in R_-1 (Proposition 5), and k-Gibbs needs "
        "k >= |C| to jump out quickly (Proposition 4). In eq. (5) the sites outside C are independent of "
        "the clique, so the two field variants give the same law for the hitting time of R_1.\n"]
  rows, par = [], []
  for variant, by_J in results["variants"].items():
    for J, by_sampler in by_J.items():
      star = "*" if float(J) >= hmax else ""
      for name, e in by_sampler.items():
        rows.append([variant, J + star, name, e["mean_steps"], e["std_steps"], e["frac_reached"],
                     e.get("exact_mean_steps", float("nan")), e.get("exact_prob_reached", float("nan"))])
        if name == "parallel":
          par.append(f"{variant} J={J}{star}: {e['frac_reached']:.3f}")
  if par:
    md.append("Independent parallel sampler, fraction of chains reaching R_1 within budget: "
              + "; ".join(par) + ".\n")
  md.append(markdown_table(["variant", "J", "sampler", "mean steps", "sd", "reached", "exact mean",
                            "exact P(reach)"], rows))
  return "\n".join(md)
