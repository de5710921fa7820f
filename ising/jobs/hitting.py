"""`python sample.py --config configs/ising_hitting.py --workdir DIR`: PaDIR Figure L.3.

Appendix L.7: steps for k-Gibbs (every k) and the independent parallel sampler to reach the
large mode R_1 (eq. 6) from the small mode R_-1 (eq. 7) on the clique model of eq. (5), across
a grid of couplings J, with the exact law of the hitting time from the transition matrix
beside the simulated one (N <= 12).
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

from gmlm import checks  # noqa: E402
from gmlm.runs import RunDir, markdown_table  # noqa: E402
from ising import exact, samplers  # noqa: E402
from ising.model import MAX_ENUMERATION_N, all_states, clique_model, exact_distribution  # noqa: E402

ENTRY_POINT = "sample.py"

VARIANTS = {
  # name: (field inside C, field outside C) as multiples of config.field
  "all_fields": (1.0, 1.0),  # h_i = h for every site (the paper's figure)
  "clique_fields": (1.0, 0.0),  # Assumption 5 variant: fields only inside C
}


def _start_states(key, model, n, c, num_chains):
  """Chains start in R_-1: clique spins -1, the other sites from p conditioned on R_-1
  (exact when N is enumerable; otherwise uniform). Returns (x0_BN, start law over states or
  None when N is too large to enumerate)."""
  if n > MAX_ENUMERATION_N:
    return samplers.mode_states(num_chains, n, c, -1, key=key), None
  states_SN = all_states(n)
  in_minus_S = np.all(states_SN[:, :c] == -1, axis=1)
  start_S = exact_distribution(model) * in_minus_S
  start_S /= start_S.sum()
  idx_B = jax.random.choice(key, start_S.shape[0], (num_chains,), p=start_S)
  return states_SN[np.asarray(idx_B)], start_S


def validate(config) -> None:
  """Checks every key `run` reads (gmlm.checks); computes nothing."""
  n = checks.check_int(config, "n", lo=2)
  checks.check_int(config, "clique_size", lo=1, hi=n)
  checks.check_float(config, "field")
  variants = checks.get(config, "variants")
  checks.check(
    isinstance(variants, (list, tuple))
    and len(variants) > 0
    and all(v in VARIANTS for v in variants),
    "variants",
    variants,
    f"must be a non-empty list of {', '.join(map(repr, VARIANTS))}",
  )
  checks.check_floats(config, "couplings", lo=0, lo_open=True)
  ks = checks.get(config, "ks")
  checks.check_ints(config, "ks")
  bad = [k for k in ks if not 1 <= k <= n]
  checks.check(not bad, "ks", ks, f"block sizes must be in [1, n={n}]; {bad} are not")
  for key in ("include_parallel", "exact"):
    checks.check(
      isinstance(checks.get(config, key), bool),
      key,
      checks.get(config, key),
      "must be True or False",
    )
  checks.check_int(config, "num_chains", lo=1)
  checks.check_int(config, "budget", lo=1)
  checks.check_int(config, "seed", lo=0)


def _samplers(config) -> list[tuple[str, int]]:
  """(method, k) of every sampler compared: k-Gibbs for each k, then the parallel sampler."""
  return [("gibbs", k) for k in config.ks] + ([("parallel", 1)] if config.include_parallel else [])


def run(config, workdir: str) -> dict:
  """Hitting times of R_1 for every (variant, J, sampler); results.json, figure, report.md."""
  validate(config)
  run_dir = RunDir(workdir, config)
  results = measure(config, run_dir)
  run_dir.write_results(results)
  render(run_dir, config, results)
  return results


def measure(config, run_dir: RunDir | None = None) -> dict:
  """Simulated (and, for N <= 12, exact) hitting-time statistics per variant, J and sampler.
  With run_dir, each finished (variant, J, sampler) cell is stored there (RunDir.cell): a
  killed run, rerun, skips the cells it finished (each cell has its own key)."""
  n, c, budget = config.n, config.clique_size, config.budget
  do_exact = config.exact and n <= exact.MAX_DENSE_N
  key = jax.random.key(config.seed)
  results = {
    "budget": budget,
    "num_chains": config.num_chains,
    "variants": {},
    "start": "p | R_-1" if n <= MAX_ENUMERATION_N else "uniform",
  }
  jobs = [(v, J) for v in config.variants for J in config.couplings]
  t0 = time.time()
  bar = tqdm(total=len(jobs) * len(_samplers(config)), desc="hitting times", unit="run")
  for variant, J in jobs:
    fin, fout = VARIANTS[variant]
    model = clique_model(n, c, J, config.field * fin, config.field * fout)
    x0_BN, start_S = _start_states(jax.random.fold_in(key, 0), model, n, c, config.num_chains)
    target_S = np.all(all_states(n)[:, :c] == 1, axis=1) if do_exact else None
    for method, k in _samplers(config):
      name = f"k={k}" if method == "gibbs" else "parallel"

      def cell(method=method, k=k) -> dict:
        hits_B = np.asarray(
          samplers.hitting_times_to_mode(
            jax.random.fold_in(key, 1 + k + 100 * (method == "parallel")),
            model,
            x0_BN,
            c,
            budget,
            method=method,
            k=k,
          )
        )
        steps_B = np.where(hits_B < 0, budget, hits_B).astype(float)  # unreached: the budget
        entry = {
          "mean_steps": float(steps_B.mean()),
          "std_steps": float(steps_B.std()),
          "frac_reached": float(np.mean(hits_B > 0)),
        }
        if do_exact:
          P_SS = exact.transition_matrix(model, method, k)
          surv_T = np.clip(exact.hitting_time_survival(P_SS, start_S, target_S, budget), 0, 1)
          # E[min(tau, budget)] = sum_{t < budget} P(tau > t)
          entry["exact_mean_steps"] = float(surv_T[:-1].sum())
          entry["exact_prob_reached"] = float(1.0 - surv_T[-1])
        return entry

      entry = cell() if run_dir is None else run_dir.cell(f"hitting_{variant}_J{J:g}_{name}", cell)
      results["variants"].setdefault(variant, {}).setdefault(f"{J:g}", {})[name] = entry
      bar.update()
  bar.close()
  results["seconds"] = time.time() - t0
  return results


def render(run_dir: RunDir, config, results: dict) -> None:
  """Figure and report from results.json alone (re-render without re-running)."""
  run_dir.savefig(_figure(config, results), "hitting_times.png")
  run_dir.write_report(_report(config, results))


def _figure(config, results):
  variants = list(results["variants"])
  fig, axes = plt.subplots(1, len(variants), figsize=(6.5 * len(variants), 4.8), squeeze=False)
  cmap = plt.get_cmap("viridis")
  Js = np.array(config.couplings, float)
  for ax, variant in zip(axes[0], variants):
    res = results["variants"][variant]
    for method, k in _samplers(config):
      name = f"k={k}" if method == "gibbs" else "parallel"
      color = "black" if method == "parallel" else cmap((k - 1) / max(1, config.n - 1))
      mean = np.array([res[f"{J:g}"][name]["mean_steps"] for J in Js])
      std = np.array([res[f"{J:g}"][name]["std_steps"] for J in Js])
      ax.errorbar(
        Js,
        mean,
        yerr=0.5 * std,
        color=color,
        marker="o",
        ms=3,
        capsize=2,
        lw=1,
        ls=":" if method == "parallel" else "-",
        label=name,
      )
      if "exact_mean_steps" in res[f"{Js[0]:g}"][name]:
        ax.plot(
          Js,
          [res[f"{J:g}"][name]["exact_mean_steps"] for J in Js],
          color=color,
          lw=0.8,
          ls="--",
          alpha=0.7,
        )
    ax.axhline(config.budget, color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(Js, [f"{J:g}" for J in Js])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("coupling J")
    ax.set_ylabel(f"steps to reach R_1 (budget {config.budget})")
    fields = (
      "h_i = %g on all sites" % config.field
      if variant == "all_fields"
      else "h_i = %g inside C only (Assumption 5)" % config.field
    )
    ax.set_title(f"N={config.n}, |C|={config.clique_size}, {fields}", fontsize=9)
  axes[0][-1].legend(
    fontsize=7, ncol=2, title="markers: simulated ± 0.5 sd\ndashed: exact", title_fontsize=7
  )
  fig.suptitle(
    "Steps from R_-1 to R_1: k-Gibbs vs the independent parallel sampler (PaDIR Fig. L.3)"
  )
  return fig


def _start_note(results) -> str:
  if results.get("start", "p | R_-1") == "p | R_-1":
    return "Chains start in R_-1 with the other sites drawn from p | R_-1."
  return (
    f"Chains start in R_-1 with the other sites drawn uniformly: p | R_-1 needs all 2^N "
    f"states (N <= {MAX_ENUMERATION_N})."
  )


def _exact_note(config) -> str:
  """Where the exact check is off, why its columns read nan."""
  if not config.exact:
    return "The `exact` columns are nan: the exact check is off (config.exact=False).\n"
  if config.n > exact.MAX_DENSE_N:
    return (
      f"The `exact` columns are nan: the exact transition matrix has 2^N x 2^N entries, "
      f"computed for N <= {exact.MAX_DENSE_N} only (N = {config.n}).\n"
    )
  return ""


def _report(config, results) -> str:
  hmax = abs(config.field)
  md = [
    "# Hitting times of R_1 from R_-1 (PaDIR Figure L.3)\n",
    f"N = {config.n}, |C| = {config.clique_size}, field {config.field}, "
    f"budget {config.budget} steps, {config.num_chains} chains (repetitions) per point, "
    f"seed {config.seed}; "
    f"{results['seconds']:.0f} s. {_start_note(results)}\n",
    "Unreached chains count as the budget. `exact` columns come from the exact transition "
    "matrix (E[min(tau, budget)] and P(tau <= budget)), an independent check of the "
    "simulation.\n" + _exact_note(config),
    "![hitting times](hitting_times.png)\n",
    "Couplings with J >= max|h_i| (marked *) satisfy Assumption 5's J >= ||h||_inf: there the "
    "independent parallel sampler is predicted to stay in R_-1 (Proposition 5), and k-Gibbs "
    "needs k >= |C| to jump out quickly (Proposition 4). In eq. (5) the sites outside C are "
    "independent of the clique, so the two field variants give the same law for the hitting "
    "time of R_1.\n",
  ]
  rows, par = [], []
  for variant, by_J in results["variants"].items():
    for J, by_sampler in by_J.items():
      star = "*" if float(J) >= hmax else ""
      for name, e in by_sampler.items():
        rows.append(
          [
            variant,
            J + star,
            name,
            e["mean_steps"],
            e["std_steps"],
            e["frac_reached"],
            e.get("exact_mean_steps", float("nan")),
            e.get("exact_prob_reached", float("nan")),
          ]
        )
        if name == "parallel":
          par.append(f"{variant} J={J}{star}: {e['frac_reached']:.3f}")
  if par:
    md.append(
      "Independent parallel sampler, fraction of chains reaching R_1 within budget: "
      + "; ".join(par)
      + ".\n"
    )
  md.append(
    markdown_table(
      ["variant", "J", "sampler", "mean steps", "sd", "reached", "exact mean", "exact P(reach)"],
      rows,
    )
  )
  return "\n".join(md)
