"""Scoring primitives the engine and every measurement share: the conditionals of every free site
of a batch of states in one forward pass, and the checks and batching around them.

`site_scores` (all n single-mask conditionals of B states in ONE batched forward) gives log p_i^1
over the candidates, i.e. the scores up to a per-site constant, which tempering
(`gmlm.core.draws.temper`) and every difference of scores ignore; `glauber.measures.margins`,
`.influence` and `.drift` are built on it.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from glauber import chains
from glauber.chains import Spec
from glauber.layout import Layout
from glauber.oracle import MaskedLM
from gmlm.checks import UserError


def scoring_spec(spec: Spec) -> Spec:
  """The spec whose tempered log-probs are log-softmax of the raw scores (T = 1, no top-k /
  top-p): differences of these are differences of scores."""
  return spec.replace(temperature=1.0, top_k=0, top_p=1.0)


def site_scores(model: MaskedLM, spec: Spec, tokens_BL: jax.Array) -> jax.Array:
  """logp_BNC = s_i(a; x_-i) - logsumexp_a s_i: every free site's conditional of every state,
  from B * n one-mask rows in one forward pass."""
  return chains.all_site_logprobs(model, scoring_spec(spec), tokens_BL)


def check_temperatures(temperatures: Sequence[float]) -> tuple[float, ...]:
  """Finite temperatures T > 0, else a UserError naming the value."""
  out = []
  for T in temperatures:
    if not (isinstance(T, (int, float, np.floating)) and math.isfinite(T) and T > 0):
      raise UserError(f"temperature T={T!r}: must be a finite number > 0")
    out.append(float(T))
  return tuple(out)


def check_tokens(spec: Spec, tokens_BL) -> jax.Array:
  tokens_BL = jnp.asarray(tokens_BL, jnp.int32)
  L = spec.layout.length
  if tokens_BL.ndim != 2 or tokens_BL.shape[1] != L:
    raise UserError(
      f"states of shape {tuple(tokens_BL.shape)}: need [B, L = {L}] ([CLS] prefix x_1..x_n "
      f"[SEP] with n = {spec.num_sites})"
    )
  return tokens_BL


def as_spec(spec_or_layout: Spec | Layout, vocab_size: int, candidates=None) -> Spec:
  """A Spec from a Spec, or from a Layout and candidates (default: every id but the layout's
  special ones)."""
  if isinstance(spec_or_layout, Spec):
    return spec_or_layout
  lay = spec_or_layout
  if candidates is None:
    specials = (lay.cls_id, lay.sep_id, lay.mask_id)
    candidates = chains.candidate_ids(vocab_size=vocab_size, exclude_ids=specials)
  return chains.make_spec(candidates, vocab_size, lay, 1.0)


def batched(fn: Callable, tokens_BL: jax.Array, rows_per_state: int, batch_size: int) -> list:
  """fn over chunks of states of ~batch_size forward rows each (the last chunk padded with
  copies of the first state so every call has one shape), outputs cut back; returns the list of
  per-chunk outputs (pytrees with a leading state axis)."""
  B = tokens_BL.shape[0]
  per = max(1, batch_size // max(1, rows_per_state))
  per = min(per, B)
  outs = []
  for start in range(0, B, per):
    chunk = tokens_BL[start : start + per]
    short = per - chunk.shape[0]
    if short:
      chunk = jnp.concatenate([chunk, jnp.repeat(tokens_BL[:1], short, axis=0)])
    out = fn(chunk)
    outs.append(jax.tree.map(lambda x: np.asarray(x)[: per - short], out))
  return outs
