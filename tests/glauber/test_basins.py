"""Semantic basins: the tables and crossing counts are the means and threshold crossings of the
recorded topic scores, each distinct state is scored once, the PCA is numpy's SVD of the centred
embeddings, and the prefix-attractor mix is the mean of the endpoint scores."""

from __future__ import annotations

import numpy as np
import pytest

from glauber.measures import basins

LABELS = ("politics", "health", "sport", "food")


class CountingScorer:
  """Scores a text by its characters (a fixed function of the text); counts what it scores."""

  labels = LABELS

  def __init__(self):
    self.seen: list[str] = []

  def scores(self, texts):
    self.seen += list(texts)
    z = np.array([[sum(map(ord, t)) % (7 + k) for k in range(len(LABELS))] for t in texts], float)
    e = np.exp(z / 3)
    return e / e.sum(-1, keepdims=True)


def decode(tokens_XN):
  return [" ".join(f"w{t}" for t in row) for row in tokens_XN]


def test_tables_and_crossings_are_the_recorded_means_and_crossings():
  rng = np.random.default_rng(0)
  R, B, L = 6, 8, len(LABELS)
  s = rng.dirichlet(np.ones(L), size=(R, B))
  seeds = ["health"] * 4 + ["sport"] * 4
  s[:, 0, 0] = 0.01  # chain 0 never crosses the politics baseline 1/4
  s[:, 5, 0] = 0.01
  s[3, 5, 0] = 0.9  # chain 5 crosses once, transiently
  res = basins.tables(s, seeds, LABELS)
  assert res["baseline"] == 0.25 and res["num_chains"] == B
  assert res["crossed"] == int((s[:, :, 0] > 0.25).any(0).sum())
  assert res["peak"] == pytest.approx(s[:, :, 0].max())
  health, sport = res["rows"]
  assert (health["topic"], sport["topic"]) == ("health", "sport")
  assert health["target_start"] == pytest.approx(s[0, :4, 0].mean())
  assert sport["target_end"] == pytest.approx(s[-1, 4:, 0].mean())
  assert health["seed_end"] == pytest.approx(s[-1, :4, 1].mean())
  assert sport["seed_start"] == pytest.approx(s[0, 4:, 2].mean())


def test_each_distinct_state_is_scored_once_and_scattered_back():
  rng = np.random.default_rng(1)
  tokens = rng.integers(0, 3, (5, 4, 2))  # 9 possible states among 20 records
  scorer = CountingScorer()
  s, e = basins.score_states(scorer, tokens, decode)
  assert e is None
  assert len(scorer.seen) == len(set(scorer.seen)) == len(np.unique(tokens.reshape(-1, 2), axis=0))
  ref = CountingScorer().scores(decode(tokens.reshape(-1, 2))).reshape(5, 4, -1)
  np.testing.assert_allclose(s, ref)


def test_pca_matches_the_covariance_eigenvectors():
  rng = np.random.default_rng(2)
  e = rng.normal(size=(50, 6)) * np.array([5, 3, 1, 0.5, 0.2, 0.1]) + 2.0
  p, comps, ratio = basins.pca(e)
  c = e - e.mean(0)
  w, v = np.linalg.eigh(c.T @ c)
  for k in range(2):
    assert abs(comps[k] @ v[:, -1 - k]) == pytest.approx(1.0, abs=1e-8)
    assert ratio[k] == pytest.approx(w[-1 - k] / w.sum())
  np.testing.assert_allclose(p, c @ comps.T)


def test_measure_section_and_attractors(tmp_path):
  from gmlm.runs import RunDir

  rng = np.random.default_rng(3)
  tokens = rng.integers(0, 5, (4, 6, 3))
  seeds = ["health"] * 3 + ["food"] * 3
  res = basins.measure(np.arange(4) * 200, tokens, seeds, CountingScorer(), decode)
  assert np.shape(res["scores"]) == (4, 6, len(LABELS)) and "pca" not in res
  res["pca"], res["pca_explained"] = rng.normal(size=(4, 6, 2)).tolist(), [0.5, 0.2]
  ends = {"a b said that": tokens[-1, :3], "c said that": tokens[-1, 3:]}
  att = basins.attractors(ends, CountingScorer(), decode)
  for p, (prefix, toks) in zip(att["prefixes"], ends.items()):
    texts = [f"{prefix} {t}" for t in decode(toks)]
    np.testing.assert_allclose(p["mean_scores"], CountingScorer().scores(texts).mean(0))
    assert sum(p["wins"].values()) == 3 and p["examples"][0] == texts[0]
  md = basins.section(res, RunDir(tmp_path), att)
  assert (tmp_path / "basins_pca.png").is_file()
  assert "(a) politics score" in md and "`c said that`" in md
