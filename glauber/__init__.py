"""Glauber dynamics on masked LMs, and its measurements.

  model, tokenizer = load_mlm("default")                          # oracle.py
  lay = Layout.from_tokenizer(tokenizer, n, "albert einstein said that")   # layout.py
  spec = make_spec(candidate_ids(tokenizer), model.config.vocab_size, lay, temperature)
  state, records = chains.run(key, model, spec, init_state(tokens_BL), R, record_every)
  state, records = rejection_free.run(key, model, spec, state, R, record_every)  # same law

Modules: `layout` (where the free sites are), `oracle` (the MaskedLM protocol, loading),
`init_states` (starting sequences), `chains` (Spec, the plain / sweep / block / parallel
kernels, Records), `rejection_free` (the exact jump-chain twin of plain Glauber, with a memo),
`coupling` (maximally coupled pairs), `recording` (trajectory chunks and checkpoints),
`mlm/` (building and scoring the default English MLM), `jobs/` (one per config family).
Paper A's measurements, a module per protocol (each with `measure` -> JSON-able results and
`section` -> a report section): `rectangle` (the rectangle test of incompatibility),
`influence` (α_ij, ω_ij and the contraction temperature), `margins` (score margins and
Theorem 8's exit bound), `drift` (the drift certificate), `exact` (the restricted chain
enumerated exactly), `metropolis` (Metropolis-Hastings with a known stationary law), `traps`,
`semantic_drift`, `topics`, `phase_diagram` (coupling over a (T, n) grid) and `basins`.
Staged jobs: `stages` (Stage, Context, the resumable stage runner), `theory_stages` (protocols
1-4 as stages), `dynamics_stages` (traps, semantic drift, coupling, basins, prefix attractors).

Shape letters (suffixes of array names, `tokens_BL`):
  B  chains (in MLM training and scoring: the sequences of a batch)
  L  tokens of a sequence: [CLS] prefix x_1..x_n [SEP]
  N  free sites (n)
  K  sites masked at once: the block size k (in MLM training the k of k-pseudolikelihood)
  C  candidate tokens a site may take
  V  vocabulary
  R  records (snapshots every record_every steps)
  S  memo slots (recent states a rejection-free chain remembers)
  Z  states of an enumerated restricted chain, c^n of them (exact.py)
  D  hidden / embedding width
  T  temperatures of a grid
  G  groups (a context, a site i, a site j) of the influence protocol
  M  values a site j takes in the influence protocol
  P  pairs of those values
  U  distinct recorded states
  Y  topic labels
  X  any other axis, named where it is used (e.g. the B * n one-mask rows)
  1, 5  an axis of that size
"""

from __future__ import annotations

import importlib

# name -> module; imported on first use, so `import glauber` (and the CLI's --help) stays light.
_API = {
  "Layout": "glauber.layout",
  "MaskedLM": "glauber.oracle",
  "load_mlm": "glauber.oracle",
  "Spec": "glauber.chains",
  "ChainState": "glauber.chains",
  "Records": "glauber.chains",
  "make_spec": "glauber.chains",
  "candidate_ids": "glauber.chains",
  "init_state": "glauber.chains",
}
_MODULES = (
  "basins",
  "chains",
  "coupling",
  "drift",
  "dynamics_stages",
  "exact",
  "influence",
  "init_states",
  "layout",
  "margins",
  "metropolis",
  "oracle",
  "phase_diagram",
  "recording",
  "rectangle",
  "rejection_free",
  "semantic_drift",
  "stages",
  "theory_stages",
  "topics",
  "traps",
)

__all__ = sorted([*_API, *_MODULES])


def __getattr__(name: str):
  if name in _API:
    return getattr(importlib.import_module(_API[name]), name)
  if name in _MODULES:
    return importlib.import_module(f"glauber.{name}")
  raise AttributeError(f"module 'glauber' has no attribute {name!r}")
