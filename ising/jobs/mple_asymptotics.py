"""`python train.py --config configs/ising_mple_asymptotics.py --workdir DIR`: Lemma 1 and
Theorems 1-2 of the PaDIR paper on the clique model.

The exact sandwich covariance Sigma_k = H_k^{-1} V_k H_k^{-1} (ising.asymptotics) against the
empirical n E||theta_hat - theta*||^2 of the k-MPLE at a large n; Theorem 1
(Sigma_{k+1} <= Sigma_k) and Theorem 2 (Sigma_k <= C_k I^{-1}, C_k the Poincare constant of
k-Gibbs) by eigenvalues, also on random models.
"""

from __future__ import annotations

import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from gmlm import checks  # noqa: E402
from gmlm.runs import RunDir, markdown_table  # noqa: E402
from ising import mple  # noqa: E402
from ising.asymptotics import fisher_information, kmple_asymptotics, psd_min_eig, theorem2_check  # noqa: E402

ENTRY_POINT = "train.py"
QUICK = {"n_large": 2000, "repetitions": 4}
FIGURES = ("asymptotic_traces.png", "theorem2_eigenvalues.png")


def validate(config) -> None:
  """Checks every key `run` reads; computes nothing."""
  mple.check_config(config)
  checks.check_int(config, "n_large", lo=1)
  if "random_models" in config:
    checks.check_int(config, "random_models", lo=0)


def run(config, workdir: str) -> dict:
  """Exact Tr Sigma_k vs n E||theta_hat - theta*||^2 at large n; Theorems 1 and 2."""
  validate(config)
  run_dir = RunDir(workdir, config)  # the config as given (quick=True, not QUICK's values)
  results = measure(mple.with_quick(config, QUICK), run_dir)
  if config.get("random_models", 0):  # Theorems 1-2 beyond the clique model
    results["random_models"] = mple.random_model_checks(
      int(config.random_models), int(config.seed), results["masks"]
    )
  run_dir.write_results(results)
  render(run_dir, config, results)
  return results


def measure(config, run_dir: RunDir | None = None) -> dict:
  """Per J and k: Tr Sigma_k, n E err^2 over the data sets, C_k and the Theorem 1-2 margins.
  With run_dir, each J's fits are stored there: a killed run, rerun, skips the finished ones."""
  modes, ks = mple.parse_masks(config.masks), sorted(set(config.ks))
  n_large, reps = int(config.n_large), int(config.repetitions)
  results = {
    "n_large": n_large,
    "repetitions": reps,
    "ks": ks,
    "masks": modes,
    "models": {},
    "nonconverged_fits": 0,
    "figures": list(FIGURES),
  }
  bar = tqdm(total=len(config.couplings), desc="asymptotics", unit="J")
  for c_idx, coupling in enumerate(config.couplings):
    model = mple.model_for(config.n_sites, coupling, config.field)
    base = jax.random.fold_in(jax.random.key(config.seed), c_idx)
    I_DD = fisher_information(model)
    I_inv = np.linalg.inv(I_DD)
    evals, evecs = np.linalg.eigh(I_DD)
    I_half = evecs @ np.diag(np.sqrt(evals)) @ evecs.T
    sig = {m: {k: kmple_asymptotics(model, k, m)["sigma"] for k in ks} for m in modes}
    out = {"trace_fisher_inv": float(np.trace(I_inv)), "k": {}}
    err, failed = mple.stored_squared_errors(
      run_dir, f"mple_asymptotics_J{coupling:g}", model, ks, modes, n_large, reps, base
    )
    results["nonconverged_fits"] += failed
    for k in ks:
      t2 = theorem2_check(model, k, "sampled")
      entry = {
        "poincare_constant": t2["poincare_constant"],
        "theorem2": t2,
        "trace_sigma": {},
        "empirical_n_mse": {},
        "rel_eigs": {},
        "theorem1_min_eig": {},
        "theorem2_margin": {},
      }
      for m in modes:
        nerr = n_large * err[m, k]
        entry["trace_sigma"][m] = float(np.trace(sig[m][k]))
        entry["empirical_n_mse"][m] = {
          "mean": float(nerr.mean()),
          "sem": float(nerr.std(ddof=1) / np.sqrt(reps)),
        }
        entry["rel_eigs"][m] = np.linalg.eigvalsh(I_half @ sig[m][k] @ I_half)
        entry["theorem2_margin"][m] = psd_min_eig(t2["poincare_constant"] * I_inv - sig[m][k])
        nxt = [j for j in ks if j > k]
        if nxt:  # lambda_min(Sigma_k - Sigma_{next k}) >= 0 is Theorem 1
          entry["theorem1_min_eig"][m] = psd_min_eig(sig[m][k] - sig[m][nxt[0]])
      out["k"][str(k)] = entry
    results["models"][mple.jkey(coupling)] = out
    bar.update(1)
  bar.close()
  return results


def render(run_dir: RunDir, config, results: dict) -> None:
  """The two figures and report.md from `results` alone (results.json redraws them)."""
  traces, eigenvalues = _figures(config, results)
  run_dir.savefig(traces, FIGURES[0])
  run_dir.savefig(eigenvalues, FIGURES[1])
  run_dir.write_report(_report(config, results))


def _figures(config, results: dict):
  ks, modes, n_large = results["ks"], results["masks"], results["n_large"]
  num_j = len(config.couplings)
  fig_t, ax_t = plt.subplots(1, num_j, figsize=(5.2 * num_j, 4.2), squeeze=False)
  fig_e, ax_e = plt.subplots(1, num_j, figsize=(5.2 * num_j, 4.2), squeeze=False)
  for c_idx, coupling in enumerate(config.couplings):
    out = results["models"][mple.jkey(coupling)]
    ax = ax_t[0, c_idx]
    for m, marker in zip(modes, ("o", "s")):
      tr = [out["k"][str(k)]["trace_sigma"][m] for k in ks]
      emp = [out["k"][str(k)]["empirical_n_mse"][m]["mean"] for k in ks]
      sem = [out["k"][str(k)]["empirical_n_mse"][m]["sem"] for k in ks]
      line = ax.plot(ks, tr, ls="-", label=f"Tr Sigma_k exact ({m})")
      ax.errorbar(
        ks,
        emp,
        yerr=2 * np.asarray(sem),
        ls="none",
        marker=marker,
        capsize=3,
        color=line[0].get_color(),
        label=f"n E||err||^2, n={n_large} ({m})",
      )
    ax.plot(
      ks,
      [out["k"][str(k)]["theorem2"]["trace_bound"] for k in ks],
      "k--",
      label="C_k Tr I^{-1} (Theorem 2)",
    )
    ax.set(yscale="log", xlabel="k", xticks=ks, title=f"J={coupling:g}: traces")
    ax.legend(fontsize=7)
    ax = ax_e[0, c_idx]
    for k in ks:
      for m, marker in zip(modes, ("o", "x")):
        ev = np.asarray(out["k"][str(k)]["rel_eigs"][m])
        ax.scatter(
          np.full(ev.shape, k + (0.08 if m == "all" else -0.08)),
          ev,
          marker=marker,
          s=18,
          color="C0" if m == "sampled" else "C2",
          label=f"eig(I^1/2 Sigma_k I^1/2), {m}" if k == ks[0] else None,
        )
      ax.scatter(
        [k],
        [out["k"][str(k)]["poincare_constant"]],
        marker="_",
        s=400,
        color="C3",
        label="C_k (Theorem 2 bound)" if k == ks[0] else None,
      )
    ax.set(yscale="log", xlabel="k", xticks=ks, title=f"J={coupling:g}: Sigma_k relative to I^-1")
    ax.legend(fontsize=7)
  return fig_t, fig_e


def _report(config, results: dict) -> str:
  ks, modes = results["ks"], results["masks"]
  report = [
    "# k-MPLE asymptotics: exact sandwich vs simulation; Theorems 1 and 2\n\n",
    f"Clique model N = |C| = {config.n_sites}, h = {config.field:g}. Sigma_k = "
    "H_k^{-1} Cov(grad l_k) H_k^{-1} at theta* by enumeration (Lemma 1); empirical: "
    f"n * mean err^2, err = ||theta_hat - theta*||_2, over {results['repetitions']} exact "
    f"data sets of n = {results['n_large']} (± 2 standard errors). {mple.MASK_NOTE}\n",
  ]
  for coupling in config.couplings:
    out = results["models"][mple.jkey(coupling)]
    report.append(f"\n## J = {coupling:g}  (Tr I^-1 = {out['trace_fisher_inv']:.4g})\n\n")
    rows = []
    for k in ks:
      e = out["k"][str(k)]
      for m in modes:
        emp = e["empirical_n_mse"][m]
        z = (emp["mean"] - e["trace_sigma"][m]) / emp["sem"]
        rows.append(
          [
            k,
            m,
            e["trace_sigma"][m],
            f"{emp['mean']:.4g} ± {2 * emp['sem']:.2g}",
            f"{z:+.2f}",
            e["poincare_constant"],
            e["theorem2"]["trace_bound"],
            float(e["rel_eigs"][m][-1]),
            e["theorem2_margin"][m],  # round-off: 0
            e["theorem1_min_eig"].get(m, "-"),
          ]
        )
    report.append(
      markdown_table(
        [
          "k",
          "masks",
          "Tr Sigma_k",
          "n E err^2 (±2se)",
          "z",
          "C_k",
          "C_k Tr I^-1",
          "max eig I^1/2 Sigma I^1/2",
          "min eig(C_k I^-1 - Sigma_k)",
          "min eig(Sigma_k - Sigma_k+1)",
        ],
        rows,
      )
    )
  entries = [e for o in results["models"].values() for e in o["k"].values()]
  for m in modes:
    t1 = min(e["theorem1_min_eig"].get(m, np.inf) for e in entries)
    t2m = min(e["theorem2_margin"][m] for e in entries)
    report.append(
      f"\nmasks = `{m}`: smallest min eig(Sigma_k - Sigma_k+1) = {t1:.3g} (Theorem 1 "
      f"needs >= 0); smallest Theorem 2 margin = {t2m:.3g} (needs >= 0; ~0 means the "
      "bound is attained up to round-off).\n"
    )
  rnd = results.get("random_models")
  if rnd:
    report.append(
      f"\n## Random models ({rnd['count']} models, N in 3..5, h ~ N(0, 0.7^2), "
      "J = (G + G^T)/2 with G_ij ~ N(0, 0.5^2))\n\n"
    )
    report.append(
      markdown_table(
        [
          "masks",
          "min over models, k of min eig(Sigma_k - Sigma_k+1) / max abs Sigma_k",
          "min relative Theorem 2 margin",
        ],
        [[m, rnd["theorem1_min_rel_eig"][m], rnd["theorem2_min_rel_margin"][m]] for m in modes],
      )
    )
    report.append(
      "\nNegative values beyond round-off (~1e-12) are violations. Theorem 1 is "
      "proved for `sampled` masks only.\n"
    )
  report.append(f"\nFits not reaching the gradient tolerance: {results['nonconverged_fits']}.\n")
  return "".join(report)
