"""Semantic drift of Glauber chains: how fast text leaves its starting meaning (paper A, 6.1, B.4).

With E the unit sentence embedding (all-MiniLM-L6-v2 through `gmlm.nn.embed`: mean pooling,
L2 normalisation) of the text of a chain's state x_t,
  d_t = 1 - cos(E(x_t), E(x_0)).
Recorded states repeat (a trapped chain records one state many times), so `embed_states`
embeds each distinct state once, in batches, and scatters the embeddings back.

Two mixing diagnostics over a grid of temperatures T and lengths n (Appendix B.1):
  Version 1 (fixed time): d at a fixed step t against n; at high T it grows like a + b log n,
    fitted by least squares in log n.
  Version 2 (hitting time): τ = the first recorded step with d_t >= d*, its median over the
    chains of a cell (a chain that never reaches d* counts as +inf, so the median is finite only
    when more than half reach it); at high T the median grows like c · n log n, fitted through
    the origin: c = Σ x τ / Σ x², x = n log n, with R² = 1 - Σ (τ - c x)² / Σ (τ - mean τ)².

Shape letters: glauber's legend plus U (distinct recorded states); ___ any leading axes.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from glauber.measures.common import pyplot
from gmlm.runs import RunDir, markdown_table

Decode = Callable[[np.ndarray], list[str]]


def load_embedder(name: str = "minilm", allow_pickle: bool = False):
  """(model, tokenizer) of a sentence encoder: "minilm" is the offline all-MiniLM-L6-v2 (the
  default MLM's base, `gmlm.nn.presets.minilm_dir`), anything else a path or hub id."""
  from gmlm import nn as gm
  from gmlm.nn import presets

  path = presets.minilm_dir() if name == "minilm" else name
  return gm.load(str(path), allow_pickle=allow_pickle)


def embed_texts(
  model, tokenizer, texts: Sequence[str], batch_size: int = 256, max_length: int = 256
) -> np.ndarray:
  """e_XD: unit sentence embeddings of the texts (each cut to max_length tokens), batch_size
  texts per forward pass."""
  from gmlm import nn as gm

  texts = list(texts)
  if not texts:
    return np.zeros((0, 0), np.float32)
  parts = [
    np.asarray(gm.embed(model, tokenizer, texts[i : i + batch_size], max_length))
    for i in range(0, len(texts), batch_size)
  ]
  return np.concatenate(parts)


def embed_states(tokens___N, decode: Decode, model, tokenizer, batch_size: int = 256) -> np.ndarray:
  """e___D: the embedding of the text of every state (any leading axes, e.g. tokens_RBN),
  each distinct state decoded and embedded once."""
  tokens___N = np.asarray(tokens___N)
  rows_XN = tokens___N.reshape(-1, tokens___N.shape[-1])
  unique_UN, inverse_X = np.unique(rows_XN, axis=0, return_inverse=True)
  e_UD = embed_texts(model, tokenizer, decode(unique_UN), batch_size)
  return e_UD[inverse_X.reshape(-1)].reshape(*tokens___N.shape[:-1], -1)


@jax.jit
def _drift(e_RBD: jax.Array) -> jax.Array:
  u_RBD = e_RBD / jnp.maximum(jnp.linalg.norm(e_RBD, axis=-1, keepdims=True), 1e-12)
  return 1.0 - jnp.einsum("rbd,bd->rb", u_RBD, u_RBD[0])


def drift(e_RBD) -> np.ndarray:
  """d_RB = 1 - cos(e_r, e_0) of each chain (record 0 is the start x_0)."""
  return np.asarray(_drift(jnp.asarray(e_RBD, jnp.float32)))


def hitting_steps(steps_R, d_RB, threshold: float) -> np.ndarray:
  """tau_B: the first recorded step with d >= threshold, +inf when a chain never reaches it."""
  steps_R, reached_RB = np.asarray(steps_R, np.float64), np.asarray(d_RB) >= threshold
  first_B = np.argmax(reached_RB, axis=0)
  return np.where(reached_RB.any(0), steps_R[first_B], np.inf)


def fit_log(n_X, y_X) -> dict:
  """Least squares y = a + b log n: {"a", "b", "r2"} (None when fewer than 2 distinct n)."""
  n_X, y_X = np.asarray(n_X, np.float64), np.asarray(y_X, np.float64)
  if np.unique(n_X).size < 2:
    return {"a": None, "b": None, "r2": None}
  A_X2 = np.stack([np.ones_like(n_X), np.log(n_X)], -1)
  (a, b), *_ = np.linalg.lstsq(A_X2, y_X, rcond=None)
  return {"a": float(a), "b": float(b), "r2": _r2(y_X, a + b * np.log(n_X))}


def fit_nlogn(n_X, tau_X) -> dict:
  """Least squares through the origin tau = c · n log n: {"c", "r2"} (None without points)."""
  n_X, tau_X = np.asarray(n_X, np.float64), np.asarray(tau_X, np.float64)
  if n_X.size == 0:
    return {"c": None, "r2": None}
  x_X = n_X * np.log(n_X)
  c = float(x_X @ tau_X / (x_X @ x_X))
  return {"c": c, "r2": _r2(tau_X, c * x_X) if n_X.size >= 2 else None}


def _r2(y_X: np.ndarray, fit_X: np.ndarray) -> float | None:
  total = float(((y_X - y_X.mean()) ** 2).sum())
  return 1.0 - float(((y_X - fit_X) ** 2).sum()) / total if total > 0 else None


def simulate(
  key: jax.Array,
  model,
  tokenizer,
  embedder: tuple,
  *,
  temperatures: Sequence[float],
  num_sites: Sequence[int],
  texts: Sequence[str],
  num_chains: int,
  num_steps: int,
  record_every: int,
  prefix: str = "",
  candidates=None,
) -> list[dict]:
  """Chains on the (T, n) grid from `texts` (chain b starts from texts[b % len(texts)]): per
  cell {"temperature", "num_sites", "steps": [R+1], "drift": [R+1][B]} with step 0 the start.
  embedder: (model, tokenizer) of the sentence encoder (`load_embedder`)."""
  from tqdm import tqdm

  from glauber import chains, init_states, recording
  from glauber.layout import Layout, max_sequence_length

  vocab_size = model.config.vocab_size
  if candidates is None:
    candidates = chains.candidate_ids(tokenizer, vocab_size)
  num_records = num_steps // record_every
  cells = []
  grid = [(n, T) for n in num_sites for T in temperatures]
  for n, T in tqdm(grid, desc="drift cells", unit="cell"):
    lay = Layout.from_tokenizer(tokenizer, n, prefix, max_sequence_length(model))
    x0_BL = init_states.from_text(tokenizer, lay, list(texts), num_chains)
    spec = chains.make_spec(candidates, vocab_size, lay, T)
    _, rec = chains.run(key, model, spec, chains.init_state(x0_BL), num_records, record_every)
    tokens_RBN = np.concatenate([x0_BL[None, :, lay.offset : lay.offset + n], rec.tokens_RBN])
    e_RBD = embed_states(tokens_RBN, lambda t: recording.decode(tokenizer, t), *embedder)
    cells.append(
      {
        "temperature": float(T),
        "num_sites": int(n),
        "steps": (record_every * np.arange(num_records + 1)).tolist(),
        "drift": drift(e_RBD).tolist(),
      }
    )
  return cells


def measure(cells: Sequence[dict], t_fixed: int, threshold: float) -> dict:
  """Version 1 and 2 over the cells of `simulate`: per cell the mean drift at step t_fixed (the
  last record at or before it) and the median hitting step of d* = threshold (None: more than
  half the chains never reached it) with the fraction reached; per T the fits a + b log n and
  c · n log n (over the cells with a finite median)."""
  rows = []
  for cell in cells:
    steps_R, d_RB = np.asarray(cell["steps"]), np.asarray(cell["drift"])
    r = int(np.searchsorted(steps_R, t_fixed, side="right")) - 1
    tau_B = hitting_steps(steps_R, d_RB, threshold)
    median = float(np.median(tau_B))
    rows.append(
      {
        "temperature": cell["temperature"],
        "num_sites": cell["num_sites"],
        "drift_at_t": float(d_RB[max(r, 0)].mean()),
        "final_drift": float(d_RB[-1].mean()),
        "median_hitting_step": median if np.isfinite(median) else None,
        "fraction_reached": float(np.isfinite(tau_B).mean()),
      }
    )
  fits = []
  for T in sorted({r["temperature"] for r in rows}):
    at = [r for r in rows if r["temperature"] == T]
    hit = [r for r in at if r["median_hitting_step"] is not None]
    fits.append(
      {
        "temperature": T,
        "version1": fit_log([r["num_sites"] for r in at], [r["drift_at_t"] for r in at]),
        "version2": fit_nlogn(
          [r["num_sites"] for r in hit], [r["median_hitting_step"] for r in hit]
        ),
        "version2_points": len(hit),
      }
    )
  return {"t_fixed": t_fixed, "threshold": threshold, "cells": rows, "fits": fits}


def figure(results: dict, cells: Sequence[dict] | None = None):
  """Fig. 3-style: (a) mean d_t against t per n at the highest T (needs the cells), (b) Version
  1: d at t_fixed against n (log axis) with a + b log n per T, (c) Version 2: median hitting
  step against n with c · n log n per T."""
  plt = pyplot()
  rows, fits = results["cells"], {f["temperature"]: f for f in results["fits"]}
  temps = sorted(fits)
  colour = dict(zip(temps, plt.get_cmap("viridis")(np.linspace(0, 0.9, len(temps)))))
  panels = 3 if cells else 2
  fig, axes = plt.subplots(1, panels, figsize=(4.2 * panels, 3.5))
  if cells:
    top = max(c["temperature"] for c in cells)
    for c in cells:
      if c["temperature"] == top:
        axes[0].plot(c["steps"], np.mean(c["drift"], 1), label=f"n = {c['num_sites']}")
    axes[0].axhline(results["threshold"], color="gray", ls=":", label="d*")
    axes[0].set(xlabel="step t", ylabel="mean d_t", title=f"(a) drift at T = {top:g}")
    axes[0].legend(fontsize=7)
  ax1, ax2 = axes[-2], axes[-1]
  for T in temps:
    at = sorted((r for r in rows if r["temperature"] == T), key=lambda r: r["num_sites"])
    n = np.array([r["num_sites"] for r in at], float)
    ax1.plot(n, [r["drift_at_t"] for r in at], "o", color=colour[T], label=f"T = {T:g}")
    v1 = fits[T]["version1"]
    if v1["b"] is not None:
      ax1.plot(n, v1["a"] + v1["b"] * np.log(n), "-", color=colour[T], lw=1)
    hit = [r for r in at if r["median_hitting_step"] is not None]
    if hit:
      nh = np.array([r["num_sites"] for r in hit], float)
      ax2.plot(
        nh, [r["median_hitting_step"] for r in hit], "o", color=colour[T], label=f"T = {T:g}"
      )
      ax2.plot(nh, fits[T]["version2"]["c"] * nh * np.log(nh), "-", color=colour[T], lw=1)
  ax1.set_xscale("log")
  ns = sorted({r["num_sites"] for r in rows})
  ax1.set_xticks(ns, [str(n) for n in ns])
  ax1.minorticks_off()
  exact = " (2 n: exact fit)" if len(ns) <= 2 else ""
  ax1.set(
    xlabel="n",
    ylabel=f"mean d at t = {results['t_fixed']}",
    title=f"(b) Version 1: a + b log n{exact}",
  )
  ax2.set(
    xlabel="n",
    ylabel=f"median step to d >= {results['threshold']}",
    title="(c) Version 2: c n log n",
  )
  ax1.legend(fontsize=7)
  if ax2.get_legend_handles_labels()[0]:
    ax2.legend(fontsize=7)
  else:  # no T has a cell whose median chain reached d*: say so instead of a blank panel
    last = max(max(c["steps"]) for c in cells) if cells else None
    within = f" within {last} steps" if last is not None else ""
    ax2.text(
      0.5,
      0.5,
      f"no cell's median chain\nreached d* = {results['threshold']:g}{within}",
      transform=ax2.transAxes,
      ha="center",
      va="center",
      fontsize=9,
    )
    ax2.set_xticks(ns, [str(n) for n in ns])
    ax2.set_xlim(min(ns) - 1, max(ns) + 1)
    ax2.set_yticks([])
  fig.tight_layout()
  return fig


def _r2_cell(r2, points: int, parameters: int) -> str | float:
  """R² as the fit table shows it: a word when the fit had no more points than parameters."""
  if r2 is None:
    return "—"
  if points <= parameters:
    return f"{r2:.3g} ({points} points: exact by construction)"
  return r2


def section(results: dict, run: RunDir, cells: Sequence[dict] | None = None) -> str:
  """Markdown of both versions (a row per cell, a row of fits per T) and semantic_drift.png."""

  def show(v):
    return "—" if v is None else v

  rows = [
    [
      r["temperature"],
      r["num_sites"],
      r["drift_at_t"],
      r["final_drift"],
      show(r["median_hitting_step"]),
      r["fraction_reached"],
    ]
    for r in results["cells"]
  ]
  v1_points = {f["temperature"]: 0 for f in results["fits"]}
  for r in results["cells"]:
    v1_points[r["temperature"]] += 1
  fit_rows = [
    [
      f["temperature"],
      show(f["version1"]["a"]),
      show(f["version1"]["b"]),
      _r2_cell(f["version1"]["r2"], v1_points[f["temperature"]], 2),
      v1_points[f["temperature"]],
      show(f["version2"]["c"]),
      _r2_cell(f["version2"]["r2"], f["version2_points"], 1),
      f["version2_points"],
    ]
    for f in results["fits"]
  ]
  exact = any(
    0 < v1_points[f["temperature"]] <= 2 or 0 < f["version2_points"] <= 1 for f in results["fits"]
  )
  note = (
    "A fit from as many points as it has parameters (V1: 2 values of n, V2: 1) passes through "
    "them exactly: its R² is 1 (or undefined) by construction and says nothing about the law; "
    "give semantic_drift.num_sites 3 or more values.\n"
    if exact
    else ""
  )
  run.savefig(figure(results, cells), "semantic_drift.png")
  return "\n".join(
    [
      "## Semantic drift\n",
      "d_t = 1 - cos(E(x_t), E(x_0)), E the all-MiniLM-L6-v2 sentence embedding. Version 1: "
      f"mean d at step {results['t_fixed']}; Version 2: median first step with d >= "
      f"{results['threshold']} (— when more than half the chains never reach it).\n",
      markdown_table(
        ["T", "n", f"d at t={results['t_fixed']}", "final d", "median hitting step", "reached"],
        rows,
      ),
      markdown_table(
        [
          "T",
          "V1 a",
          "V1 b (per log n)",
          "V1 R²",
          "V1 points",
          "V2 c (per n log n)",
          "V2 R²",
          "V2 points",
        ],
        fit_rows,
      ),
      note,
      "![semantic drift](semantic_drift.png)\n",
    ]
  )
