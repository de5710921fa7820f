"""The accelerator fast paths of the Glauber engine, on CPU: bfloat16 compute keeps the sampler
exact for the bf16 model's own conditionals (tempering and draws in float32), donated chain
states give bitwise the same chains, and the sample job's pipelined chunk loop (asynchronous
copies to the host, donated states) writes the trajectory of one uninterrupted run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from glauber_util import (
  CANDIDATES,
  exact_conditionals,
  histogram,
  sequences,
  spec,
  state_index,
  tiny_mlm,
  transition_matrix,
  tv,
)

from glauber import chains, recording, rejection_free
from gmlm import nn as gm

X0 = np.array([[2, 0, 4, 1]])  # the fixed start (candidate indices)
B = 8192


@pytest.fixture(scope="module")
def models():
  model = tiny_mlm()
  return model, gm.with_dtype(model, jnp.bfloat16)


def law_after(P, t: int) -> np.ndarray:
  mu = np.eye(len(P))[state_index(CANDIDATES[X0])[0]]
  for _ in range(t):
    mu = mu @ P
  return mu


def tv_quantile(mu, num: int, q: float = 0.999, reps: int = 1000) -> float:
  """The q-quantile of the null distribution of TV(empirical law of num i.i.d. draws, mu)."""
  rng = np.random.default_rng(1)
  return float(np.quantile([tv(rng.multinomial(num, mu) / num, mu) for _ in range(reps)], q))


def start(num_chains: int = B) -> chains.ChainState:
  return chains.init_state(np.repeat(sequences(X0), num_chains, axis=0))


def test_bf16_compute_keeps_float32_params_and_logits_and_close_conditionals(models):
  """Parameters stay float32, the logits come out float32, and each bf16 conditional
  p_i(. | x_-i) is within TV 0.03 of the float32 one (0.011 measured; mean over the 1296 x 4
  conditionals within 0.005)."""
  m32, m16 = models
  assert m16.layers[0].c.dtype == jnp.bfloat16 and m16.config.dtype == jnp.bfloat16
  assert {x.dtype for x in jax.tree.leaves(nnx.state(m16, nnx.Param))} == {jnp.dtype(jnp.float32)}
  tokens_BL = jnp.asarray(sequences(X0))
  logits = gm.masked_logits(m16, tokens_BL, jnp.full((1, 2), 2, jnp.int32))
  assert logits.dtype == jnp.float32
  assert chains.tempered_logprobs(spec(0.7), logits).dtype == jnp.float32
  d_SN = 0.5 * np.abs(exact_conditionals(m16) - exact_conditionals(m32)).sum(-1)
  assert 0 < d_SN.max() <= 0.03 and d_SN.mean() <= 0.005


@pytest.mark.parametrize("mode", ["plain", "rejection_free"])
def test_bf16_chains_follow_the_exact_law_of_the_bf16_conditionals(models, mode):
  """After 2 and 4 steps from a fixed state, the empirical law of B chains run on the bf16
  model is within the 0.999 quantile of the TV null distribution for B draws of the exact law
  P16^t, P16 the Glauber kernel enumerated from the bf16 model's own conditionals."""
  m16 = models[1]
  P16 = transition_matrix(exact_conditionals(m16, 0.7))
  runner = chains.run if mode == "plain" else rejection_free.run
  _, rec = runner(jax.random.key(21), m16, spec(0.7), start(), 2, 2, record_logprobs=True)
  assert rec.logp_RBN.dtype == jnp.float32 and bool(jnp.isfinite(rec.logp_RBN).all())
  for r, t in ((0, 2), (1, 4)):
    mu = law_after(P16, t)
    assert tv(histogram(np.asarray(rec.tokens_RBN[r])), mu) <= tv_quantile(mu, B)


@pytest.mark.slow  # the chains compiled with and without donation
def test_a_donated_state_gives_the_same_chains_and_is_consumed():
  """donate=True hands the state's buffers to the result (CPU donates too: the input is
  deleted, so a caller that read it again would fail loudly) and changes no draw."""
  model = tiny_mlm()
  kept_in, donated_in = start(64), start(64)
  kept, rec_kept = chains.run(jax.random.key(3), model, spec(), kept_in, 3, 2, record_logprobs=True)
  donated, rec_donated = chains.run(
    jax.random.key(3), model, spec(), donated_in, 3, 2, record_logprobs=True, donate=True
  )
  assert not kept_in.tokens_BL.is_deleted() and donated_in.tokens_BL.is_deleted()
  for a, b in ((kept, donated), (rec_kept, rec_donated)):
    jax.tree.map(np.testing.assert_array_equal, a, b)
  # Going on from the returned state, piece by piece, equals one run of all the records.
  state, pieces = start(64), []
  for _ in range(3):
    state, rec = chains.run(jax.random.key(4), model, spec(), state, 1, 2, donate=True)
    pieces.append(np.asarray(rec.tokens_RBN))
  _, whole = chains.run(jax.random.key(4), model, spec(), start(64), 3, 2)
  np.testing.assert_array_equal(np.concatenate(pieces), whole.tokens_RBN)


def test_rejection_free_runs_are_unchanged_by_its_donated_loop_buffers():
  """rejection_free.run donates the buffers its iteration loop carries, never the caller's
  state: the input state survives and a second call from it draws the same chains."""
  model, x0 = tiny_mlm(), start(16)
  a, ra = rejection_free.run(jax.random.key(5), model, spec(0.3), x0, 3, 4, retire_every=2)
  b, rb = rejection_free.run(jax.random.key(5), model, spec(0.3), x0, 3, 4, retire_every=2)
  assert not x0.tokens_BL.is_deleted()
  for u, v in ((a, b), (ra, rb)):
    jax.tree.map(np.testing.assert_array_equal, u, v)


@pytest.mark.slow  # two runs of the job, pipelined and not
def test_the_pipelined_job_writes_the_trajectory_of_one_uninterrupted_run(
  splade_dir, tmp_path, monkeypatch
):
  """The sample job (donated states, records copied to the host while the next chunk runs)
  writes, chunk by chunk, exactly the records of one chains.run over all the steps."""
  from test_glauber_job import small_config

  from glauber.jobs import sample as sample_job

  seen = {}
  real_sample = sample_job.sample

  def spy(config, rd, model, spec_, x0_BL):
    seen.update(model=model, spec=spec_, x0=x0_BL)
    return real_sample(config, rd, model, spec_, x0_BL)

  monkeypatch.setattr(sample_job, "sample", spy)
  config = small_config(splade_dir, mode="plain", record_logprobs=True)
  sample_job.run(config, str(tmp_path))
  written = recording.Trajectory(tmp_path).load()
  num_records = config.num_steps // config.record_every
  _, rec = chains.run(
    jax.random.key(config.seed),
    seen["model"],
    seen["spec"],
    chains.init_state(seen["x0"]),
    num_records,
    config.record_every,
    record_logprobs=True,
  )
  np.testing.assert_array_equal(written["tokens_RBN"], rec.tokens_RBN)
  np.testing.assert_array_equal(written["logp_RBN"], rec.logp_RBN)
  np.testing.assert_array_equal(
    written["steps_R"], config.record_every * (1 + np.arange(num_records))
  )
