"""Semantic drift: d_t is 1 - cos against a numpy reference (embedding each distinct state once
changes nothing), and the two fits recover planted a + b log n and c · n log n curves within the
standard errors their noise implies."""

from __future__ import annotations

import numpy as np
import pytest

from glauber.measures import semantic_drift as sd

N_GRID = np.array([5, 10, 20, 40, 80, 160])


def test_drift_is_one_minus_cosine_to_the_start():
  rng = np.random.default_rng(0)
  e = rng.normal(size=(7, 3, 16)) * rng.uniform(0.5, 2, size=(7, 3, 1))  # not unit norm
  cos = np.einsum("rbd,bd->rb", e, e[0]) / (
    np.linalg.norm(e, axis=-1) * np.linalg.norm(e[0], axis=-1)
  )
  np.testing.assert_allclose(sd.drift(e), 1 - cos, atol=1e-6)


def test_fit_log_recovers_a_planted_curve():
  rng = np.random.default_rng(1)
  a, b, sigma = 0.05, 0.08, 0.01
  n = np.repeat(N_GRID, 4)
  y = a + b * np.log(n) + sigma * rng.normal(size=n.size)
  fit = sd.fit_log(n, y)
  A = np.stack([np.ones(n.size), np.log(n)], -1)
  se_a, se_b = sigma * np.sqrt(np.diag(np.linalg.inv(A.T @ A)))  # OLS standard errors
  assert abs(fit["a"] - a) < 4 * se_a and abs(fit["b"] - b) < 4 * se_b
  exact = sd.fit_log(N_GRID, a + b * np.log(N_GRID))
  assert exact["a"] == pytest.approx(a) and exact["b"] == pytest.approx(b)
  assert exact["r2"] == pytest.approx(1.0)


def test_fit_nlogn_recovers_a_planted_curve():
  rng = np.random.default_rng(2)
  c, sigma = 1.7, 20.0
  x = N_GRID * np.log(N_GRID)
  tau = c * x + sigma * rng.normal(size=x.size)
  fit = sd.fit_nlogn(N_GRID, tau)
  assert abs(fit["c"] - c) < 4 * sigma / np.sqrt(x @ x)
  assert 0.9 < fit["r2"] <= 1.0
  exact = sd.fit_nlogn(N_GRID, c * x)
  assert exact["c"] == pytest.approx(c) and exact["r2"] == pytest.approx(1.0)
  # A square-root law is not n log n: the fit through the origin leaves most variance.
  assert sd.fit_nlogn(N_GRID, 100 * np.sqrt(N_GRID))["r2"] < 0.5


def test_measure_finds_planted_hitting_times_and_versions():
  # Drift curves d_t = 1 - exp(-t / (c n log n)): hitting d* at t = -log(1 - d*) c n log n.
  c, d_star, T = 5.0, 0.4, 2.0
  steps = np.arange(0, 4001)
  cells = []
  for n in N_GRID[:4]:
    scale = c * n * np.log(n) * np.array([0.9, 1.0, 1.1])  # three chains per cell
    d = 1 - np.exp(-steps[:, None] / scale[None])
    cells.append(
      {"temperature": T, "num_sites": int(n), "steps": steps.tolist(), "drift": d.tolist()}
    )
  res = sd.measure(cells, t_fixed=100, threshold=d_star)
  for cell, row in zip(cells, res["cells"]):
    n = cell["num_sites"]
    want = np.ceil(-np.log(1 - d_star) * c * n * np.log(n))  # the median chain's first step
    assert row["median_hitting_step"] == want
    assert row["drift_at_t"] == pytest.approx(np.mean(np.asarray(cell["drift"])[100]))
  (fit,) = res["fits"]
  assert fit["version2"]["c"] == pytest.approx(-np.log(1 - d_star) * c, rel=0.02)
  assert fit["version2"]["r2"] > 0.999
  # A chain set that never reaches d*: no median, excluded from the fit.
  cells.append({"temperature": T, "num_sites": 7, "steps": [0, 1], "drift": [[0, 0], [0.1, 0.1]]})
  res = sd.measure(cells, t_fixed=100, threshold=d_star)
  assert res["cells"][-1]["median_hitting_step"] is None
  assert res["fits"][0]["version2_points"] == 4


def test_embed_states_matches_per_text_embeddings(minilm_dir):
  from gmlm import nn as gm

  model, tok = gm.load(minilm_dir)
  words = np.array(tok.convert_tokens_to_ids(["the", "cat", "sat", "on", "a", "mat", "dog"]))
  rng = np.random.default_rng(0)
  tokens_RBN = words[rng.integers(0, 3, (5, 2, 4)) + np.array([0, 1, 2, 4])]  # repeats states
  decode = lambda t: tok.batch_decode(t)  # noqa: E731
  e = sd.embed_states(tokens_RBN, decode, model, tok)
  # Reference: every recorded state embedded, repeats included, in one batch.
  ref = np.asarray(gm.embed(model, tok, decode(tokens_RBN.reshape(10, 4)))).reshape(5, 2, -1)
  np.testing.assert_allclose(e, ref, atol=2e-5)
  u = ref / np.linalg.norm(ref, axis=-1, keepdims=True)
  np.testing.assert_allclose(sd.drift(e), 1 - np.einsum("rbd,bd->rb", u, u[0]), atol=2e-5)
