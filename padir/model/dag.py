"""The directed acyclic decoder of DA-Transformer (Huang et al. 2022; issue 43): training.

The non-autoregressive decoder runs over A = floor(k S) vertices (k = model.dag_upsample >= 2,
fractional allowed: 2.5), reading the source tokens each repeated k times in CTC's layout
(padir.model.slots; PAD stays PAD: a source of n tokens gets n_v = floor(k n) live vertices).
Every vertex v predicts a token, p(y | v), and the link head (padir.model.dag_links) the
transitions E[v, u] to the later vertices. A translation is a
path 0 = a_1 < a_2 < ... < a_M = n_v - 1 through the graph with a token at each vertex:
    P(y, a | x) = prod_{i<M} E[a_i, a_{i+1}] prod_i p(y_i | a_i),
and training maximises the marginal over all paths of the target's length M (EOS included),
    log P(y | x) = log sum_a P(y, a | x),
by dynamic programming over the target positions in log space (`path_logprob`, a lax.scan):
    f_1(v) = [v = 0] log p(y_1 | 0),   f_{i+1}(u) = logsumexp_{v<u} (f_i(v) + log E[v, u]) + log p(y_{i+1} | u),
    log P(y | x) = f_M(n_v - 1).
The loss is -log P(y | x) summed over the batch's feasible rows over their target tokens; a
target longer than its vertices (M > n_v) has no path: it is left out and counted
(aux "dag_infeasible").

Glancing on the best path (Huang et al. 2022, Sec. 2.3; off by default, the `glancing` ratio
of GLAT): a first pass without gradient; the most probable path of the target (`best_path`,
Viterbi over the same lattice: argmax_a P(y, a | x)); N = floor(ratio x the number of target
positions whose path vertex's argmax token is wrong) target positions, uniform among the
target's; the decoder input at each chosen position's vertex becomes its target token; the loss
of the second pass is the marginal over every path, as without glancing.

Decoding: padir.decoding.dag. Shape letters: padir/__init__.py; A vertices (as CTC's slots),
Z the same vertices as the target of an edge.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from padir.data import tokenizer as tokenizer_lib
from padir.model import losses, slots
from padir.model import transformer as model_lib
from padir.model.dag_links import NEG

Array = jax.Array


def upsample(inputs_BS: Array, k: float) -> Array:
  """[B, floor(k S)] the decoder's input: each source token repeated k times, a fractional k
  spread evenly (padir.model.slots), PAD kept."""
  if not k >= 2:
    raise ValueError(f"the DAG upsampling factor must be >= 2, got {k}")
  return slots.upsample(inputs_BS, k)


def token_logprobs(logits_BAV: Array) -> Array:
  """[B, A, V] log p(token | vertex); PAD, BOS, [MASK], [LEN] banned (-inf)."""
  return jax.nn.log_softmax(losses.ban_never_predicted(logits_BAV.astype(jnp.float32)), axis=-1)


def _emissions(logp_BAV: Array, targets_BT: Array) -> Array:
  """[T, B, A] log p(y_i | v) of each target position i at each vertex v, at least NEG (a PAD
  position's banned token is -inf: a finite floor keeps every gradient of the DP finite)."""
  tokens_BAT = jnp.broadcast_to(
    targets_BT[:, None, :], (targets_BT.shape[0], logp_BAV.shape[1], targets_BT.shape[1])
  )
  emit_BAT = jnp.maximum(jnp.take_along_axis(logp_BAV, tokens_BAT, axis=-1), NEG)
  return emit_BAT.transpose(2, 0, 1)


def feasible(live_BA: Array, targets_BT: Array) -> Array:
  """[B] rows with at least one path of the target's length from the first live vertex to the
  last: 1 <= M <= n_v, and M = 1 only with one vertex."""
  M_B, n_B = losses.target_lengths(targets_BT), live_BA.sum(-1)
  return (M_B >= 1) & (M_B <= n_B) & ((M_B > 1) | (n_B == 1))


@struct.dataclass
class Forward:
  """The DP's state after target position i: f_BA = log P(y_1..y_i, a_i = v), and out_B the
  log-likelihood of the rows whose target has ended (M = i + 1)."""

  f_BA: Array
  out_B: Array


def path_logprob(logp_BAV: Array, links_BAZ: Array, live_BA: Array, targets_BT: Array) -> Array:
  """[B] log P(y | x): the marginal over all paths (module docstring); about NEG or below for an
  infeasible row (see `feasible`). The scan's step is rematerialised (jax.checkpoint): the
  backward pass recomputes each position's [B, A, Z] sums from the carried f instead of keeping
  all T of them (151 MB at B 64, A 112, T 48)."""
  emit_TBA = _emissions(logp_BAV, targets_BT)
  B, A = live_BA.shape
  M_B, last_B = losses.target_lengths(targets_BT), live_BA.sum(-1) - 1
  at_last_BA = jnp.arange(A)[None] == last_B[:, None]
  f_BA = jnp.where(jnp.arange(A)[None] == 0, emit_TBA[0], NEG)
  end = lambda f_BA: jnp.where(at_last_BA, f_BA, NEG).max(-1)
  state = Forward(f_BA, jnp.where(M_B == 1, end(f_BA), NEG))

  def step(s: Forward, x):
    i, emit_BA = x
    f_BA = jax.nn.logsumexp(s.f_BA[:, :, None] + links_BAZ, axis=1) + emit_BA
    return Forward(f_BA, jnp.where(M_B == i + 1, end(f_BA), s.out_B)), None

  T = targets_BT.shape[1]
  state, _ = jax.lax.scan(jax.checkpoint(step), state, (jnp.arange(1, T), emit_TBA[1:]))
  return state.out_B


def best_path(
  logp_BAV: Array, links_BAZ: Array, live_BA: Array, targets_BT: Array
) -> tuple[Array, Array]:
  """Viterbi over the lattice of `path_logprob`: (the vertex of each target position on the most
  probable path [B, T], 0 past the target's end; its log P(y, a | x) [B])."""
  emit_TBA = _emissions(logp_BAV, targets_BT)
  B, A = live_BA.shape
  M_B, last_B = losses.target_lengths(targets_BT), live_BA.sum(-1) - 1
  d_BA = jnp.where(jnp.arange(A)[None] == 0, emit_TBA[0], NEG)

  def step(d_BA, emit_BA):
    new_BA = (d_BA[:, :, None] + links_BAZ).max(1) + emit_BA
    return new_BA, new_BA

  T = targets_BT.shape[1]
  _, ds_TBA = jax.lax.scan(step, d_BA, emit_TBA[1:])
  ds_TBA = jnp.concatenate([d_BA[None], ds_TBA])
  final_BA = jnp.take_along_axis(ds_TBA, jnp.maximum(M_B - 1, 0)[None, :, None], axis=0)[0]
  score_B = jnp.take_along_axis(final_BA, last_B[:, None], axis=1)[:, 0]

  def back(u_B, x):
    # the argmax predecessor of u at target position i: only the path's vertex's column of
    # candidates is formed again (the same sums as the forward's, so the same ties)
    i, d_BA = x  # d_BA: the best scores at position i - 1
    on_B = i <= M_B - 1
    into_BA = jnp.take_along_axis(links_BAZ, u_B[:, None, None], axis=2)[:, :, 0]
    prev_B = jnp.argmax(d_BA + into_BA, axis=1).astype(jnp.int32)
    return jnp.where(on_B, prev_B, u_B), jnp.where(on_B, u_B, 0)

  first_B, path_TB = jax.lax.scan(back, last_B, (jnp.arange(1, T), ds_TBA[:-1]), reverse=True)
  return jnp.concatenate([first_B[:, None], path_TB.T], axis=1), score_B


def glance(
  key: Array,
  logp_BAV: Array,
  links_BAZ: Array,
  live_BA: Array,
  targets_BT: Array,
  x_BA: Array,
  ratio: Array | float,
) -> tuple[Array, Array]:
  """Glancing on the best path (module docstring): (the new decoder input [B, A], the revealed
  vertices [B, A]). No gradient flows through the first pass."""
  logp_BAV, links_BAZ = jax.lax.stop_gradient((logp_BAV, links_BAZ))
  path_BT, _ = best_path(logp_BAV, links_BAZ, live_BA, targets_BT)
  pred_BT = jnp.take_along_axis(jnp.argmax(logp_BAV, -1), path_BT, axis=1)
  valid_BT = targets_BT != tokenizer_lib.PAD_ID
  distance_B = ((pred_BT != targets_BT) & valid_BT).sum(-1)
  distance_B = jnp.where(feasible(live_BA, targets_BT), distance_B, 0)
  num_B = jnp.floor(ratio * distance_B.astype(jnp.float32)).astype(jnp.int32)
  chosen_BT = losses.random_subset(key, valid_BT, num_B)
  A = x_BA.shape[1]
  hit_BTA = (path_BT[:, :, None] == jnp.arange(A)) & chosen_BT[:, :, None]
  revealed_BA = hit_BTA.any(1)
  token_BA = (
    (hit_BTA * targets_BT[:, :, None]).sum(1).astype(x_BA.dtype)
  )  # a path's vertices differ
  return jnp.where(revealed_BA, token_BA, x_BA), revealed_BA


def vertex_outputs(
  model: model_lib.Transformer, x_BA: Array, enc_mask_BS: Array, fixed: tuple
) -> tuple[Array, Array]:
  """One decoder pass over the vertices: (log p(token | vertex) [B, A, V], links [B, A, Z])."""
  logits_BAV, h_BAD = model.decode(x_BA, None, enc_mask_BS, fixed, return_hidden=True)
  return token_logprobs(logits_BAV), model.dag_links(h_BAD, x_BA != tokenizer_lib.PAD_ID)


def dag_loss(
  model: model_lib.Transformer,
  batch: dict[str, Array],
  *,
  glancing: Array | float | None = None,
  key: Array | None = None,
  num_slots_used: int | None = None,
) -> tuple[Array, dict[str, Array]]:
  """-log P(y | x) over the feasible rows' target tokens (module docstring); aux: token_loss,
  dag_infeasible, and with glancing glance_ratio and glance_revealed (per target token).
  num_slots_used (static; padir.decoding.ctc.batch_slots): the graph's first this many vertex
  positions only, the ones the batch's rows use (None: all floor(k S))."""
  k = model.cfg.dag_upsample
  if not k:
    raise ValueError("dag_loss needs a model with dag_upsample >= 2")
  inputs_BS, targets_BT = batch["inputs"], batch["targets"]
  enc_BSD, enc_mask_BS = model.encode(inputs_BS)
  fixed = model.project_encoder(enc_BSD)
  x_BA = upsample(inputs_BS, k)[:, :num_slots_used]
  live_BA = x_BA != tokenizer_lib.PAD_ID
  aux = {}
  tokens_B = losses.target_lengths(targets_BT)
  if glancing is not None:
    if key is None:
      raise ValueError("glancing draws its positions from a key: pass key=")
    first = jax.lax.stop_gradient(vertex_outputs(model, x_BA, enc_mask_BS, fixed))
    x_BA, revealed_BA = glance(key, *first, live_BA, targets_BT, x_BA, glancing)
    aux["glance_ratio"] = jnp.asarray(glancing, jnp.float32)
    aux["glance_revealed"] = revealed_BA.sum() / jnp.maximum(tokens_B.sum(), 1)
  logp_BAV, links_BAZ = vertex_outputs(model, x_BA, enc_mask_BS, fixed)
  ll_B = path_logprob(logp_BAV, links_BAZ, live_BA, targets_BT)
  ok_B = feasible(live_BA, targets_BT)
  denom = jnp.maximum((tokens_B * ok_B).sum(), 1).astype(jnp.float32)
  loss = -jnp.where(ok_B, ll_B, 0.0).sum() / denom
  aux.update(token_loss=loss, dag_infeasible=1.0 - ok_B.mean())
  return loss, aux
