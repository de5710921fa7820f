"""Paper A's figures and report texts on the results a newcomer meets (issue 27): D spread over
1e-3 far from 0, no traps, infinite t_mix bounds, no chain reaching d*, long margin texts, fits
from as many points as parameters. Each figure is checked as a reader sees it
(tests/figure_checks.py: a visible mark in every panel, a legend over several series, colour
bars with units, tick labels that do not collide)."""

from __future__ import annotations

import math
import warnings

import figure_checks
import numpy as np

from glauber.measures import drift, influence, margins, semantic_drift, traps
from gmlm.runs import RunDir


def drift_results(D_BT, temperatures, k=12, n=16) -> dict:
  """drift.measure's results for the drifts D_BT."""
  return {
    "token": "!",
    "k": k,
    "n": n,
    "num_states": len(D_BT),
    "base_text": "",
    "rows": drift.summary(D_BT, temperatures),
    "drift_BT": np.asarray(D_BT).tolist(),
  }


def test_drift_figure_shows_a_spread_of_1e3_far_from_zero_and_the_table_is_read(
  tmp_path, monkeypatch
):
  """Every D in [-0.75, -0.748] (the default MLM's): the bars are visible, the numbers are
  written on the figure, and the all-"no / 0" table gets its reading (N drifts down, D at
  -k/n: the model gives `!` no probability)."""
  rng = np.random.default_rng(0)
  D = np.stack([-0.75 + 1e-5 * rng.random(200), -0.75 + 2e-3 * rng.random(200)], 1)
  seen = figure_checks.capture(monkeypatch)
  md = drift.section(drift_results(D, [0.5, 1.0]), RunDir(tmp_path))
  assert seen == {"drift.png": []}
  fig = drift.figure(drift_results(D, [0.5, 1.0]))
  written = " ".join(t.get_text() for t in fig.axes[0].texts)
  assert f"min {D[:, 0].min():.5g}" in written and f"max {D[:, 1].max():.5g}" in written
  assert "no state has D > 0" in md and "within 1% of -k/n = -0.75" in md
  certified = drift_results(np.abs(D), [0.5, 1.0])
  assert "every state has D > 0" in drift.interpretation(certified)
  assert figure_checks.problems(drift.figure(certified)) == []


def trap_results(found=()) -> dict:
  return {
    "window": 300,
    "threshold": 0.12,
    "similarity": 0.8,
    "num_chains": 4,
    "last_step": 600,
    "traps": list(found),
  }


def test_traps_figure_without_traps_says_so(tmp_path, monkeypatch):
  seen = figure_checks.capture(monkeypatch)
  traps.section(trap_results(), RunDir(tmp_path))
  assert seen == {"traps.png": []}
  fig = traps.figure(trap_results())
  assert "no traps found (4 chains × 600 steps)" in fig.axes[0].texts[0].get_text()
  found = [{"chain": c, "start": 10 * c, "duration": 200, "neighbourhood": c % 2} for c in range(3)]
  fig = traps.figure(trap_results(found))  # two neighbourhoods: a legend names them
  assert figure_checks.problems(fig) == [] and not fig.axes[0].texts
  assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [
    "neighbourhood 0",
    "neighbourhood 1",
  ]


def influence_results(alpha_hat) -> dict:
  temps = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0][: len(alpha_hat)]
  n = 3
  return {
    "seed_text": "a b c",
    "tokens": ["a", "b", "c"],
    "n": n,
    "num_contexts": 2,
    "num_values": 3,
    "num_changed": 1,
    "epsilon": 0.25,
    "temperatures": temps,
    "alpha_hat_max": list(alpha_hat),
    "alpha_hat_mean": [a / 2 for a in alpha_hat],
    "omega_bound": [8 / T for T in temps],
    "lemma6_slack": [-0.1] * len(temps),
    "sufficient_temperature": 8.0,
    "contraction_temperature": influence.contraction_temperature(temps, alpha_hat),
    "tmix_bound": [float(t) for t in influence.tmix_bound(alpha_hat, n)],
    "alpha_max": [np.full((n, n), a / n).tolist() for a in alpha_hat],
    "alpha_mean": [np.full((n, n), a / 2 / n).tolist() for a in alpha_hat],
    "omega": np.full((n, n), 2.0).tolist(),
    "max_pair_alpha": [a / n for a in alpha_hat],
    "max_pair_omega": 2.0,
  }


def test_influence_figure_marks_the_infinite_bounds_and_its_ticks_do_not_collide(
  tmp_path, monkeypatch
):
  alpha_hat = [6.0, 3.5, 1.8, 0.9, 0.45, 0.22, 0.11, 0.05]  # t_mix bound infinite at 3 T
  seen = figure_checks.capture(monkeypatch)
  md = influence.section(influence_results(alpha_hat), RunDir(tmp_path))
  assert seen == {"influence_vs_T.png": [], "influence_heatmap.png": []}
  assert md.count("| ∞ (α̂ >= 1: no bound) |") == 3 and "| inf |" not in md
  fig = influence.curve_figure(influence_results(alpha_hat))
  left, right = fig.axes
  assert figure_checks.overlapping_tick_labels(left) == []
  assert [t.get_text() for t in left.get_xticklabels()][:3] == ["0.25", "0.5", "1"]
  marked = [x for line in right.lines if line.get_marker() == "^" for x in line.get_xdata()]
  assert marked == [0.25, 0.5, 1.0]  # the T where α̂ >= 1, drawn on the panel
  assert any("no finite bound at T = 0.25, 0.5, 1" in t.get_text() for t in right.texts)
  none_finite = influence.curve_figure(influence_results([2.0, 1.5]))
  assert figure_checks.problems(none_finite) == []
  assert math.isinf(influence_results([2.0])["tmix_bound"][0])


def test_semantic_drift_without_hits_writes_no_empty_legend_and_names_exact_fits(tmp_path):
  cells = [
    {
      "temperature": T,
      "num_sites": n,
      "steps": [0, 5, 10],
      "drift": [[0, 0], [0.02 * n, 0.2], [0.1, 0.3]],
    }
    for T in (1.0, 4.0)
    for n in (4, 6)
  ]
  results = semantic_drift.measure(cells, t_fixed=5, threshold=0.5)  # no chain reaches 0.5
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # matplotlib's "No artists with labels" warning included
    fig = semantic_drift.figure(results, cells)
  assert figure_checks.problems(fig) == []
  assert any("reached d* = 0.5" in t.get_text() for t in fig.axes[-1].texts)
  md = semantic_drift.section(results, RunDir(tmp_path), cells)
  assert "1 (2 points: exact by construction)" in md and "says nothing about the law" in md
  more = [dict(c, num_sites=n) for c in cells[:1] for n in (4, 6, 8)]
  md = semantic_drift.section(semantic_drift.measure(more, 5, 0.5), RunDir(tmp_path), more)
  assert "exact by construction" not in md  # 3 values of n: a real fit


def test_margins_report_keeps_whole_texts_and_its_legend_numbers_them(tmp_path, monkeypatch):
  long = "it has been used as the theme song for jesus christ superstar | and more"
  state = {
    "text": long,
    "n": 4,
    "delta_min": -1.0,
    "delta_mean": 0.5,
    "argmax_sites": 3,
    "type": "approximate",
    "gaps": [1.0, -1.0, 2.0, 0.5],
    "exit_bound": [3.0],
    "predicted_escape": [0.33],
    "exit_prob": [0.2],
    "mean_holding_time": [5.0],
  }
  results = {"temperatures": [1.0], "num_candidates": 100, "states": [state, dict(state, text="x")]}
  seen = figure_checks.capture(monkeypatch)
  md = margins.section(results, RunDir(tmp_path))
  assert seen == {"margins.png": []}
  assert long.replace("|", "\\|") in md  # whole, not cut at 40 characters
  import matplotlib.pyplot as plt

  captured = {}
  monkeypatch.setattr(RunDir, "savefig", lambda self, fig, name: captured.update({name: fig}))
  margins.section(results, RunDir(tmp_path))
  labels = [t.get_text() for t in captured["margins.png"].axes[0].get_legend().get_texts()]
  assert labels[0].startswith("No. 1 (n = 4") and not any(long[:20] in x for x in labels)
  plt.close("all")
