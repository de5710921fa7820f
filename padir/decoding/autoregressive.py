"""Inference: greedy and beam AR decoding; PaDIR refinement lives in padir.decoding.refinement (its
`refine`, `RefineOptions` and `legacy_options` are re-exported here).

AR beam search (the paper's AR baselines decode with 5 beams; distillation teachers too), with
fairseq's bookkeeping: each step ranks the extensions of the W = beam_size alive prefixes by
their summed log-probability and takes the E = 2W best; those among the first W that end (EOS,
or max_len tokens reached without EOS) are finished and scored
    sum_t log p(y_t | y_<t, x) / lp(n),    lp(n) = ((5 + n) / 6) ** length_penalty
(Wu et al. 2016; n counts the EOS), and the W best that did not end stay alive. An input is done
once W hypotheses have finished; the best-scoring finished one is returned. So beam_size=1 is
greedy decoding, and a beam at least as large as the number of hypotheses is exhaustive search.
Both AR decoders keep a KV cache (Transformer.init_cache / decode_step): step t runs the decoder
on position t alone, attending to the cached projections of positions < t, and the beam search
reorders the cache with its beams. The cross-attention keys and values are projected once.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from gmlm.core import draws
from padir.data import tokenizer as tokenizer_lib
from padir.decoding.refinement import RefineOptions, gnmt_penalty, legacy_options, refine
from padir.model import losses
from padir.model import transformer as model_lib

__all__ = ["RefineOptions", "beam_search", "drop_stutter", "greedy_ar", "legacy_options", "refine"]

Array = jax.Array


def _cache_prefix(
  cache: model_lib.KVCache, width: int, full: model_lib.KVCache
) -> model_lib.KVCache:
  """`cache` cut (or extended with zeros) to its first `width` positions, its fixed part cut
  from `full` (init_cache's, at max_len): a step t < width reads nothing beyond them (the
  causal mask), so attending over `width` slots instead of max_len gives the same result for
  less work. The positional attention's weights are cut likewise (rows and columns)."""

  def fit(a, axis):
    if a is None:
      return None
    have = a.shape[axis]
    if have >= width:
      return jax.lax.slice_in_dim(a, 0, width, axis=axis)
    pad = [(0, 0)] * a.ndim
    pad[axis] = (0, width - have)
    return jnp.pad(a, pad)

  prefix = tuple(
    p.replace(
      self_k_MNHT=fit(p.self_k_MNHT, 3),
      self_v_MNTH=fit(p.self_v_MNTH, 2),
      pos_v_MNTH=fit(p.pos_v_MNTH, 2),
    )
    for p in cache.prefix
  )
  fixed = tuple(
    f if f.pos_probs_TNT is None else f.replace(pos_probs_TNT=fit(fit(f.pos_probs_TNT, 0), 2))
    for f in full.fixed
  )
  return cache.replace(prefix=prefix, fixed=fixed)


def cache_widths(max_len: int, window: int) -> list[int]:
  """The cache widths greedy_ar(window=k) decodes at: k, 2k, ..., max_len (window 0: max_len)."""
  if window < 0:
    raise ValueError(f"window must be >= 0 (0 = the whole cache), got {window}")
  if not window or window >= max_len:
    return [max_len]
  return [min(w, max_len) for w in range(window, max_len + window, window)]


def greedy_ar(model: model_lib.Transformer, inputs_BS: Array, window: int = 0) -> Array:
  """Greedy decoding of the AR baseline: tokens [B, T], PAD after the first EOS. The loop ends
  when every row has emitted its EOS (so a batch costs its longest output's decoder passes).
  window = k > 0: steps [0, k) attend over a cache of k slots, steps [k, 2k) over 2k, ... (one
  loop per width, `cache_widths`), not every step over max_target_length slots: the same
  tokens, less attention work for short outputs (each width compiles its own loop body)."""
  B, T = inputs_BS.shape[0], model.cfg.max_target_length
  enc_BSD, enc_mask_BS = model.encode(inputs_BS)

  def body(state):
    t, out_BT, done_B, prev_B, cache = state
    logits_BV, cache = model.decode_step(prev_B, t, cache)
    next_B = draws.argmax(losses.ban_never_predicted(logits_BV))
    next_B = jnp.where(done_B, tokenizer_lib.PAD_ID, next_B)
    done_B = done_B | (next_B == tokenizer_lib.EOS_ID)
    return (t + 1, out_BT.at[:, t].set(next_B), done_B, next_B, cache)

  widths = cache_widths(T, window)
  cache = model.init_cache(enc_BSD, enc_mask_BS, T)
  state = (
    jnp.asarray(0, jnp.int32),
    jnp.full((B, T), tokenizer_lib.PAD_ID, jnp.int32),
    jnp.zeros((B,), bool),
    jnp.full((B,), tokenizer_lib.BOS_ID, jnp.int32),
    cache if len(widths) == 1 else _cache_prefix(cache, widths[0], cache),
  )
  for i, width in enumerate(widths):
    if i:
      state = (*state[:4], _cache_prefix(state[4], width, cache))

    def running(state, width=width):  # stop once every row has its EOS: the rest would be PAD
      t, _, done_B, _, _ = state
      return (t < width) & ~jnp.all(done_B)

    state = jax.lax.while_loop(running, body, state)
  return state[1]


length_penalty_factor = gnmt_penalty  # lp(n) = ((5 + n) / 6) ** alpha, GNMT


@struct.dataclass
class BeamState:
  """Loop state of beam_search: per input, W alive prefixes and up to W finished hypotheses."""

  t: Array  # [] the position being decoded
  alive_BWT: Array  # tokens so far, PAD from position t on
  alive_logp_BW: Array  # summed token log-probabilities; -inf marks an empty slot
  finished_BWT: Array  # PAD after the EOS
  finished_score_BW: Array  # length-normalized, best first; -inf marks an empty slot
  num_finished_B: Array
  cache: model_lib.KVCache  # of the B * W alive prefixes, in beam order


def beam_search(
  model: model_lib.Transformer,
  inputs_BS: Array,
  beam_size: int,
  max_len: int | None = None,
  length_penalty: float = 0.6,
) -> dict[str, Array]:
  """Beam search with the AR baseline (see the module docstring).

  Returns tokens [B, T] (the best hypothesis, PAD after its EOS), scores [B] (its normalized
  log-probability), every finished beam best first (beams [B, W, T], beam_scores [B, W], -inf
  for empty slots) and the number of steps run; T = max_len (default: max_target_length).
  Call it under nnx.jit with beam_size, max_len and length_penalty static.
  """
  if model.cfg.decoder != "ar":
    raise ValueError("beam_search needs a model with decoder='ar'")
  B, W = inputs_BS.shape[0], beam_size
  T = max_len or model.cfg.max_target_length
  if not 1 <= T <= model.cfg.max_target_length:
    raise ValueError(
      f"max_len={max_len} must be in [1, max_target_length={model.cfg.max_target_length}]"
    )
  V = model.cfg.vocab_size
  E = min(2 * W, W * V)  # ranked extensions: at most W of them end in EOS, so W stay alive
  enc_BSD, enc_mask_BS = model.encode(inputs_BS)
  enc_MSD = jnp.repeat(enc_BSD, W, axis=0)  # M = B * W
  enc_mask_MS = jnp.repeat(enc_mask_BS, W, axis=0)

  def gather_beams(x_B___, index_B_):
    """out[b, j] = x[b, index[b, j]]."""
    return jnp.take_along_axis(
      x_B___, index_B_.reshape(index_B_.shape + (1,) * (x_B___.ndim - 2)), 1
    )

  def cond(s: BeamState):
    return (s.t < T) & jnp.any(s.num_finished_B < W)

  def body(s: BeamState):
    t = s.t
    last_M = jax.lax.dynamic_index_in_dim(s.alive_BWT, jnp.maximum(t - 1, 0), 2, False)
    in_M = jnp.where(t == 0, tokenizer_lib.BOS_ID, last_M.reshape(B * W))
    logits_MV, cache = model.decode_step(in_M, t, s.cache)
    logits_MV = losses.ban_never_predicted(logits_MV)
    logp_BWV = jax.nn.log_softmax(logits_MV.astype(jnp.float32), -1).reshape(B, W, V)
    cand_logp_BE, flat_BE = jax.lax.top_k(
      (s.alive_logp_BW[..., None] + logp_BWV).reshape(B, W * V), E
    )
    beam_BE, token_BE = flat_BE // V, (flat_BE % V).astype(jnp.int32)
    cand_BET = gather_beams(s.alive_BWT, beam_BE).at[:, :, t].set(token_BE)
    ends_BE = (token_BE == tokenizer_lib.EOS_ID) | (t == T - 1)
    # Finish the ending extensions ranked in the first W (finite: not from an empty slot), unless
    # the input is already done.
    finish_BE = (
      ends_BE
      & (jnp.arange(E)[None] < W)
      & jnp.isfinite(cand_logp_BE)
      & (s.num_finished_B < W)[:, None]
    )
    lp = length_penalty_factor((t + 1).astype(jnp.float32), length_penalty)
    score_BU = jnp.concatenate(
      [s.finished_score_BW, jnp.where(finish_BE, cand_logp_BE / lp, -jnp.inf)], 1
    )
    finished_score_BW, pick_BW = jax.lax.top_k(score_BU, W)
    finished_BWT = gather_beams(jnp.concatenate([s.finished_BWT, cand_BET], 1), pick_BW)
    alive_logp_BW, keep_BW = jax.lax.top_k(jnp.where(ends_BE, -jnp.inf, cand_logp_BE), W)
    parent_BW = gather_beams(beam_BE, keep_BW)  # the alive beam each new one extends

    def reorder(x_M___):
      x_BW___ = x_M___.reshape(B, W, *x_M___.shape[1:])
      return gather_beams(x_BW___, parent_BW).reshape(x_M___.shape)

    cache = cache.replace(prefix=jax.tree.map(reorder, cache.prefix))
    return BeamState(
      t=t + 1,
      alive_BWT=gather_beams(cand_BET, keep_BW),
      alive_logp_BW=alive_logp_BW,
      finished_BWT=finished_BWT,
      finished_score_BW=finished_score_BW,
      num_finished_B=s.num_finished_B + finish_BE.sum(-1),
      cache=cache,
    )

  empty_BWT = jnp.full((B, W, T), tokenizer_lib.PAD_ID, jnp.int32)
  # One live slot per input at the start, so W copies of the empty prefix do not fill the beam.
  alive_logp_BW = jnp.broadcast_to(jnp.where(jnp.arange(W) == 0, 0.0, -jnp.inf), (B, W))
  state = BeamState(
    t=jnp.int32(0),
    alive_BWT=empty_BWT,
    alive_logp_BW=alive_logp_BW,
    finished_BWT=empty_BWT,
    finished_score_BW=jnp.full((B, W), -jnp.inf),
    num_finished_B=jnp.zeros((B,), jnp.int32),
    cache=model.init_cache(enc_MSD, enc_mask_MS, T),
  )
  state = jax.lax.while_loop(cond, body, state)
  return {
    "tokens": state.finished_BWT[:, 0],
    "scores": state.finished_score_BW[:, 0],
    "beams": state.finished_BWT,
    "beam_scores": state.finished_score_BW,
    "steps": state.t,
  }


def drop_stutter(ids: Sequence[int] | np.ndarray) -> list[int]:
  """Removes tokens equal to their left neighbour (the paper's post-processing)."""
  out = []
  for i in np.asarray(ids).tolist():
    if not out or i != out[-1]:
      out.append(i)
  return out
