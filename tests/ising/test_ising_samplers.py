"""Samplers against exact enumeration: long-run laws, one-step laws, hitting times,
Proposition 5, reproducibility across resumes and device counts, and input validation."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_at_xla_defaults, run_on_devices
from ising_helpers import random_model

from ising import exact, samplers
from ising.model import all_states, clique_model, exact_distribution, ising, state_index


def empirical(x_BN, n):
  return np.bincount(state_index(np.asarray(x_BN)), minlength=2**n) / x_BN.shape[0]


def tv(p, q):
  return 0.5 * float(np.abs(p - q).sum())


def steps_to_mix(P, p, mu0, eps=0.003):
  """Smallest t with TV(mu0 P^t, p) <= eps, from the exact matrix."""
  mu, t = mu0, 0
  while tv(mu, p) > eps:
    mu, t = mu @ P, t + 1
  return t


def check_long_run_law(n, ks, num_chains, seed):
  model = random_model(n, seed)
  p = exact_distribution(model)
  x0 = samplers.random_states(jax.random.key(seed), num_chains, n)
  for k in ks:
    num_steps = steps_to_mix(exact.kgibbs_transition_matrix(model, k), p, np.full(2**n, 0.5**n))
    x = samplers.sample(jax.random.key(100 + k), model, x0, num_steps, k=k)
    assert tv(empirical(x, n), p) <= 0.02, f"k={k}, {num_steps} steps"


@pytest.mark.slow  # long chains per k against the exact law
def test_kgibbs_long_run_law_is_exact_n5_every_k():
  check_long_run_law(5, range(1, 6), num_chains=65536, seed=1)


@pytest.mark.slow
def test_kgibbs_long_run_law_is_exact_n8_every_k():
  # many cheap steps: compiled at XLA's defaults, 23 s, not 100 at the suite's setting
  run_at_xla_defaults(__file__, "kgibbs_long_run_n8")


def kgibbs_long_run_n8():
  check_long_run_law(8, range(1, 9), num_chains=262144, seed=2)


@pytest.mark.parametrize("method,k", [("gibbs", 1), ("gibbs", 2), ("gibbs", 4), ("parallel", 1)])
def test_one_step_law_equals_exact_transition_row(method, k):
  # From a fixed state, the next state of many chains is distributed as the row P[x, .].
  n = 4
  model = random_model(n, 5, scale=0.6)
  P = exact.transition_matrix(model, method, k)
  x = all_states(n)[6]
  x0 = jnp.broadcast_to(jnp.asarray(x), (200000, n))
  x1 = samplers.sample(jax.random.key(3), model, x0, 1, method=method, k=k)
  assert tv(empirical(x1, n), P[6]) <= 0.01


def test_parallel_sampler_converges_to_its_own_stationary_law_not_the_target():
  n = 5
  model = clique_model(n, n, coupling=0.2, field_in=0.0)
  p = exact_distribution(model)
  P_par = exact.parallel_transition_matrix(model)
  pi_par = exact.stationary_distribution(P_par)
  assert tv(pi_par, p) > 0.1  # exact: 0.1195
  num_steps = steps_to_mix(P_par, pi_par, np.full(2**n, 0.5**n))
  x0 = samplers.random_states(jax.random.key(0), 65536, n)
  x = samplers.sample(jax.random.key(1), model, x0, num_steps, method="parallel")
  emp = empirical(x, n)
  assert tv(emp, pi_par) <= 0.02
  assert tv(emp, p) >= 0.08


def test_hitting_times_match_exact_law():
  # Figure L.3's setting, small budget: empirical P(tau <= t) vs the exact law from the
  # transition matrix (Kolmogorov distance).
  n, c = 6, 3
  model = clique_model(n, c, coupling=0.6, field_in=1.0)
  budget = 60
  for k in (1, 3):
    P = exact.kgibbs_transition_matrix(model, k)
    states = all_states(n)
    start = np.all(states[:, :c] == -1, axis=1).astype(float)
    start /= start.sum()
    target = np.all(states[:, :c] == 1, axis=1)
    surv = exact.hitting_time_survival(P, start, target, budget)
    x0 = samplers.mode_states(20000, n, c, -1, key=jax.random.key(4))
    hits = np.asarray(samplers.hitting_times_to_mode(jax.random.key(k), model, x0, c, budget, k=k))
    emp_surv = np.array([np.mean((hits < 0) | (hits > t)) for t in range(budget + 1)])
    assert np.max(np.abs(emp_surv - surv)) <= 0.02, f"k={k}"


def test_independent_parallel_sampler_stays_stuck_in_minus_mode():
  # Proposition 5: from R_-1 on a strongly ferromagnetic clique model, the parallel sampler
  # keeps sum_{i in C} x_i <= -2 for the whole budget; k-Gibbs with k >= |C| escapes.
  n, c = 10, 4
  model = clique_model(n, c, coupling=3.0, field_in=5.0)
  x0 = samplers.mode_states(2000, n, c, -1)
  hits_par = samplers.hitting_times_to_mode(
    jax.random.key(0), model, x0, c, 1000, method="parallel"
  )
  assert np.all(np.asarray(hits_par) == -1)
  x = x0
  for t in range(10):
    x = samplers.sample(jax.random.key(1), model, x, 100, method="parallel", start_step=100 * t)
    assert np.all(np.asarray(x)[:, :c].sum(1) <= -2)
  hits_k = samplers.hitting_times_to_mode(jax.random.key(0), model, x0, c, 1000, k=c)
  assert np.mean(np.asarray(hits_k) > 0) > 0.99


def test_resumed_run_is_bitwise_equal_to_one_run():
  model = random_model(7, 0)
  x0 = samplers.random_states(jax.random.key(0), 512, 7)
  key = jax.random.key(42)
  for method, k in [("gibbs", 1), ("gibbs", 3), ("parallel", 1)]:
    one = samplers.sample(key, model, x0, 50, method=method, k=k)
    half = samplers.sample(key, model, x0, 20, method=method, k=k)
    two = samplers.sample(key, model, half, 30, method=method, k=k, start_step=20)
    np.testing.assert_array_equal(np.asarray(one), np.asarray(two))


SHARDED_SCRIPT = r"""
import json, sys
import jax, numpy as np
from jax.sharding import Mesh
from ising import samplers
from ising.model import clique_model
model = clique_model(10, 4, coupling=1.0, field_in=0.5)
x0 = samplers.random_states(jax.random.key(0), 1024, 10)
mesh = Mesh(np.array(jax.devices()), ("data",)) if len(jax.devices()) > 1 else None
out = {"devices": len(jax.devices())}
for method, k in [("gibbs", 1), ("gibbs", 3), ("parallel", 1)]:
  x = samplers.sample(jax.random.key(7), model, x0, 40, method=method, k=k, mesh=mesh)
  if mesh is not None:
    assert len(x.sharding.device_set) == len(jax.devices())
  out[f"{method}{k}"] = np.asarray(x).tolist()
hits = samplers.hitting_times_to_mode(jax.random.key(7), model, x0, 4, 40, k=2, mesh=mesh)
out["hits"] = np.asarray(hits).tolist()
json.dump(out, open(sys.argv[1], "w"))
"""


def run_with_devices(num_devices, out_path):
  run_on_devices(SHARDED_SCRIPT, num_devices, str(out_path))
  return json.loads(out_path.read_text())


@pytest.mark.slow  # an interpreter with 8 devices compiling the samplers
def test_same_key_same_chains_on_one_or_eight_devices(tmp_path):
  one = run_with_devices(1, tmp_path / "one.json")
  eight = run_with_devices(8, tmp_path / "eight.json")
  assert one.pop("devices") == 1 and eight.pop("devices") == 8
  assert one == eight


@pytest.mark.parametrize(
  "n,method,k", [(7, "gibbs", 1), (7, "gibbs", 3), (20, "gibbs", 1), (20, "parallel", 1)]
)  # Glauber on N = 7: the packed-state table; on N = 20: the update of one site
def test_unrolled_scans_run_the_same_chains_as_one_step_per_iteration(n, method, k):
  """Several steps per loop iteration (unroll: not a divisor of the length, or all of it)
  change no chain and no hitting time: step t still uses fold_in(key, t)."""
  model = random_model(n, 1)
  x0 = samplers.random_states(jax.random.key(0), 256, n)
  key = jax.random.key(3)
  run = lambda unroll: np.asarray(
    samplers.sample(key, model, x0, 13, method=method, k=k, unroll=unroll)
  )
  one = run(1)
  assert np.any(one != np.asarray(x0))
  for unroll in (4, 13):
    np.testing.assert_array_equal(run(unroll), one, f"unroll={unroll}")
  hits = lambda unroll: np.asarray(
    samplers.hitting_times_to_mode(key, model, x0, 2, 13, method=method, k=k, unroll=unroll)
  )
  first = hits(1)
  assert np.any(first > 0)
  np.testing.assert_array_equal(hits(4), first)
  with pytest.raises(ValueError, match="unroll must be an int >= 1"):
    samplers.sample(key, model, x0, 3, unroll=0)


@pytest.mark.parametrize(
  "kwargs,match",
  [
    (dict(k=5), "k=5"),
    (dict(k=0), "k=0"),
    (dict(method="metropolis"), "metropolis"),
    (dict(method="parallel", k=0), r"method='parallel' updates all sites per step; block size k=0"),
    (dict(method="parallel", k=99), r"block size k=99 applies to 'gibbs' only"),
  ],
)
def test_bad_sampler_arguments_raise_clear_errors(kwargs, match):
  model = random_model(4, 0)
  x0 = samplers.random_states(jax.random.key(0), 8, 4)
  with pytest.raises(ValueError, match=match):
    samplers.sample(jax.random.key(0), model, x0, 3, **kwargs)


def test_bad_model_and_chain_inputs_raise_clear_errors():
  with pytest.raises(ValueError, match="symmetric"):
    ising([0.0, 0.0], [[0.0, 1.0], [0.5, 0.0]])
  with pytest.raises(ValueError, match="diagonal"):
    ising([0.0, 0.0], [[1.0, 0.0], [0.0, 0.0]])
  with pytest.raises(ValueError, match=r"\[2, 2\]"):
    ising([0.0, 0.0], np.zeros((3, 3)))
  with pytest.raises(ValueError, match="num_chains must be >= 1, got 0"):
    samplers.random_states(jax.random.key(0), 0, 4)
  model = random_model(4, 0)
  with pytest.raises(ValueError, match="0 chains"):
    samplers.sample(jax.random.key(0), model, np.zeros((0, 4), np.int8), 3)
  with pytest.raises(ValueError, match="N=4"):
    samplers.sample(jax.random.key(0), model, np.ones((2, 5), np.int8), 3)
  with pytest.raises(ValueError, match="clique_size"):
    clique_model(4, 5, 1.0, 0.0)


def test_unrolled_threefry_is_bitwise_jax_threefry():
  from jax.extend.random import threefry_2x32

  from gmlm.core import randbits

  for seed, size in [(0, 1), (42, 1001), (7, 65536)]:
    key = jax.random.key(seed)
    half = (size + 1) // 2
    ref = threefry_2x32(jax.random.key_data(key), jnp.arange(2 * half, dtype=jnp.uint32))[:size]
    np.testing.assert_array_equal(np.asarray(randbits.random_words(key, (size,))), np.asarray(ref))
