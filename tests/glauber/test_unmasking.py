"""The unmasking samplers (glauber.unmasking) against their exact output laws
(glauber.measures.unmasking_laws) on a tiny random BERT restricted to 3 candidates at 4 free
sites (81 full states, 256 with masks): every option's empirical law within the 0.999 null band
of its enumerated law, the enumeration against brute force over orders (n = 3), greedy decoding
by hand at T = 0, remasking one random site a round = Glauber, batch invariance, 1 vs 4
devices, and the bad values."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run_on_devices
from glauber_util import CLS, LAYOUT, MASK, SEP, V, tiny_mlm

from glauber import chains, unmasking
from glauber.layout import Layout
from glauber.measures import exact
from glauber.measures import unmasking_laws as laws_lib
from glauber.unmasking import Sampler
from gmlm import nn as gm
from gmlm.core import draws

CANDS = np.array([6, 8, 9])  # c = 3 (laws of different samplers far apart at T = 0.7)
B = 4096


def make_spec(T=0.7, lay=LAYOUT, cands=CANDS, **kw):
  return chains.make_spec(cands, V, lay, T, **kw)


@pytest.fixture(scope="module")
def model():
  return tiny_mlm()


@pytest.fixture(scope="module")
def scores(model):
  return laws_lib.enumerate_masked_scores(model, LAYOUT, CANDS)


def output_index(tokens_BN, cands=CANDS) -> np.ndarray:
  """The exact.all_states index of each output (free tokens -> candidate indices)."""
  c, n = len(cands), tokens_BN.shape[1]
  lookup = np.full(V, -1)
  lookup[cands] = np.arange(c)
  x = lookup[np.asarray(tokens_BN)]
  assert (x >= 0).all()
  return x @ c ** np.arange(n - 1, -1, -1)


def empirical(tokens_BN, c=3, n=4) -> np.ndarray:
  return np.bincount(output_index(tokens_BN), minlength=c**n) / len(tokens_BN)


# Every option appears: the three order rules, both schedules, S < n and S = n, both remask
# orders at k = 1 and k = 2, Glauber plain and rejection-free after the sampler, T = 0.7 and
# top-k / top-p truncation.
SAMPLERS = {
  "ancestral_random": (Sampler(), {}),
  "ancestral_l2r_remask_random_2x2_glauber": (
    Sampler(order="left_to_right", remask_rounds=2, remask_sites=2, glauber_steps=2),
    {},
  ),
  "ancestral_confidence_topk": (Sampler(order="confidence"), {"top_k": 2}),
  "parallel2_linear_random_remask_confidence": (
    Sampler(steps=2, remask_rounds=1, remask_order="confidence"),
    {},
  ),
  "parallel3_cosine_confidence_topp_remask_conf_2x2_rejection_free": (
    Sampler(
      steps=3,
      schedule="cosine",
      order="confidence",
      remask_rounds=2,
      remask_sites=2,
      remask_order="confidence",
      glauber_steps=2,
      glauber_mode="rejection_free",
    ),
    {"top_p": 0.8},
  ),
  "parallel2_cosine_l2r": (Sampler(steps=2, schedule="cosine", order="left_to_right"), {}),
  # T = 1, no truncation: the confidence order's block masses are reused by the draw.
  "parallel3_linear_confidence_t1": (Sampler(steps=3, order="confidence"), {"T": 1.0}),
}


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_each_samplers_empirical_law_is_its_enumerated_law(model, scores, name):
  """B chains of the engine against the enumerated law q: TV within the 0.999 quantile of the
  null TV for B i.i.d. draws of q; and the test can fail: the law of ancestral random order
  (or of left-to-right, for that sampler) lies outside the band."""
  sampler, kw = SAMPLERS[name]
  kw = dict(kw)
  T = kw.pop("T", 0.7)
  q = laws_lib.Laws(scores, T, **kw).output(sampler)
  assert abs(q.sum() - 1) < 1e-9
  spec = make_spec(T, **kw)
  _, rec = unmasking.run(jax.random.key(7), model, spec, unmasking.all_masked(spec, B), sampler)
  got = empirical(rec.tokens_RBN[-1])
  band = laws_lib.null_tv_quantile(q, B)
  assert exact.tv(got, q) <= band, (exact.tv(got, q), band)
  other = Sampler(order="left_to_right") if name == "ancestral_random" else Sampler()
  q_other = laws_lib.Laws(scores, T).output(other)
  assert exact.tv(got, q_other) > band


def brute_force(model, lay, cands, sampler: Sampler, T: float, top_k: int = 0) -> dict:
  """The output law by recursion over every reveal order and token, the model queried per state
  (gm.masked_logits, one sequence at a time): {state tuple: probability}."""
  n, c = lay.num_sites, len(cands)
  ids = np.append(cands, lay.mask_id)
  memo: dict = {}

  def scores(z):
    if z not in memo:
      tokens = lay.sequences(ids[np.asarray(z)][None])
      pos = lay.offset + np.arange(n)[None]
      out = gm.masked_logits(model, jnp.asarray(tokens), jnp.asarray(pos, jnp.int32))
      memo[z] = np.asarray(out, np.float64)[0][:, cands]
    return memo[z]

  def p_T(s):  # tempered, optional top-k, written out here
    z = s / T
    if top_k:
      z = np.where(z >= np.sort(z)[-top_k], z, -np.inf)
    e = np.exp(z - z.max())
    return e / e.sum()

  def softmax(s):
    e = np.exp(s - s.max())
    return e / e.sum()

  def reveal(law, k, order):
    new: dict = {}
    for z, pz in law.items():
      M = [i for i in range(n) if z[i] == c]
      s = scores(z)
      if order == "random":  # every order of the masked sites, equally likely
        perms = list(itertools.permutations(M))
        sets = [(tuple(sorted(p[:k])), 1 / len(perms)) for p in perms]
      elif order == "left_to_right":
        sets = [(tuple(M[:k]), 1.0)]
      else:  # largest max-probability first, ties to the lower site
        ranked = sorted(M, key=lambda i: (-softmax(s[i]).max(), i))
        sets = [(tuple(sorted(ranked[:k])), 1.0)]
      for A, pa in sets:
        for a in itertools.product(range(c), repeat=len(A)):
          y = list(z)
          p = pz * pa
          for i, v in zip(A, a):
            y[i] = v
            p *= p_T(s[i])[v]
          new[tuple(y)] = new.get(tuple(y), 0.0) + p
    return new

  def remask(law, k, order):
    new: dict = {}
    for x, px in law.items():
      if order == "random":
        perms = list(itertools.permutations(range(n)))
        sets = [(tuple(sorted(p[:k])), 1 / len(perms)) for p in perms]
      else:
        own = []
        for i in range(n):
          z = list(x)
          z[i] = c
          own.append(softmax(scores(tuple(z))[i])[x[i]])
        sets = [(tuple(sorted(sorted(range(n), key=lambda i: (own[i], i))[:k])), 1.0)]
      for A, pa in sets:
        z = tuple(c if i in A else x[i] for i in range(n))
        new[z] = new.get(z, 0.0) + px * pa
    return reveal(new, k, "left_to_right")

  law = {(c,) * n: 1.0}
  for k in sampler.counts(n):
    law = reveal(law, k, sampler.order)
  for _ in range(sampler.remask_rounds):
    law = remask(law, sampler.remask_sites, sampler.remask_order)
  return law


@pytest.mark.parametrize(
  "sampler, top_k",
  [
    (Sampler(), 0),
    (Sampler(order="confidence"), 2),
    (Sampler(steps=2, schedule="cosine", order="confidence"), 0),
    (Sampler(steps=2, order="random", remask_rounds=1, remask_sites=2), 0),
    (Sampler(order="left_to_right", remask_rounds=2, remask_order="confidence"), 0),
  ],
  ids=["random", "confidence_topk", "cosine2_confidence", "remask_random2", "remask_confidence"],
)
def test_enumerated_law_equals_brute_force_over_orders_on_three_sites(model, sampler, top_k):
  lay = Layout(LAYOUT.prefix_ids, 3, CLS, SEP, MASK)
  scores3 = laws_lib.enumerate_masked_scores(model, lay, CANDS)
  q = laws_lib.Laws(scores3, 0.9, top_k=top_k).output(sampler)
  law = brute_force(model, lay, CANDS, sampler, 0.9, top_k)
  want = np.zeros(27)
  for x, p in law.items():
    want[np.asarray(x) @ [9, 3, 1]] += p
  np.testing.assert_allclose(q, want, atol=2e-6)
  assert abs(want.sum() - 1) < 1e-9


def test_ancestral_confidence_at_zero_temperature_is_greedy_decoding_by_hand(model):
  """Greedy decoding written out: reveal the masked site whose conditional has the largest
  maximum, write its argmax, repeat; here from starts with site 1 given (infilling), all 6
  candidates."""
  cands = np.arange(5, 11)
  spec = make_spec(0.0, cands=cands)
  starts = LAYOUT.sequences(np.array([[MASK, a, MASK, MASK] for a in cands]))
  _, rec = unmasking.run(
    jax.random.key(0), model, spec, chains.init_state(starts), Sampler(order="confidence")
  )
  for b, tokens in enumerate(starts):
    x = tokens.copy()
    while (x == MASK).any():
      masked = np.flatnonzero(x == MASK)
      logits = np.asarray(
        gm.masked_logits(model, jnp.asarray(x[None]), jnp.asarray(masked[None], jnp.int32))
      )[0][:, cands]
      p = np.exp(logits - logits.max(-1, keepdims=True))
      p /= p.sum(-1, keepdims=True)
      j = int(np.argmax(p.max(-1)))
      x[masked[j]] = cands[int(np.argmax(logits[j]))]
    np.testing.assert_array_equal(np.asarray(rec.tokens_RBN[-1, b]), x[2:6])


def test_one_random_site_a_round_is_a_glauber_step(model, scores):
  """Exactly: the enumerated one-round law from every full state is the Glauber kernel's row
  (exact.glauber_matrix). In the engine: R rounds from a full state are bitwise R steps of
  chains.run(method='glauber') with the same key and step counter."""
  T = 0.8
  laws = laws_lib.Laws(scores, T)
  W, Z = 4**4, 3**4
  rows = []
  for z in range(Z):
    q = np.zeros(W)
    q[laws.full_Z[z]] = 1.0
    rows.append(laws.steps(Sampler(remask_rounds=1), q)[-1][laws.full_Z])
  P = exact.glauber_matrix(laws_lib.one_mask_scores(scores), T).toarray()
  np.testing.assert_allclose(np.array(rows), P, atol=1e-12)
  # The engine: from a full state with t = 5, 6 rounds = 6 Glauber steps.
  spec = make_spec(T)
  x = np.random.default_rng(0).choice(CANDS, (64, 4))
  state = chains.init_state(LAYOUT.sequences(x)).replace(t=jnp.int32(5))
  a, ra = unmasking.run(
    jax.random.key(3), model, spec, state, Sampler(remask_rounds=6), record=True
  )
  b, rb = chains.run(jax.random.key(3), model, spec, state, 6, 1)
  np.testing.assert_array_equal(ra.tokens_RBN, rb.tokens_RBN)
  np.testing.assert_array_equal(a.tokens_BL, b.tokens_BL)
  assert int(a.t) == int(b.t) == 11


_SCRIPT = r"""
import sys, numpy as np, jax
from jax.sharding import Mesh
from glauber_util import LAYOUT, tiny_mlm
from glauber import chains, unmasking
from glauber.unmasking import Sampler
assert jax.device_count() == 4
mesh = Mesh(np.array(jax.devices()), ("data",))
model = tiny_mlm()
spec = chains.make_spec(np.arange(5, 11), 11, LAYOUT, 0.7)
sampler = Sampler(steps=3, order="confidence", remask_rounds=2, remask_sites=2, glauber_steps=3)
out = {}
for name, B, m in (("one", 12, None), ("four", 12, mesh), ("five", 5, None)):
  s, rec = unmasking.run(jax.random.key(4), model, spec, unmasking.all_masked(spec, B), sampler,
                         record=True, mesh=m)
  out[name] = np.asarray(rec.tokens_RBN)
  if m is not None:
    assert len(s.tokens_BL.sharding.device_set) == 4
np.savez(sys.argv[1], **out)
"""


@pytest.mark.slow
def test_a_chain_depends_neither_on_the_chains_beside_it_nor_on_the_devices(tmp_path):
  """The same key gives the same 12 chains on 1 and 4 devices (every record of every step),
  and the first 5 of them when only 5 run."""
  out = tmp_path / "runs.npz"
  run_on_devices(_SCRIPT, 4, str(out), timeout=300)
  got = np.load(out)
  assert got["one"].shape == (3 + 2 + 3, 12, 4)
  np.testing.assert_array_equal(got["one"], got["four"])
  np.testing.assert_array_equal(got["one"][:, :5], got["five"])


def test_schedules_reveal_every_site_at_least_one_a_step():
  for m in range(1, 13):
    for S in range(1, m + 1):
      for schedule in unmasking.SCHEDULES:
        k = unmasking.reveal_counts(m, S, schedule)
        assert len(k) == S and sum(k) == m and min(k) >= 1
    assert unmasking.reveal_counts(m, m, "cosine") == (1,) * m
  assert unmasking.reveal_counts(16, 4, "linear") == (4, 4, 4, 4)
  assert unmasking.reveal_counts(16, 4, "cosine") == (1, 3, 5, 7)  # MaskGIT: few first


def _all_partitions(S):
  for cuts in itertools.product((0, 1), repeat=S - 1):
    ends = [i + 1 for i, c in enumerate(cuts) if c] + [S]
    yield ends


@pytest.mark.parametrize("budget", [1, 2, 3, 5])
@pytest.mark.parametrize(
  "counts,order",
  [
    ((1,) * 9, "confidence"),  # ancestral: needs 9, 8, ..., 1
    ((1, 2, 4, 5), "confidence"),  # cosine S = 4 on 12
    ((2, 2, 3, 2, 3), "random"),
    ((3, 1, 1, 4, 1, 2, 1), "left_to_right"),
    ((1, 1, 2, 1, 3, 1, 1), "confidence"),
  ],
)
def test_segments_are_the_partition_with_fewest_head_rows(counts, order, budget):
  """The plan's scans cover the steps in order, each step at >= its rows (k_s, or every masked
  site for confidence) and draws >= k_s, in at most `budget` scans, and its head rows in all are
  the minimum over every partition of the steps into at most `budget` consecutive runs
  (brute force over the 2^(S-1) partitions)."""
  m = sum(counts)
  left = m - np.concatenate([[0], np.cumsum(counts)[:-1]])
  needs = left if order == "confidence" else np.asarray(counts)
  plan = unmasking._segments(counts, m, order, budget)
  assert len(plan) <= budget
  assert tuple(k for _, _, ks in plan for k in ks) == counts
  step_rows = [r for r, _, ks in plan for _ in ks]
  assert all(r >= need for r, need in zip(step_rows, needs))
  assert all(
    most == max(ks) and rows == max(needs[i : i + len(ks)])
    for i, (rows, most, ks) in zip(np.cumsum([0] + [len(s[2]) for s in plan]), plan)
  )
  brute = min(
    sum((e - s) * needs[s:e].max() for s, e in zip([0] + ends[:-1], ends))
    for ends in _all_partitions(len(counts))
    if len(ends) <= budget
  )
  assert sum(step_rows) == brute


def test_the_default_segment_budget_pads_ancestral_confidence_little():
  """m = 64, one site a step: the default budget (2 x the power-of-two buckets: 14 scans) pads the
  head rows by under 6% (power-of-two buckets padded them by 31%)."""
  counts = (1,) * 64
  plan = unmasking._segments(counts, 64, "confidence")
  assert len(plan) <= unmasking.segment_budget(64) == 14
  exact_rows = sum(range(1, 65))
  assert sum(r * len(ks) for r, _, ks in plan) / exact_rows - 1 < 0.06


def test_numpy_tempering_is_the_engines():
  s = np.random.default_rng(0).normal(size=(50, 7)) * 3
  s[0, :2] = s[0].max() + 1  # a tie at the top
  for T, k, p in ((0.7, 0, 1.0), (0.0, 0, 1.0), (math.inf, 0, 1.0), (0.5, 3, 1.0), (1.3, 0, 0.7)):
    want = np.exp(np.asarray(draws.temper(jnp.asarray(s, jnp.float32), T, k, p), np.float64))
    np.testing.assert_allclose(laws_lib.temper(s, T, k, p), want, atol=2e-6)


@pytest.mark.parametrize(
  "sampler, message",
  [
    (Sampler(schedule="exp"), "schedule='exp': unknown"),
    (Sampler(steps=5), r"steps=5: must be in \[1, 4\]"),
    (Sampler(order="entropy"), "order='entropy': unknown order rule"),
    (Sampler(remask_rounds=1, remask_order="worst"), "remask_order='worst'"),
    (Sampler(remask_rounds=1, remask_sites=5), r"remask_sites=5: must be in \[1, n=4\]"),
    (Sampler(glauber_steps=1, glauber_mode="fast"), "glauber_mode='fast'"),
  ],
)
def test_bad_values_are_one_line_errors(model, sampler, message):
  spec = make_spec()
  with pytest.raises(ValueError, match=message) as e:
    unmasking.run(jax.random.key(0), model, spec, unmasking.all_masked(spec, 2), sampler)
  assert "\n" not in str(e.value)
  starts = LAYOUT.sequences(np.array([[MASK, 5, 5, 5], [MASK, MASK, 5, 5]]))
  with pytest.raises(ValueError, match="same number of masked free sites"):
    unmasking.run(jax.random.key(0), model, spec, chains.init_state(starts), Sampler())
