"""Glauber chains on a masked LM: thousands of chains, one jitted `lax.scan`.

The state of a chain is a full token sequence tokens[L] = [CLS] prefix x_1..x_n [SEP]; only the
n free sites (positions offset .. offset+n-1) ever change. A step is block dynamics over the
MLM conditional oracle (`gmlm.core`: blocks and draws):

  method="glauber"   pick a free site uniformly, put [MASK] there, redraw it from
                     p_i^T(a | x_-i) ∝ exp(s_i(a; x_-i) / T) (the MLM head at that site only).
  method="sweep"     the same, sites visited in order (t*k .. t*k+k-1) mod n (systematic scan).
  method="block"     k uniformly random sites masked AT ONCE, each drawn independently from its
                     own conditional given the masked context. For k > 1 this is NOT a Gibbs
                     kernel: the product of masked marginals is not the joint conditional.
  method="parallel"  the independent parallel sampler: every site i drawn at once and
                     independently from p_i^T(. | x_-i) of the current state (n one-mask
                     sequences per chain). Not a Gibbs kernel either.

Draws are restricted to a candidate vocabulary (by default every id except the tokenizer's
special tokens and BERT's [unused*] ids) and optionally truncated to the top-k / top-p mass.
T = 0 is argmax (ties uniform), T = inf uniform over the candidates.

Step t uses the key fold_in(key, t): a run split into pieces equals one run in a single piece,
and the same key gives the same chains however the chain axis is sharded over a mesh.
"""

from __future__ import annotations

import re
from typing import Literal, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from glauber.layout import Layout
from glauber.oracle import MaskedLM
from gmlm.core import blocks, draws
from gmlm.core import mesh as mesh_lib
from gmlm.nn import masked_logits

Method = Literal["glauber", "sweep", "block", "parallel"]
METHODS = ("glauber", "sweep", "block", "parallel")
UNUSED_PATTERN = r"^\[unused\d+\]$|^<unused\d+>$"


@struct.dataclass
class Spec:
  """Where the free sites are (the layout) and how a site's new token is drawn from the MLM
  logits."""

  candidates_C: jax.Array  # int32[C]: the token ids a site may take
  index_V: jax.Array  # int32[V]: candidate index of each vocabulary id, -1 outside
  layout: Layout = struct.field(pytree_node=False)
  temperature: float = struct.field(pytree_node=False)  # 0: argmax, inf: uniform
  top_k: int = struct.field(pytree_node=False, default=0)  # 0: no truncation
  top_p: float = struct.field(pytree_node=False, default=1.0)  # 1: no truncation

  @property
  def mask_id(self) -> int:
    return self.layout.mask_id

  @property
  def offset(self) -> int:
    """The position of the first free site."""
    return self.layout.offset

  @property
  def num_sites(self) -> int:
    return self.layout.num_sites

  @property
  def positions_N(self) -> jax.Array:
    return self.offset + jnp.arange(self.num_sites, dtype=jnp.int32)

  def free(self, tokens_BL: jax.Array) -> jax.Array:
    return tokens_BL[..., self.offset : self.offset + self.num_sites]


@struct.dataclass
class ChainState:
  tokens_BL: jax.Array  # int32 full sequences
  steps_B: jax.Array  # int32: Glauber steps simulated by each chain
  t: jax.Array  # int32 scalar: kernel invocations so far (the index of the key schedule)


@struct.dataclass
class Records:
  """What a run (`chains.run` or `rejection_free.run`) recorded: tokens_RBN[r] are the free
  tokens after (r + 1) * record_every more steps of each chain."""

  tokens_RBN: jax.Array
  logp_RBN: jax.Array | None = None  # log p^T(x_i | x_-i) of each site (record_logprobs)
  iterations: jax.Array | None = None  # rejection-free: iterations the call spent
  changes_B: jax.Array | None = None  # rejection-free: jumps of each chain
  memo_hits_B: jax.Array | None = None  # rejection-free: iterations served from the memo


def candidate_ids(
  tokenizer=None,
  vocab_size: int | None = None,
  *,
  exclude_special: bool = True,
  exclude_pattern: str | None = UNUSED_PATTERN,
  exclude_ids: Sequence[int] = (),
) -> np.ndarray:
  """Token ids a site may take: all of the vocabulary minus special tokens, ids whose token
  string matches `exclude_pattern` (BERT's [unused*]) and `exclude_ids`."""
  if vocab_size is None:
    if tokenizer is None:
      raise ValueError("candidate_ids needs a tokenizer or a vocab_size")
    vocab_size = len(tokenizer)
  keep = np.ones(vocab_size, bool)
  if tokenizer is not None and exclude_special:
    keep[[i for i in tokenizer.all_special_ids if i < vocab_size]] = False
  if tokenizer is not None and exclude_pattern:
    pattern = re.compile(exclude_pattern)
    tokens = tokenizer.convert_ids_to_tokens(list(range(min(vocab_size, len(tokenizer)))))
    keep[[i for i, s in enumerate(tokens) if s is not None and pattern.match(s)]] = False
  keep[[i for i in exclude_ids if 0 <= i < vocab_size]] = False
  ids = np.flatnonzero(keep).astype(np.int32)
  if ids.size == 0:
    raise ValueError("the candidate vocabulary is empty: every id was excluded")
  return ids


def make_spec(
  candidates,
  vocab_size: int,
  layout: Layout,
  temperature: float,
  top_k: int = 0,
  top_p: float = 1.0,
) -> Spec:
  temperature = float(temperature)
  if not temperature >= 0:
    raise ValueError(f"temperature must be >= 0 (0 = argmax, inf = uniform), got {temperature}")
  if top_k < 0:
    raise ValueError(f"top_k must be >= 0 (0 = off), got {top_k}")
  if not 0.0 < top_p <= 1.0:
    raise ValueError(f"top_p must be in (0, 1] (1 = off), got {top_p}")
  candidates = np.asarray(candidates, np.int32)
  if candidates.size == 0 or candidates.min() < 0 or candidates.max() >= vocab_size:
    raise ValueError(f"candidate ids must be a non-empty subset of [0, {vocab_size})")
  index = np.full(vocab_size, -1, np.int32)
  index[candidates] = np.arange(candidates.size, dtype=np.int32)
  return Spec(
    jnp.asarray(candidates), jnp.asarray(index), layout, temperature, int(top_k), float(top_p)
  )


def tempered_logprobs(spec: Spec, logits_XV: jax.Array) -> jax.Array:
  """log p^T over the candidates, logp_XC (-inf outside the top-k / top-p set)."""
  s_XC = jnp.take(logits_XV, spec.candidates_C, axis=-1)
  return draws.temper(s_XC, spec.temperature, spec.top_k, spec.top_p)


def site_logprobs(
  model: MaskedLM, spec: Spec, tokens_BL: jax.Array, sites_BK: jax.Array
) -> jax.Array:
  """logp_BKC of the k sites (indices into the free sites), all k masked in one sequence."""
  positions_BK = spec.offset + sites_BK
  masked_BL = blocks.write_block(
    tokens_BL, positions_BK, jnp.full(sites_BK.shape, spec.mask_id, tokens_BL.dtype)
  )
  return tempered_logprobs(spec, masked_logits(model, masked_BL, positions_BK))


def all_site_logprobs(model: MaskedLM, spec: Spec, tokens_BL: jax.Array) -> jax.Array:
  """logp_BNC: the single-site conditional p_i^T(. | x_-i) of every free site, from B*n
  sequences with one mask each (one batched forward pass)."""
  B, L = tokens_BL.shape
  n = spec.num_sites
  eye_NL = jax.nn.one_hot(spec.positions_N, L, dtype=jnp.bool_)
  masked_BNL = jnp.where(eye_NL[None], spec.mask_id, tokens_BL[:, None, :])
  positions_X1 = jnp.tile(spec.positions_N, B)[:, None]  # X = B * n one-mask rows
  logits_X1V = masked_logits(model, masked_BNL.reshape(B * n, L), positions_X1)
  return tempered_logprobs(spec, logits_X1V[:, 0]).reshape(B, n, -1)


def current_logprobs(spec: Spec, tokens_BL: jax.Array, logp_BNC: jax.Array) -> jax.Array:
  """log p_i^T(x_i | x_-i) of each site's current token, logp_BN (-inf when x_i is not a
  candidate, e.g. [MASK] at an all-mask start)."""
  idx_BN = spec.index_V[spec.free(tokens_BL)]
  logp_BN = jnp.take_along_axis(logp_BNC, jnp.maximum(idx_BN, 0)[..., None], axis=-1)[..., 0]
  return jnp.where(idx_BN >= 0, logp_BN, -jnp.inf)


def check_method(method: str, k: int, n: int) -> None:
  if method not in METHODS:
    raise ValueError(f"unknown method {method!r}; choose one of {METHODS}")
  if method in ("glauber", "parallel") and k != 1:
    updates = "one site" if method == "glauber" else "all sites"
    raise ValueError(
      f"method={method!r} updates {updates} per step; block size k={k} applies "
      "to 'block' and 'sweep' only"
    )
  if not 1 <= k <= n:
    raise ValueError(f"block size k must be in [1, n={n}], got k={k}")


def make_step(method: Method, k: int = 1):
  """One step as a pure function step(key, t, model, spec, tokens_BL) -> tokens_BL."""

  def step(key, t, model, spec, tokens_BL):
    B, n = tokens_BL.shape[0], spec.num_sites
    k_sites, k_draw = jax.random.split(key)
    if method == "parallel":
      sites_BN = blocks.all_sites(B, n)
      logp_BNC = all_site_logprobs(model, spec, tokens_BL)
      return draws.draw_product(
        k_draw, tokens_BL, spec.offset + sites_BN, logp_BNC, spec.candidates_C
      )
    if method == "sweep":
      sites_BK = blocks.sweep_blocks(t, B, n, k)
    else:
      sites_BK = blocks.random_blocks(k_sites, B, n, 1 if method == "glauber" else k)
    logp_BKC = site_logprobs(model, spec, tokens_BL, sites_BK)
    return draws.draw_product(
      k_draw, tokens_BL, spec.offset + sites_BK, logp_BKC, spec.candidates_C
    )

  return step


def chain_sharding(mesh: Mesh | None, axis: str = "data") -> NamedSharding | None:
  return mesh_lib.batch_sharding(mesh, 1, axis)


constrain = mesh_lib.constrain


def place(model, state: ChainState, mesh: Mesh | None):
  """Chains sharded over the mesh's 'data' axis, the model replicated on every device."""
  if mesh is None:
    return model, state
  model = jax.device_put(model, NamedSharding(mesh, P()))
  data = chain_sharding(mesh)
  state = ChainState(
    jax.device_put(state.tokens_BL, data),
    jax.device_put(state.steps_B, data),
    jax.device_put(state.t, NamedSharding(mesh, P())),
  )
  return model, state


def init_state(tokens_BL) -> ChainState:
  tokens_BL = jnp.asarray(tokens_BL, jnp.int32)
  if tokens_BL.ndim != 2 or tokens_BL.shape[0] < 1:
    raise ValueError(f"initial tokens must have shape [num_chains >= 1, L], got {tokens_BL.shape}")
  return ChainState(tokens_BL, jnp.zeros(tokens_BL.shape[:1], jnp.int32), jnp.int32(0))


def _run(
  key, model, spec, state, *, num_records, record_every, method, k, record_logprobs, sharding
):
  step = make_step(method, k)

  def one_step(tokens_BL, t):
    return constrain(step(blocks.step_key(key, t), t, model, spec, tokens_BL), sharding), None

  def one_record(carry, _):
    tokens_BL, t = carry
    tokens_BL, _ = jax.lax.scan(one_step, tokens_BL, t + jnp.arange(record_every))
    logp_BN = None
    if record_logprobs:
      logp_BN = current_logprobs(spec, tokens_BL, all_site_logprobs(model, spec, tokens_BL))
    return (tokens_BL, t + record_every), (spec.free(tokens_BL), logp_BN)

  (tokens_BL, t), (tokens_RBN, logp_RBN) = jax.lax.scan(
    one_record, (constrain(state.tokens_BL, sharding), state.t), None, length=num_records
  )
  return (
    ChainState(tokens_BL, state.steps_B + num_records * record_every, t),
    Records(tokens_RBN, logp_RBN),
  )


_STATIC = ("num_records", "record_every", "method", "k", "record_logprobs", "sharding")
_run_kept = jax.jit(_run, static_argnames=_STATIC)
# The new state is written over the one it replaces: no second B x L buffer.
_run_donated = jax.jit(_run, static_argnames=_STATIC, donate_argnames=("state",))


def run(
  key: jax.Array,
  model: MaskedLM,
  spec: Spec,
  state: ChainState,
  num_records: int,
  record_every: int = 1,
  *,
  method: Method = "glauber",
  k: int = 1,
  record_logprobs: bool = False,
  mesh: Mesh | None = None,
  donate: bool = False,
) -> tuple[ChainState, Records]:
  """num_records * record_every steps of every chain; returns (final state, records) where
  records.tokens_RBN[r] are the free tokens after (r + 1) * record_every more steps (and
  records.logp_RBN each site's log p^T of its current token when record_logprobs).

  donate: the call takes over `state`'s buffers for the state it returns (state is deleted on
  backends that donate, CPU included), for a caller that only ever goes on from the result."""
  check_method(method, k, spec.num_sites)
  if num_records < 0 or record_every < 1:
    raise ValueError(
      f"need num_records >= 0 and record_every >= 1, got {num_records}, {record_every}"
    )
  model, state = place(model, state, mesh)
  runner = _run_donated if donate else _run_kept
  return runner(
    key,
    model,
    spec,
    state,
    num_records=num_records,
    record_every=record_every,
    method=method,
    k=k,
    record_logprobs=record_logprobs,
    sharding=chain_sharding(mesh),
  )
