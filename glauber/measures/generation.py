"""What a generated sequence looks like: the measures the unmasking job compares samplers by.

pseudo-log-likelihood   PLL(x) = Σ_i log p_i(x_i | x_-i), untempered, over the candidates
                        (`scoring.site_scores`: n one-mask rows per sequence); reported per site.
perfect trap            every token its site's argmax (Δ_min > 0, `measures.margins`' sense).
repetition              1 - (distinct tokens) / n within a sequence, averaged.
distinct-n              distinct n-grams / all n-grams over every sequence of a sampler (Li et
                        al. 2016), n = 1, 2.
prompt drift            1 - cos(E(output), E(prompt)), E the unit sentence embedding
                        (`semantic_drift.embed_texts`).
trap rate               the traps stage's rule at the output (`measures.traps`): Glauber chains
                        from it for `window` steps at the stage's temperature, and the output is
                        trapped when the mean cosine drift of the window's recorded states from
                        it, D_0, is below the threshold.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import numpy as np

from glauber import chains, scoring
from glauber.chains import Spec
from glauber.measures import semantic_drift, traps
from glauber.oracle import MaskedLM

Decode = Callable[[np.ndarray], list[str]]


def site_logprobs(model: MaskedLM, spec: Spec, tokens_BL, batch_rows: int = 2048) -> np.ndarray:
  """logp_BNC: log p_i(. | x_-i) of every free site, untempered, over the candidates."""
  tokens_BL = scoring.check_tokens(spec, tokens_BL)
  fn = jax.jit(scoring.site_scores)
  parts = scoring.batched(lambda t: fn(model, spec, t), tokens_BL, spec.num_sites, batch_rows)
  return np.concatenate(parts)


def likelihood(spec: Spec, tokens_BL, logp_BNC: np.ndarray) -> dict:
  """pll_B (per site) and perfect_B (every token its site's argmax) of each sequence."""
  idx_BN = np.asarray(spec.index_V)[np.asarray(spec.free(np.asarray(tokens_BL)))]
  own_BN = np.take_along_axis(logp_BNC, np.maximum(idx_BN, 0)[..., None], -1)[..., 0]
  own_BN = np.where(idx_BN >= 0, own_BN, -np.inf)
  return {"pll_B": own_BN.mean(-1), "perfect_B": (own_BN >= logp_BNC.max(-1)).all(-1)}


def repetition(tokens_BN) -> np.ndarray:
  """1 - distinct tokens / n of each sequence."""
  t = np.asarray(tokens_BN)
  return np.array([1.0 - len(set(row.tolist())) / len(row) for row in t])


def distinct_n(tokens_BN, n: int) -> float:
  """Distinct n-grams over all n-grams of every sequence (1.0 when there are none)."""
  grams = [
    tuple(row[i : i + n]) for row in np.asarray(tokens_BN).tolist() for i in range(len(row) - n + 1)
  ]
  return len(set(grams)) / len(grams) if grams else 1.0


def prompt_drift(texts: Sequence[str], prompt: str, embedder) -> np.ndarray:
  """1 - cos(E(text), E(prompt)) of each text."""
  e_XD = semantic_drift.embed_texts(*embedder, [prompt, *texts])
  return 1.0 - e_XD[1:] @ e_XD[0]


def trapped(
  key: jax.Array,
  model: MaskedLM,
  spec: Spec,
  tokens_BL,
  decode: Decode,
  embedder,
  window: int,
  record_every: int,
  threshold: float,
) -> np.ndarray:
  """trapped_B: the traps stage's drift rule at each sequence (module docstring); spec carries
  the stage's temperature."""
  R = window // record_every
  _, rec = chains.run(key, model, spec, chains.init_state(tokens_BL), R, record_every)
  tokens_RBN = np.concatenate([np.asarray(spec.free(tokens_BL))[None], np.asarray(rec.tokens_RBN)])
  e_RBD = semantic_drift.embed_states(tokens_RBN, decode, *embedder)
  return traps.window_drift(e_RBD, R)[0] < threshold


def summary(spec: Spec, tokens_BL, logp_BNC: np.ndarray) -> dict:
  """Every per-sampler number that needs no embedding."""
  free_BN = np.asarray(spec.free(np.asarray(tokens_BL)))
  lik = likelihood(spec, tokens_BL, logp_BNC)
  return {
    "pll_per_site": float(lik["pll_B"].mean()),
    "perfect_traps": float(lik["perfect_B"].mean()),
    "repetition": float(repetition(free_BN).mean()),
    "distinct_1": distinct_n(free_BN, 1),
    "distinct_2": distinct_n(free_BN, 2),
  }
