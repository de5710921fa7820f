"""Pairwise influence, score oscillation and the high-temperature contraction bound (paper A,
Sections 5.1-5.2, Appendix A.1).

Influence of site j on site i at temperature T, over contexts x, y that differ only at j:

  α_ij(T) = sup TV(p_i^T(. | x_-i), p_i^T(. | y_-i)),   α̂(T) = max_i Σ_{j != i} α_ij(T).

If α̂ < 1 the same-site maximal coupling contracts the Hamming distance (Theorem 5) and

  t_mix(ε) <= ⌈ n / (1 - α̂) · log(n / ε) ⌉.

Score oscillation ω_ij = sup osc_a(s_i(a; x_-i) - s_i(a; y_-i)) (osc = max - min over the
candidates a). Lemma 6: along s_t = s_x + t (s_y - s_x), d/dt TV <= ½ E_p|w - E_p w| <= osc(w)/4
with w = (s_y - s_x) / T, so α_ij(T) <= ω_ij / (4T) for each pair (x, y), and T > max_i Σ_j
ω_ij / 4 guarantees α̂ < 1 (Corollary 7).

Estimate (a lower bound on each sup): base contexts b = the seed sentence and copies of it with
a few sites changed; at each j the token runs over a value set of M tokens (the seed's token and
the model's top M - 1 others at j given the seed); α_ij is the max TV over the M(M-1)/2 value
pairs, then the max (and the mean) over base contexts; ω_ij likewise. One group (b, i, j) is M
one-mask sequences (site i masked, site j set to each value); groups run in batches of about
`batch_size` sequences, every temperature from the same forward. The conditionals are the
untruncated tempered softmax over the candidates (`gmlm.core.draws.temper`, the engine's): the
bound does not hold under top-k / top-p truncation, which is refused.

Shape letters added here: G groups (b, i, j), M values of site j, P value pairs, T temperatures.
"""

from __future__ import annotations

import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from glauber import chains
from glauber.chains import Spec
from glauber.layout import Layout, max_sequence_length
from glauber.measures.common import config_args, pyplot
from glauber.oracle import MaskedLM
from glauber.scoring import check_temperatures, check_tokens, scoring_spec, site_scores
from gmlm import checks
from gmlm.checks import UserError
from gmlm.core import draws
from gmlm.runs import RunDir, markdown_table


@struct.dataclass
class Influence:
  """Estimated influences over T temperatures (numpy arrays; zero on the diagonal)."""

  alpha_max_TNN: np.ndarray  # max over base contexts of the max over value pairs
  alpha_mean_TNN: np.ndarray  # mean over base contexts of the max over value pairs
  omega_NN: np.ndarray  # max over base contexts and value pairs of the score oscillation
  slack_T: np.ndarray  # max over all (b, i, j, pair) of TV - ω/(4T): <= 0 by Lemma 6
  temperatures: tuple[float, ...] = struct.field(pytree_node=False, default=())


def check_spec(spec: Spec) -> None:
  if spec.top_k or spec.top_p < 1.0:
    raise UserError(
      f"influence with top_k={spec.top_k}, top_p={spec.top_p}: the contraction bounds hold for "
      "the untruncated softmax only; use top_k=0, top_p=1"
    )


def _variants(spec: Spec, base_GL, j_G, values_GM):
  """base_GL with site j set to each of the M values: variants_GML."""
  L = base_GL.shape[-1]
  at_j_GL = jax.nn.one_hot(spec.offset + j_G, L, dtype=jnp.bool_)
  return jnp.where(at_j_GL[:, None, :], values_GM[:, :, None], base_GL[:, None, :])


@jax.jit(static_argnames=("temperatures",))
def group_influence(
  model: MaskedLM,
  spec: Spec,
  contexts_BL: jax.Array,
  b_G: jax.Array,
  i_G: jax.Array,
  j_G: jax.Array,
  values_GM: jax.Array,
  temperatures: tuple[float, ...],
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """For each group (context b, site i, varied site j, M values of j) in one forward of G * M
  one-mask rows: tv_TG (max over value pairs of the TV at site i), omega_G (max over value pairs
  of the score oscillation) and slack_TG (max over value pairs of TV - ω/(4T))."""
  G, M = values_GM.shape
  variants_GML = _variants(spec, contexts_BL[b_G], j_G, values_GM)
  rows_X1 = jnp.repeat(i_G, M)[:, None]  # X = G * M one-mask rows
  logp_X1C = chains.site_logprobs(
    model, scoring_spec(spec), variants_GML.reshape(G * M, -1), rows_X1
  )
  logp_GMC = logp_X1C.reshape(G, M, -1)
  a_P, b_P = np.triu_indices(M, 1)
  diff_GPC = logp_GMC[:, a_P] - logp_GMC[:, b_P]  # per-row constants cancel in the oscillation
  omega_GP = diff_GPC.max(-1) - diff_GPC.min(-1)
  tv, slack = [], []
  for T in temperatures:
    p_GMC = jnp.exp(draws.temper(logp_GMC, T))
    tv_GP = 0.5 * jnp.abs(p_GMC[:, a_P] - p_GMC[:, b_P]).sum(-1)
    tv.append(tv_GP.max(-1))
    slack.append((tv_GP - omega_GP / (4.0 * T)).max(-1))
  return jnp.stack(tv), omega_GP.max(-1), jnp.stack(slack)


def check_values(values, num_sites: int) -> np.ndarray:
  """values_NM (or one value set [M] shared by every site) with M >= 2."""
  values = np.asarray(values, np.int32)
  if values.ndim == 1:
    values = np.tile(values, (num_sites, 1))
  if values.ndim != 2 or values.shape[0] != num_sites:
    raise UserError(f"value sets of shape {values.shape}: need [M] or [n = {num_sites}, M]")
  if values.shape[1] < 2:
    raise UserError(f"candidate set of size {values.shape[1]} at site j: need at least 2 values")
  return values


def check_pair(i: int, j: int, num_sites: int) -> None:
  for name, s in (("i", i), ("j", j)):
    if not 0 <= s < num_sites:
      raise UserError(f"site {name}={s} is outside the free sites 0..{num_sites - 1}")
  if i == j:
    raise UserError(f"sites i = j = {i}: the influence of a site on itself is not defined")


def pair_influence(
  model: MaskedLM,
  spec: Spec,
  contexts_BL,
  i: int,
  j: int,
  values,
  temperatures: Sequence[float],
) -> tuple[np.ndarray, np.ndarray]:
  """(alpha_TB, omega_B): the influence of free site j on free site i in each base context (the
  max over pairs of the M values at j) at each temperature, and the score oscillation."""
  check_spec(spec)
  n = spec.num_sites
  check_pair(i, j, n)
  temps = check_temperatures(temperatures)
  contexts_BL = check_tokens(spec, contexts_BL)
  values_M = check_values(values, n)[j]
  B = contexts_BL.shape[0]
  tv_TB, omega_B, _ = group_influence(
    model,
    spec,
    contexts_BL,
    jnp.arange(B),
    jnp.full(B, i),
    jnp.full(B, j),
    jnp.tile(values_M, (B, 1)),
    temps,
  )
  return np.asarray(tv_TB), np.asarray(omega_B)


def influence_matrix(
  model: MaskedLM,
  spec: Spec,
  contexts_BL,
  values,
  temperatures: Sequence[float],
  *,
  batch_size: int = 512,
) -> Influence:
  """α_ij (max and mean over the B base contexts), ω_ij and the Lemma-6 slack for every ordered
  pair i != j: B * n * (n - 1) groups of M rows, about batch_size rows per forward."""
  check_spec(spec)
  n = spec.num_sites
  temps = check_temperatures(temperatures)
  contexts_BL = check_tokens(spec, contexts_BL)
  values_NM = check_values(values, n)
  B, M = contexts_BL.shape[0], values_NM.shape[1]
  b_G, i_G, j_G = (a.ravel() for a in np.meshgrid(np.arange(B), np.arange(n), np.arange(n)))
  off = i_G != j_G
  b_G, i_G, j_G = b_G[off], i_G[off], j_G[off]
  total = b_G.size
  per = max(1, min(total, batch_size // M))
  pad = -total % per
  idx_G = np.concatenate([np.arange(total), np.zeros(pad, int)])
  tv, om, sl = [], [], []
  for s in range(0, idx_G.size, per):
    g = idx_G[s : s + per]
    out = group_influence(
      model, spec, contexts_BL, b_G[g], i_G[g], j_G[g], values_NM[j_G[g]], temps
    )
    tv.append(np.asarray(out[0]))
    om.append(np.asarray(out[1]))
    sl.append(np.asarray(out[2]))
  tv_TG = np.concatenate(tv, axis=1)[:, :total]
  omega_G = np.concatenate(om)[:total]
  slack_T = np.concatenate(sl, axis=1)[:, :total].max(-1)
  T = len(temps)
  tv_TBNN = np.zeros((T, B, n, n))
  tv_TBNN[:, b_G, i_G, j_G] = tv_TG
  omega_BNN = np.zeros((B, n, n))
  omega_BNN[b_G, i_G, j_G] = omega_G
  return Influence(tv_TBNN.max(1), tv_TBNN.mean(1), omega_BNN.max(0), slack_T, temps)


def top_values(model: MaskedLM, spec: Spec, seed_1L, num_values: int) -> np.ndarray:
  """values_NM: at each free site, the seed's own token and the num_values - 1 highest-scoring
  other candidates given the seed."""
  if num_values < 2:
    raise UserError(f"candidate set of size {num_values} at site j: need at least 2 values")
  seed_1L = check_tokens(spec, seed_1L)
  logp_NC = np.array(site_scores(model, spec, seed_1L))[0]
  own_N = np.asarray(spec.free(seed_1L))[0]
  own_idx_N = np.asarray(spec.index_V)[own_N]
  logp_NC[own_idx_N >= 0, own_idx_N[own_idx_N >= 0]] = -np.inf
  top_NM = np.argsort(-logp_NC, axis=-1, kind="stable")[:, : num_values - 1]
  return np.concatenate([own_N[:, None], np.asarray(spec.candidates_C)[top_NM]], axis=1)


def base_contexts(
  rng: np.random.Generator, spec: Spec, seed_1L, values_NM, num_contexts: int, num_changed: int
) -> np.ndarray:
  """contexts_BL: the seed, then num_contexts - 1 copies with num_changed random free sites set
  to one of their other values (values_NM[:, 1:])."""
  seed_1L = np.asarray(check_tokens(spec, seed_1L))
  n = spec.num_sites
  if num_contexts < 1:
    raise UserError(f"number of base contexts {num_contexts}: must be >= 1")
  if not 0 <= num_changed <= n:
    raise UserError(f"sites changed per base context {num_changed}: must be in [0, n = {n}]")
  out = np.repeat(seed_1L, num_contexts, axis=0)
  for b in range(1, num_contexts):
    sites = rng.choice(n, num_changed, replace=False)
    picks = rng.integers(1, values_NM.shape[1], num_changed)
    out[b, spec.offset + sites] = values_NM[sites, picks]
  return out


def alpha_hat(alpha_TNN: np.ndarray) -> np.ndarray:
  """α̂ = max_i Σ_j α_ij, per temperature."""
  return np.asarray(alpha_TNN).sum(-1).max(-1)


def sufficient_temperature(omega_NN: np.ndarray) -> float:
  """Corollary 7: every T above max_i Σ_j ω_ij / 4 has α̂ <= that / T < 1."""
  return float(np.asarray(omega_NN).sum(-1).max() / 4.0)


def tmix_bound(alpha, n: int, epsilon: float = 0.25) -> np.ndarray:
  """Theorem 5: ⌈n / (1 - α) · log(n / ε)⌉ where α < 1, inf elsewhere."""
  if not 0 < epsilon < 1:
    raise UserError(f"epsilon={epsilon}: must be in (0, 1)")
  a = np.asarray(alpha, np.float64)
  with np.errstate(divide="ignore"):
    t = np.ceil(n / (1.0 - a) * math.log(n / epsilon))
  return np.where(a < 1, t, np.inf)


def contraction_temperature(temperatures, alpha_hat_T) -> dict:
  """Where the measured α̂ falls below 1 on the grid: `grid` = the smallest grid T from which
  α̂ < 1 at every larger grid T (None when not even at the largest), `interpolated` = the
  crossing of α̂ = 1 interpolated in log T - log α̂ between that T and the grid T below it."""
  T = np.asarray(temperatures, np.float64)
  a = np.asarray(alpha_hat_T, np.float64)
  order = np.argsort(T)
  T, a = T[order], a[order]
  below = a < 1
  if not below[-1]:
    return {"grid": None, "interpolated": None}
  k = len(T) - 1
  while k > 0 and below[k - 1]:
    k -= 1
  if k == 0:
    return {"grid": float(T[0]), "interpolated": None}
  t0, t1, a0, a1 = np.log(T[k - 1]), np.log(T[k]), np.log(a[k - 1]), np.log(max(a[k], 1e-300))
  x = t0 + (0.0 - a0) * (t1 - t0) / (a1 - a0)
  return {"grid": float(T[k]), "interpolated": float(np.exp(x))}


# --- protocol 2: measure and report -------------------------------------------------------------


def measure(
  model: MaskedLM,
  tokenizer,
  seed_text: str,
  temperatures: Sequence[float],
  *,
  num_contexts: int = 4,
  num_values: int = 5,
  num_changed: int | None = None,
  epsilon: float = 0.25,
  prefix: str = "",
  candidates=None,
  seed: int = 0,
  batch_size: int = 512,
) -> dict:
  """Protocol 2 on the seed sentence (n = its number of tokens): α_ij(T) max / mean over base
  contexts, ω_ij, α̂(T), Lemma 6's bound and slack, Corollary 7's sufficient temperature, the
  measured contraction temperature and Theorem 5's t_mix bound per T."""
  temps = check_temperatures(temperatures)
  ids = tokenizer(seed_text, add_special_tokens=False)["input_ids"]
  if len(ids) < 2:
    raise UserError(f"influence seed {seed_text!r} has {len(ids)} tokens: need at least 2")
  if candidates is None:
    candidates = chains.candidate_ids(tokenizer, model.config.vocab_size)
  n = len(ids)
  lay = Layout.from_tokenizer(tokenizer, n, prefix, max_sequence_length(model))
  spec = chains.make_spec(candidates, model.config.vocab_size, lay, 1.0)
  seed_1L = lay.sequences(np.asarray([ids]))
  values_NM = top_values(model, spec, seed_1L, num_values)
  changed = max(1, n // 4) if num_changed is None else num_changed
  rng = np.random.default_rng(seed)
  contexts_BL = base_contexts(rng, spec, seed_1L, values_NM, num_contexts, changed)
  inf = influence_matrix(model, spec, contexts_BL, values_NM, temps, batch_size=batch_size)
  a_max_T, a_mean_T = alpha_hat(inf.alpha_max_TNN), alpha_hat(inf.alpha_mean_TNN)
  omega_row = float(inf.omega_NN.sum(-1).max())
  return {
    "seed_text": tokenizer.decode(ids),
    "tokens": tokenizer.convert_ids_to_tokens(ids),
    "n": n,
    "num_contexts": num_contexts,
    "num_values": num_values,
    "num_changed": changed,
    "epsilon": epsilon,
    "temperatures": list(temps),
    "alpha_hat_max": a_max_T.tolist(),
    "alpha_hat_mean": a_mean_T.tolist(),
    "omega_bound": [omega_row / (4 * T) for T in temps],
    "lemma6_slack": inf.slack_T.tolist(),
    "sufficient_temperature": sufficient_temperature(inf.omega_NN),
    "contraction_temperature": contraction_temperature(temps, a_max_T),
    "tmix_bound": [float(t) for t in tmix_bound(a_max_T, n, epsilon)],
    "alpha_max": inf.alpha_max_TNN.tolist(),
    "alpha_mean": inf.alpha_mean_TNN.tolist(),
    "omega": inf.omega_NN.tolist(),
    "max_pair_alpha": inf.alpha_max_TNN.max(axis=(1, 2)).tolist(),
    "max_pair_omega": float(inf.omega_NN.max()),
  }


# The job's config keys (under a prefix, e.g. config.influence.*) and their defaults.
DEFAULTS = {
  "seed_text": "the quick brown fox jumps over the lazy dog near the old river bank",  # 14 tokens
  "temperatures": (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0),
  "num_contexts": 4,  # the seed and 3 copies with num_changed sites changed
  "num_values": 5,  # the seed's token and the model's top 4 others at each j
  "num_changed": -1,  # -1: max(1, n // 4)
  "epsilon": 0.25,
  "seed": 0,
  "batch_size": 512,  # one-mask rows per forward
}


def validate(config, under: str = "influence.") -> None:
  """Checks the DEFAULTS keys under `under` (e.g. "influence." or "influence_")."""
  key = under + "seed_text"
  text = checks.get(config, key)
  checks.check(isinstance(text, str) and len(text.split()) >= 2, key, text, "needs 2+ words")
  checks.check_floats(config, under + "temperatures", lo=0, lo_open=True)
  checks.check_int(config, under + "num_contexts", lo=1)
  checks.check_int(config, under + "num_values", lo=2)
  checks.check_int(config, under + "num_changed", lo=-1)
  checks.check_float(config, under + "epsilon", 0, 1, lo_open=True, hi_open=True)
  checks.check_int(config, under + "seed", lo=0)
  checks.check_int(config, under + "batch_size", lo=1)


def from_config(model: MaskedLM, tokenizer, config, under: str = "influence.", **kw) -> dict:
  """`measure` with the DEFAULTS keys read under `under` (kw: `prefix` text, candidates)."""
  args = config_args(config, under, DEFAULTS)
  args["num_changed"] = None if args["num_changed"] < 0 else args["num_changed"]
  return measure(model, tokenizer, **args, **kw)


def _fmt_t(x) -> str:
  return "none on the grid" if x is None else f"{x:.3g}"


def _bound(steps) -> float | str:
  """A t_mix bound as the table shows it: infinite where α̂ >= 1 (Theorem 5 gives none)."""
  return steps if math.isfinite(float(steps)) else "∞ (α̂ >= 1: no bound)"


def _temperature_axis(ax, temps) -> None:
  """A log T axis ticked at the grid's temperatures only (log axes label their minor ticks
  over short ranges, and those labels collide)."""
  ax.set_xscale("log")
  ax.minorticks_off()
  shown = list(temps) if len(temps) <= 10 else list(temps)[:: -(-len(temps) // 10)]
  ax.set_xticks(shown, [f"{T:g}" for T in shown])
  ax.set_xlabel("temperature T")


def curve_figure(results: dict):
  """α̂ and its ω bound against T (left); Theorem 5's t_mix bound against T (right), the
  temperatures where α̂ >= 1 (no bound: infinite) marked by triangles at the top edge."""
  plt = pyplot()
  temps = results["temperatures"]
  fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10.5, 3.8))
  ax0.plot(temps, results["alpha_hat_max"], "o-", label="α̂ (max over contexts)")
  ax0.plot(temps, results["alpha_hat_mean"], "s--", label="α̂ (mean over contexts)")
  ax0.plot(temps, results["omega_bound"], "^:", ms=4, label="max_i Σ_j ω_ij / (4T)")
  ax0.set_yscale("log")
  ax0.axhline(1, color="k", lw=0.6)
  _temperature_axis(ax0, temps)
  ax0.set_ylabel("α̂ (sum of TV distances)")
  ax0.set_title("Influence α̂ = max_i Σ_j α_ij against T (< 1: contraction)", fontsize=9)
  ax0.legend(fontsize=7)
  bound = [float(m) for m in results["tmix_bound"]]
  finite = [(T, m) for T, m in zip(temps, bound) if math.isfinite(m)]
  infinite = [T for T, m in zip(temps, bound) if not math.isfinite(m)]
  if finite:
    ax1.plot(*zip(*finite), "o-", label="bound (α̂ < 1)")
    ax1.set_yscale("log")
    lo, hi = min(m for _, m in finite), max(m for _, m in finite)
    ax1.set_ylim(lo / 1.5, hi * (8 if infinite else 1.5))  # room above for the ∞ marks
  else:
    ax1.set_ylim(0, 1)
    ax1.set_yticks([])
  if infinite:
    top = ax1.get_xaxis_transform()  # x in data, y in axes coordinates
    ax1.plot(
      infinite,
      [0.96] * len(infinite),
      "^",
      color="tab:red",
      ms=8,
      transform=top,
      label="∞: α̂ >= 1, no bound",
    )
    ax1.text(
      0.5,
      0.5 if not finite else 0.85,
      f"no finite bound at T = {', '.join(f'{T:g}' for T in infinite)} (α̂ >= 1)",
      transform=ax1.transAxes,
      ha="center",
      va="center",
      fontsize=8,
      color="tab:red",
    )
  _temperature_axis(ax1, temps)
  if infinite:
    ax1.set_xlim(*ax0.get_xlim())
  ax1.set_ylabel("steps")
  ax1.set_title(f"Theorem 5: t_mix({results['epsilon']:g}) <= ⌈n/(1-α̂) log(n/ε)⌉", fontsize=9)
  ax1.legend(fontsize=7, loc="lower left")
  fig.tight_layout()
  return fig


def section(results: dict, run: RunDir) -> str:
  """The report section of protocol 2: the α̂ table, the temperatures, the curve and the
  heatmap figures."""
  plt = pyplot()

  temps = results["temperatures"]
  n = results["n"]
  ct = results["contraction_temperature"]
  header = ["T", "α̂ (max over contexts)", "α̂ (mean)", "max_i Σ_j ω_ij/(4T)", "t_mix bound"]
  rows = [
    [
      T,
      results["alpha_hat_max"][t],
      results["alpha_hat_mean"][t],
      results["omega_bound"][t],
      _bound(results["tmix_bound"][t]),
    ]
    for t, T in enumerate(temps)
  ]
  slack = max(results["lemma6_slack"])
  run.savefig(curve_figure(results), "influence_vs_T.png")

  t_show = int(np.argmin(np.abs(np.log(temps) - 0.0)))  # the grid T nearest 1
  A = np.asarray(results["alpha_max"])[t_show]
  fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
  labels = results["tokens"]
  for ax, M, title, unit in (
    (axes[0], A, f"α_ij at T = {temps[t_show]:g}", "α_ij (total variation, 0 to 1)"),
    (
      axes[1],
      np.asarray(results["omega"]),
      "score oscillation ω_ij",
      "ω_ij (score difference, nats at T = 1)",
    ),
  ):
    im = ax.imshow(M, cmap="viridis")
    ax.set_xticks(range(n), labels, rotation=90, fontsize=7)
    ax.set_yticks(range(n), labels, fontsize=7)
    ax.set_xlabel("j (varied)")
    ax.set_ylabel("i (resampled)")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, shrink=0.8, label=unit)
  fig.tight_layout()
  run.savefig(fig, "influence_heatmap.png")
  return (
    "## Influence and contraction (Sections 5.1-5.2)\n\n"
    f"Seed {results['seed_text']!r} (n = {n}); {results['num_contexts']} base contexts (the "
    f"seed and copies with {results['num_changed']} sites changed); at each j the seed's token "
    f"and the model's top {results['num_values'] - 1} others. α_ij = max TV over value pairs, "
    "then max (or mean) over contexts: a lower bound on the sup.\n\n"
    + markdown_table(header, rows, digits=3)
    + f"\n- Measured contraction (α̂ < 1 from this grid T up): {_fmt_t(ct['grid'])}"
    f" (interpolated crossing {_fmt_t(ct['interpolated'])}).\n"
    f"- Corollary 7's sufficient temperature max_i Σ_j ω_ij / 4 = "
    f"{results['sufficient_temperature']:.3g}.\n"
    f"- Lemma 6 check: max over all (context, i, j, value pair, T) of TV - ω/(4T) = "
    f"{slack:.3g} (<= 0 as the lemma says).\n"
    f"- Largest single α_ij per T: {', '.join(f'{a:.3g}' for a in results['max_pair_alpha'])};"
    f" largest ω_ij = {results['max_pair_omega']:.3g}.\n\n"
    "![influence vs T](influence_vs_T.png)\n\n![influence heatmap](influence_heatmap.png)\n"
  )
