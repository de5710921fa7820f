"""PaDIR decoding by iterative refinement (paper App. L.1.1, L.2), as the authors' released
decoder runs it (google-research `padir/decoding.py`), with each difference an option.

Candidates. The length predictor's top num_lengths lengths n; around each, the O =
length_offsets lengths n + o for o in -(O//2) .. O//2 (clipped to [1, T]; the reference's
`beam_length`); for each, num_starts independent random starts (`parallel_decodes`). The G =
num_lengths O num_starts candidates of the B sources are decoded together as M = B G rows.

Passes. X(0) holds noise tokens inside the candidate's length (uniform regular tokens, or
[MASK] with init="mask"), PAD after. Pass t computes the decoder's logits once for every row and
    Y = argmax decoder(X(t), h)     (temperature 0), or
    Y_i ~ p^(1/T)(. | X(t), h)      (temperature T > 0: gmlm.core.draws.temper + categorical),
then resets some positions i to the noise token X(0)_i (or [MASK]):
- stutter="initial" (the reference): Y_i = Y_{i-1}, on every pass including the last;
  stutter="mask" (our former rule): to [MASK], on every pass but the last; "keep": never;
- remask="confidence" (Mask-Predict, Ghazvininejad et al. 2019): after pass t of S =
  num_steps, the floor(n (S - t) / S) positions of lowest p(Y_i) are re-noised (t = 1..S; none
  after the last pass).
X(t+1) = Y with the resets. A row whose X(t+1) = X(t) is at a fixed point (early_stop): it is
frozen (with the Mask-Predict schedule only once no re-noising is left; with stutter="mask"
when the prediction before its resets equals X(t), as before), and the loop ends when every
row is. Freezing is per row, so a row's result does not depend on its batch. A frozen row
still costs its share of each later pass (row_stop="mask": computed, its result discarded)
unless row_stop="compact": each pass then decodes the live rows only, gathered into the
smallest of M, M/2, M/4, M/8 rows (rounded up) that holds them (a switch between the
compiled row counts: on a CPU a pass costs in proportion to its rows).

Output. Positions dropped after the loop: drop="initial" (the reference) every position still
equal to its noise token X(0)_i, which includes a correct token that happens to equal its noise
(probability 1/(V - 6) per position for random noise: rare at V = 32k, not at V = 32);
drop="reset" only the positions reset on the last pass; "none" none. The kept tokens move left
in order; the hypothesis ends at its first EOS. Its score, from the last pass's log-probabilities
of the kept tokens (the untempered model's, also when sampling):
    score = sum_i log p(Y_i)          (score="sum", the reference)   or  mean_i (score="mean"),
    divided by lp(n) = ((5 + n) / 6) ** brevity_alpha with n kept tokens (GNMT; 0 = off).
rerank="ar" replaces sum_i log p(Y_i) by the AR model's teacher-forced log-probability of the
kept tokens, log p_AR(y | x) = sum_i log p_AR(y_i | y_<i, x) (fairseq's external reranker).
length_prior adds log p(n | x), the length predictor's log-probability of the length n the
candidate was decoded at: the score becomes a joint log-probability of length and tokens. (The
reference's sum counts only kept tokens, so a candidate far too short, whose surplus positions
stutter and are dropped, can outscore the right one; the length term stops that.)
An empty hypothesis scores -inf. Each source returns its best candidate (first among ties).

cache_cross: every pass reuses the decoder layers' cross-attention keys and values of the
encoder states, projected once per source (model.project_encoder; the reference projects them
at every pass of every candidate).

Not ported from the reference: it places EOS at position n - 1 of X(0) (our training noises
the EOS position like any other, so the decoder predicts it); its learned rejecter.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx, struct

from gmlm.core import draws
from padir.data import tokenizer as tokenizer_lib
from padir.model import losses
from padir.model import transformer as model_lib

Array = jax.Array

INITS = ("random", "mask")
STUTTERS = ("initial", "mask", "keep")
DROPS = ("initial", "reset", "none")
SCORES = ("sum", "mean")
REMASKS = ("none", "confidence")
RERANKS = ("none", "ar")
ROW_STOPS = ("mask", "compact")


@dataclasses.dataclass(frozen=True)
class RefineOptions:
  """The decoding options; the defaults are the paper's (the released decoder's) behaviour.
  Hashable: pass it to a jitted function as a static argument."""

  num_steps: int = 4  # decoder passes S at most (the paper: 4)
  num_lengths: int = 5  # top-G predicted lengths (the paper: 5)
  length_offsets: int = 1  # O (odd): lengths n - O//2 .. n + O//2 around each predicted n
  num_starts: int = 1  # R independent random starts per length
  init: Literal["random", "mask"] = "random"  # the noise of X(0)
  stutter: Literal["initial", "mask", "keep"] = "initial"
  drop: Literal["initial", "reset", "none"] = "initial"
  score: Literal["sum", "mean"] = "sum"
  brevity_alpha: float = 0.0  # GNMT lp(n) exponent; 0 = no penalty
  early_stop: bool = True
  cache_cross: bool = True  # (not in the reference)
  remask: Literal["none", "confidence"] = "none"  # Mask-Predict re-noising (not in it)
  temperature: float = 0.0  # 0 = argmax (not in it: sampled refinement)
  top_k: int = 0  # sampling truncation (0 = off), draws.temper
  top_p: float = 1.0  # nucleus truncation (1 = off)
  rerank: Literal["none", "ar"] = "none"  # "ar": needs refine(..., ar_model=) (not in it)
  length_prior: bool = False  # add log p(n | x) of the candidate's length n (not in it)
  # Frozen rows (early_stop) in later passes: "mask" computes them and keeps their old values;
  # "compact" gathers the live rows into the smallest of a few row counts (M, M/2, M/4, M/8,
  # rounded up) that holds them and decodes those only (not in it). The same tokens.
  row_stop: Literal["mask", "compact"] = "mask"

  def __post_init__(self):
    for name, allowed in (
      ("init", INITS),
      ("stutter", STUTTERS),
      ("drop", DROPS),
      ("score", SCORES),
      ("remask", REMASKS),
      ("rerank", RERANKS),
      ("row_stop", ROW_STOPS),
    ):
      if getattr(self, name) not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
    for name in ("num_steps", "num_lengths", "length_offsets", "num_starts"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
    if self.length_offsets % 2 == 0:
      raise ValueError(f"length_offsets must be odd, got {self.length_offsets}")
    if self.temperature < 0 or self.brevity_alpha < 0 or self.top_k < 0:
      raise ValueError("temperature, brevity_alpha and top_k must be >= 0")
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

  @property
  def num_candidates(self) -> int:
    """G = num_lengths x length_offsets x num_starts hypotheses per source."""
    return self.num_lengths * self.length_offsets * self.num_starts


LEGACY = {"stutter": "keep", "drop": "none", "score": "mean", "num_lengths": 1}

# Named decoders: the RefineOptions fields each changes from the paper's. "length-prior" adds
# log p(n | x) to each candidate's score; "length-prior-reset" also drops only the positions the
# last pass reset (not every token equal to its noise, which happens at 1/V per position).
VARIANTS = {
  "paper": {},
  "length-prior": {"length_prior": True},
  "length-prior-reset": {"length_prior": True, "drop": "reset"},
}


def legacy_options(remask_stutter: bool, **overrides) -> RefineOptions:
  """Our decoder before the reference's rules: stutter re-masked with [MASK] between passes
  (remask_stutter) or kept, nothing dropped, the mean log-probability ranks the candidates."""
  stutter = "mask" if remask_stutter else "keep"
  return RefineOptions(**{**LEGACY, "stutter": stutter, **overrides})


@struct.dataclass
class RefineState:
  """Loop state of refine: per row m of the M candidates."""

  t: Array  # [] passes run
  x_MT: Array  # the hypothesis X(t)
  logp_MT: Array  # log p of each position's last prediction (untempered)
  reset_MT: Array  # positions reset by the row's last pass
  passes_M: Array  # passes run on the row before it froze
  frozen_M: Array  # at a fixed point


def stutter_mask(x_MT: Array) -> Array:
  """Positions holding the token of their left neighbour (PAD excluded)."""
  prev_MT = jnp.pad(x_MT[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
  return (x_MT == prev_MT) & (x_MT != tokenizer_lib.PAD_ID)


def lowest_confidence_mask(logp_MT: Array, inside_MT: Array, num_M: Array) -> Array:
  """The num_M[m] positions of lowest logp inside the length (ties: the leftmost first)."""
  conf_MT = jnp.where(inside_MT, logp_MT, jnp.inf)
  rank_MT = jnp.argsort(jnp.argsort(conf_MT, axis=-1, stable=True), axis=-1, stable=True)
  return (rank_MT < num_M[:, None]) & inside_MT


def length_log_probs(length_logits_BC: Array) -> Array:
  """[B, C] log p(n | x) of the length predictor over n = 0..C-1 (length 0 excluded: EOS)."""
  return jax.nn.log_softmax(length_logits_BC.astype(jnp.float32).at[:, 0].set(-jnp.inf), -1)


def candidate_lengths(length_logits_BC: Array, options: RefineOptions, max_len: int) -> Array:
  """[B, G] target lengths (EOS included): the top num_lengths, each with its length_offsets
  neighbours, each of those num_starts times."""
  valid_BC = length_logits_BC.at[:, 0].set(-jnp.inf)  # length 0 is impossible (EOS)
  top = jax.lax.top_k(valid_BC, options.num_lengths)[1]  # [B, num_lengths]
  O = options.length_offsets
  around = top[:, :, None] + jnp.arange(O)[None, None] - O // 2  # [B, num_lengths, O]
  lengths_BG = jnp.clip(around, 1, max_len).reshape(top.shape[0], -1)
  return jnp.repeat(lengths_BG, options.num_starts, axis=1).astype(jnp.int32)


def longest_candidate(
  model: model_lib.Transformer, inputs_BS: Array, options: RefineOptions
) -> tuple[Array, tuple[Array, Array]]:
  """([] the longest candidate length of the batch, EOS included: what `trimmed_width` rounds;
  the encoder's (states, mask), for refine(..., encoded=) not to encode again)."""
  encoded = model.encode(inputs_BS)
  T = model.cfg.max_target_length
  return candidate_lengths(model.length_logits(*encoded), options, T).max(), encoded


def trimmed_width(longest: int, max_len: int, multiple: int) -> int:
  """The decode width for a batch whose longest candidate has `longest` positions: rounded up to
  a multiple of `multiple` (so at most ceil(max_len / multiple) widths compile), at most
  max_len."""
  if multiple < 1:
    raise ValueError(f"the width multiple must be >= 1, got {multiple}")
  return int(min(max_len, -(-int(longest) // multiple) * multiple))


def compact(tokens_MT: Array, keep_MT: Array, logp_MT: Array) -> tuple[Array, Array, Array]:
  """The kept tokens moved left in order, cut after the first EOS, PAD after; the mask of the
  result's positions that hold a kept token; the log-probabilities moved with their tokens."""
  order_MT = jnp.argsort(~keep_MT, axis=-1, stable=True)
  tokens_MT, keep_MT, logp_MT = (
    jnp.take_along_axis(a_MT, order_MT, -1) for a_MT in (tokens_MT, keep_MT, logp_MT)
  )
  eos_MT = keep_MT & (tokens_MT == tokenizer_lib.EOS_ID)
  keep_MT = keep_MT & ~((jnp.cumsum(eos_MT, -1) - eos_MT) > 0)
  return jnp.where(keep_MT, tokens_MT, tokenizer_lib.PAD_ID), keep_MT, logp_MT


def gnmt_penalty(length: Array, alpha: float) -> Array:
  """lp(n) = ((5 + n) / 6) ** alpha."""
  return ((5.0 + length) / 6.0) ** alpha


def candidate_scores(
  logp_MT: Array,
  keep_MT: Array,
  options: RefineOptions,
  ar_logp_M: Array | None = None,
  length_logp_M: Array | None = None,
) -> Array:
  """The ranking score of each candidate (module docstring) from the log-probabilities of its
  tokens at the kept positions keep_MT (or the AR reranker's log-probabilities ar_logp_M), plus
  length_logp_M, log p(n | x) of the length it was decoded at, with options.length_prior."""
  n_M = keep_MT.sum(-1).astype(jnp.float32)
  total_M = (jnp.where(keep_MT, logp_MT, 0.0)).sum(-1) if ar_logp_M is None else ar_logp_M
  if options.score == "mean":
    total_M = total_M / jnp.maximum(n_M, 1.0)
  if options.brevity_alpha:
    total_M = total_M / gnmt_penalty(n_M, options.brevity_alpha)
  if options.length_prior:
    if length_logp_M is None:
      raise ValueError("length_prior=True needs the candidates' length log-probabilities")
    total_M = total_M + length_logp_M
  return jnp.where(n_M > 0, total_M, -jnp.inf)


def ar_log_prob(
  ar_model: model_lib.Transformer, inputs_BS: Array, tokens_MT: Array, num_candidates: int
) -> Array:
  """[M] teacher-forced log p_AR(tokens | source) of each candidate (PAD positions excluded);
  row m belongs to source m // num_candidates."""
  if ar_model.cfg.decoder != "ar":
    raise ValueError("rerank='ar' needs a model with decoder='ar'")
  T = tokens_MT.shape[1]
  if ar_model.cfg.max_target_length < T:
    raise ValueError(
      f"the AR reranker's max_target_length={ar_model.cfg.max_target_length} is below the "
      f"candidates' {T}"
    )
  enc_BSD, enc_mask_BS = ar_model.encode(inputs_BS)
  fixed = jax.tree.map(
    lambda a: jnp.repeat(a, num_candidates, 0), ar_model.project_encoder(enc_BSD)
  )
  enc_mask_MS = jnp.repeat(enc_mask_BS, num_candidates, 0)
  M = tokens_MT.shape[0]
  shifted_MT = jnp.concatenate(
    [jnp.full((M, 1), tokenizer_lib.BOS_ID, tokens_MT.dtype), tokens_MT[:, :-1]], axis=1
  )
  logits_MTV = ar_model.decode(shifted_MT, None, enc_mask_MS, fixed=fixed)
  logp_MTV = jax.nn.log_softmax(losses.ban_never_predicted(logits_MTV), -1)
  logp_MT = jnp.take_along_axis(logp_MTV, tokens_MT[..., None], -1)[..., 0]
  return jnp.where(tokens_MT != tokenizer_lib.PAD_ID, logp_MT, 0.0).sum(-1)


def _row_keys(key: Array, B: int) -> Array:
  """[B] keys: one per source (given), or fold_in(key, b) from a single key."""
  if not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
    key = jax.random.wrap_key_data(key)
  if key.shape == ():
    return jax.vmap(lambda b: jax.random.fold_in(key, b))(jnp.arange(B))
  if key.shape != (B,):
    raise ValueError(f"key must be one key or one per source ({B}), got shape {key.shape}")
  return key


def refine(
  model: model_lib.Transformer,
  inputs_BS: Array,
  key: Array,
  options: RefineOptions | None = None,
  *,
  ar_model: model_lib.Transformer | None = None,
  target_length: int | None = None,
  width: int | None = None,
  encoded: tuple[Array, Array] | None = None,
  remask_stutter: bool | None = None,
  **overrides,
) -> dict[str, Array]:
  """PaDIR decoding of a batch of sources [B, S] (EOS-terminated, PAD-padded).

  key: one key, or [B] keys (one per source: a source then decodes to the same tokens whatever
  its batch). options: RefineOptions (default: the paper's), fields overridable by keyword
  (refine(m, x, k, num_steps=10)). remask_stutter (True / False) selects our former decoder
  (legacy_options). target_length forces every candidate's length (EOS included). ar_model:
  the AR reranker (options.rerank="ar"). width (static): decode on the first `width` target
  positions only, which must hold every candidate length (`trimmed_width`); the tokens equal the
  full-width decode's (PAD positions are masked out of attention, and X(0) is drawn at full
  width and cut), at width / T of the decoder's work. encoded: model.encode(inputs_BS) when
  the caller has it. Call under jit with options static.

  Returns tokens [B, T] (the best candidate: kept tokens, EOS, then PAD), lengths [B] (its
  tokens, EOS included), scores [B], passes [B] (its decoder passes), noise [B, T] (its X(0)),
  steps [] (loop
  iterations), candidates [B, G, T], candidate_scores [B, G], candidate_lengths [B, G] (the
  lengths tried); T = max_target_length.
  """
  if remask_stutter is not None:
    options = legacy_options(remask_stutter, **overrides)
  else:
    options = dataclasses.replace(options or RefineOptions(), **overrides)
  if options.rerank == "ar" and ar_model is None:
    raise ValueError("rerank='ar' needs refine(..., ar_model=an AR Transformer)")
  B, T, V = inputs_BS.shape[0], model.cfg.max_target_length, model.cfg.vocab_size
  W = T if width is None else int(width)
  if not 1 <= W <= T:
    raise ValueError(f"width must be in [1, max_target_length={T}], got {width}")
  G, S = options.num_candidates, options.num_steps
  M = B * G
  enc_BSD, enc_mask_BS = model.encode(inputs_BS) if encoded is None else encoded
  length_logits_BC = model.length_logits(enc_BSD, enc_mask_BS)  # also with length offsets
  if target_length is None:
    lengths_BG = candidate_lengths(length_logits_BC, options, T)
  else:
    lengths_BG = jnp.full((B, G), target_length, jnp.int32)
  lengths_M = lengths_BG.reshape(M)
  length_logp_M = jnp.take_along_axis(length_log_probs(length_logits_BC), lengths_BG, -1)
  length_logp_M = length_logp_M.reshape(M)
  lengths_M = jnp.minimum(lengths_M, W)  # a no-op for width=None or >= trimmed_width
  inside_MT = jnp.arange(W)[None] < lengths_M[:, None]
  keys_M2 = jax.vmap(lambda k: jax.random.split(k, 2 * G))(_row_keys(key, B)).reshape(M, 2)
  if options.init == "random":
    noise_MT = jax.vmap(lambda k: jax.random.randint(k, (T,), tokenizer_lib.NUM_SPECIAL, V))(
      keys_M2[:, 0]
    )
  else:
    noise_MT = jnp.full((M, T), tokenizer_lib.MASK_ID)
  x0_MT = jnp.where(inside_MT, noise_MT[:, :W], tokenizer_lib.PAD_ID).astype(jnp.int32)
  enc_mask_MS = jnp.repeat(enc_mask_BS, G, axis=0)
  take = lambda a_M_, rows_R: a_M_ if rows_R is None else a_M_[rows_R]
  if options.cache_cross:
    fixed = jax.tree.map(lambda a: jnp.repeat(a, G, 0), model.project_encoder(enc_BSD))
    decoder = lambda x_RT, rows_R: model.decode(
      x_RT, None, take(enc_mask_MS, rows_R), fixed=jax.tree.map(lambda a: take(a, rows_R), fixed)
    )
  else:
    enc_MSD = jnp.repeat(enc_BSD, G, axis=0)
    decoder = lambda x_RT, rows_R: model.decode(
      x_RT, take(enc_MSD, rows_R), take(enc_mask_MS, rows_R)
    )

  def predict_rows(s: RefineState, rows_R: Array | None) -> tuple[Array, Array]:
    """The pass's prediction and its log-probabilities for the rows rows_R (R of the M; None:
    all, in order)."""
    logits_RTV = losses.ban_never_predicted(decoder(take(s.x_MT, rows_R), rows_R)[..., :V])
    logp_RTV = jax.nn.log_softmax(logits_RTV, -1)
    if options.temperature == 0.0:
      pred_RT = draws.argmax(logits_RTV)
    else:
      tempered_RTV = draws.temper(logits_RTV, options.temperature, options.top_k, options.top_p)
      step_keys_R = jax.vmap(lambda k: jax.random.fold_in(k, s.t))(take(keys_M2[:, 1], rows_R))
      pred_RT = jax.vmap(draws.categorical)(step_keys_R, tempered_RTV)
    pred_RT = jnp.where(take(inside_MT, rows_R), pred_RT, tokenizer_lib.PAD_ID).astype(jnp.int32)
    return pred_RT, jnp.take_along_axis(logp_RTV, pred_RT[..., None], -1)[..., 0]

  # Row counts a compacting pass may run at: the smallest that holds the live rows is used.
  sizes = sorted({-(-M // 2**k) for k in range(4)}) if options.row_stop == "compact" else [M]

  def predict(s: RefineState) -> tuple[Array, Array]:
    """[M, W] prediction and log-probabilities; with row_stop="compact" only the live rows
    (and enough frozen ones to fill the row count) are decoded, the other rows' values are
    zeros that the caller discards (a frozen row keeps its state)."""
    if len(sizes) == 1:
      return predict_rows(s, None)
    order_M = jnp.argsort(s.frozen_M, stable=True)  # live rows first

    def at_size(R):
      def branch(s):
        rows_R = order_M[:R]
        pred_RT, logp_RT = predict_rows(s, rows_R)
        pred_MT = jnp.zeros((M, W), jnp.int32).at[rows_R].set(pred_RT)
        return pred_MT, jnp.zeros((M, W), jnp.float32).at[rows_R].set(logp_RT)

      return branch

    live = jnp.sum(~s.frozen_M)
    index = jnp.searchsorted(jnp.asarray(sizes), live)  # the first size >= live
    return jax.lax.switch(index, [at_size(R) for R in sizes], s)

  def body(s: RefineState) -> RefineState:
    pred_MT, logp_MT = predict(s)
    last = s.t + 1 == S
    reset_MT = jnp.zeros_like(inside_MT)
    if options.stutter == "initial":
      reset_MT = stutter_mask(pred_MT)
    elif options.stutter == "mask":
      reset_MT = stutter_mask(pred_MT) & ~last
    x_MT = jnp.where(
      reset_MT, tokenizer_lib.MASK_ID if options.stutter == "mask" else x0_MT, pred_MT
    )
    schedule_done_M = jnp.ones((M,), bool)
    if options.remask == "confidence":
      num_M = (lengths_M * (S - 1 - s.t)) // S
      remask_MT = lowest_confidence_mask(logp_MT, inside_MT, num_M)
      x_MT = jnp.where(remask_MT, x0_MT, x_MT)
      reset_MT = reset_MT | remask_MT
      schedule_done_M = num_M == 0
    live_M = ~s.frozen_M
    keep = lambda new_M_, old_M_: jnp.where(
      live_M.reshape((M,) + (1,) * (new_M_.ndim - 1)), new_M_, old_M_
    )
    frozen_M = s.frozen_M
    if options.early_stop:
      # stutter="mask" (our former rule) compares the prediction before its [MASK] resets.
      new_MT = pred_MT if options.stutter == "mask" else x_MT
      frozen_M = frozen_M | (jnp.all(new_MT == s.x_MT, -1) & schedule_done_M)
    return RefineState(
      t=s.t + 1,
      x_MT=keep(x_MT, s.x_MT),
      logp_MT=keep(logp_MT, s.logp_MT),
      reset_MT=keep(reset_MT, s.reset_MT),
      passes_M=s.passes_M + live_M,
      frozen_M=frozen_M,
    )

  state = RefineState(
    t=jnp.int32(0),
    x_MT=x0_MT,
    logp_MT=jnp.zeros((M, W), jnp.float32),
    reset_MT=jnp.zeros((M, W), bool),
    passes_M=jnp.zeros((M,), jnp.int32),
    frozen_M=jnp.zeros((M,), bool),
  )
  state = jax.lax.while_loop(lambda s: (s.t < S) & ~jnp.all(s.frozen_M), body, state)

  if options.drop == "initial":
    dropped_MT = state.x_MT == x0_MT
  elif options.drop == "reset":
    dropped_MT = state.reset_MT
  else:
    dropped_MT = jnp.zeros_like(inside_MT)
  tokens_MT, keep_MT, logp_MT = compact(state.x_MT, inside_MT & ~dropped_MT, state.logp_MT)
  ar_logp_M = None
  if options.rerank == "ar":
    ar_logp_M = ar_log_prob(ar_model, inputs_BS, tokens_MT, G)
  score_M = candidate_scores(logp_MT, keep_MT, options, ar_logp_M, length_logp_M)
  score_BG = score_M.reshape(B, G)
  best_B = jnp.argmax(score_BG, axis=-1)
  # back to T positions (PAD beyond the width): the shapes do not depend on the width
  tokens_MT, x0_MT = (
    jnp.pad(a_MW, ((0, 0), (0, T - W)), constant_values=tokenizer_lib.PAD_ID)
    for a_MW in (tokens_MT, x0_MT)
  )
  pick = lambda a_M_: a_M_.reshape(B, G, *a_M_.shape[1:])[jnp.arange(B), best_B]
  return {
    "tokens": pick(tokens_MT),
    "lengths": pick(keep_MT.sum(-1)),
    "scores": pick(score_M),
    "passes": pick(state.passes_M),
    "noise": pick(x0_MT),
    "steps": state.t,
    "candidates": tokens_MT.reshape(B, G, T),
    "candidate_scores": score_BG,
    "candidate_lengths": lengths_BG,
  }


@functools.partial(nnx.jit, static_argnames=("options",))
def refine_jit(
  model: model_lib.Transformer,
  inputs_BS: Array,
  key: Array,
  options: RefineOptions,
  ar_model: model_lib.Transformer | None = None,
) -> dict[str, Array]:
  """refine under nnx.jit (one compilation per options and input shape)."""
  return refine(model, inputs_BS, key, options, ar_model=ar_model)
