"""Metropolis-Hastings on a masked LM (Goyal et al. 2022, "Exposing the implicit energy networks
behind masked language models via Metropolis-Hastings"): a chain with a KNOWN stationary law
although the MLM conditionals are incompatible (no joint law has them as conditionals).

Energies, from the untempered scores s_j(a; x_-j) (the MLM logits at site j with x_j masked,
restricted to the spec's candidate tokens, top-k / top-p never applied):

  "pll"  E(x) = -Σ_j log p_j(x_j | x_-j),  p_j = softmax of s_j over the candidates (T = 1):
         the negative pseudo-log-likelihood.
  "raw"  E(x) = -Σ_j s_j(x_j; x_-j): the raw-logit energy.

Step (x -> x'): pick a free site i uniformly; propose b ~ q(. | x_-i) = p_i^T(. | x_-i) ∝
exp(s_i(.; x_-i) / T), the tempered conditional Glauber would draw from; x' = x^{i<-b};
accept with probability

  A(x, x') = min(1, exp(-(E(x') - E(x)) / T) · q(x_i | x_-i) / q(b | x_-i)),

else stay. x_-i = x'_-i, so the reverse move proposes x_i from the same q: detailed balance holds
for, and the unique stationary law is, the Gibbs law of the energy AT THE SAME TEMPERATURE T:

  π_{E,T}(x) ∝ exp(-E(x) / T)  over the candidate states of the n free sites

(the energy's scores untempered, T the spec's temperature; T = 1 with "pll" is the
pseudo-likelihood-normalised law ∝ Π_j p_j(x_j | x_-j)). For "raw" the site-i terms cancel and
log A = (1/T) Σ_{j≠i} [s_j(x'_j; x'_-j) - s_j(x_j; x_-j)]: only the other sites' reaction to
the move is judged, i.e. exactly the incompatibility of the conditionals.

Cost of a step: B one-mask rows for the proposal and B·(n-1) for the other sites of x' (the
proposal's row is site i's row of x'); the chain carries each site's energy term e_j(x) so E(x)
is never recomputed. A self-proposal (b = x_i) has ratio 1 (up to float rounding of the
recomputed terms) and counts as accepted.
Step t uses the key fold_in(key, t) (as `glauber.chains`); chains shard over a mesh's 'data'
axis the same way.
"""

from __future__ import annotations

import math
from typing import Literal

import jax
import jax.numpy as jnp
from flax import struct
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from glauber.chains import Records, Spec, chain_sharding, constrain
from glauber.oracle import MaskedLM
from gmlm.core import blocks, draws
from gmlm.nn import masked_logits

Energy = Literal["pll", "raw"]
ENERGIES = ("pll", "raw")


@struct.dataclass
class MHState:
  tokens_BL: jax.Array  # int32 full sequences
  terms_BN: jax.Array  # float32 e_j(x): E(x) = -Σ_j e_j(x)
  accepted_B: jax.Array  # int32 accepted proposals (self-proposals included)
  moved_B: jax.Array  # int32 accepted proposals that changed the state
  steps_B: jax.Array  # int32 MH steps simulated
  t: jax.Array  # int32 scalar: steps so far (the index of the key schedule)


def site_scores(model: MaskedLM, spec: Spec, tokens_BL: jax.Array, sites_BK: jax.Array):
  """s_BKC: the raw candidate logits at k free sites of each sequence, each read from its own
  copy of the sequence with only that site masked (B*k one-mask rows, one forward pass)."""
  B, K = sites_BK.shape
  pos_X1 = spec.offset + sites_BK.reshape(B * K, 1)  # X = B * k one-mask rows
  rows_XL = jnp.repeat(tokens_BL, K, axis=0)
  masked_XL = blocks.write_block(rows_XL, pos_X1, jnp.full(pos_X1.shape, spec.mask_id))
  logits_XV = masked_logits(model, masked_XL, pos_X1)[:, 0]
  return jnp.take(logits_XV, spec.candidates_C, axis=-1).reshape(B, K, -1)


site_scores_jit = jax.jit(site_scores)


def energy_terms(s_XC: jax.Array, idx_X: jax.Array, energy: Energy) -> jax.Array:
  """e(x) of each row: s(x) ("raw") or log softmax(s)(x) ("pll"); idx_X candidate indices."""
  if energy == "pll":
    s_XC = jax.nn.log_softmax(s_XC.astype(jnp.float32), axis=-1)
  return jnp.take_along_axis(s_XC, idx_X[..., None], axis=-1)[..., 0]


def check(spec: Spec, energy: str) -> None:
  if energy not in ENERGIES:
    raise ValueError(f"unknown energy {energy!r}; choose one of {ENERGIES}")
  T = spec.temperature
  if not (0 < T and math.isfinite(T)):
    raise ValueError(f"Metropolis-Hastings needs a temperature 0 < T < inf, got T = {T}")
  if spec.top_k or spec.top_p < 1:
    raise ValueError("Metropolis-Hastings proposals must be untruncated: top_k = 0, top_p = 1")


def init_state(model: MaskedLM, spec: Spec, tokens_BL, energy: Energy) -> MHState:
  """The chains at tokens_BL (every free token a candidate), with their energy terms."""
  check(spec, energy)
  tokens_BL = jnp.asarray(tokens_BL, jnp.int32)
  idx_BN = spec.index_V[spec.free(tokens_BL)]
  if bool((idx_BN < 0).any()):
    raise ValueError("every free token of a Metropolis-Hastings start must be a candidate token")
  B, n = idx_BN.shape
  s_BNC = site_scores_jit(model, spec, tokens_BL, blocks.all_sites(B, n))
  zero_B = jnp.zeros(B, jnp.int32)
  terms_BN = energy_terms(s_BNC, idx_BN, energy)
  return MHState(tokens_BL, terms_BN, zero_B, zero_B, zero_B, jnp.int32(0))


def step(key, model: MaskedLM, spec: Spec, energy: Energy, state: MHState) -> MHState:
  """One Metropolis-Hastings step of every chain (module docstring)."""
  k_site, k_draw, k_accept = jax.random.split(key, 3)
  tokens_BL, n = state.tokens_BL, spec.num_sites
  B = tokens_BL.shape[0]
  rows_B = jnp.arange(B)
  i_B1 = blocks.random_blocks(k_site, B, n, 1)
  s_BC = site_scores(model, spec, tokens_BL, i_B1)[:, 0]  # x_-i = x'_-i
  logq_BC = draws.temper(s_BC, spec.temperature)
  b_B = draws.categorical(k_draw, logq_BC)
  a_B = spec.index_V[spec.free(tokens_BL)[rows_B, i_B1[:, 0]]]
  new_BL = blocks.write_block(tokens_BL, spec.offset + i_B1, spec.candidates_C[b_B][:, None])
  others_BK = (i_B1 + 1 + jnp.arange(n - 1, dtype=jnp.int32)) % n
  idx_BN = spec.index_V[spec.free(new_BL)]
  terms_BN = (
    jnp.zeros_like(state.terms_BN).at[rows_B, i_B1[:, 0]].set(energy_terms(s_BC, b_B, energy))
  )
  if n > 1:
    s_BKC = site_scores(model, spec, new_BL, others_BK)
    idx_BK = jnp.take_along_axis(idx_BN, others_BK, axis=1)
    terms_BN = blocks.write_block(terms_BN, others_BK, energy_terms(s_BKC, idx_BK, energy))
  # log A = -(E(x') - E(x)) / T + log q(x_i) - log q(b), the energy difference site by site.
  log_ratio_B = (terms_BN - state.terms_BN).sum(-1) / jnp.float32(spec.temperature)
  log_ratio_B += logq_BC[rows_B, a_B] - logq_BC[rows_B, b_B]
  accept_B = jnp.log(jax.random.uniform(k_accept, (B,))) < log_ratio_B
  return MHState(
    jnp.where(accept_B[:, None], new_BL, tokens_BL),
    jnp.where(accept_B[:, None], terms_BN, state.terms_BN),
    state.accepted_B + accept_B,
    state.moved_B + (accept_B & (b_B != a_B)),
    state.steps_B + 1,
    state.t + 1,
  )


def _run(key, model, spec, state, *, energy, num_records, record_every, sharding):
  def one_step(state, _):
    state = step(blocks.step_key(key, state.t), model, spec, energy, state)
    return state.replace(tokens_BL=constrain(state.tokens_BL, sharding)), None

  def one_record(state, _):
    state, _ = jax.lax.scan(one_step, state, None, length=record_every)
    return state, spec.free(state.tokens_BL)

  state, tokens_RBN = jax.lax.scan(one_record, state, None, length=num_records)
  return state, Records(tokens_RBN)


_run_jit = jax.jit(_run, static_argnames=("energy", "num_records", "record_every", "sharding"))


def place(model, state: MHState, mesh: Mesh | None):
  """Chains sharded over the mesh's 'data' axis, the model replicated on every device."""
  if mesh is None:
    return model, state
  data = chain_sharding(mesh)
  per_chain = {k: jax.device_put(getattr(state, k), data) for k in MHState.__dataclass_fields__}
  per_chain["t"] = jax.device_put(state.t, NamedSharding(mesh, P()))
  return jax.device_put(model, NamedSharding(mesh, P())), MHState(**per_chain)


def run(
  key: jax.Array, model: MaskedLM, spec: Spec, energy: Energy, state: MHState, num_records: int,
  record_every: int = 1, mesh: Mesh | None = None,
) -> tuple[MHState, Records]:  # fmt: skip
  """num_records * record_every MH steps of every chain; records.tokens_RBN[r] are the free
  tokens after (r + 1) * record_every more steps. `energy` must be the one `state` was
  initialised with (its terms are carried)."""
  check(spec, energy)
  if num_records < 0 or record_every < 1:
    raise ValueError(f"need num_records >= 0, record_every >= 1: {num_records}, {record_every}")
  model, state = place(model, state, mesh)
  return _run_jit(
    key,
    model,
    spec,
    state,
    energy=energy,
    num_records=num_records,
    record_every=record_every,
    sharding=chain_sharding(mesh),
  )


def acceptance_rate(state: MHState) -> float:
  """Accepted proposals / proposals over all chains (self-proposals count as accepted)."""
  return float(jnp.sum(state.accepted_B) / jnp.maximum(jnp.sum(state.steps_B), 1))


def move_rate(state: MHState) -> float:
  """Accepted proposals that changed the state / proposals."""
  return float(jnp.sum(state.moved_B) / jnp.maximum(jnp.sum(state.steps_B), 1))
