"""Decoding the directed acyclic decoder (padir.model.dag; Huang et al. 2022, Sec. 2.4).

One decoder pass gives each vertex's token log-probabilities and the links; a translation is a
path from the first live vertex with a token at each vertex, cut after its first EOS:
- "greedy": at each vertex its argmax token, then the most probable next vertex,
  argmax_u log E[v, u];
- "lookahead": the same, the next vertex chosen with the token it would emit,
  argmax_u (log E[v, u] + max_y log p(y | u));
- "viterbi": the path from the first live vertex to the last with the largest
  sum of log E over its edges + sum of max_y log p(y | vertex) over its vertices (the mode of
  P(y, a | x) with each vertex's token at its argmax), by dynamic programming over the vertices;
  no length normalisation (the variant of Shao et al. 2022 that divides by the length is not
  here);
- "beam": DA-Transformer's beam search over translations rather than paths: each hypothesis is
  a prefix y_1..y_t with the log-probability of every path that emits it, per vertex,
  beta_t(u) = log sum over paths reaching u of P(y_1..y_t, path), so the paths that emit the
  same words are summed, not competing; a hypothesis ends by emitting EOS at the last vertex,
  and the answer is the finished y of the largest log P(y | x) (the marginal the model is
  trained on, `padir.model.dag.path_logprob`). With a beam as wide as every prefix it is the
  exact argmax_y P(y | x) (tested by enumeration); the width is `beam_size` (default 5). With
  an n-gram model of the target language (padir.decoding.ngram, from the training targets:
  Huang et al.'s joint n-gram search), the beam ranks by log P(y | x) + w log P_lm(y) instead
  (decode.dag_lm_order and decode.dag_lm_weight).
Greedy and lookahead stop at EOS or at the last live vertex. Shape letters: padir/__init__.py;
A vertices, Z the same vertices as the target of an edge.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import struct

from padir.data import tokenizer as tokenizer_lib
from padir.decoding import ngram, refinement
from padir.model import dag as dag_lib
from padir.model import transformer as model_lib

Array = jax.Array
STRATEGIES = ("greedy", "lookahead", "viterbi", "beam")
BEAM_SIZE = 5


def _fit(tokens_BA: Array, max_len: int) -> Array:
  """[B, max_len]: PAD after the first EOS, truncated or PAD-extended to max_len."""
  eos_BA = tokens_BA == tokenizer_lib.EOS_ID
  after_BA = (jnp.cumsum(eos_BA, axis=1) - eos_BA) > 0
  tokens_BA = jnp.where(after_BA, tokenizer_lib.PAD_ID, tokens_BA)
  A = tokens_BA.shape[1]
  if A >= max_len:
    return tokens_BA[:, :max_len]
  return jnp.pad(tokens_BA, ((0, 0), (0, max_len - A)), constant_values=tokenizer_lib.PAD_ID)


@struct.dataclass
class Walk:
  """Greedy / lookahead's state: the current vertex of each row and whether it has ended."""

  v_B: Array
  done_B: Array


def walk(logp_BAV: Array, links_BAZ: Array, live_BA: Array, lookahead: bool = True) -> Array:
  """[B, A] the tokens of the greedy (lookahead=False) or lookahead path, PAD after its end."""
  token_BA = jnp.argmax(logp_BAV, -1).astype(jnp.int32)
  score_BAZ = links_BAZ + (logp_BAV.max(-1)[:, None, :] if lookahead else 0.0)
  next_BA = jnp.argmax(score_BAZ, -1).astype(jnp.int32)
  last_B = live_BA.sum(-1) - 1
  take = lambda x_BA, v_B: jnp.take_along_axis(x_BA, v_B[:, None], axis=1)[:, 0]

  def step(w: Walk, _):
    tok_B = take(token_BA, w.v_B)
    out_B = jnp.where(w.done_B, tokenizer_lib.PAD_ID, tok_B)
    done_B = w.done_B | (tok_B == tokenizer_lib.EOS_ID) | (w.v_B >= last_B)
    return Walk(jnp.where(done_B, w.v_B, take(next_BA, w.v_B)), done_B), out_B

  B, A = live_BA.shape
  start = Walk(jnp.zeros((B,), jnp.int32), last_B < 0)
  _, out_AB = jax.lax.scan(step, start, None, length=A)
  return out_AB.T


def viterbi(logp_BAV: Array, links_BAZ: Array, live_BA: Array) -> tuple[Array, Array, Array]:
  """The best path of the module docstring: (its tokens [B, A] in path order, PAD after; the
  vertices on it [B, A] as a mask; its score [B])."""
  B, A = live_BA.shape
  best_BA = logp_BAV.max(-1)
  s_BA = jnp.full((B, A), dag_lib.NEG).at[:, 0].set(best_BA[:, 0])

  def step(s_BA, u):
    cand_BA = s_BA + jax.lax.dynamic_index_in_dim(links_BAZ, u, axis=2, keepdims=False)
    s_BA = s_BA.at[:, u].set(cand_BA.max(-1) + best_BA[:, u])
    return s_BA, jnp.argmax(cand_BA, -1).astype(jnp.int32)

  s_BA, back_AB = jax.lax.scan(step, s_BA, jnp.arange(1, A))
  last_B = live_BA.sum(-1) - 1
  score_B = jnp.take_along_axis(s_BA, last_B[:, None], axis=1)[:, 0]

  def back(v_B, x):
    u, back_B = x
    on_B = v_B == u
    return jnp.where(on_B, back_B, v_B), on_B

  _, on_AB = jax.lax.scan(back, last_B, (jnp.arange(1, A), back_AB), reverse=True)
  on_BA = jnp.concatenate([jnp.ones((B, 1), bool), on_AB.T], axis=1) & live_BA
  token_BA = jnp.argmax(logp_BAV, -1).astype(jnp.int32)
  tokens_BA, _, _ = refinement.compact(token_BA, on_BA, jnp.zeros((B, A), jnp.float32))
  return tokens_BA, on_BA, score_B


@struct.dataclass
class Beam:
  """Beam search's state: per row, K prefixes (their tokens, their path log-probabilities at
  each vertex before it emits), and the best finished translation so far."""

  beta_BKA: Array
  tokens_BKA: Array
  best_B: Array
  best_BA: Array
  lm_state_BK: Array  # each prefix's state in the n-gram automaton (padir.decoding.ngram)
  lm_score_BK: Array  # log P_lm(prefix)


def _logmatmul(x_BKA: Array, p_BAN: Array) -> Array:
  """[B, K, N] log sum_a exp(x[b, k, a]) p[b, a, n], for p >= 0 (a matmul after a max shift)."""
  m_BK = x_BKA.max(-1)
  y_BKN = jnp.einsum("bka,ban->bkn", jnp.exp(x_BKA - m_BK[..., None]), p_BAN)
  return jnp.where(y_BKN > 0, jnp.log(jnp.maximum(y_BKN, 1e-30)) + m_BK[..., None], dag_lib.NEG)


def beam(
  logp_BAV: Array,
  links_BAZ: Array,
  live_BA: Array,
  beam_size: int = BEAM_SIZE,
  lm: ngram.Tables | None = None,
  lm_weight: float | Array = 0.0,
  early_exit: bool = True,
  length_norm: float | Array = 0.0,
  length_logp: Array | None = None,
) -> tuple[Array, Array]:
  """Beam search over translations (module docstring): (the best finished tokens [B, A], EOS
  last, PAD after; its log P(y | x) [B], about NEG where nothing finished). With lm, an n-gram
  model's automaton (padir.decoding.ngram.Tables, its rows finite), prefixes and translations
  are ranked by log P(y | x) + lm_weight log P_lm(y) (DA-Transformer's joint
  n-gram search; lm_weight >= 0), and that sum is the score returned. With length_norm = b > 0,
  finished translations are ranked by that score divided by |y|^b (|y| counting EOS;
  DA-Transformer's length normalisation), which undoes the preference of a sum of
  log-probabilities for short translations; prefixes all have the same length at each step, so
  only the choice among finished translations changes. length_logp [B, A + 1], a log-prior
  over |y| (index = length, EOS counted; e.g. 0 at a known length and NEG elsewhere), is added
  to each finished translation's score after the normalisation.

  A prefix's probability mass, log sum_v beta(v), bounds every translation it can still become
  (each token, edge and the final EOS multiply it by at most 1, and the n-gram term only falls);
  divided by the longest it can still grow to (its tokens so far, plus one a vertex from its
  first vertex to the last), it bounds the normalised score as well, the bound being <= 0. So
  with early_exit the search stops once no row's prefix can beat the row's best finished
  translation: the same result as running over all A token positions (tested), in about the
  target's length of steps instead of A without normalisation, later with it."""
  B, A, V = logp_BAV.shape
  K = int(beam_size)
  if K < 1:
    raise ValueError(f"the DAG beam size must be >= 1, got {beam_size}")
  # the n-gram model's rows are finite (NEVER, not -inf); without one, a term of 0
  if lm is None:
    lm_rows = lambda state_BK: jnp.zeros((*state_BK.shape, V), jnp.float32)  # noqa: E731
    lm_advance = lambda state_BK, token_BK: state_BK  # noqa: E731
  else:
    lm_rows = functools.partial(ngram.rows, lm)
    lm_advance = functools.partial(ngram.advance, lm)
  lm_weight = jnp.asarray(lm_weight, jnp.float32)
  length_norm = jnp.asarray(length_norm, jnp.float32)
  if length_logp is None:
    length_BL = jnp.zeros((B, A + 1), jnp.float32)
  elif length_logp.shape != (B, A + 1):
    raise ValueError(f"length_logp must be [B, A + 1] = {(B, A + 1)}, got {length_logp.shape}")
  else:
    length_BL = length_logp.astype(jnp.float32)
  # the best length term a prefix of t words can still get: the max over lengths >= t + 1
  reach_BL = jax.lax.cummax(length_BL, axis=1, reverse=True)
  eos = tokenizer_lib.EOS_ID
  last_B = live_BA.sum(-1) - 1
  vertex_A = jnp.arange(A)
  at_last_BA = vertex_A[None] == last_B[:, None]
  # a prefix continues only at a live vertex before the last (the last one emits EOS)
  inner_BA = live_BA & ~at_last_BA
  p_BAV = jnp.exp(logp_BAV) * inner_BA[..., None]
  p_BAV = p_BAV.at[:, :, eos].set(0.0)  # EOS only ends a translation, at the last vertex
  p_BAV = p_BAV.at[:, :, tokenizer_lib.PAD_ID].set(0.0)  # never a word (banned by the model too)
  edges_BAZ = jnp.exp(links_BAZ)
  eos_last_B = jnp.take_along_axis(logp_BAV[..., eos], last_B[:, None], axis=1)[:, 0]
  start_BKA = jnp.where(
    (vertex_A[None, None] == 0) & (jnp.arange(K)[None, :, None] == 0), 0.0, dag_lib.NEG
  )
  state = Beam(
    jnp.broadcast_to(start_BKA, (B, K, A)),
    jnp.full((B, K, A), tokenizer_lib.PAD_ID, jnp.int32),
    jnp.full((B,), dag_lib.NEG * 4),
    jnp.full((B, A), tokenizer_lib.PAD_ID, jnp.int32),
    jnp.full((B, K), 0 if lm is None else lm.start, jnp.int32),
    jnp.zeros((B, K), jnp.float32),
  )

  def step(s: Beam, t):
    lm_BKV = lm_rows(s.lm_state_BK)  # log P_lm(next token | prefix)
    # finish: EOS at the last vertex
    fin_BK = jnp.take_along_axis(s.beta_BKA, last_B[:, None, None], axis=2)[..., 0]
    fin_BK = fin_BK + eos_last_B[:, None] + lm_weight * (s.lm_score_BK + lm_BKV[..., eos])
    fin_BK = fin_BK / (t + 1.0) ** length_norm  # t words and EOS
    fin_BK = fin_BK + jax.lax.dynamic_index_in_dim(length_BL, t + 1, axis=1)
    k_B = jnp.argmax(fin_BK, -1)
    fin_B = jnp.take_along_axis(fin_BK, k_B[:, None], axis=1)[:, 0]
    fin_BA = jnp.take_along_axis(s.tokens_BKA, k_B[:, None, None], axis=1)[:, 0]
    fin_BA = jnp.where(vertex_A[None] == t, eos, fin_BA)
    better_B = fin_B > s.best_B
    best_B = jnp.where(better_B, fin_B, s.best_B)
    best_BA = jnp.where(better_B[:, None], fin_BA, s.best_BA)
    # continue: every prefix + y, scored by the log-probability of all its paths
    cont_BKV = _logmatmul(s.beta_BKA, p_BAV)
    lm_cont_BKV = s.lm_score_BK[..., None] + lm_BKV
    _, pick_BC = jax.lax.top_k((cont_BKV + lm_weight * lm_cont_BKV).reshape(B, K * V), K)
    score_BC = jnp.take_along_axis(cont_BKV.reshape(B, K * V), pick_BC, axis=1)
    parent_BK, token_BK = pick_BC // V, (pick_BC % V).astype(jnp.int32)
    lm_score_BK = jnp.take_along_axis(lm_cont_BKV.reshape(B, K * V), pick_BC, axis=1)
    lm_state_BK = jnp.take_along_axis(s.lm_state_BK, parent_BK, axis=1)
    lm_state_BK = lm_advance(lm_state_BK, token_BK)
    beta_BKA = jnp.take_along_axis(s.beta_BKA, parent_BK[..., None], axis=1)
    emit_BKA = jnp.take_along_axis(
      jnp.swapaxes(logp_BAV, 1, 2), token_BK[..., None], axis=1
    )  # [B, K, A]: log p(token | vertex)
    alpha_BKA = jnp.where(inner_BA[:, None], beta_BKA + emit_BKA, dag_lib.NEG)
    alpha_BKA = jnp.where((score_BC > dag_lib.NEG / 2)[..., None], alpha_BKA, dag_lib.NEG)
    beta_BKA = _logmatmul(alpha_BKA, edges_BAZ)
    tokens_BKA = jnp.take_along_axis(s.tokens_BKA, parent_BK[..., None], axis=1)
    tokens_BKA = jnp.where(vertex_A[None, None] == t, token_BK[..., None], tokens_BKA)
    return Beam(beta_BKA, tokens_BKA, best_B, best_BA, lm_state_BK, lm_score_BK), None

  def open_rows(s: Beam, t: Array) -> Array:
    """[B] whether a prefix can still beat the row's best finished translation."""
    bound_BK = jax.nn.logsumexp(s.beta_BKA, axis=-1) + lm_weight * s.lm_score_BK
    # the longest translation a prefix can become: its t words, then one a vertex from its
    # first vertex with mass to the last, EOS included
    first_BK = jnp.argmax(s.beta_BKA > dag_lib.NEG / 2, axis=-1)
    longest_BK = t + 1.0 + (last_B[:, None] - first_BK)
    bound_BK = jnp.where(bound_BK > 0, bound_BK, bound_BK / longest_BK**length_norm)
    bound_BK = bound_BK + jax.lax.dynamic_index_in_dim(reach_BL, jnp.minimum(t + 1, A), axis=1)
    return bound_BK.max(-1) > s.best_B

  def cond(carry):
    t, s = carry
    return (t < A) & (open_rows(s, t).any() | (not early_exit))

  def body(carry):
    t, s = carry
    return t + 1, step(s, t)[0]

  _, state = jax.lax.while_loop(cond, body, (jnp.int32(0), state))
  return state.best_BA, state.best_B


def _graph(model: model_lib.Transformer, inputs_BS: Array) -> tuple[Array, Array, Array]:
  """The model's graph for the sources: log p(token | vertex) [B, A, V], log links [B, A, A],
  live vertices [B, A]."""
  k = model.cfg.dag_upsample
  if not k:
    raise ValueError("DAG decoding needs a model with dag_upsample >= 2")
  enc_BSD, enc_mask_BS = model.encode(inputs_BS)
  x_BA = dag_lib.upsample(inputs_BS, k)
  logp_BAV, links_BAZ = dag_lib.vertex_outputs(
    model, x_BA, enc_mask_BS, model.project_encoder(enc_BSD)
  )
  return logp_BAV, links_BAZ, x_BA != tokenizer_lib.PAD_ID


def decode_grid(
  model: model_lib.Transformer,
  inputs_BS: Array,
  lm_weight_N: Array,
  length_norm_N: Array,
  beam_size: int = BEAM_SIZE,
  lm: ngram.Tables | None = None,
) -> Array:
  """The beam's translations [N, B, max_target_length] at N settings (n-gram weight, length
  normalisation) from one pass of the model: each equal to `decode(..., "beam", ...)` at that
  setting (tested), the graph computed once instead of N times (a validation's grid)."""
  logp_BAV, links_BAZ, live_BA = _graph(model, inputs_BS)
  search = lambda w, b: beam(logp_BAV, links_BAZ, live_BA, beam_size, lm, w, length_norm=b)[0]
  tokens_NBA = jax.vmap(search)(
    jnp.asarray(lm_weight_N, jnp.float32), jnp.asarray(length_norm_N, jnp.float32)
  )
  return jax.vmap(lambda t: _fit(t, model.cfg.max_target_length))(tokens_NBA)


def decode(
  model: model_lib.Transformer,
  inputs_BS: Array,
  strategy: str = "lookahead",
  beam_size: int = BEAM_SIZE,
  lm: ngram.Tables | None = None,
  lm_weight: float | Array = 0.0,
  length_norm: float | Array = 0.0,
) -> dict[str, Array]:
  """DAG decoding (module docstring): tokens [B, max_target_length], PAD after the first EOS.
  lm, lm_weight and length_norm: the beam's n-gram model and length normalisation (`beam`);
  other strategies refuse an n-gram model."""
  if strategy not in STRATEGIES:
    raise ValueError(f"the DAG decoding strategy must be one of {STRATEGIES}, got {strategy!r}")
  if lm is not None and strategy != "beam":
    raise ValueError(f"an n-gram model joins the DAG's beam search only, not {strategy!r}")
  logp_BAV, links_BAZ, live_BA = _graph(model, inputs_BS)
  if strategy == "viterbi":
    tokens_BA = viterbi(logp_BAV, links_BAZ, live_BA)[0]
  elif strategy == "beam":
    tokens_BA = beam(
      logp_BAV, links_BAZ, live_BA, beam_size, lm, lm_weight, length_norm=length_norm
    )[0]
  else:
    tokens_BA = walk(logp_BAV, links_BAZ, live_BA, lookahead=strategy == "lookahead")
  return {"tokens": _fit(tokens_BA, model.cfg.max_target_length)}
