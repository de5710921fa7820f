"""Score margins of a state and Theorem 8's one-step exit bound (paper A, Section 5.3).

For a state x of n free sites and the scores s_i(a; x_-i) (the MLM logits at site i with x_i
masked, over the candidate vocabulary of size |V| = C):

  g_i(x) = s_i(x_i; x_-i) - max_{a != x_i} s_i(a; x_-i)      the score gap of site i
  Δ_min(x) = min_i g_i(x),  Δ_mean(x) = mean_i g_i(x)

x is a *perfect* trap state when every token is its site's argmax (Δ_min > 0), else
*approximate* (some g_i <= 0). A token outside the candidates has g_i = -inf (the chain leaves
it at the first visit). Theorem 8: on a basin B with uniform margin Δ over its m exit-capable
sites, the one-step exit probability from any x in B is at most

  (m / n) (|V| - 1) exp(-Δ / T),

so the expected escape time is at least its inverse (the "predicted escape time"). For the
one-state basin {x} every site can exit (m = n) and Δ = Δ_min(x); the exact one-step exit
probability of the engine's kernel, (1/n) Σ_i (1 - p_i^T(x_i | x_-i)), is computed beside it.

`glauber.scoring.site_scores` (all n single-mask conditionals of B states in ONE batched forward) is the
scoring primitive `influence` and `drift` share: log p_i^1 over the candidates, i.e. the scores
up to a per-site constant, which tempering (`gmlm.core.draws.temper`) and every difference of
scores ignore.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from glauber import chains
from glauber.chains import Spec
from glauber.layout import Layout
from glauber.measures.common import config_args, pyplot
from glauber.oracle import MaskedLM
from glauber.scoring import (
  as_spec,
  batched,
  check_temperatures,
  check_tokens,
  site_scores,
)
from gmlm import checks
from gmlm.checks import UserError
from gmlm.core import draws
from gmlm.runs import RunDir, markdown_table


@struct.dataclass
class Margins:
  """The score margins of B states (T-independent) and, when temperatures were given, the
  exact one-step exit probability of each state at each temperature."""

  gaps_BN: jax.Array  # g_i(x)
  delta_min_B: jax.Array
  delta_mean_B: jax.Array
  perfect_B: jax.Array  # bool: every token its site's argmax (Δ_min > 0)
  exit_prob_BT: jax.Array | None = None  # (1/n) Σ_i (1 - p_i^T(x_i | x_-i))
  num_candidates: int = struct.field(pytree_node=False, default=0)  # |V| of the bound


@jax.jit
def _gaps(spec: Spec, tokens_BL: jax.Array, logp_BNC: jax.Array) -> jax.Array:
  """g_BN from the site scores (-inf where x_i is not a candidate)."""
  idx_BN = spec.index_V[spec.free(tokens_BL)]
  own_BN = chains.current_logprobs(spec, tokens_BL, logp_BNC)
  is_own_BNC = jnp.arange(logp_BNC.shape[-1]) == idx_BN[..., None]
  other_BN = jnp.max(jnp.where(is_own_BNC, -jnp.inf, logp_BNC), axis=-1)
  return own_BN - other_BN


def _exit_probs(
  spec: Spec, tokens_BL: jax.Array, logp_BNC: jax.Array, temperatures: tuple[float, ...]
) -> jax.Array:
  """exit_BT = (1/n) Σ_i (1 - p_i^T(x_i | x_-i)) under the spec's truncation."""
  cols = []
  for T in temperatures:
    logp_T_BNC = draws.temper(logp_BNC, T, spec.top_k, spec.top_p)
    stay_BN = jnp.exp(chains.current_logprobs(spec, tokens_BL, logp_T_BNC))
    cols.append(jnp.mean(1.0 - stay_BN, axis=-1))
  return jnp.stack(cols, axis=-1)


@jax.jit(static_argnames=("temperatures",))
def _margins_core(model, spec: Spec, tokens_BL, temperatures: tuple[float, ...]):
  logp_BNC = site_scores(model, spec, tokens_BL)
  gaps_BN = _gaps(spec, tokens_BL, logp_BNC)
  exit_BT = _exit_probs(spec, tokens_BL, logp_BNC, temperatures) if temperatures else None
  return gaps_BN, exit_BT


def margins(
  mlm: MaskedLM,
  spec_or_layout: Spec | Layout,
  tokens_BL,
  *,
  candidates=None,
  temperatures: Sequence[float] = (),
  batch_size: int = 1024,
) -> Margins:
  """The score margins of B states (full sequences tokens_BL, [CLS] prefix x [SEP]); each
  state's n sites are scored in one batched forward (chunks of ~batch_size rows).
  temperatures: also the exact one-step exit probability at each (the spec's top-k / top-p
  apply; none when given a Layout)."""
  spec = as_spec(spec_or_layout, mlm.config.vocab_size, candidates)
  tokens_BL = check_tokens(spec, tokens_BL)
  temps = check_temperatures(temperatures)
  outs = batched(
    lambda t: _margins_core(mlm, spec, t, temps), tokens_BL, spec.num_sites, batch_size
  )
  gaps_BN = np.concatenate([o[0] for o in outs])
  exit_BT = np.concatenate([o[1] for o in outs]) if temps else None
  return Margins(
    gaps_BN=gaps_BN,
    delta_min_B=gaps_BN.min(-1),
    delta_mean_B=gaps_BN.mean(-1),
    perfect_B=gaps_BN.min(-1) > 0,
    exit_prob_BT=exit_BT,
    num_candidates=int(spec.candidates_C.shape[0]),
  )


def exit_bound(delta, temperature, num_sites: int, num_candidates: int, num_exit_sites=None):
  """Theorem 8: (m/n) (|V| - 1) exp(-Δ/T) (m = num_exit_sites, default n); an array when Δ or
  T are. Meaningful (below 1) only for Δ > T log((m/n)(|V| - 1))."""
  T = np.asarray(temperature, np.float64)
  if np.any(~(T > 0)) or np.any(~np.isfinite(T)):
    raise UserError(f"temperature T={temperature!r}: must be a finite number > 0")
  if num_candidates < 2:
    raise UserError(f"|V| = {num_candidates} candidates: need at least 2")
  m = num_sites if num_exit_sites is None else num_exit_sites
  if not 1 <= m <= num_sites:
    raise UserError(f"m = {m} exit-capable sites: must be in [1, n = {num_sites}]")
  return (m / num_sites) * (num_candidates - 1) * np.exp(-np.asarray(delta, np.float64) / T)


def escape_time(bound):
  """The predicted escape time 1 / bound (steps): a lower bound on the mean escape time where
  the bound is below 1."""
  return 1.0 / np.asarray(bound, np.float64)


# --- protocol 3: measure and report -------------------------------------------------------------


def measure(
  model: MaskedLM,
  tokenizer,
  texts: Sequence[str],
  temperatures: Sequence[float],
  *,
  prefix: str = "",
  candidates=None,
  batch_size: int = 1024,
) -> dict:
  """Margins, Theorem 8's bound, the predicted and the exact escape time of each text taken
  as a state (its own n = its number of tokens, after `prefix`)."""
  from glauber.layout import max_sequence_length

  temps = check_temperatures(temperatures)
  if candidates is None:
    candidates = chains.candidate_ids(tokenizer, model.config.vocab_size)
  rows = []
  for text in texts:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
      raise UserError(f"margin text {text!r} has no tokens")
    lay = Layout.from_tokenizer(tokenizer, len(ids), prefix, max_sequence_length(model))
    spec = chains.make_spec(candidates, model.config.vocab_size, lay, 1.0)
    m = margins(
      model, spec, lay.sequences(np.asarray([ids])), temperatures=temps, batch_size=batch_size
    )
    d_min, d_mean = float(m.delta_min_B[0]), float(m.delta_mean_B[0])
    bound_T = exit_bound(d_min, temps, len(ids), m.num_candidates)
    rows.append(
      {
        "text": tokenizer.decode(ids),
        "n": len(ids),
        "delta_min": d_min,
        "delta_mean": d_mean,
        "argmax_sites": int((m.gaps_BN[0] > 0).sum()),
        "type": "perfect" if bool(m.perfect_B[0]) else "approximate",
        "gaps": [float(g) for g in m.gaps_BN[0]],
        "exit_bound": [float(b) for b in bound_T],
        "predicted_escape": [float(t) for t in escape_time(bound_T)],
        "exit_prob": [float(p) for p in m.exit_prob_BT[0]],
        "mean_holding_time": [float(t) for t in 1.0 / m.exit_prob_BT[0]],
      }
    )
  return {"temperatures": list(temps), "num_candidates": int(len(candidates)), "states": rows}


# The job's config keys (under a prefix, e.g. config.margins.*) and their defaults.
DEFAULTS = {
  "texts": (
    "...............",  # the paper's longest trap (Appendix A.1)
    "it has been used as the theme song for jesus christ superstar",
  ),
  "temperatures": (0.5, 1.0),
  "batch_size": 1024,
}


def validate(config, under: str = "margins.") -> None:
  """Checks the DEFAULTS keys under `under` (e.g. "margins." or "margins_")."""
  key = under + "texts"
  texts = checks.get(config, key)
  ok = isinstance(texts, (list, tuple)) and texts and all(isinstance(t, str) for t in texts)
  checks.check(bool(ok) and all(t.strip() for t in texts), key, texts, "non-empty texts")
  checks.check_floats(config, under + "temperatures", lo=0, lo_open=True)
  checks.check_int(config, under + "batch_size", lo=1)


def from_config(model: MaskedLM, tokenizer, config, under: str = "margins.", **kw) -> dict:
  """`measure` with the DEFAULTS keys read under `under` (kw: `prefix` text, candidates)."""
  return measure(model, tokenizer, **config_args(config, under, DEFAULTS), **kw)


def _cell(text: str) -> str:
  """A text as a Markdown table cell, whole (code span; `|` escaped)."""
  return "`" + text.replace("`", "'").replace("|", "\\|") + "`"


def section(results: dict, run: RunDir) -> str:
  """The report section of protocol 3 (a table per temperature) and its figure."""
  plt = pyplot()

  temps, states = results["temperatures"], results["states"]
  out = [
    "## Score margins (Section 5.3)\n",
    "Each text taken as a state: g_i = s_i(x_i) - max_{a != x_i} s_i(a), Δ_min, Δ_mean; "
    "perfect = every token its site's argmax. Theorem 8's one-step exit bound for the basin "
    f"{{x}} is (m/n)(|V|-1) e^(-Δ_min/T) with m = n, |V| = {results['num_candidates']}; "
    "predicted escape = 1/bound; exact = the engine's one-step exit probability "
    "(1/n) Σ_i (1 - p_i^T(x_i)) and its mean holding time 1/exit.\n",
  ]
  header = ["No.", "text", "n", "Δ_mean", "Δ_min", "argmax sites", "type"]
  rows = [
    [i, _cell(s["text"]), s["n"], s["delta_mean"], s["delta_min"], s["argmax_sites"], s["type"]]
    for i, s in enumerate(states, 1)
  ]
  out.append(markdown_table(header, rows, digits=3))
  header = ["No.", "T", "exit bound", "predicted escape", "exact exit prob", "mean holding"]
  rows = [
    [
      i,
      T,
      s["exit_bound"][t],
      s["predicted_escape"][t] if float(s["exit_bound"][t]) < 1 else "- (bound >= 1)",
      s["exit_prob"][t],
      s["mean_holding_time"][t],
    ]
    for i, s in enumerate(states, 1)
    for t, T in enumerate(temps)
  ]
  out.append("\nPer temperature (No.: the text of that row above):\n")
  out.append(markdown_table(header, rows, digits=3))
  fig, ax = plt.subplots(figsize=(7, 3.5))
  for i, s in enumerate(states, 1):
    gaps = [float(g) for g in s["gaps"]]  # read back from JSON: ±inf is "inf" / "-inf"
    label = f"No. {i} (n = {s['n']}, Δ_min = {float(s['delta_min']):.3g}, {s['type']})"
    ax.plot(range(1, s["n"] + 1), gaps, marker="o", ms=3, label=label)
  ax.axhline(0, color="k", lw=0.6)
  ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
  ax.set_xlabel("site i")
  ax.set_ylabel("score gap g_i (nats at T = 1)")
  ax.set_title("Per-site score gaps (> 0: the token is its site's argmax)")
  ax.legend(fontsize=7, title="state (the report's No.)", title_fontsize=7)
  run.savefig(fig, "margins.png")
  out.append("\n![score gaps](margins.png)\n")
  return "\n".join(out)
