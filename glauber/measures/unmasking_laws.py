"""Exact output laws of the unmasking samplers (`glauber.unmasking`) on a restricted real MLM.

The MLM restricted to c candidate tokens at n free sites (as `measures.exact`), now with masks:
each site holds a candidate or [MASK], (c+1)^n states W, indexed lexicographically with
[MASK] = c: index(z) = Σ_i z_i (c+1)^(n-1-i). ONE enumeration gives the MLM's scores
s_i(a; z) at every masked site i of every state z (one forward row per state, the head at its
masked sites; `enumerate_masked_scores`). Everything follows from it, at every T:

  reveal step       from z with masked set M, the set A ⊂ M of k sites (random: each k-subset
                    with probability 1 / C(|M|, k); left_to_right: the first k; confidence: the
                    k largest max_a softmax(s_i(.; z))(a), ties to the lower site), then every
                    a_A with probability Π_{i∈A} p_i^T(a_i | z) (`temper`, the engine's
                    tempering with top-k / top-p, in float64).
  remask round      from a full state x: A (random k-subset, or the k smallest untempered
                    p_i(x_i | x_-i), from the one-mask states' scores) masked, then a reveal
                    step of all of A.
  Glauber           P_T from the one-mask states' scores (`exact.kernel`), π_T (`exact.stationary`),
                    PL_T (`exact.pseudo_likelihood`): the conditionals of the full states are
                    those of the states with one mask, so `exact`'s chain is part of this one.

The law of a sampler's output is q_W propagated through its steps; its part on the c^n full
states (order Z of `measures.exact`) is q_Z. `measure` reports TV(q, π_T), TV(q, PL_T) and the
Glauber steps from q to TV(q P_T^t, π_T) <= 1/4 beside those from the uniform law on the full
states (a random start).
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np

from glauber import unmasking
from glauber.chains import make_spec
from glauber.layout import Layout
from glauber.measures import exact
from glauber.oracle import MaskedLM
from gmlm.checks import UserError

EPS = 0.25
MAX_GLAUBER = 100_000  # steps from a sampler's output searched for TV <= EPS


def check_size(c: int, n: int, max_states: int = exact.MAX_STATES) -> int:
  """W = (c+1)^n, or a UserError naming the size and the limit."""
  exact.check_size(c, n, max_states)
  W = (c + 1) ** n
  if W > max_states:
    raise UserError(
      f"the restricted chain with masks has (c+1)^n = {c + 1}^{n} = {W} states, over the limit "
      f"of {max_states}; use fewer candidates or free sites (or raise the limit)"
    )
  return W


def masked_states(c: int, n: int) -> np.ndarray:
  """states_WN in {0..c} (c = [MASK]) in lexicographic order."""
  return np.indices((c + 1,) * n).reshape(n, -1).T.astype(np.int32)


def weights(c: int, n: int) -> np.ndarray:
  return (c + 1) ** np.arange(n - 1, -1, -1)


def full_index(c: int, n: int) -> np.ndarray:
  """index_Z: the W index of each full state, in `exact.all_states` order."""
  return exact.all_states(c, n) @ weights(c, n)


def enumerate_masked_scores(
  model: MaskedLM,
  layout: Layout,
  candidates_C,
  max_states: int = exact.MAX_STATES,
  batch: int = 256,
) -> np.ndarray:
  """scores_WNC (float64 of the float32 logits): s_i(a; z) at every masked site of every state
  (NaN at the filled sites), through the engine's masked-logits path (`unmasking.masked_scores`:
  one forward row per state)."""
  import jax

  candidates_C = np.asarray(candidates_C, np.int32)
  c, n = len(candidates_C), layout.num_sites
  check_size(c, n, max_states)
  spec = make_spec(candidates_C, model.config.vocab_size, layout, 1.0)
  states_WN = masked_states(c, n)
  ids = np.append(candidates_C, layout.mask_id)
  out = []
  f = jax.jit(unmasking.masked_scores)
  for lo in range(0, len(states_WN), batch):
    z = states_WN[lo : lo + batch]
    tokens = layout.sequences(ids[z])
    if len(z) < batch:  # one shape for every call
      tokens = np.concatenate([tokens, np.repeat(tokens[:1], batch - len(z), 0)])
    out.append(np.asarray(f(model, spec, tokens))[: len(z)])
  scores = np.concatenate(out).astype(np.float64)
  return np.where((states_WN == c)[..., None], scores, np.nan)


def one_mask_scores(scores_WNC: np.ndarray) -> np.ndarray:
  """scores_ZNC of `measures.exact` (the full states' single-site scores): the states with one
  mask."""
  W, n, c = scores_WNC.shape
  x_ZN = exact.all_states(c, n)
  w_N = weights(c, n)
  z_ZN = (x_ZN @ w_N)[:, None] + (c - x_ZN) * w_N  # x with site i masked
  return scores_WNC[z_ZN, np.arange(n)]


def temper(scores_XC: np.ndarray, T: float, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
  """p^T over the last axis (float64), as `gmlm.core.draws.temper`: T = 0 argmax (ties
  uniform), T = inf uniform, -inf outside the top-k / top-p set. NaN rows stay NaN."""
  s = np.asarray(scores_XC, np.float64)
  if T == 0:
    z = np.where(s == np.nanmax(s, -1, keepdims=True), 0.0, -np.inf)
  elif math.isinf(T):
    z = np.zeros_like(s)
  else:
    z = s / T
  z = np.where(np.isnan(s), np.nan, z)
  C = z.shape[-1]
  if 0 < top_k < C:
    kth = -np.sort(-z, -1)[..., top_k - 1 : top_k]
    z = np.where(z >= kth, z, -np.inf)
  if top_p < 1.0:
    zs = -np.sort(-z, -1)
    ps = _softmax(zs)
    before = np.cumsum(ps, -1) - ps
    floor = np.min(np.where(before < top_p, zs, np.inf), -1, keepdims=True)
    z = np.where(z >= floor, z, -np.inf)
  return _softmax(z)


def _softmax(z: np.ndarray) -> np.ndarray:
  with np.errstate(invalid="ignore"):
    z = z - np.max(z, -1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def confidence(scores_WNC: np.ndarray) -> np.ndarray:
  """conf_WN = max_a softmax(s_i(.; z))(a) (untempered; NaN at filled sites)."""
  return _softmax(scores_WNC).max(-1)


def _joint(p_XKC: np.ndarray) -> np.ndarray:
  """joint_XH: Π_k p[x, k, a_k] over every configuration a (H = C^K, lexicographic)."""
  j = p_XKC[:, 0]
  for t in range(1, p_XKC.shape[1]):
    j = (j[:, :, None] * p_XKC[:, t][:, None, :]).reshape(len(j), -1)
  return j


def reveal(
  q_W: np.ndarray, cond_WNC: np.ndarray, conf_WN: np.ndarray, k: int, order: str
) -> np.ndarray:
  """The law after one reveal step of k sites (module docstring) from the law q_W."""
  W, n, c = cond_WNC.shape
  states_WN = masked_states(c, n)
  w_N = weights(c, n)
  masked_WN = states_WN == c
  pattern_W = masked_WN @ (1 << np.arange(n))
  out = np.zeros(W)
  configs_HK = np.indices((c,) * k).reshape(k, -1).T
  for pattern in np.unique(pattern_W[q_W > 0]):
    idx = np.flatnonzero((pattern_W == pattern) & (q_W > 0))
    M = [i for i in range(n) if pattern >> i & 1]
    if len(M) < k:
      raise ValueError(f"a reveal of k={k} sites from a state with {len(M)} masked")
    if order == "random":
      choices = [
        (A, np.full(len(idx), 1.0 / math.comb(len(M), k))) for A in itertools.combinations(M, k)
      ]
    elif order == "left_to_right":
      choices = [(tuple(M[:k]), np.ones(len(idx)))]
    elif order == "confidence":
      conf_XN = conf_WN[idx][:, M]
      top_XK = np.sort(np.asarray(M)[np.argsort(-conf_XN, axis=1, kind="stable")[:, :k]], axis=1)
      choices = [
        (tuple(A), (top_XK == A).all(1).astype(np.float64)) for A in np.unique(top_XK, axis=0)
      ]
    else:
      raise ValueError(f"unknown order {order!r}")
    for A, prob_X in choices:
      A = list(A)
      w_X = q_W[idx] * prob_X
      keep = w_X > 0
      if not keep.any():
        continue
      joint_XH = _joint(cond_WNC[idx[keep]][:, A])
      delta_H = (configs_HK - c) @ w_N[A]
      targets = idx[keep][:, None] + delta_H[None]
      out += np.bincount(targets.ravel(), (w_X[keep][:, None] * joint_XH).ravel(), minlength=W)
  return out


def mask(q_W: np.ndarray, own_WN: np.ndarray, k: int, order: str) -> np.ndarray:
  """The law after masking k sites of each full state: a uniform k-subset (random) or the k
  smallest own_WN (confidence; own_WN[x, i] = p_i(x_i | x_-i) untempered, ties to the lower
  site)."""
  W, n = own_WN.shape
  c = round(W ** (1 / n)) - 1
  states_WN = masked_states(c, n)
  w_N = weights(c, n)
  idx = np.flatnonzero(q_W > 0)
  if (states_WN[idx] == c).any():
    raise ValueError("remasking starts from full states")
  out = np.zeros(W)
  if order == "random":
    for A in itertools.combinations(range(n), k):
      A = list(A)
      targets = idx + ((c - states_WN[idx][:, A]) * w_N[A]).sum(1)
      out += np.bincount(targets, q_W[idx] / math.comb(n, k), minlength=W)
    return out
  if order != "confidence":
    raise ValueError(f"unknown remask order {order!r}")
  low_XK = np.argsort(own_WN[idx], axis=1, kind="stable")[:, :k]
  x_XK = np.take_along_axis(states_WN[idx], low_XK, 1)
  targets = idx + ((c - x_XK) * w_N[low_XK]).sum(1)
  return out + np.bincount(targets, q_W[idx], minlength=W)


class Laws:
  """The exact laws of every sampler at one temperature (and top-k / top-p) from one
  enumeration scores_WNC."""

  def __init__(self, scores_WNC: np.ndarray, T: float, top_k: int = 0, top_p: float = 1.0):
    W, n, c = scores_WNC.shape
    self.n, self.c, self.T = n, c, float(T)
    self.cond_WNC = temper(scores_WNC, T, top_k, top_p)
    self.conf_WN = confidence(scores_WNC)
    self.full_Z = full_index(c, n)
    scores_ZNC = one_mask_scores(scores_WNC)
    own_ZN = np.take_along_axis(_softmax(scores_ZNC), exact.all_states(c, n)[..., None], axis=-1)[
      ..., 0
    ]
    self.own_WN = np.full((W, n), np.nan)
    self.own_WN[self.full_Z] = own_ZN
    self.glauber_cond_ZNC = temper(scores_ZNC, T, top_k, top_p)
    self._P = None
    self._pi = None

  @property
  def P(self):
    """The sparse Glauber kernel P_T on the full states."""
    if self._P is None:
      self._P = exact.kernel(self.glauber_cond_ZNC)
    return self._P

  @property
  def pi(self) -> np.ndarray:
    if self._pi is None:
      self._pi = exact.stationary(self.P)
    return self._pi

  def pseudo_likelihood(self) -> np.ndarray:
    with np.errstate(divide="ignore"):
      return exact.pseudo_likelihood(self.glauber_cond_ZNC)

  def start(self) -> np.ndarray:
    """q_W of the all-mask state."""
    q = np.zeros((self.c + 1) ** self.n)
    q[-1] = 1.0
    return q

  def steps(self, sampler: unmasking.Sampler, q_W: np.ndarray | None = None) -> list[np.ndarray]:
    """q_W after every unmasking step and remasking round of the sampler from q_W (default:
    all masked); Glauber steps are not included (see `output`)."""
    q = self.start() if q_W is None else q_W
    masked = int((masked_states(self.c, self.n)[np.argmax(q)] == self.c).sum())
    sampler.check(masked, self.n)
    out = []
    for k in sampler.counts(masked):
      q = reveal(q, self.cond_WNC, self.conf_WN, k, sampler.order)
      out.append(q)
    for _ in range(sampler.remask_rounds):
      q = mask(q, self.own_WN, sampler.remask_sites, sampler.remask_order)
      q = reveal(q, self.cond_WNC, self.conf_WN, sampler.remask_sites, "left_to_right")
      out.append(q)
    return out

  def output(self, sampler: unmasking.Sampler, q_W: np.ndarray | None = None) -> np.ndarray:
    """q_Z: the law of the sampler's output on the full states, Glauber steps included."""
    q = (self.steps(sampler, q_W) or [self.start() if q_W is None else q_W])[-1][self.full_Z]
    for _ in range(sampler.glauber_steps):
      q = self.P.T @ q
    return q

  def glauber_curve(
    self, q_Z: np.ndarray, eps: float = EPS, max_steps: int = MAX_GLAUBER
  ) -> tuple[int | None, list]:
    """(the first t with TV(q P^t, π) <= eps, or None within max_steps; [(t, TV)] at t = 0 and
    powers of two up to it)."""
    pi, q, PT = self.pi, np.asarray(q_Z, np.float64), self.P.T.tocsr()
    t, d = 0, exact.tv(q, pi)
    curve = [(0, d)]
    while d > eps:
      if t >= max_steps:
        return None, curve
      q, t = PT @ q, t + 1
      d = exact.tv(q, pi)
      if t & (t - 1) == 0:
        curve.append((t, d))
    if curve[-1][0] != t:
      curve.append((t, d))
    return t, curve


def measure_temperature(
  scores_WNC: np.ndarray, T: float, samplers: Sequence[unmasking.Sampler], eps: float = EPS
) -> dict:
  """At temperature T: per sampler its forward rows, TV(q, π_T), TV(q, PL_T) and the Glauber
  steps from q to TV <= eps (with the TV curve); the same for the uniform random start."""
  exact.check_temperature(T)
  laws = Laws(scores_WNC, T)
  pi, pl = laws.pi, laws.pseudo_likelihood()
  n = laws.n
  rows = []
  uniform = np.full(laws.c**n, 1.0 / laws.c**n)
  for name, s, q in [("uniform random start", None, uniform)] + [
    (s.name, s, laws.output(s)) for s in samplers
  ]:
    hit, curve = laws.glauber_curve(q, eps)
    rows.append(
      {
        "sampler": name,
        "forward_rows": 0 if s is None else s.forward_rows(n),
        "tv_pi": exact.tv(q, pi),
        "tv_pl": exact.tv(q, pl),
        "glauber_to_eps": hit,
        "curve": curve,
      }
    )
  return {"T": float(T), "tv_pi_pl": exact.tv(pi, pl), "rows": rows}


def null_tv_quantile(
  mu: np.ndarray, num: int, level: float = 0.999, reps: int = 2000, seed: int = 0
) -> float:
  """The `level` quantile of TV(empirical law of num i.i.d. draws from mu, mu), simulated: the
  band an exact sampler's empirical TV stays inside."""
  rng = np.random.default_rng(seed)
  mu = np.asarray(mu, np.float64) / np.sum(mu)
  tvs = 0.5 * np.abs(rng.multinomial(num, mu, reps) / num - mu).sum(1)
  return float(np.quantile(tvs, level))
