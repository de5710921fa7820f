"""Influence, score oscillation and contraction (paper A, Sections 5.1-5.2) against brute force:
a toy MaskedLM whose logits are a hand-made pairwise table (numpy reference by enumeration of
every pair of contexts that differ at j), Lemma 6's bound α_ij <= ω_ij/(4T) on it and on a tiny
random BERT, Corollary 7 and Theorem 5's t_mix bound against the exact t_mix of the toy chain."""

from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from glauber_util import CANDIDATES, C, N, sequences, spec, tiny_mlm

from glauber import chains
from glauber.layout import Layout
from glauber.measures import influence
from gmlm.checks import UserError

CLS, SEP, MASK = 1, 2, 3
TOY_V, TOY_N = 8, 3
TOY_CAND = np.arange(4, 8)  # 4 candidates
TOY_LAYOUT = Layout((), TOY_N, CLS, SEP, MASK)
TOY_L = TOY_LAYOUT.length
TEMPS = (0.3, 1.0, 3.0)


@dataclasses.dataclass(frozen=True)
class ToyConfig:
  vocab_size: int
  max_positions: int


@struct.dataclass
class PairwiseMLM:
  """s_p(a; x) = bias[p, a] + Σ_{q != p} W[p, q, x_q, a]: a MaskedLM with hand-made logits."""

  W_LLVV: jax.Array
  bias_LV: jax.Array
  config: ToyConfig = struct.field(pytree_node=False)

  def encode(self, tokens_BL, attention_mask_BL=None, token_types_BL=None, rows_BK=None):
    onehot_BLV = jax.nn.one_hot(tokens_BL, self.config.vocab_size)
    s_BLV = jnp.einsum("bqv,pqva->bpa", onehot_BLV, self.W_LLVV) + self.bias_LV
    return jnp.take_along_axis(s_BLV, rows_BK[..., None], axis=1)

  def mlm_logits(self, h_BKD):
    return h_BKD


def toy_model(seed: int = 0, scale: float = 1.5) -> PairwiseMLM:
  rng = np.random.default_rng(seed)
  W = rng.normal(0, scale, (TOY_L, TOY_L, TOY_V, TOY_V))
  W[np.arange(TOY_L), np.arange(TOY_L)] = 0.0  # a site does not see itself
  bias = rng.normal(0, scale, (TOY_L, TOY_V))
  return PairwiseMLM(
    jnp.asarray(W, jnp.float32), jnp.asarray(bias, jnp.float32), ToyConfig(TOY_V, TOY_L)
  )


def toy_spec(T: float = 1.0) -> chains.Spec:
  return chains.make_spec(TOY_CAND, TOY_V, TOY_LAYOUT, T)


TOY_STATES = np.array(list(itertools.product(range(len(TOY_CAND)), repeat=TOY_N)))


def toy_scores(model: PairwiseMLM, free_N: np.ndarray, i: int) -> np.ndarray:
  """s_i(a; x_-i) over the candidates, by a plain loop over the other positions (float64)."""
  W, bias = np.asarray(model.W_LLVV, np.float64), np.asarray(model.bias_LV, np.float64)
  tokens = TOY_LAYOUT.sequences(free_N[None])[0]
  p = TOY_LAYOUT.offset + i
  s = bias[p].copy()
  for q, v in enumerate(tokens):
    if q != p:
      s += W[p, q, v]
  return s[TOY_CAND]


def softmax(z):
  e = np.exp(z - z.max())
  return e / e.sum()


def brute_force(model, T: float):
  """alpha_NN, omega_NN: sup over every pair of contexts differing only at j."""
  alpha, omega = np.zeros((TOY_N, TOY_N)), np.zeros((TOY_N, TOY_N))
  for i, j in itertools.permutations(range(TOY_N), 2):
    for x in TOY_STATES:
      for a, b in itertools.combinations(range(len(TOY_CAND)), 2):
        xa, xb = x.copy(), x.copy()
        xa[j], xb[j] = a, b
        sa, sb = toy_scores(model, TOY_CAND[xa], i), toy_scores(model, TOY_CAND[xb], i)
        tv = 0.5 * np.abs(softmax(sa / T) - softmax(sb / T)).sum()
        alpha[i, j] = max(alpha[i, j], tv)
        omega[i, j] = max(omega[i, j], np.ptp(sa - sb))
  return alpha, omega


@pytest.fixture(scope="module")
def toy():
  model = toy_model()
  inf = influence.influence_matrix(
    model, toy_spec(), TOY_LAYOUT.sequences(TOY_CAND[TOY_STATES]), TOY_CAND, TEMPS, batch_size=64
  )
  return model, inf


def test_tv_and_oscillation_equal_brute_force(toy):
  model, inf = toy
  for t, T in enumerate(TEMPS):
    alpha, omega = brute_force(model, T)
    np.testing.assert_allclose(inf.alpha_max_TNN[t], alpha, atol=2e-5)
    np.testing.assert_allclose(inf.omega_NN, omega, rtol=1e-5, atol=1e-4)
  assert (inf.alpha_mean_TNN <= inf.alpha_max_TNN + 1e-7).all()


@pytest.fixture(scope="module")
def bert():
  return tiny_mlm()


def test_lemma6_bound_on_toy_and_tiny_bert(toy, bert):
  _, inf = toy
  for t, T in enumerate(TEMPS):
    assert (inf.alpha_max_TNN[t] <= inf.omega_NN / (4 * T) + 1e-6).all()
  assert (inf.slack_T <= 1e-6).all()
  # the tiny random BERT: random base contexts, every candidate as a value of j
  model = bert
  ctx = sequences(np.random.default_rng(0).integers(0, C, (3, N)))
  temps = (0.2, 1.0, 5.0)
  bert = influence.influence_matrix(model, spec(), ctx, CANDIDATES, temps, batch_size=64)
  for t, T in enumerate(temps):
    assert (bert.alpha_max_TNN[t] <= bert.omega_NN / (4 * T) + 1e-6).all()
  assert (bert.slack_T <= 1e-6).all()
  ratio = bert.alpha_max_TNN[1] / np.maximum(bert.omega_NN / 4.0, 1e-12)
  assert ratio.max() > 0.1  # not vacuous: the bound is within a factor 10 somewhere
  # one pair alone equals its entry of the matrix
  a_TB, om_B = influence.pair_influence(model, spec(), ctx, 2, 0, CANDIDATES, temps)
  np.testing.assert_allclose(a_TB.max(1), bert.alpha_max_TNN[:, 2, 0], atol=1e-6)
  np.testing.assert_allclose(om_B.max(), bert.omega_NN[2, 0], rtol=1e-5)


def exact_tmix(model, T: float, eps: float) -> int:
  """The true t_mix(ε) of the toy's Glauber chain by powers of its transition matrix."""
  S, w = len(TOY_STATES), len(TOY_CAND) ** np.arange(TOY_N)[::-1]
  P = np.zeros((S, S))
  for s, x in enumerate(TOY_STATES):
    for i in range(TOY_N):
      p = softmax(toy_scores(model, TOY_CAND[x], i) / T)
      for a in range(len(TOY_CAND)):
        y = x.copy()
        y[i] = a
        P[s, y @ w] += p[a] / TOY_N
  evals, evecs = np.linalg.eig(P.T)
  pi = np.real(evecs[:, np.argmin(np.abs(evals - 1))])
  pi /= pi.sum()
  Pt = np.eye(S)
  for t in range(1, 10_000):
    Pt = Pt @ P
    if 0.5 * np.abs(Pt - pi).sum(1).max() <= eps:
      return t
  raise AssertionError("no mixing")


def test_corollary7_and_theorem5_on_toy(toy):
  model, inf = toy
  T_star = influence.sufficient_temperature(inf.omega_NN)
  T = 1.05 * T_star
  exact = influence.influence_matrix(
    model, toy_spec(), TOY_LAYOUT.sequences(TOY_CAND[TOY_STATES]), TOY_CAND, (T,)
  )
  a = influence.alpha_hat(exact.alpha_max_TNN)[0]
  assert a <= T_star / T < 1  # Corollary 7 (the exact α̂, every context enumerated)
  bound = influence.tmix_bound(a, TOY_N, 0.25)
  assert exact_tmix(model, T, 0.25) <= bound  # Theorem 5
  assert influence.tmix_bound(1.0, TOY_N) == np.inf


def test_contraction_temperature_on_a_grid():
  got = influence.contraction_temperature([4.0, 1.0, 2.0, 8.0], [0.5, 4.0, 2.0, 0.25])
  assert got["grid"] == 4.0
  assert 2.0 < got["interpolated"] < 4.0
  assert np.isclose(got["interpolated"], 2.0 * np.sqrt(2.0))  # log-log line through 2 and 0.5
  assert influence.contraction_temperature([1.0, 2.0], [3.0, 1.5])["grid"] is None


def test_bad_input_is_one_line_user_error(bert):
  model = bert
  ctx = sequences(np.zeros((1, N), int))
  cases = [
    (dict(i=1, j=1), "i = j = 1"),
    (dict(i=N, j=0), f"i={N}"),
    (dict(i=0, j=-1), "j=-1"),
    (dict(temperatures=(0.0,)), "T=0.0"),
    (dict(temperatures=(-1.0,)), "T=-1.0"),
    (dict(values=CANDIDATES[:1]), "size 1"),
  ]
  for kw, needle in cases:
    args = dict(i=0, j=1, values=CANDIDATES, temperatures=(1.0,)) | kw
    with pytest.raises(UserError, match=needle) as e:
      influence.pair_influence(model, spec(), ctx, **args)
    assert "\n" not in str(e.value)
  with pytest.raises(UserError, match="top_k=2"):
    influence.influence_matrix(model, spec(top_k=2), ctx, CANDIDATES, (1.0,))
  with pytest.raises(UserError, match="size 1"):
    influence.top_values(model, spec(), ctx, 1)


def test_config_validation_names_the_key():
  import ml_collections

  from glauber.measures import drift, margins

  c = ml_collections.ConfigDict(
    {m.__name__.split(".")[-1]: dict(m.DEFAULTS) for m in (influence, margins, drift)}
  )
  for m in (influence, margins, drift):
    m.validate(c)
  bad = [
    ("influence", "num_values", 1),
    ("influence", "temperatures", (1.0, 0.0)),
    ("margins", "texts", ("ok", " ")),
    ("drift", "k", c.drift.num_sites + 1),
  ]
  for section, name, value in bad:
    cc = ml_collections.ConfigDict(c.to_dict())
    cc[section][name] = value
    module = {"influence": influence, "margins": margins, "drift": drift}[section]
    with pytest.raises(UserError, match=rf"config\.{section}\.{name}="):
      module.validate(cc)
