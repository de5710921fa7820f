"""Trap detection: the drift rule and the holding-time detector find planted traps at their
planted start and end, agree with each other on a rejection-free run of the tiny model, and the
catalogue groups traps of one basin into one neighbourhood."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from glauber_util import CANDIDATES, C, N, sequences, spec, tiny_mlm

from glauber import chains, rejection_free
from glauber.measures import traps
from gmlm.runs import RunDir

D = 32


def unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def planted(R: int, plan: dict[int, list[tuple[int, int, int]]], B: int, seed: int = 0):
  """Embeddings e_RBD: a fresh random direction every record, except inside each planted
  (start, end, basin) where the direction is the basin's (plus 1% noise)."""
  rng = np.random.default_rng(seed)
  basins = unit(rng.normal(size=(8, D)))
  e = unit(rng.normal(size=(R, B, D)))
  for b, spans in plan.items():
    for start, end, basin in spans:
      e[start:end, b] = unit(basins[basin] + 0.01 * rng.normal(size=(end - start, D)) / D**0.5)
  return e


PLAN = {0: [(500, 1400, 0)], 1: [(200, 600, 1), (1000, 2600, 0)], 3: [(2500, 3000, 2)]}


def test_drift_rule_finds_planted_traps_at_their_start_and_end():
  R, B = 3000, 4
  steps_R = np.arange(R)
  found = traps.drift_traps(steps_R, planted(R, PLAN, B), window=300, threshold=0.12)
  got = sorted((t["chain"], t["start"], t["start"] + t["duration"], t["censored"]) for t in found)
  want = sorted((b, s, e, e == R) for b, spans in PLAN.items() for s, e, _ in spans)
  assert got == want


def test_window_drift_is_the_mean_distance_from_the_window_start():
  e = planted(50, {}, 2, seed=1)
  w = 7
  d = traps.window_drift(e, w)
  ref = np.array(
    [[np.mean(1 - e[r + 1 : r + w + 1, b] @ e[r, b]) for b in range(2)] for r in range(50 - w)]
  )
  np.testing.assert_allclose(d[: 50 - w], ref, atol=1e-5)
  assert np.isnan(d[50 - w :]).all()


def test_records_every_k_steps_report_steps_not_records():
  R, k = 300, 10
  e = planted(R, {0: [(100, 200, 0)]}, 1)
  (t,) = traps.drift_traps(k * np.arange(R), e, window=300, threshold=0.12)
  assert (t["start"], t["duration"]) == (1000, 1000)


def synthetic_tokens(R: int, plan: dict, B: int, seed: int = 0):
  """tokens_RBN: a fresh random state every step outside the planted spans; inside, the
  basin's state with one-step single-site flips at random times (a holding-time record)."""
  rng = np.random.default_rng(seed)
  states = rng.integers(0, 50, (8, N))
  tok = rng.integers(0, 50, (R, B, N))
  for b, spans in plan.items():
    for start, end, basin in spans:
      tok[start:end, b] = states[basin]
      for r in rng.choice(np.arange(start + 1, end - 1), size=(end - start) // 100, replace=False):
        tok[r, b, rng.integers(N)] += 50  # a one-step excursion
  return tok


def one_hot(tok_RBN, vocab):
  """A position-aware bag of tokens: 1 - cos = (sites that differ) / n."""
  R, B, n = tok_RBN.shape
  return np.eye(vocab)[tok_RBN].reshape(R, B, n * vocab) / np.sqrt(n)


def test_holding_times_find_planted_traps_and_agree_with_the_drift_rule():
  R, B = 3000, 4
  tok = synthetic_tokens(R, PLAN, B)
  steps_R = np.arange(R)
  held = traps.holding_traps(steps_R, tok, min_hold=300, max_gap=1, max_sites=1)
  got = sorted((t["chain"], t["start"], t["start"] + t["duration"]) for t in held)
  assert got == sorted((b, s, e) for b, spans in PLAN.items() for s, e, _ in spans)
  drift = traps.drift_traps(steps_R, one_hot(tok, 100), window=300, threshold=0.12)
  assert traps.agreement(held, drift, R, B) == 1.0


@pytest.mark.slow  # a rejection-free run: ~10 s, mostly compiling
def test_holding_detector_agrees_with_drift_rule_on_a_rejection_free_run():
  # T = 0.3: the tiny model has one deep state (expected holding time 658 steps) that chains
  # enter, leave for short excursions and re-enter; every other state holds <= 4 steps.
  R, B, w = 1500, 8, 50
  x0 = chains.init_state(sequences(np.random.default_rng(2).integers(0, C, (B, N))))
  _, rec = rejection_free.run(
    jax.random.key(0), tiny_mlm(), spec(0.3), x0, R, 1, memo=0, retire_every=0
  )
  tok = np.asarray(rec.tokens_RBN)
  assert (np.asarray(rec.changes_B) > 0).all()  # every chain moved: there is something to find
  steps_R = 1 + np.arange(R)
  held = traps.holding_traps(steps_R, tok, min_hold=w, max_gap=5, max_sites=1)
  drift = traps.drift_traps(steps_R, one_hot(tok - CANDIDATES[0], C), window=w, threshold=0.12)
  assert held and drift
  assert traps.agreement(held, drift, R, B) >= 0.9


def test_catalogue_neighbourhoods_texts_and_margin_slots(tmp_path):
  R, B = 3000, 4
  tok = synthetic_tokens(R, PLAN, B)
  e = planted(R, PLAN, B)
  calls = []

  def margins(tokens_XN):
    calls.append(tokens_XN)
    return {"delta_mean": tokens_XN.mean(-1), "delta_min": tokens_XN.min(-1) - 3.0}

  results = traps.measure(
    np.arange(R),
    tok,
    e,
    decode=lambda rows: ["-".join(map(str, r)) for r in rows],
    margins=margins,
    holding=True,
    max_gap=1,
  )
  cat = {(t["chain"], t["start"]): t for t in results["traps"]}
  # The two spans of basin 0 (chains 0 and 1) form one neighbourhood; basins 1 and 2 their own.
  hood = {(b, s): cat[(b, s)]["neighbourhood"] for b, spans in PLAN.items() for s, _, _ in spans}
  assert hood[(0, 500)] == hood[(1, 1000)]
  assert len({hood[(1, 200)], hood[(0, 500)], hood[(3, 2500)]}) == 3
  rng = np.random.default_rng(0)
  states = rng.integers(0, 50, (8, N))  # the planted states (same draws as synthetic_tokens)
  for (b, s), t in cat.items():
    basin = next(x for st, _, x in PLAN[b] if st == s)
    assert t["tokens"] == states[basin].tolist()
    assert t["text"] == "-".join(map(str, states[basin]))
    assert t["delta_mean"] == states[basin].mean()
    assert t["kind"] == ("perfect" if states[basin].min() > 3 else "approximate")
    assert t["predicted_escape"] is None
    assert t["observed_escape"] == (None if t["censored"] else t["duration"])
  assert len(calls) == 2 and results["agreement"] == 1.0  # drift and holding catalogues
  assert json.loads(json.dumps(results)) == results
  md = traps.section(results, RunDir(tmp_path))
  assert (tmp_path / "traps.png").is_file() and md.count("\n| ") == 1 + len(results["traps"])


def test_escape_steps_is_the_first_record_that_rewrote_the_share_of_sites():
  home_BN = np.zeros((3, 4), int)
  tokens_RBN = np.zeros((4, 3, 4), int)
  tokens_RBN[1, 0, :2] = 1  # chain 0: half the sites rewritten at record 1
  tokens_RBN[2:, 0] = 1
  tokens_RBN[3, 1, 0] = 1  # chain 1: a quarter at the end only
  steps_R = np.array([10, 20, 30, 40])
  esc = traps.escape_steps(steps_R, tokens_RBN, home_BN, 0.5)
  np.testing.assert_array_equal(esc, [20, np.inf, np.inf])
  np.testing.assert_array_equal(
    traps.escape_steps(steps_R, tokens_RBN, home_BN, 0.25), [20, 40, np.inf]
  )
