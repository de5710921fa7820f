"""Glauber dynamics on masked LMs, and its measurements.

  model, tokenizer = load_mlm("default")                          # oracle.py
  lay = Layout.from_tokenizer(tokenizer, n, "albert einstein said that")   # layout.py
  spec = make_spec(candidate_ids(tokenizer), model.config.vocab_size, lay, temperature)
  state, records = chains.run(key, model, spec, init_state(tokens_BL), R, record_every)
  state, records = rejection_free.run(key, model, spec, state, R, record_every)  # same law
  state, records = unmasking.run(key, model, spec, unmasking.all_masked(spec, B), Sampler(...))

The package has three layers; a layer imports only the layers above it in this list
(tests/test_layering.py checks it):

- the engine, at the top: `layout` (where the free sites are), `oracle` (the MaskedLM protocol,
  loading), `init_states` (starting sequences), `chains` (Spec, the plain / sweep / block /
  parallel kernels, Records), `rejection_free` (the exact jump-chain twin of plain Glauber, with a
  memo), `coupling` (maximally coupled pairs), `metropolis` (Metropolis-Hastings with a known
  stationary law), `recording` (trajectory chunks and checkpoints), `scoring` (every free site's
  conditional in one forward pass, shared by the measurements), `unmasking` (ancestral and
  parallel unmasking, remasking, Glauber after: the masked-diffusion samplers);
- `measures/`: paper A's measurements, a module per protocol (`rectangle`, `influence`,
  `margins`, `drift`, `exact`, `traps`, `semantic_drift`, `topics`, `phase_diagram`, `basins`,
  `unmasking_laws`: the samplers' exact output laws, `generation`: what generated text looks
  like);
- `stages/` (the resumable stage runner; `stages.theory`: protocols 1-4, `stages.dynamics`:
  traps, semantic drift, coupling, basins, prefix attractors) and `mlm/` (building and scoring
  the default English MLM), used by `jobs/` (one per config family).

Shape letters (suffixes of array names, `tokens_BL`):
  B  chains (in MLM training and scoring: the sequences of a batch)
  L  tokens of a sequence: [CLS] prefix x_1..x_n [SEP]
  N  free sites (n)
  K  sites masked at once: the block size k (in MLM training the k of k-pseudolikelihood)
  C  candidate tokens a site may take
  V  vocabulary
  R  records (snapshots every record_every steps)
  S  memo slots (recent states a rejection-free chain remembers)
  Z  states of an enumerated restricted chain, c^n of them (measures/exact.py)
  W  its states with masks, (c+1)^n of them (measures/unmasking_laws.py)
  Q  sites an unmasking step runs the MLM head at (unmasking.py)
  A  sites an unmasking step draws at (reveals)
  H  the c^k token configurations of k revealed sites (measures/unmasking_laws.py)
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
  "chains",
  "coupling",
  "init_states",
  "layout",
  "measures",
  "metropolis",
  "oracle",
  "recording",
  "rejection_free",
  "scoring",
  "stages",
  "unmasking",
)

__all__ = sorted([*_API, *_MODULES])


def __getattr__(name: str):
  if name in _API:
    return getattr(importlib.import_module(_API[name]), name)
  if name in _MODULES:
    return importlib.import_module(f"glauber.{name}")
  raise AttributeError(f"module 'glauber' has no attribute {name!r}")
