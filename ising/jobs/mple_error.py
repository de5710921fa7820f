"""`python train.py --config configs/ising_mple_error.py --workdir DIR`: PaDIR Figures 1 and 2.

The mean squared parameter error E||theta_hat - theta*||^2 of the k-MPLE versus the sample
size n, for every k and mask mode, on the clique model of eq. (5) with exact samples; beside it
the exact asymptote Tr Sigma_k / n (ising.asymptotics). One figure per coupling J.
"""

from __future__ import annotations

import jax
import matplotlib
import matplotlib.ticker
import numpy as np
from tqdm import tqdm

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from gmlm import checks  # noqa: E402
from gmlm.runs import RunDir, markdown_table  # noqa: E402
from ising import mple  # noqa: E402
from ising.asymptotics import kmple_asymptotics  # noqa: E402

ENTRY_POINT = "train.py"
QUICK = {"sample_sizes": (200, 2000), "repetitions": 3}


def validate(config) -> None:
  """Checks every key `run` reads; computes nothing."""
  mple.check_config(config)
  checks.check_ints(config, "sample_sizes", lo=1)


def run(config, workdir: str) -> dict:
  """Figures 1 and 2: mean squared parameter error of the k-MPLE vs n, one PNG per J."""
  validate(config)
  run_dir = RunDir(workdir, config)  # the config as given (quick=True, not QUICK's values)
  results = measure(mple.with_quick(config, QUICK), run_dir)
  run_dir.write_results(results)
  render(run_dir, config, results)
  return results


def measure(config, run_dir: RunDir | None = None) -> dict:
  """Per J, mask mode, k and n: mean and std of the squared error; Tr Sigma_k per J. With
  run_dir, each finished (J, n) cell of fits is stored there: a killed run, rerun, skips them."""
  modes, ks = mple.parse_masks(config.masks), sorted(set(config.ks))
  sizes, reps = [int(n) for n in config.sample_sizes], int(config.repetitions)
  results = {
    "sample_sizes": sizes,
    "ks": ks,
    "masks": modes,
    "repetitions": reps,
    "errors": {},
    "exact_trace_sigma": {},
    "larger_k_lower_error": {},
    "ordering_in_k": {},
    "nonconverged_fits": 0,
    "figures": [figure_name(J) for J in config.couplings],
  }
  bar = tqdm(total=len(config.couplings) * len(sizes), desc="error vs n", unit="(J, n)")
  for c_idx, coupling in enumerate(config.couplings):
    model = mple.model_for(config.n_sites, coupling, config.field)
    jk = mple.jkey(coupling)
    base = jax.random.fold_in(jax.random.key(config.seed), c_idx)
    errs = {m: {k: np.zeros((len(sizes), reps)) for k in ks} for m in modes}
    for i, n in enumerate(sizes):
      err, failed = mple.stored_squared_errors(
        run_dir,
        f"mple_error_J{coupling:g}_n{n}",
        model,
        ks,
        modes,
        n,
        reps,
        jax.random.fold_in(base, i),
      )
      results["nonconverged_fits"] += failed
      for (m, k), values in err.items():
        errs[m][k][i] = values
      bar.update(1)
    results["exact_trace_sigma"][jk] = {
      m: {str(k): float(np.trace(kmple_asymptotics(model, k, m)["sigma"])) for k in ks}
      for m in modes
    }
    results["errors"][jk] = {
      m: {str(k): {"mean": errs[m][k].mean(1), "std": errs[m][k].std(1)} for k in ks} for m in modes
    }
    results["ordering_in_k"][jk] = {
      m: [mple.ordering([errs[m][k][i].mean() for k in ks]) for i in range(len(sizes))]
      for m in modes
    }
    results["larger_k_lower_error"][jk] = {
      m: [
        bool(all(errs[m][a][i].mean() > errs[m][b][i].mean() for a, b in zip(ks, ks[1:])))
        for i in range(len(sizes))
      ]
      for m in modes
    }
  bar.close()
  return results


def figure_name(coupling: float) -> str:
  return f"error_vs_samples_J{coupling:g}.png"


def render(run_dir: RunDir, config, results: dict) -> None:
  """The figures and report.md from `results` alone (results.json redraws them)."""
  for coupling in config.couplings:
    run_dir.savefig(_figure(config, results, coupling), figure_name(coupling))
  run_dir.write_report(_report(config, results))


def _figure(config, results: dict, coupling: float):
  sizes, ks, modes = results["sample_sizes"], results["ks"], results["masks"]
  jk = mple.jkey(coupling)
  fig, axes = plt.subplots(1, len(modes), figsize=(5.2 * len(modes), 4.2), squeeze=False)
  for ax, m in zip(axes[0], modes):
    for k in ks:
      e = results["errors"][jk][m][str(k)]
      line = ax.errorbar(
        sizes,
        e["mean"],
        yerr=0.5 * np.asarray(e["std"]),
        marker="o",
        ms=3,
        capsize=2,
        label=f"k={k}",
      )
      trace = results["exact_trace_sigma"][jk][m][str(k)]
      ax.plot(sizes, trace / np.asarray(sizes), ls=":", color=line[0].get_color(), lw=1)
    ax.set(
      xscale="log",
      yscale="log",
      xlabel="sample size n",
      ylabel="||theta_hat - theta*||^2",
      title=f"J={coupling:g}, masks={m}\n(dotted: Tr Sigma_k / n)",
    )
    ax.set_xticks(sizes, [_short(n) for n in sizes])  # "5000" and "10000" ran into each other
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.legend(fontsize=8)
  return fig


def _short(n: int) -> str:
  """A sample size as a short tick label: 500, 2k, 10k, 1.5k."""
  return f"{n / 1000:g}k" if n >= 1000 else f"{n:g}"


def _report(config, results: dict) -> str:
  sizes, ks, modes = results["sample_sizes"], results["ks"], results["masks"]
  report = [
    "# k-MPLE squared parameter error vs sample size (PaDIR Figures 1, L.2)\n",
    f"Clique model N = |C| = {config.n_sites}, h = {config.field:g}; exact samples; "
    f"{results['repetitions']} repetitions per point; error = ||theta_hat - theta*||^2 "
    "over theta = (h, J_i<j); Newton on the k-pseudolikelihood. "
    f"{mple.MASK_NOTE}\n",
  ]
  for coupling in config.couplings:
    jk = mple.jkey(coupling)
    report.append(f"\n## J = {coupling:g}  (figure `{figure_name(coupling)}`)\n")
    for m in modes:
      err = results["errors"][jk][m]
      rows = [
        [n]
        + [f"{err[str(k)]['mean'][i]:.3g} ± {0.5 * err[str(k)]['std'][i]:.2g}" for k in ks]
        + [results["ordering_in_k"][jk][m][i]]
        for i, n in enumerate(sizes)
      ]
      rows.append(
        ["Tr Sigma_k (exact)"] + [results["exact_trace_sigma"][jk][m][str(k)] for k in ks] + [""]
      )
      report.append(
        f"\nmasks = `{m}`: mean error ± 0.5 std; last column: error strictly "
        "decreasing in k at this n? ('ties' = non-increasing with some consecutive "
        f"means within {mple.TIE_RTOL:.1%})\n\n"
      )
      report.append(markdown_table(["n"] + [f"k={k}" for k in ks] + ["larger k lower?"], rows))
  report.append(f"\nFits not reaching the gradient tolerance: {results['nonconverged_fits']}.\n")
  return "".join(report)
