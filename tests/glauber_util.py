"""Shared fixtures of the Glauber tests: a tiny random BERT over 6 candidate tokens and the
exact Glauber transition matrix of its n = 4 free sites, enumerated through masked_logits."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from glauber import chains
from glauber.layout import Layout
from gmlm import nn as gm

PAD, CLS, SEP, MASK, UNK = 0, 1, 2, 3, 4
V, C, N = 11, 6, 4  # vocabulary, candidates (ids 5..10), free sites
PREFIX = [7]  # one frozen prefix token
OFFSET = 1 + len(PREFIX)
CANDIDATES = np.arange(5, 5 + C)
LAYOUT = Layout(tuple(PREFIX), N, CLS, SEP, MASK)


def tiny_mlm(seed: int = 0, std: float = 0.5):
  """A 2-layer BERT with every weight drawn at scale `std` (LayerNorm scales near 1), so its
  conditionals are far from uniform."""
  hf = {
    "architectures": ["BertForMaskedLM"],
    "vocab_size": V,
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 32,
    "max_position_embeddings": 16,
    "hidden_act": "gelu",
  }
  model = gm.from_config(hf, rngs=nnx.Rngs(seed))
  graphdef, state = nnx.split(model)
  leaves, treedef = jax.tree_util.tree_flatten_with_path(state)
  keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
  new = []
  for (path, x), k in zip(leaves, keys):
    z = jax.random.normal(k, x.shape, x.dtype)
    new.append(1 + 0.2 * z if "scale" in jax.tree_util.keystr(path) else std * z)
  return nnx.merge(graphdef, jax.tree_util.tree_unflatten(treedef, new))


def spec(temperature: float = 1.0, **kw) -> chains.Spec:
  ids = chains.candidate_ids(vocab_size=V, exclude_ids=[PAD, CLS, SEP, MASK, UNK])
  assert (ids == CANDIDATES).all()
  return chains.make_spec(ids, V, LAYOUT, temperature, **kw)


ALL_STATES = np.array(list(itertools.product(range(C), repeat=N)))  # candidate indices
WEIGHTS = C ** np.arange(N)[::-1]


def sequences(states_SN: np.ndarray) -> np.ndarray:
  """Full token sequences [CLS] prefix x [SEP] of states given as candidate indices."""
  return LAYOUT.sequences(CANDIDATES[states_SN])


def state_index(free_tokens_XN) -> np.ndarray:
  return (np.asarray(free_tokens_XN) - CANDIDATES[0]) @ WEIGHTS


def exact_conditionals(model, temperature: float = 1.0) -> np.ndarray:
  """p_i^T(a | x_-i) for every state and site, [S, N, C], straight from gm.masked_logits."""
  tokens_SL = sequences(ALL_STATES)
  out = np.zeros((len(ALL_STATES), N, C))
  f = jax.jit(gm.masked_logits)
  for i in range(N):
    masked = tokens_SL.copy()
    masked[:, OFFSET + i] = MASK
    pos = np.full((len(masked), 1), OFFSET + i, np.int32)
    logits = np.asarray(f(model, jnp.asarray(masked), jnp.asarray(pos)), np.float64)[:, 0]
    z = logits[:, CANDIDATES] / temperature
    z -= z.max(-1, keepdims=True)
    out[:, i] = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
  return out


def transition_matrix(cond_SNC: np.ndarray) -> np.ndarray:
  """P_T(x, y) = (1/n) Σ_i 1[y_-i = x_-i] p_i^T(y_i | x_-i)."""
  S = cond_SNC.shape[0]
  P = np.zeros((S, S))
  idx = ALL_STATES @ WEIGHTS
  for i in range(N):
    for a in range(C):
      y = ALL_STATES.copy()
      y[:, i] = a
      P[idx, y @ WEIGHTS] += cond_SNC[:, i, a] / N
  return P


def stationary(P: np.ndarray) -> np.ndarray:
  """The solution of pi P = pi, sum(pi) = 1."""
  A = P.T - np.eye(len(P))
  A[-1] = 1.0
  b = np.zeros(len(P))
  b[-1] = 1.0
  return np.linalg.solve(A, b)


def tv(p, q) -> float:
  return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


def histogram(free_tokens_XN) -> np.ndarray:
  return np.bincount(state_index(free_tokens_XN), minlength=C**N) / len(free_tokens_XN)


def device_run(mesh=None) -> dict[str, np.ndarray]:
  """Plain and rejection-free chains of the tiny model, sharded over `mesh` when given."""
  from glauber import rejection_free

  model = tiny_mlm()
  x0 = chains.init_state(sequences(np.random.default_rng(2).integers(0, C, (16, N))))
  a, ra = chains.run(jax.random.key(10), model, spec(0.8), x0, 3, 4, mesh=mesh)
  b, rb = rejection_free.run(jax.random.key(11), model, spec(0.3), x0, 3, 4, mesh=mesh)
  if mesh is not None:
    assert len(a.tokens_BL.sharding.device_set) == mesh.size
  return dict(
    plain=np.asarray(ra.tokens_RBN),
    rejection_free=np.asarray(rb.tokens_RBN),
    steps=np.asarray(b.steps_B),
    t=np.asarray(b.t),
  )


def unmasking_config(splade_dir, minilm_dir):
  """configs/glauber_unmasking.py at toy sizes on SPLADE-tiny: 3 samplers, one exact T."""
  from configs.glauber_unmasking import get_config

  c = get_config()
  c.model, c.embedding_model = str(splade_dir), str(minilm_dir)
  c.num_sites, c.num_chains, c.forward_rows = 4, 2, 8
  c.samplers = ("ancestral confidence", "parallel 2 cosine random remask 0.5 confidence", "glauber")
  c.trap_window, c.trap_record_every = 4, 2
  c.candidates, c.exact_sites, c.exact_temperatures, c.exact_steps = (
    ("the", "cat", "dog"),
    2,
    (1.0,),
    (1,),
  )
  return c
