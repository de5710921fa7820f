"""Exact validation on a small state space (paper A's diagnostics against the true chain).

A real MLM restricted to c candidate tokens at n free sites (`chains.Spec`: the engine's own
restriction) is a Markov chain on S = c^n states, small enough (S <= max_states) to enumerate.
States are ordered lexicographically, index(x) = Σ_i x_i c^(n-1-i) (x_i candidate indices);
the shape letter Z indexes them (scores_ZNC: state, free site, candidate).

  scores s_i(a; x_-i)   the MLM logits over the candidates at site i with x_i masked: ONE
                        enumeration (S·n one-mask rows); every T is computed from it, as the
                        engine does: p_i^T(a | x_-i) = softmax(s_i(.; x_-i) / T)(a).
  P_T(x, y)             = (1/n) Σ_i 1[y_-i = x_-i] p_i^T(y_i | x_-i): random-scan Glauber, a
                        sparse matrix with n(c-1)+1 nonzeros per row.
  π_T                   the solution of π P_T = π, Σ π = 1: by GTH state reduction (no
                        subtraction, every π_T(x) to a relative O(S eps) even at 1e-300) up to
                        GTH_LIMIT states, else sparse LU anchored on the heaviest state; refused
                        (UserError) when ‖π P_T − π‖₁ > 8 S eps.
  gap                   P_T is not reversible in general (incompatible conditionals), so the
                        eigenvalues can be complex: we report the ABSOLUTE spectral gap
                        γ* = 1 - λ*, λ* = max{|λ| : λ eigenvalue of P_T, λ ≠ 1} (the
                        second-largest eigenvalue modulus, SLEM), from P_T - 1 π^T (same spectrum
                        with 1 -> 0). Below ~1e-12 it is at float64 resolution.
  t_mix(ε)              = min{t : d(t) <= ε}, d(t) = max_x TV(P_T^t(x, .), π_T), over EVERY start;
                        from dense powers P^(2^k) (doubling, then bisection with the stored
                        powers): a bracket [lo, hi], exact (lo = hi) up to 2^(refine_bits+1) steps.
  α_ij(T)               = max over x and b of TV(p_i^T(.|x_-i), p_i^T(.|(x^{j<-b})_-i)): all
                        contexts, by enumeration. α̂ = max_i Σ_j α_ij. Theorem 5: when α̂ < 1,
                        t_mix(ε) <= ⌈n / (1 - α̂) · log(n / ε)⌉ (an upper bound).
  g_i(x), Δ             g_i(x) = s_i(x_i) - max_{a≠x_i} s_i(a): the score margins; Δ_min(x) =
                        min_i g_i(x). Theorem 8 on the singleton basin B = {x*}, x* the state
                        of largest Δ = Δ_min(x*) among those with π_T(x) <= 1/2 (the theorem's
                        condition, checked exactly; m = n exit sites, c - 1 exit tokens each):
                        Φ(B) <= (c - 1) e^{-Δ/T}, so t_mix(1/4) >= e^{Δ/T} / (4(c - 1)) (below 1
                        when Δ <= 0: no information). Beside it the exact 1 / (4 Φ(B)).
  ΔR                    the rectangle defect of every rectangle (x, i < j, b_i ≠ x_i, b_j ≠ x_j),
                        from the untempered log-ratios (ΔR at T is ΔR / T); mean and max.
  PL_T(x)               ∝ Π_i p_i^T(x_i | x_-i): the pseudo-likelihood-normalised law; TV(π_T, PL_T).
  π_{E,T}               the Gibbs law ∝ exp(-E/T) of `metropolis`'s energies (the law MH samples).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from glauber import metropolis
from glauber.chains import make_spec
from glauber.layout import Layout
from glauber.oracle import MaskedLM
from gmlm.checks import UserError

MAX_STATES = 20_000  # c^n above this: a UserError
MAX_DENSE = 4096  # t_mix needs dense S x S powers: skipped above this many states
DENSE_EIG = 256  # the gap from a dense eigendecomposition up to this many states, else ARPACK
GTH_LIMIT = MAX_DENSE  # π by dense GTH (componentwise accurate) up to this many states, else LU
EPS = 0.25


def check_size(num_candidates: int, num_sites: int, max_states: int = MAX_STATES) -> int:
  """S = c^n, or a UserError naming the size and the limit."""
  if num_candidates < 2:
    raise UserError(
      f"the candidate set has {num_candidates} token(s); the restricted chain needs >= 2"
    )
  if num_sites < 1:
    raise UserError(f"the number of free sites n must be >= 1, got {num_sites}")
  S = num_candidates**num_sites
  if S > max_states:
    raise UserError(
      f"the restricted chain has c^n = {num_candidates}^{num_sites} = {S} states, over the "
      f"limit of {max_states}; use fewer candidates or free sites (or raise the limit)"
    )
  return S


def check_temperature(T: float) -> float:
  T = float(T)
  if not (T > 0 and math.isfinite(T)):
    raise UserError(f"the exact chain needs a temperature 0 < T < inf, got T = {T}")
  return T


def all_states(c: int, n: int) -> np.ndarray:
  """states_ZN: every state (candidate indices) in lexicographic order."""
  return np.indices((c,) * n).reshape(n, -1).T.astype(np.int32)


def neighbours(c: int, n: int) -> np.ndarray:
  """nbr_ZNC: the index of x^{i<-a}."""
  states_ZN = all_states(c, n)
  w_N = c ** np.arange(n - 1, -1, -1)
  idx_Z = states_ZN @ w_N
  return idx_Z[:, None, None] + (np.arange(c)[None, None] - states_ZN[..., None]) * w_N[:, None]


def enumerate_scores(
  model: MaskedLM, layout: Layout, candidates_C, max_states: int = MAX_STATES, batch: int = 256
) -> np.ndarray:
  """scores_ZNC (float64 of the float32 logits): s_i(a; x_-i) of every state, site and
  candidate, through the engine's Spec and masked-logits path (metropolis.site_scores)."""
  from gmlm.core import blocks

  candidates_C = np.asarray(candidates_C, np.int32)
  c, n = len(candidates_C), layout.num_sites
  check_size(c, n, max_states)
  spec = make_spec(candidates_C, model.config.vocab_size, layout, 1.0)
  states_ZN = all_states(c, n)
  out = []
  for lo in range(0, len(states_ZN), batch):
    tokens_BL = layout.sequences(candidates_C[states_ZN[lo : lo + batch]])
    out.append(
      np.asarray(
        metropolis.site_scores_jit(model, spec, tokens_BL, blocks.all_sites(len(tokens_BL), n))
      )
    )
  return np.concatenate(out).astype(np.float64)


def log_softmax(z: np.ndarray) -> np.ndarray:
  z = z - z.max(-1, keepdims=True)
  return z - np.log(np.exp(z).sum(-1, keepdims=True))


def conditionals(scores_ZNC: np.ndarray, T: float) -> np.ndarray:
  """cond_ZNC = p_i^T(a | x_-i) (float64)."""
  return np.exp(log_softmax(scores_ZNC / check_temperature(T)))


def kernel(move_ZNC: np.ndarray):
  """The sparse single-site kernel K(x, x^{i<-a}) = move_ZNC[x, i, a] / n for a ≠ x_i, the rest
  of each row's mass on the diagonal (n(c-1)+1 nonzeros per row)."""
  import scipy.sparse as sp

  S, n, c = move_ZNC.shape
  states_ZN = all_states(c, n)
  nbr_ZNC = neighbours(c, n)
  off_ZNC = np.arange(c)[None, None] != states_ZN[..., None]
  data = np.where(off_ZNC, move_ZNC / n, 0.0)
  stay_Z = 1.0 - data.sum((1, 2))
  rows = np.concatenate([np.repeat(np.arange(S), off_ZNC[0].sum()), np.arange(S)])
  cols = np.concatenate([nbr_ZNC[off_ZNC], np.arange(S)])
  vals = np.concatenate([data[off_ZNC], stay_Z])
  return sp.csr_matrix((vals, (rows, cols)), shape=(S, S))


def glauber_matrix(scores_ZNC: np.ndarray, T: float):
  """P_T of random-scan Glauber."""
  return kernel(conditionals(scores_ZNC, T))


def energy(scores_ZNC: np.ndarray, kind: str) -> np.ndarray:
  """E_Z of every state (metropolis' energies, float64)."""
  if kind not in metropolis.ENERGIES:
    raise ValueError(f"unknown energy {kind!r}; choose one of {metropolis.ENERGIES}")
  S, n, c = scores_ZNC.shape
  s = log_softmax(scores_ZNC) if kind == "pll" else scores_ZNC
  states_ZN = all_states(c, n)
  return -np.take_along_axis(s, states_ZN[..., None], axis=-1)[..., 0].sum(1)


def gibbs_law(E_Z: np.ndarray, T: float) -> np.ndarray:
  z = -E_Z / check_temperature(T)
  w = np.exp(z - z.max())
  return w / w.sum()


def mh_matrix(scores_ZNC: np.ndarray, T: float, kind: str):
  """The exact kernel of `metropolis` (proposal p_i^T, acceptance from the energy `kind`)."""
  S, n, c = scores_ZNC.shape
  q_ZNC = conditionals(scores_ZNC, T)
  E_Z = energy(scores_ZNC, kind)
  states_ZN = all_states(c, n)
  q_own_ZN1 = np.take_along_axis(q_ZNC, states_ZN[..., None], axis=-1)
  with np.errstate(divide="ignore", over="ignore"):
    log_ratio = (E_Z[:, None, None] - E_Z[neighbours(c, n)]) / T + np.log(q_own_ZN1 / q_ZNC)
  return kernel(q_ZNC * np.exp(np.minimum(log_ratio, 0.0)))


def off_diagonal(P):
  """The off-diagonal rates of P (csr, diagonal removed): stored exactly, unlike the diagonal
  1 - Σ_{y≠x} P(x, y), which is 1.0 in float64 once the exit probability is below 1e-16."""
  import scipy.sparse as sp

  R = sp.csr_matrix(P, dtype=np.float64, copy=True)
  R.setdiag(0.0)
  R.eliminate_zeros()
  return R


def stationary_residual(P, pi: np.ndarray) -> float:
  """‖π P − π‖₁ from the generator: Σ_y |Σ_{x≠y} π_x P(x, y) − π_y Σ_{z≠y} P(y, z)| (the
  diagonal's 1 − ... never formed, so a tiny exit probability is not lost to rounding)."""
  R = off_diagonal(P)
  pi = np.asarray(pi, np.float64)
  return float(np.abs(pi @ R - pi * np.asarray(R.sum(1)).ravel()).sum())


def residual_tolerance(S: int) -> float:
  """The largest ‖π P − π‖₁ `stationary` accepts: 8 S float64 eps. A componentwise relative
  error δ in π (GTH: δ = O(S eps)) moves the residual by at most 2 max|δ|; forming the residual
  adds at most 2 (deg + 1) eps <= 2 S eps."""
  return 8.0 * S * float(np.finfo(np.float64).eps)


def stationary(P, *, method: str = "auto", check: bool = True) -> np.ndarray:
  """π with π P = π, Σ π = 1, accurate however small a state's mass.

  method "gth" (auto up to GTH_LIMIT states): Grassmann-Taksar-Heyman state reduction on the
  generator (dense, blocked): Gaussian elimination whose pivots are recomputed as sums of
  non-negative off-diagonal rates, so it never subtracts, and every π_x comes out with a
  relative error O(S eps) even at 1e-300 (Grassmann, Taksar & Heyman 1985; O'Cinneide 1993).
  method "lu" (auto above): sparse LU of the generator with the exact diagonal, anchored on the
  state of largest mass (the stickiest state first, then the argmax of the solve until it
  holds); accurate in ‖.‖₁, not componentwise inside a metastable basin of tiny mass.
  check: a UserError (one line) when ‖π P − π‖₁ > residual_tolerance(S)."""
  S = P.shape[0]
  if S == 1:
    return np.ones(1)
  if method == "auto":
    method = "gth" if S <= GTH_LIMIT else "lu"
  if method not in ("gth", "lu"):
    raise ValueError(f"unknown method {method!r}; choose 'auto', 'gth' or 'lu'")
  R = off_diagonal(P)
  out_Z = np.asarray(R.sum(1)).ravel()
  if not (out_Z > 0).all():
    x = int(np.argmin(out_Z))
    raise UserError(
      f"state {x} of the {S}-state chain never moves (every exit probability is 0 in "
      "float64: the temperature is too low for the scores); raise T"
    )
  pi = _gth(R, out_Z) if method == "gth" else _anchored_lu(R, out_Z)
  if check:
    res, tol = stationary_residual(P, pi), residual_tolerance(S)
    if not res <= tol:
      raise UserError(
        f"the stationary law of the {S}-state chain failed its check: ‖πP − π‖₁ = {res:.3g} "
        f"> {tol:.3g} (method {method!r}); raise T or use fewer states"
      )
  return pi


def _gth(R, out_Z: np.ndarray, block: int = 64) -> np.ndarray:
  """GTH on the dense off-diagonal rates, blocked: a block of states is eliminated one by one
  against the rows and columns it touches, the rest of the Schur complement by one matrix
  product of non-negative factors. States are ordered by exit rate so that the stickiest (the
  likeliest heavy) state is eliminated last and anchors the back substitution."""
  S = R.shape[0]
  order = np.argsort(out_Z, kind="stable")  # position 0: smallest exit rate, eliminated last
  A = np.ascontiguousarray(R[order][:, order].toarray())
  for hi in range(S, 1, -block):
    lo = max(hi - block, 1)
    for p in range(hi - 1, lo - 1, -1):
      s = A[p, :p].sum()  # the exit rate of p to the states still in: a sum, no subtraction
      if not s > 0:
        raise UserError(
          f"the {S}-state chain splits in float64 (a state's exit probabilities underflow): raise T"
        )
      A[:p, p] /= s
      if p > lo:
        A[lo:p, :p] += np.outer(A[lo:p, p], A[p, :p])
        A[:lo, lo:p] += np.outer(A[:lo, p], A[p, lo:p])
    A[:lo, :lo] += A[:lo, lo:hi] @ A[lo:hi, :lo]  # the diagonal collects junk, never read
  pi = np.zeros(S)
  pi[0] = 1.0
  for p in range(1, S):
    pi[p] = pi[:p] @ A[:p, p]
    if pi[p] > 1e200:  # keep the unnormalised law finite (ratios are unchanged)
      pi[: p + 1] /= pi[p]
  if not np.isfinite(pi).all():
    raise UserError(f"the stationary law of the {S}-state chain overflows float64: raise T")
  out = np.empty(S)
  out[order] = pi / pi.sum()
  return out


def _anchored_lu(R, out_Z: np.ndarray, rounds: int = 4) -> np.ndarray:
  """Sparse LU of π Q = 0 (Q the generator with its exact diagonal −exit rate), π_anchor = 1:
  the anchor starts at the stickiest state and moves to the argmax of the solve until it is the
  argmax (a tiny anchor makes the reduced system numerically singular)."""
  import scipy.sparse as sp
  from scipy.sparse.linalg import spsolve

  S = R.shape[0]
  QT = (R - sp.diags(out_Z)).T.tocsc()
  anchor = int(np.argmin(out_Z))
  for _ in range(rounds):
    keep = np.flatnonzero(np.arange(S) != anchor)
    rest = np.atleast_1d(spsolve(QT[keep][:, keep], -QT[keep][:, [anchor]].toarray()[:, 0]))
    pi = np.insert(np.nan_to_num(rest, nan=0.0, posinf=0.0), anchor, 1.0)
    pi = np.maximum(pi, 0.0) / np.maximum(pi, 0.0).sum()
    top = int(np.argmax(pi))
    if top == anchor or pi[anchor] >= 0.5 * pi[top]:
      break
    anchor = top
  return pi


def spectral_gap(P, pi: np.ndarray, dense_limit: int = DENSE_EIG) -> dict:
  """{"slem": λ*, "gap": 1 - λ*} (module docstring), dense up to dense_limit states."""
  S = P.shape[0]
  if S <= dense_limit:
    lam = np.linalg.eigvals(P.toarray())
    lam = np.delete(lam, np.argmin(np.abs(lam - 1.0)))
  else:
    from scipy.sparse.linalg import LinearOperator, eigs

    op = LinearOperator((S, S), matvec=lambda v: P @ v - pi @ v, dtype=np.float64)
    lam = eigs(
      op, k=min(4, S - 2), which="LM", tol=1e-12, maxiter=100 * S, return_eigenvectors=False
    )
  slem = float(np.max(np.abs(lam))) if lam.size else 0.0
  return {"slem": slem, "gap": 1.0 - slem}


def worst_tv(M: np.ndarray, pi: np.ndarray) -> float:
  """d = max_x TV(M[x], π)."""
  return float(0.5 * np.abs(M - pi).sum(1).max())


def mixing_time(
  P, pi: np.ndarray, eps: float = EPS, refine_bits: int = 6, max_doublings: int = 62
) -> dict:
  """t_mix(eps) bracketed: {"lo", "hi", "curve": [(t, d(t)), ...]}; lo = hi is exact. d(2^k)
  by squaring until d <= eps, then refine_bits bisection steps over the stored powers (exact
  up to t_mix = 2^(refine_bits + 1), else hi / lo - 1 <= 2^-refine_bits). hi is None when
  d(2^max_doublings) > eps."""
  powers = [np.asarray(P.toarray(), np.float64)]  # P^(2^k) for the last few k
  curve = [(1, worst_tv(powers[0], pi))]
  while curve[-1][1] > eps:
    if len(curve) > max_doublings:
      return {"lo": curve[-1][0] + 1, "hi": None, "curve": curve}
    powers = [*powers[-(refine_bits + 1) :], powers[-1] @ powers[-1]]
    curve.append((2 * curve[-1][0], worst_tv(powers[-1], pi)))
  if len(curve) == 1:
    return {"lo": 1, "hi": 1, "curve": curve}
  # t_mix in (t, 2t] with t = 2^(K-1); powers[-2] = P^t, powers[-3::-1] = P^(t/2), P^(t/4), ...
  t, R = curve[-2][0], powers[-2]
  step = t
  for Q in powers[-3::-1]:
    step //= 2
    C = R @ Q
    d = worst_tv(C, pi)
    curve.append((t + step, d))
    if d > eps:
      t, R = t + step, C
  return {"lo": t + 1, "hi": t + step, "curve": sorted(curve)}


def influence(cond_ZNC: np.ndarray) -> np.ndarray:
  """alpha_NN[i, j]: the exact α_ij (max over every context; 0 on the diagonal)."""
  S, n, c = cond_ZNC.shape
  grid = cond_ZNC.reshape((c,) * n + (n, c))
  alpha = np.zeros((n, n))
  for i in range(n):
    for j in range(n):
      if i != j:
        X = np.moveaxis(grid[..., i, :], j, 0)  # [x_j, other x, a]
        alpha[i, j] = 0.5 * np.abs(X[:, None] - X[None, :]).sum(-1).max()
  return alpha


def contraction_bound(alpha_NN: np.ndarray, eps: float = EPS) -> float:
  """Theorem 5's t_mix(eps) <= ⌈n / (1 - α̂) log(n / eps)⌉; inf when α̂ >= 1."""
  n = len(alpha_NN)
  a = float(alpha_NN.sum(1).max())
  return float(math.ceil(n / (1 - a) * math.log(n / eps))) if a < 1 else math.inf


def margins(scores_ZNC: np.ndarray) -> np.ndarray:
  """g_ZN = s_i(x_i; x_-i) - max_{a ≠ x_i} s_i(a; x_-i)."""
  S, n, c = scores_ZNC.shape
  own_ZN1 = all_states(c, n)[..., None]
  s_own = np.take_along_axis(scores_ZNC, own_ZN1, axis=-1)[..., 0]
  others = np.where(np.arange(c) == own_ZN1, -np.inf, scores_ZNC)
  return s_own - others.max(-1)


def rectangles(scores_ZNC: np.ndarray) -> dict:
  """ΔR over every rectangle (untempered): {"mean", "max", "count"}. For sites i < j and the
  rest of the context fixed, M[u, v] = s_i(u; x_j = v) - s_j(v; x_i = u) and ΔR is
  |M[b_i, b_j] - M[b_i, a_j] - M[a_i, b_j] + M[a_i, a_j]| (0 for every rectangle iff M is a sum
  f(u) + g(v): compatibility)."""
  S, n, c = scores_ZNC.shape
  grid = scores_ZNC.reshape((c,) * n + (n, c))
  total, top, count = 0.0, 0.0, 0
  for i in range(n):
    for j in range(i + 1, n):
      A = np.moveaxis(np.take(grid[..., i, :], 0, axis=i), j - 1, -2)  # [rest, v, u]
      B = np.moveaxis(np.take(grid[..., j, :], 0, axis=j), i, -2)  # [rest, u, v]
      M = np.swapaxes(A, -1, -2) - B  # [rest, u, v]
      D = (
        M[..., :, None, :, None]
        - M[..., :, None, None, :]
        - M[..., None, :, :, None]
        + M[..., None, :, None, :]
      )  # [rest, a_i, b_i, a_j, b_j]
      keep = (~np.eye(c, dtype=bool))[:, :, None, None] & (~np.eye(c, dtype=bool))[None, None]
      d = np.abs(D[..., keep])
      total, top, count = total + d.sum(), max(top, float(d.max())), count + d.size
  return {"mean": total / count if count else 0.0, "max": top, "count": count}


def pseudo_likelihood(cond_ZNC: np.ndarray) -> np.ndarray:
  """PL_Z ∝ Π_i p_i(x_i | x_-i), normalised."""
  S, n, c = cond_ZNC.shape
  own = np.take_along_axis(cond_ZNC, all_states(c, n)[..., None], axis=-1)[..., 0]
  log_pl = np.log(own).sum(1)
  w = np.exp(log_pl - log_pl.max())
  return w / w.sum()


def tv(p: np.ndarray, q: np.ndarray) -> float:
  return float(0.5 * np.abs(np.asarray(p) - np.asarray(q)).sum())


def nonreversibility(P, pi: np.ndarray) -> float:
  """Σ_{x<y} |π(x) P(x, y) - π(y) P(y, x)|: 0 iff P is reversible w.r.t. π."""
  import scipy.sparse as sp

  F = sp.diags(pi) @ P
  return float(0.5 * abs(F - F.T).sum())


def measure_temperature(
  scores_ZNC: np.ndarray,
  T: float,
  *,
  eps: float = EPS,
  max_dense: int = MAX_DENSE,
  refine_bits: int = 6,
) -> dict:
  """Every exact figure of the restricted chain at temperature T (module docstring)."""
  T = check_temperature(T)
  S, n, c = scores_ZNC.shape
  cond_ZNC = conditionals(scores_ZNC, T)
  P = kernel(cond_ZNC)
  pi = stationary(P)
  row = {"T": T, **spectral_gap(P, pi)}
  row["stationary_residual"] = stationary_residual(P, pi)
  if S <= max_dense:
    mix = mixing_time(P, pi, eps, refine_bits)
    row.update(tmix_lo=mix["lo"], tmix_hi=mix["hi"], tv_curve=mix["curve"])
  else:
    row.update(tmix_lo=None, tmix_hi=None, tv_curve=[])
  alpha_NN = influence(cond_ZNC)
  row.update(alpha_hat=float(alpha_NN.sum(1).max()), alpha_NN=alpha_NN.tolist())
  upper = contraction_bound(alpha_NN, eps)
  row["thm5_upper"] = upper if math.isfinite(upper) else None  # None: α̂ >= 1, no bound
  delta_Z = margins(scores_ZNC).min(1)
  trap = int(np.argmax(np.where(pi <= 0.5, delta_Z, -np.inf)))  # the deepest with π <= 1/2
  delta = float(delta_Z[trap])
  log10_lower = delta / T / math.log(10) - math.log10(4 * (c - 1))  # Theorem 8, when it applies
  exit_bound = (c - 1) * math.exp(max(-delta / T, -700.0))
  off_NC = np.arange(c) != all_states(c, n)[trap][:, None]
  exit_exact = float(cond_ZNC[trap][off_NC].sum() / n)  # 1 - P(x*, x*), without cancellation
  row.update(
    trap_state=trap,
    trap_margin=delta,
    trap_pi=float(pi[trap]),
    trap_exit_bound=exit_bound,
    trap_exit_exact=exit_exact,
    thm8_log10_lower=log10_lower,
    thm8_lower=10**log10_lower if log10_lower < 300 else None,
    trap_conductance_lower=1 / (4 * exit_exact) if exit_exact > 0 else None,
  )
  row["tv_pi_pl"] = tv(pi, pseudo_likelihood(cond_ZNC))
  for kind in metropolis.ENERGIES:
    row[f"tv_pi_gibbs_{kind}"] = tv(pi, gibbs_law(energy(scores_ZNC, kind), T))
  row["nonreversibility"] = nonreversibility(P, pi)
  return row


def summary(scores_ZNC: np.ndarray) -> dict:
  """The temperature-free figures: size, ΔR (untempered), the margins of the deepest trap."""
  S, n, c = scores_ZNC.shape
  delta_Z = margins(scores_ZNC).min(1)
  return {
    "num_states": S,
    "num_sites": n,
    "num_candidates": c,
    "rectangles": rectangles(scores_ZNC),
    "perfect_traps": int((delta_Z > 0).sum()),
    "max_trap_margin": float(delta_Z.max()),
  }


def measure(
  model: MaskedLM,
  layout: Layout,
  candidates_C,
  temperatures: Sequence[float],
  *,
  eps: float = EPS,
  max_states: int = MAX_STATES,
  max_dense: int = MAX_DENSE,
  refine_bits: int = 6,
) -> dict:
  """{"summary": summary(...), "rows": [measure_temperature(...) per T]} of the MLM restricted
  to candidates_C at the layout's free sites."""
  for T in temperatures:
    check_temperature(T)
  check_size(len(candidates_C), layout.num_sites, max_states)
  scores_ZNC = enumerate_scores(model, layout, candidates_C, max_states)
  kw = dict(eps=eps, max_dense=max_dense, refine_bits=refine_bits)
  return {
    "summary": summary(scores_ZNC),
    "rows": [measure_temperature(scores_ZNC, T, **kw) for T in temperatures],
  }


HEADER = [
  "T",
  "abs. spectral gap",
  "t_mix(1/4)",
  "α̂",
  "Thm 5 upper",
  "Thm 8 lower",
  "exact 1/(4Φ(x*))",
  "mean ΔR / T",
  "TV(π_T, PL_T)",
  "TV(π_T, π_pll,T)",
  "TV(π_T, π_raw,T)",
]


def _tmix(row: dict) -> str:
  lo, hi = row["tmix_lo"], row["tmix_hi"]
  if lo is None:
    return "not computed"
  if hi is None:
    return f"> {lo - 1:.3g}"
  return str(lo) if lo == hi else f"{lo}..{hi}"


def _value(x) -> str | float:
  return "n/a" if x is None else float(x)


def section(results: dict, run) -> str:
  """Markdown over T: exact gap and t_mix beside both bounds, ΔR and the TVs; figures
  exact_tmix.png and exact_tv.png through run.savefig."""
  from gmlm.runs import markdown_table

  s, rows = results["summary"], results["rows"]
  mean_dr = s["rectangles"]["mean"]
  table = [
    [
      r["T"],
      r["gap"],
      _tmix(r),
      r["alpha_hat"],
      "none (α̂ ≥ 1)" if r["thm5_upper"] is None else float(r["thm5_upper"]),
      _value(r["thm8_lower"]),
      _value(r["trap_conductance_lower"]),
      mean_dr / r["T"],
      r["tv_pi_pl"],
      r["tv_pi_gibbs_pll"],
      r["tv_pi_gibbs_raw"],
    ]
    for r in rows
  ]
  run.savefig(tmix_figure(results), "exact_tmix.png")
  run.savefig(tv_figure(results), "exact_tv.png")
  return "\n".join(
    [
      f"## Exact chain: c = {s['num_candidates']} candidates, n = {s['num_sites']} free sites, "
      f"{s['num_states']} states\n",
      f"ΔR over all {s['rectangles']['count']} rectangles (untempered): mean "
      f"{mean_dr:.4g}, max {s['rectangles']['max']:.4g}. {s['perfect_traps']} perfect traps "
      f"(every token the argmax); the deepest has Δ_min = {s['max_trap_margin']:.4g}.\n",
      "The gap is the absolute spectral gap 1 - max{|λ| : λ ≠ 1} (P_T is not reversible). "
      "t_mix is exact over every start (a..b: bracketed). Theorem 5 bounds t_mix from above "
      "when α̂ < 1; Theorem 8 from below (singleton basin of the state x* of largest Δ_min "
      "among those with π_T(x) <= 1/2); the exact 1/(4Φ(x*)) is the bottleneck bound that Theorem 8 estimates. "
      "π_pll,T and π_raw,T are the laws Metropolis-Hastings samples.\n",
      markdown_table(HEADER, table),
      "\n![exact t_mix and bounds](exact_tmix.png)\n\n![worst-case TV](exact_tv.png)\n",
    ]
  )


def tmix_figure(results: dict):
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  rows = results["rows"]
  T = [r["T"] for r in rows]
  fig, ax = plt.subplots(figsize=(6, 3.5))

  def line(values, style, label):
    pts = [(t, v) for t, v in zip(T, values) if v is not None and math.isfinite(v)]
    if pts:
      ax.plot(*zip(*pts), style, label=label)

  line([r["tmix_hi"] or r["tmix_lo"] for r in rows], "ko-", "exact t_mix(1/4)")
  line([r["thm5_upper"] for r in rows], "v--", "Theorem 5 upper bound")
  line([r["thm8_lower"] for r in rows], "^--", "Theorem 8 lower bound")
  line([r["trap_conductance_lower"] for r in rows], "^:", "exact 1/(4Φ) of the trap")
  line([1 / r["gap"] if r["gap"] > 0 else None for r in rows], "s:", "1 / abs. gap")
  ax.set(xscale="log", yscale="log", xlabel="temperature T", ylabel="steps")
  s = results["summary"]
  ax.set_title(
    f"Exact restricted chain: c = {s['num_candidates']}, n = {s['num_sites']}", fontsize=10
  )
  ax.legend(fontsize=8, bbox_to_anchor=(1.02, 1), loc="upper left")
  return fig


def tv_figure(results: dict):
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6, 3.5))
  for r in results["rows"]:
    if r["tv_curve"]:
      ax.plot(*zip(*r["tv_curve"]), "o-", ms=3, label=f"T = {r['T']:g}")
  ax.axhline(EPS, color="gray", ls=":")
  ax.set(xscale="log", xlabel="step t", ylabel="d(t) = max_x TV(P^t(x,.), π)")
  ax.legend(fontsize=8)
  return fig
