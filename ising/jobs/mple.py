"""Experiments on k-pseudolikelihood for Ising models (PaDIR paper, Section 3.1, Appendix L.6).

error_vs_samples: squared parameter error of the k-MPLE versus sample size (Figures 1 and 2).
asymptotics: exact sandwich covariances Sigma_k versus the empirical n E||theta_hat - theta*||^2,
  Theorem 1 (Sigma_{k+1} <= Sigma_k) and Theorem 2 (Sigma_k <= C_k I^{-1}).

Both run on the clique model of eq. (5) with N = |C| sites, no fields, exact samples.
"""

from __future__ import annotations

import jax
import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

from ising.asymptotics import fisher_information, kmple_asymptotics, psd_min_eig, theorem2_check  # noqa: E402
from ising.exact import poincare_constant  # noqa: E402
from ising.model import Ising, clique_model, ising  # noqa: E402
from ising.pseudolikelihood import MASK_MODES, exact_samples, fit_kmple, to_theta  # noqa: E402
from gmlm.runs import RunDir, markdown_table  # noqa: E402

MASK_NOTE = ("Masks: `sampled` pairs each sample with one uniformly random k-block, as in "
             "Definition 2's n i.i.d. (sequence, mask) pairs (the estimator Theorems 1-2 are "
             "about); `all` averages each sample's loss over all C(N, k) blocks.")


def parse_masks(masks: str) -> list[str]:
  modes = [m.strip() for m in str(masks).split(",") if m.strip()]
  bad = [m for m in modes if m not in MASK_MODES]
  if not modes or bad:
    raise ValueError(f"config.masks={masks!r}: give a comma-separated subset of {MASK_MODES}")
  return modes


def model_for(config, coupling: float) -> Ising:
  return clique_model(config.n_sites, config.n_sites, float(coupling), float(config.field))


def check_ks(config) -> list[int]:
  ks = [int(k) for k in config.ks]
  if not ks or any(not 1 <= k <= config.n_sites for k in ks):
    raise ValueError(f"config.ks={tuple(config.ks)} must be non-empty with 1 <= k <= n_sites={config.n_sites}")
  return sorted(set(ks))


def squared_errors(model: Ising, ks: list[int], modes: list[str], num: int, reps: int,
                   key: jax.Array) -> tuple[dict[tuple[str, int], np.ndarray], int]:
  """||theta_hat - theta*||^2 [reps] of the k-MPLE for every (mask mode, k), on `reps`
  independent exact data sets of size num shared by all (mode, k) (paired comparisons), and
  the number of fits that did not reach the gradient tolerance."""
  theta_star = np.asarray(to_theta(model), np.float64)
  err = {(m, k): np.empty(reps) for m in modes for k in ks}
  failed = 0
  for r in range(reps):
    data_key, mask_key = jax.random.split(jax.random.fold_in(key, r))
    x_BN = np.asarray(exact_samples(data_key, model, num))
    for m in modes:
      for k in ks:
        fit = fit_kmple(x_BN, k, masks=m, key=jax.random.fold_in(mask_key, k))
        err[m, k][r] = np.sum((np.asarray(fit.theta, np.float64) - theta_star) ** 2)
        failed += int(not bool(fit.converged))
  return err, failed


TIE_RTOL = 0.005


def _ordering(mean_k: list[float]) -> str:
  """'yes' if strictly decreasing in k, 'ties' if non-increasing up to TIE_RTOL, else 'NO'."""
  pairs = list(zip(mean_k, mean_k[1:]))
  if all(b < a * (1 - TIE_RTOL) for a, b in pairs):
    return "yes"
  if all(b <= a * (1 + TIE_RTOL) for a, b in pairs):
    return "ties" if any(b >= a * (1 - TIE_RTOL) for a, b in pairs) else "yes"
  return "NO"


def _jkey(coupling: float) -> str:
  return f"J={coupling:g}"


# ----------------------------------------------------------------------------- error vs n

def error_vs_samples(config, workdir: str) -> dict:
  """Figures 1 and 2: mean squared parameter error of the k-MPLE vs n, one PNG per J."""
  config = config.copy_and_resolve_references()
  if config.get("quick", False):
    config.sample_sizes, config.repetitions = (200, 2000), 3
  run = RunDir(workdir, config)
  modes, ks = parse_masks(config.masks), check_ks(config)
  sizes = [int(n) for n in config.sample_sizes]
  reps = int(config.repetitions)
  if reps < 2 or not sizes or min(sizes) < 1:
    raise ValueError(f"need repetitions >= 2 and positive sample sizes, got {reps}, {sizes}")
  results = {"sample_sizes": sizes, "ks": ks, "masks": modes, "repetitions": reps,
             "errors": {}, "exact_trace_sigma": {}, "larger_k_lower_error": {},
             "nonconverged_fits": 0, "figures": []}
  report = [f"# k-MPLE squared parameter error vs sample size (PaDIR Figures 1, L.2)\n",
            f"Clique model N = |C| = {config.n_sites}, h = {config.field:g}; exact samples; "
            f"{reps} repetitions per point; error = ||theta_hat - theta*||^2 over "
            f"theta = (h, J_i<j); Newton on the k-pseudolikelihood. {MASK_NOTE}\n"]
  bar = tqdm(total=len(config.couplings) * len(sizes), desc="error vs n", unit="(J, n)")
  for c_idx, coupling in enumerate(config.couplings):
    model = model_for(config, coupling)
    jk = _jkey(coupling)
    base = jax.random.fold_in(jax.random.key(config.seed), c_idx)
    errs = {m: {k: np.zeros((len(sizes), reps)) for k in ks} for m in modes}
    for i, n in enumerate(sizes):
      err, failed = squared_errors(model, ks, modes, n, reps, jax.random.fold_in(base, i))
      results["nonconverged_fits"] += failed
      for (m, k), err_R in err.items():
        errs[m][k][i] = err_R
      bar.update(1)
    traces = {m: {k: float(np.trace(kmple_asymptotics(model, k, m)["sigma"])) for k in ks}
              for m in modes}
    results["exact_trace_sigma"][jk] = {m: {str(k): t for k, t in traces[m].items()} for m in modes}
    results["errors"][jk] = {m: {str(k): {"mean": errs[m][k].mean(1), "std": errs[m][k].std(1)}
                                 for k in ks} for m in modes}
    monotone = {m: [bool(all(errs[m][a][i].mean() > errs[m][b][i].mean() for a, b in zip(ks, ks[1:])))
                    for i in range(len(sizes))] for m in modes}
    ordering = {m: [_ordering([errs[m][k][i].mean() for k in ks]) for i in range(len(sizes))]
                for m in modes}
    results.setdefault("ordering_in_k", {})[jk] = ordering
    results["larger_k_lower_error"][jk] = monotone

    fig, axes = plt.subplots(1, len(modes), figsize=(5.2 * len(modes), 4.2), squeeze=False)
    for ax, m in zip(axes[0], modes):
      for k in ks:
        mean, std = errs[m][k].mean(1), errs[m][k].std(1)
        line = ax.errorbar(sizes, mean, yerr=0.5 * std, marker="o", ms=3, capsize=2, label=f"k={k}")
        ax.plot(sizes, traces[m][k] / np.asarray(sizes), ls=":", color=line[0].get_color(), lw=1)
      ax.set(xscale="log", yscale="log", xlabel="sample size n", ylabel="||theta_hat - theta*||^2",
             title=f"J={coupling:g}, masks={m}  (dotted: Tr Sigma_k / n)")
      ax.set_xticks(sizes, [f"{n:g}" for n in sizes])
      ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
      ax.legend(fontsize=8)
    name = f"error_vs_samples_J{coupling:g}.png"
    run.savefig(fig, name)
    plt.close(fig)
    results["figures"].append(name)

    report.append(f"\n## J = {coupling:g}  (figure `{name}`)\n")
    for m in modes:
      rows = [[n] + [f"{errs[m][k][i].mean():.3g} ± {0.5 * errs[m][k][i].std():.2g}" for k in ks]
              + [ordering[m][i]] for i, n in enumerate(sizes)]
      rows.append(["Tr Sigma_k (exact)"] + [f"{traces[m][k]:.4g}" for k in ks] + [""])
      report.append(f"\nmasks = `{m}`: mean error ± 0.5 std; last column: error strictly "
                    f"decreasing in k at this n? ('ties' = non-increasing with some consecutive means within "
                    f"{TIE_RTOL:.1%})\n\n")
      report.append(markdown_table(["n"] + [f"k={k}" for k in ks] + ["larger k lower?"], rows))
  bar.close()
  report.append(f"\nFits not reaching the gradient tolerance: {results['nonconverged_fits']}.\n")
  run.write_results(results)
  run.write_report("".join(report))
  return results


# ----------------------------------------------------------------------------- asymptotics

def random_model_checks(count: int, seed: int, modes: list[str]) -> dict:
  """Theorems 1 and 2 by enumeration on `count` random models (N in 3..5), per mask mode:
  the smallest lambda_min(Sigma_k - Sigma_{k+1}) / max|Sigma_k| and the smallest
  lambda_min(C_k I^{-1} - Sigma_k) / (C_k Tr I^{-1}) over models and k."""
  rng = np.random.default_rng(seed)
  t1 = {m: np.inf for m in modes}
  t2 = {m: np.inf for m in modes}
  for _ in range(count):
    n = int(rng.integers(3, 6))
    J = rng.normal(0.0, 0.5, (n, n))
    J = (J + J.T) / 2
    np.fill_diagonal(J, 0.0)
    model = ising(rng.normal(0.0, 0.7, n), J)
    I_inv = np.linalg.inv(fisher_information(model))
    C = {k: poincare_constant(model, k) for k in range(1, n + 1)}
    for m in modes:
      sig = [kmple_asymptotics(model, k, m)["sigma"] for k in range(1, n + 1)]
      for k, (a, b) in enumerate(zip(sig, sig[1:]), start=1):
        t1[m] = min(t1[m], psd_min_eig(a - b) / np.abs(a).max())
      for k, a in enumerate(sig, start=1):
        t2[m] = min(t2[m], psd_min_eig(C[k] * I_inv - a) / (C[k] * np.trace(I_inv)))
  return {"count": count, "theorem1_min_rel_eig": t1, "theorem2_min_rel_margin": t2}


def asymptotics(config, workdir: str) -> dict:
  """Exact Tr Sigma_k vs n E||theta_hat - theta*||^2 at large n; Theorems 1 and 2."""
  config = config.copy_and_resolve_references()
  if config.get("quick", False):
    config.n_large, config.repetitions = 2000, 4
  run = RunDir(workdir, config)
  modes, ks = parse_masks(config.masks), check_ks(config)
  n_large, reps = int(config.n_large), int(config.repetitions)
  if reps < 2 or n_large < 1:
    raise ValueError(f"need repetitions >= 2 and n_large >= 1, got {reps}, {n_large}")
  results = {"n_large": n_large, "repetitions": reps, "ks": ks, "masks": modes, "models": {},
             "nonconverged_fits": 0, "figures": ["asymptotic_traces.png", "theorem2_eigenvalues.png"]}
  report = ["# k-MPLE asymptotics: exact sandwich vs simulation; Theorems 1 and 2\n\n",
            f"Clique model N = |C| = {config.n_sites}, h = {config.field:g}. Sigma_k = "
            "H_k^{-1} Cov(grad l_k) H_k^{-1} at theta* by enumeration (Lemma 1); empirical: "
            f"n * mean err^2, err = ||theta_hat - theta*||_2, over {reps} exact data sets of n = {n_large} "
            f"(± 2 standard errors). {MASK_NOTE}\n"]
  fig_t, ax_t = plt.subplots(1, len(config.couplings), figsize=(5.2 * len(config.couplings), 4.2),
                             squeeze=False)
  fig_e, ax_e = plt.subplots(1, len(config.couplings), figsize=(5.2 * len(config.couplings), 4.2),
                             squeeze=False)
  bar = tqdm(total=len(config.couplings), desc="asymptotics", unit="J")
  for c_idx, coupling in enumerate(config.couplings):
    model = model_for(config, coupling)
    jk = _jkey(coupling)
    base = jax.random.fold_in(jax.random.key(config.seed), c_idx)
    I_DD = fisher_information(model)
    I_inv = np.linalg.inv(I_DD)
    evals, evecs = np.linalg.eigh(I_DD)
    I_half = evecs @ np.diag(np.sqrt(evals)) @ evecs.T
    sig = {m: {k: kmple_asymptotics(model, k, m)["sigma"] for k in ks} for m in modes}
    out = {"trace_fisher_inv": float(np.trace(I_inv)), "k": {}}
    err, failed = squared_errors(model, ks, modes, n_large, reps, base)
    results["nonconverged_fits"] += failed
    for k in ks:
      t2 = theorem2_check(model, k, "sampled")
      entry = {"poincare_constant": t2["poincare_constant"], "theorem2": t2,
               "trace_sigma": {}, "empirical_n_mse": {}, "rel_eigs": {}, "theorem1_min_eig": {}}
      for m in modes:
        nerr = n_large * err[m, k]
        entry["trace_sigma"][m] = float(np.trace(sig[m][k]))
        entry["empirical_n_mse"][m] = {"mean": float(nerr.mean()),
                                       "sem": float(nerr.std(ddof=1) / np.sqrt(reps))}
        entry["rel_eigs"][m] = np.linalg.eigvalsh(I_half @ sig[m][k] @ I_half)
        entry["theorem2_margin"] = entry.get("theorem2_margin", {})
        entry["theorem2_margin"][m] = psd_min_eig(t2["poincare_constant"] * I_inv - sig[m][k])
        nxt = [j for j in ks if j > k]
        if nxt:  # lambda_min(Sigma_k - Sigma_{next k}) >= 0 is Theorem 1
          entry["theorem1_min_eig"][m] = psd_min_eig(sig[m][k] - sig[m][nxt[0]])
      out["k"][str(k)] = entry
    results["models"][jk] = out
    bar.update(1)

    ax = ax_t[0, c_idx]
    for m, mk in zip(modes, ("o", "s")):
      tr = [out["k"][str(k)]["trace_sigma"][m] for k in ks]
      emp = [out["k"][str(k)]["empirical_n_mse"][m]["mean"] for k in ks]
      sem = [out["k"][str(k)]["empirical_n_mse"][m]["sem"] for k in ks]
      line = ax.plot(ks, tr, ls="-", label=f"Tr Sigma_k exact ({m})")
      ax.errorbar(ks, emp, yerr=2 * np.asarray(sem), ls="none", marker=mk, capsize=3,
                  color=line[0].get_color(), label=f"n E||err||^2, n={n_large} ({m})")
    ax.plot(ks, [out["k"][str(k)]["theorem2"]["trace_bound"] for k in ks], "k--",
            label="C_k Tr I^{-1} (Theorem 2)")
    ax.set(yscale="log", xlabel="k", xticks=ks, title=f"J={coupling:g}: traces")
    ax.legend(fontsize=7)
    ax = ax_e[0, c_idx]
    for k in ks:
      for m, mk in zip(modes, ("o", "x")):
        ev = out["k"][str(k)]["rel_eigs"][m]
        ax.scatter(np.full(ev.shape, k + (0.08 if m == "all" else -0.08)), ev, marker=mk, s=18,
                   color="C0" if m == "sampled" else "C2",
                   label=f"eig(I^1/2 Sigma_k I^1/2), {m}" if k == ks[0] else None)
      ax.scatter([k], [out["k"][str(k)]["poincare_constant"]], marker="_", s=400, color="C3",
                 label="C_k (Theorem 2 bound)" if k == ks[0] else None)
    ax.set(yscale="log", xlabel="k", xticks=ks, title=f"J={coupling:g}: Sigma_k relative to I^-1")
    ax.legend(fontsize=7)

    report.append(f"\n## J = {coupling:g}  (Tr I^-1 = {out['trace_fisher_inv']:.4g})\n\n")
    rows = []
    for k in ks:
      e = out["k"][str(k)]
      for m in modes:
        emp = e["empirical_n_mse"][m]
        z = (emp["mean"] - e["trace_sigma"][m]) / emp["sem"]
        rows.append([k, m, e["trace_sigma"][m], f"{emp['mean']:.4g} ± {2 * emp['sem']:.2g}",
                     f"{z:+.2f}", e["poincare_constant"], e["theorem2"]["trace_bound"],
                     float(e["rel_eigs"][m][-1]), f"{e['theorem2_margin'][m]:.3g}",
                     f"{e['theorem1_min_eig'][m]:.3g}" if m in e["theorem1_min_eig"] else "-"])
    report.append(markdown_table(
        ["k", "masks", "Tr Sigma_k", "n E err^2 (±2se)", "z", "C_k", "C_k Tr I^-1",
         "max eig I^1/2 Sigma I^1/2", "min eig(C_k I^-1 - Sigma_k)",
         "min eig(Sigma_k - Sigma_k+1)"], rows))
  bar.close()
  for m in modes:
    t1 = min(e["theorem1_min_eig"].get(m, np.inf) for o in results["models"].values()
             for e in o["k"].values())
    t2m = min(e["theorem2_margin"][m] for o in results["models"].values() for e in o["k"].values())
    report.append(f"\nmasks = `{m}`: smallest min eig(Sigma_k - Sigma_k+1) = {t1:.3g} (Theorem 1 "
                  f"needs >= 0); smallest Theorem 2 margin = {t2m:.3g} (needs >= 0; ~0 means the "
                  "bound is attained up to round-off).\n")
  if config.get("random_models", 0):
    rnd = random_model_checks(int(config.random_models), int(config.seed), modes)
    results["random_models"] = rnd
    report.append(f"\n## Random models ({rnd['count']} models, N in 3..5, h ~ N(0, 0.7^2), "
                  "J = (G + G^T)/2 with G_ij ~ N(0, 0.5^2))\n\n")
    report.append(markdown_table(
        ["masks", "min over models, k of min eig(Sigma_k - Sigma_k+1) / max abs Sigma_k",
         "min relative Theorem 2 margin"],
        [[m, rnd["theorem1_min_rel_eig"][m], rnd["theorem2_min_rel_margin"][m]] for m in modes]))
    report.append("\nNegative values beyond round-off (~1e-12) are violations. Theorem 1 is "
                  "proved for `sampled` masks only.\n")
  report.append(f"\nFits not reaching the gradient tolerance: {results['nonconverged_fits']}.\n")
  run.savefig(fig_t, "asymptotic_traces.png")
  run.savefig(fig_e, "theorem2_eigenvalues.png")
  plt.close(fig_t)
  plt.close(fig_e)
  run.write_results(results)
  run.write_report("".join(report))
  return results
