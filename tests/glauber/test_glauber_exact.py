"""Glauber chains on a tiny random BERT against exact enumeration (6 candidates, n = 4 free
sites, 1296 states): step-t laws and the stationary law of plain and rejection-free chains,
holding times and jump destinations, T -> 0, frozen tokens, resume and 1 vs 8 devices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_on_devices
from glauber_util import (
  CANDIDATES,
  MASK,
  OFFSET,
  SEP,
  C,
  N,
  device_run,
  exact_conditionals,
  histogram,
  sequences,
  spec,
  state_index,
  stationary,
  tiny_mlm,
  transition_matrix,
  tv,
)
from scipy import stats

from glauber import chains, rejection_free

X0 = np.array([[0, 3, 1, 5]])  # the fixed start (candidate indices)
B = 8192


@pytest.fixture(scope="module")
def exact():
  model = tiny_mlm()
  cond_SNC = exact_conditionals(model)
  P = transition_matrix(cond_SNC)
  return model, cond_SNC, P, stationary(P)


def law_after(P, t):
  mu = np.zeros(len(P))
  mu[state_index(CANDIDATES[X0])[0]] = 1.0
  for _ in range(t):
    mu = mu @ P
  return mu


def start(num_chains=B):
  return chains.init_state(np.repeat(sequences(X0), num_chains, axis=0))


def sampling_band(mu, num, q=0.999, draws=400):
  """The q-quantile of TV(empirical, mu) for num exact i.i.d. draws from mu."""
  rng = np.random.default_rng(0)
  return float(np.quantile([tv(rng.multinomial(num, mu) / num, mu) for _ in range(draws)], q))


def check_transient(tokens_BN, mu):
  """The step-t law: TV inside the sampling band of the exact law and a chi-square fit."""
  assert tv(histogram(tokens_BN), mu) <= sampling_band(mu, len(tokens_BN))
  counts = np.bincount(state_index(tokens_BN), minlength=len(mu))
  expected = mu * len(tokens_BN)
  big = expected >= 5
  obs = np.append(counts[big], counts[~big].sum())
  exp = np.append(expected[big], expected[~big].sum())
  assert stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > 1e-3


def check_laws(exact, rec, every):
  _, _, P, pi = exact
  tokens_RBN = np.asarray(rec.tokens_RBN)
  check_transient(tokens_RBN[0], law_after(P, every))
  check_transient(tokens_RBN[2], law_after(P, 3 * every))
  assert tv(law_after(P, 6 * every), pi) <= 0.005  # the pooled records below are mixed
  assert tv(histogram(tokens_RBN[5:].reshape(-1, N)), pi) <= 0.03


@pytest.mark.slow  # long chains against the exact laws
def test_plain_glauber_has_the_exact_step_t_and_stationary_laws(exact):
  model = exact[0]
  assert np.allclose(exact[2].sum(1), 1.0, atol=1e-5) and exact[3].min() > 0
  state, rec = chains.run(jax.random.key(1), model, spec(), start(), 8, 8)
  assert (np.asarray(state.steps_B) == 64).all() and int(state.t) == 64
  check_laws(exact, rec, 8)


@pytest.mark.slow  # long chains against the exact laws
@pytest.mark.parametrize("retire_every,granule", [(32, 8), (1, 1), (0, 8)])
def test_rejection_free_has_the_exact_step_t_and_stationary_laws(exact, retire_every, granule):
  """Exact whether finished chains retire often (1, 1), by default (32, 8) or never (0)."""
  model = exact[0]
  state, rec = rejection_free.run(
    jax.random.key(2), model, spec(), start(), 8, 8, retire_every=retire_every, granule=granule
  )
  assert (np.asarray(state.steps_B) == 64).all()
  assert int(state.t) == int(rec.iterations) < 64
  check_laws(exact, rec, 8)


@pytest.mark.slow  # chains compiled with and without the memo
@pytest.mark.parametrize("retire_every,slots", [(0, 2), (32, 3)])
def test_the_memo_of_recent_states_serves_revisits_without_changing_any_draw(
  exact, retire_every, slots
):
  """Chains that remember their recent states' conditionals make the same moves as chains that
  recompute them, and the memo serves exactly the revisits of remembered states (the tiny
  chain returns to recent states often)."""
  model = exact[0]
  kw = dict(retire_every=retire_every, granule=4)
  s_on, rec_on = rejection_free.run(
    jax.random.key(7), model, spec(), start(64), 6, 8, memo=slots, **kw
  )
  s_off, rec_off = rejection_free.run(
    jax.random.key(7), model, spec(), start(64), 6, 8, memo=0, **kw
  )
  np.testing.assert_array_equal(np.asarray(rec_on.tokens_RBN), np.asarray(rec_off.tokens_RBN))
  np.testing.assert_array_equal(np.asarray(s_on.steps_B), np.asarray(s_off.steps_B))
  assert int(rec_on.iterations) == int(rec_off.iterations)
  assert (np.asarray(rec_off.memo_hits_B) == 0).all()
  # The hits, replayed from a step-by-step record: a chain's iterations start in x0, x1, ...
  # (the states after each jump), plus one in the final state unless the last jump came at the
  # last step; a hit is an iteration in a remembered state; a miss replaces the least recently
  # used one.
  _, rec = rejection_free.run(jax.random.key(8), model, spec(), start(64), 48, 1, memo=slots, **kw)
  idx_RB = np.concatenate(
    [np.full((1, 64), state_index(CANDIDATES[X0])[0]), state_index(np.asarray(rec.tokens_RBN))]
  )
  expected = []
  for b in range(64):
    changed = np.flatnonzero(idx_RB[1:, b] != idx_RB[:-1, b])
    visits = [idx_RB[0, b], *idx_RB[changed + 1, b]]
    if changed.size and changed[-1] == 47:
      visits = visits[:-1]
    recent, hits = [], 0  # least recently used first
    for x in visits:
      if x in recent:
        hits += 1
        recent.remove(x)
      elif len(recent) == slots:
        recent.pop(0)
      recent.append(x)
    expected.append(hits)
  np.testing.assert_array_equal(np.asarray(rec.memo_hits_B), expected)
  assert sum(expected) > 0
  assert rejection_free.memo_slots(spec(), 64) == 8
  assert rejection_free.memo_slots(spec(), 64, budget_bytes=1) == 0
  with pytest.raises(ValueError, match="memo=-1"):
    rejection_free.run(jax.random.key(7), model, spec(), start(4), 1, 1, memo=-1)


def first_change_law(P, x_index, horizon):
  """P(first change at step g + 1) for g < horizon, and the law of the state it jumps to."""
  stay = P[x_index, x_index]
  hold_G = stay ** np.arange(horizon) * (1 - stay)
  dest = P[x_index].copy()
  dest[x_index] = 0
  return hold_G, dest / dest.sum()


def test_holding_times_and_jumps_agree_between_modes_and_with_exact(exact):
  model, _, P, _ = exact
  x_index = state_index(CANDIDATES[X0])[0]
  H = 12
  hold_G, dest = first_change_law(P, x_index, H)
  # Plain: record every step; the first record that differs from x0.
  _, rec = chains.run(jax.random.key(3), model, spec(), start(), H, 1)
  idx_RB = state_index(np.asarray(rec.tokens_RBN))
  moved_RB = idx_RB != x_index
  assert moved_RB.any(0).mean() > 0.99
  first_B = np.argmax(moved_RB, axis=0)[moved_RB.any(0)]
  plain_dest = idx_RB[first_B, np.flatnonzero(moved_RB.any(0))]
  # Rejection-free: one iteration with a target beyond the horizon; G + 1 steps to the jump.
  st = start()
  toks, steps, stay_B, _ = jax.jit(rejection_free.iteration)(
    jax.random.key(4), model, spec(), st.tokens_BL, st.steps_B, st.steps_B + 10**6
  )
  rf_first = np.asarray(steps) - 1
  rf_dest = state_index(np.asarray(spec().free(toks)))
  np.testing.assert_allclose(np.asarray(stay_B), P[x_index, x_index], atol=1e-5)
  for first in (first_B, rf_first[rf_first < H]):
    counts = np.bincount(first, minlength=H)[:H]
    expected = hold_G / hold_G.sum() * counts.sum()
    keep = expected >= 5
    assert (
      stats.chisquare(
        counts[keep], expected[keep] * counts[keep].sum() / expected[keep].sum()
      ).pvalue
      > 1e-3
    )
  assert stats.ks_2samp(first_B, rf_first[rf_first < H]).pvalue > 1e-3
  for d in (plain_dest, rf_dest):
    assert tv(np.bincount(d, minlength=len(P)) / len(d), dest) <= 0.03


@pytest.mark.slow  # chains compiled per temperature
def test_zero_temperature_is_argmax_and_extreme_temperatures_are_finite(exact):
  model, cond_SNC, _, _ = exact
  logits = jnp.asarray([[9.0] * 5 + [0.0, 3.0, 3.0 - 1e-3, -50.0, 0.0, 0.0]])  # ids 5..10 count
  for T in (0.0, 1e-8, 1e-30):
    lp = np.asarray(chains.tempered_logprobs(spec(T), logits))
    assert not np.isnan(lp).any() and np.exp(lp)[0, 1] == pytest.approx(1.0)
  for T in (np.inf, 1e30):
    lp = np.asarray(chains.tempered_logprobs(spec(T), logits))
    np.testing.assert_allclose(np.exp(lp), 1 / C, rtol=1e-6)
  # A zero-temperature sweep writes the argmax of each site's current conditional.
  _, rec = chains.run(jax.random.key(5), model, spec(0.0), start(4), 2 * N, 1, method="sweep")
  tokens_RBN = np.asarray(rec.tokens_RBN)
  prev = np.repeat(CANDIDATES[X0], 4, 0)
  for r in range(2 * N):
    i = r % N
    before = state_index(prev)
    assert (tokens_RBN[r][:, i] == CANDIDATES[cond_SNC[before, i].argmax(-1)]).all()
    prev = tokens_RBN[r]
  # Near a zero-temperature fixed point the stay probability is ~1, auto mode goes rejection-free,
  # and at T = 0 the rejection-free chain stays put in one iteration per record.
  fixed = chains.init_state(np.repeat(sequences((prev - CANDIDATES[0])[:1]), 4, 0))
  _, rec = chains.run(jax.random.key(6), model, spec(0.0), fixed, 1, N, method="sweep")
  assert (np.asarray(rec.tokens_RBN[0]) == prev[:1]).all()  # a fixed point of argmax sweeps
  assert rejection_free.choose_mode(model, spec(0.05), fixed.tokens_BL)[0] == "rejection_free"
  state, rec = rejection_free.run(jax.random.key(6), model, spec(0.0), fixed, 2, 5)
  assert int(rec.iterations) == 1
  np.testing.assert_array_equal(np.asarray(state.tokens_BL), np.asarray(fixed.tokens_BL))


def test_top_k_and_top_p_truncate_to_the_largest_probabilities():
  logits = jnp.asarray(
    [[9.0] * 5 + [np.log(0.4), np.log(0.3), np.log(0.15), np.log(0.1), np.log(0.04), np.log(0.01)]]
  )
  p_k = np.exp(np.asarray(chains.tempered_logprobs(spec(top_k=2), logits)))[0]
  np.testing.assert_allclose(p_k, [4 / 7, 3 / 7, 0, 0, 0, 0], rtol=1e-5)
  p_p = np.exp(np.asarray(chains.tempered_logprobs(spec(top_p=0.8), logits)))[0]
  np.testing.assert_allclose(p_p, np.array([0.4, 0.3, 0.15, 0, 0, 0]) / 0.85, rtol=1e-5)
  p_both = np.exp(np.asarray(chains.tempered_logprobs(spec(0.5, top_k=3, top_p=0.99), logits)))[0]
  np.testing.assert_allclose(p_both, np.array([0.16, 0.09, 0.0225, 0, 0, 0]) / 0.2725, rtol=1e-5)


@pytest.mark.parametrize(
  "method,k", [("glauber", 1), ("sweep", 2), ("block", 3), ("parallel", 1), ("rejection_free", 1)]
)
def test_frozen_prefix_and_special_tokens_never_change(exact, method, k):
  model = exact[0]
  x0 = sequences(np.random.default_rng(0).integers(0, C, (64, N)))
  x0[:5, OFFSET + 1] = MASK  # an all-mask-like start is resampled into candidates
  if method == "rejection_free":
    state, rec = rejection_free.run(
      jax.random.key(7), model, spec(0.7), chains.init_state(x0), 3, 4
    )
  else:
    state, rec = chains.run(
      jax.random.key(7), model, spec(0.7), chains.init_state(x0), 3, 4, method=method, k=k
    )
  out = np.asarray(state.tokens_BL)
  np.testing.assert_array_equal(out[:, :OFFSET], x0[:, :OFFSET])
  assert (out[:, -1] == SEP).all()
  assert np.isin(np.asarray(rec.tokens_RBN)[:, 5:], CANDIDATES).all()
  assert np.isin(out[5:, OFFSET:-1], CANDIDATES).all()


@pytest.mark.slow  # runs in pieces and whole, each compiled
@pytest.mark.parametrize("mode", ["plain", "rejection_free"])
def test_resumed_runs_equal_one_run_bitwise(exact, mode, tmp_path):
  """A run continued from an orbax checkpoint equals the uninterrupted run; in plain mode
  any split of the steps does (rejection-free runs reproduce for the same chunking)."""
  from glauber import recording

  model = exact[0]
  runner = chains.run if mode == "plain" else rejection_free.run
  x0 = chains.init_state(sequences(np.random.default_rng(1).integers(0, C, (32, N))))
  key = jax.random.key(8)
  half, rec1 = runner(key, model, spec(0.5), x0, 2, 3)
  rest, rec2 = runner(key, model, spec(0.5), half, 2, 3)
  recording.save(recording.checkpoints(tmp_path), 1, half)
  _, restored = recording.restore(recording.checkpoints(tmp_path), x0)
  resumed, rec3 = runner(key, model, spec(0.5), restored, 2, 3)
  np.testing.assert_array_equal(np.asarray(resumed.tokens_BL), np.asarray(rest.tokens_BL))
  np.testing.assert_array_equal(np.asarray(rec3.tokens_RBN), np.asarray(rec2.tokens_RBN))
  assert int(resumed.t) == int(rest.t) and (np.asarray(resumed.steps_B) == 12).all()
  if mode == "plain":
    whole, rec = runner(key, model, spec(0.5), x0, 4, 3)
    np.testing.assert_array_equal(np.asarray(whole.tokens_BL), np.asarray(rest.tokens_BL))
    np.testing.assert_array_equal(
      np.asarray(rec.tokens_RBN),
      np.concatenate([np.asarray(rec1.tokens_RBN), np.asarray(rec2.tokens_RBN)]),
    )


@pytest.mark.parametrize("mode", ["plain", "rejection_free"])
def test_recorded_logprobs_are_those_of_the_recorded_tokens(exact, mode):
  model, cond_SNC, _, _ = exact
  runner = chains.run if mode == "plain" else rejection_free.run
  x0 = chains.init_state(sequences(np.random.default_rng(3).integers(0, C, (16, N))))
  _, rec = runner(jax.random.key(12), model, spec(), x0, 5, 2, record_logprobs=True)
  tokens_XN = np.asarray(rec.tokens_RBN).reshape(-1, N)
  expected = np.log(
    np.take_along_axis(
      cond_SNC[state_index(tokens_XN)], (tokens_XN - CANDIDATES[0])[..., None], -1
    )[..., 0]
  )
  np.testing.assert_allclose(np.asarray(rec.logp_RBN).reshape(-1, N), expected, atol=2e-4)


@pytest.mark.slow  # many one-step draws per method against the exact marginals
def test_block_and_parallel_one_step_marginals(exact):
  """Parallel: every site redrawn from p_i(. | x0_-i), the exact single-site conditionals.
  Block with k sites: each drawn from its marginal with all k masked, which differs."""
  model, cond_SNC, _, _ = exact
  x_index = state_index(CANDIDATES[X0])[0]
  _, rec = chains.run(jax.random.key(9), model, spec(), start(), 1, 1, method="parallel")
  tokens_BN = np.asarray(rec.tokens_RBN[0]) - CANDIDATES[0]
  for i in range(N):
    freq = np.bincount(tokens_BN[:, i], minlength=C) / B
    assert tv(freq, cond_SNC[x_index, i]) <= 0.02
  # Block with k = n: all sites masked at once, each drawn from its all-masked marginal.
  from gmlm import nn as gm

  masked = sequences(X0)
  masked[:, OFFSET : OFFSET + N] = MASK
  logits = np.asarray(
    gm.masked_logits(model, jnp.asarray(masked), jnp.asarray(OFFSET + np.arange(N)[None])),
    np.float64,
  )[0]
  z = logits[:, CANDIDATES]
  marg_NC = np.exp(z - z.max(-1, keepdims=True))
  marg_NC /= marg_NC.sum(-1, keepdims=True)
  _, rec = chains.run(jax.random.key(13), model, spec(), start(), 1, 1, method="block", k=N)
  tokens_BN = np.asarray(rec.tokens_RBN[0]) - CANDIDATES[0]
  for i in range(N):
    assert tv(np.bincount(tokens_BN[:, i], minlength=C) / B, marg_NC[i]) <= 0.02
  assert max(tv(marg_NC[i], cond_SNC[x_index, i]) for i in range(N)) > 0.05  # not Gibbs


_SCRIPT = r"""
import sys, numpy as np, jax
from jax.sharding import Mesh
from glauber_util import device_run
assert jax.device_count() == 8
np.savez(sys.argv[1], **device_run(Mesh(np.array(jax.devices()), ("data",))))
"""


@pytest.mark.slow  # an interpreter with 8 devices compiling the chains
def test_one_and_eight_devices_give_identical_chains(tmp_path):
  out = tmp_path / "eight.npz"
  run_on_devices(_SCRIPT, 8, str(out), timeout=240)
  eight, one = np.load(out), device_run()  # this process has one device
  for name in ("plain", "rejection_free", "steps", "t"):
    np.testing.assert_array_equal(one[name], eight[name])


def test_bad_inputs_raise_clear_errors(exact):
  model = exact[0]
  with pytest.raises(ValueError, match="temperature must be >= 0"):
    spec(-1.0)
  with pytest.raises(ValueError, match="unknown method"):
    chains.run(jax.random.key(0), model, spec(), start(2), 1, 1, method="gibs")
  with pytest.raises(ValueError, match="block size k"):
    chains.run(jax.random.key(0), model, spec(), start(2), 1, 1, method="block", k=N + 1)
  with pytest.raises(ValueError, match="top_p"):
    spec(top_p=0.0)
  with pytest.raises(ValueError, match="candidate vocabulary is empty"):
    chains.candidate_ids(vocab_size=3, exclude_ids=[0, 1, 2])
