"""Attention of stuttering vs other adjacent target positions (paper Sec. 3.4, Tables 4-5 / L.4-L.5).

The analysed pass: the decoder run once on a hypothesis y (the PaDIR output, EOS-terminated,
PAD after it) with the encoder states of its source; at a fixed point of refinement (the
decoder maps y to itself, which is where early stopping ends) it is the pass that produced y.
From its LAST decoder layer we read, per head n, the self-attention A_n[q, k] (query position q,
key position k) and the cross-attention C_n[q, s] over source positions s ([LEN] included).

Pairs: every (i, i+1) with y_i and y_{i+1} both content tokens (not EOS, not PAD); it stutters
if y_i = y_{i+1} (token level, before any stutter is dropped). Statistics, each reported as
mean +- standard deviation over the pairs of one group (stutter / other), with N heads:
- self-attention (Table 4): each pair gives two samples, one per direction, a_n = A_n[i, i+1]
  and a_n = A_n[i+1, i]; per sample min_n a_n, (1/N) sum_n a_n, max_n a_n.
  top-k overlap: the fraction of (sample, head) with the key among the k largest weights of
  the query's row A_n[q, :] (over the hypothesis' positions).
- cross-attention (Table 5): per pair and head, for p = C_n[i, :] and r = C_n[i+1, :],
  TV_n = (1/2) sum_s |p_s - r_s| and cosine distance 1 - <p, r> / (|p| |r|) (both in [0, 1]:
  the weights are non-negative); per pair min / avg / max over heads.
  top-k overlap: the fraction of (pair, head) whose top-k source positions of p and of r
  share at least one position.
`pair_statistics` computes these from arrays (numpy, any model); `last_layer_attention` gets the
arrays out of a padir Transformer (the Attention modules sow their weights when asked).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import jax
import numpy as np
from flax import nnx

from padir.data import tokenizer as tokenizer_lib
from padir.model import transformer as model_lib

TOP_K = (1, 2)


@contextlib.contextmanager
def sowing(modules: Sequence[nnx.Module]) -> Iterator[None]:
  """Within the block, the given Attention modules sow their softmax weights."""
  for m in modules:
    m.sow_weights = True
  try:
    yield
  finally:
    for m in modules:
      m.sow_weights = False


@nnx.jit
def _attention(model: model_lib.Transformer, inputs_BS: jax.Array, hyp_BT: jax.Array):
  def forward(model):
    enc_BSD, enc_mask_BS = model.encode(inputs_BS)
    return model.decode(hyp_BT, enc_BSD, enc_mask_BS)

  _, sown = nnx.capture(forward, nnx.Intermediate)(model)
  last = sown["decoder_layers"][len(model.decoder_layers) - 1]
  return tuple(
    last[name]["weights_BNQK"].get_value()[0] for name in ("self_attention", "cross_attention")
  )


def last_layer_attention(
  model: model_lib.Transformer, inputs_BS: Any, hyp_BT: Any
) -> tuple[np.ndarray, np.ndarray]:
  """(self_BNTT, cross_BNTS): the last decoder layer's attention weights, float32, of one
  decoder pass on hyp_BT given the sources inputs_BS (the pass the module docstring analyses)."""
  if model.cfg.scanned:  # a stacked layer's views do not sow: the same model per layer
    model = model_lib.with_layout(model, "loop")
  layer = model.decoder_layers[-1]
  with sowing([layer.self_attention, layer.cross_attention]):
    self_BNTT, cross_BNTS = _attention(model, inputs_BS, hyp_BT)
  return np.asarray(self_BNTT, np.float32), np.asarray(cross_BNTS, np.float32)


def adjacent_pairs(tokens_BT: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(b, i, stutter) of every adjacent pair (i, i+1) of content tokens: arrays of one length."""
  tokens_BT = np.asarray(tokens_BT)
  content_BT = (tokens_BT != tokenizer_lib.PAD_ID) & (tokens_BT != tokenizer_lib.EOS_ID)
  both_BT = content_BT[:, :-1] & content_BT[:, 1:]
  b, i = np.nonzero(both_BT)
  return b, i, tokens_BT[b, i] == tokens_BT[b, i + 1]


def _in_top_k(weights_xK: np.ndarray, index_x: np.ndarray, k: int) -> np.ndarray:
  """Whether weights[..., index] is among the k largest of its row (ties: the earlier first)."""
  order_xK = np.argsort(-weights_xK, axis=-1, kind="stable")[..., :k]
  return (order_xK == index_x[..., None]).any(-1)


def _summary(values: np.ndarray) -> list[float]:
  return [float(values.mean()), float(values.std())] if len(values) else [float("nan")] * 2


def self_attention_samples(
  self_BNTT: np.ndarray, b: np.ndarray, i: np.ndarray, k_values: Sequence[int] = TOP_K
) -> dict[str, np.ndarray]:
  """Per direction sample (pairs first, then the reverse direction): min / avg / max over heads
  of the weight between the pair, and per k the (sample, head) top-k indicators [samples, N]."""
  q = np.concatenate([i, i + 1])
  key = np.concatenate([i + 1, i])
  bb = np.concatenate([b, b])
  rows_XNK = self_BNTT[bb, :, q, :]  # [samples, N, keys]
  a_XN = np.take_along_axis(rows_XNK, key[:, None, None], -1)[..., 0]
  out = {"min": a_XN.min(1), "avg": a_XN.mean(1), "max": a_XN.max(1)}
  key_XN = np.broadcast_to(key[:, None], a_XN.shape)
  for k in k_values:
    out[f"top{k}"] = _in_top_k(rows_XNK, key_XN, k)
  return out


def cross_attention_samples(
  cross_BNTS: np.ndarray, b: np.ndarray, i: np.ndarray, k_values: Sequence[int] = TOP_K
) -> dict[str, np.ndarray]:
  """Per pair: min / avg / max over heads of the TV and cosine distances between the two
  positions' cross-attention rows, and per k the (pair, head) top-k overlap indicators."""
  p_XNS = cross_BNTS[b, :, i, :]
  r_XNS = cross_BNTS[b, :, i + 1, :]
  tv_XN = 0.5 * np.abs(p_XNS - r_XNS).sum(-1)
  norms_XN = np.linalg.norm(p_XNS, axis=-1) * np.linalg.norm(r_XNS, axis=-1)
  cos_XN = 1.0 - (p_XNS * r_XNS).sum(-1) / np.maximum(norms_XN, 1e-30)
  out = {}
  for name, d_XN in (("tv", tv_XN), ("cos", cos_XN)):
    out.update(
      {f"{name}_min": d_XN.min(1), f"{name}_avg": d_XN.mean(1), f"{name}_max": d_XN.max(1)}
    )
  for k in k_values:
    top_p = np.argsort(-p_XNS, axis=-1, kind="stable")[..., :k]
    top_r = np.argsort(-r_XNS, axis=-1, kind="stable")[..., :k]
    out[f"top{k}"] = (top_p[..., :, None] == top_r[..., None, :]).any((-1, -2))
  return out


def pair_statistics(
  tokens_BT: np.ndarray,
  self_BNTT: np.ndarray,
  cross_BNTS: np.ndarray,
  k_values: Sequence[int] = TOP_K,
) -> dict[str, Any]:
  """The two tables of the module docstring, JSON-ready:
  {"self" | "cross": {"stutter" | "other": {"pairs": n, stat: [mean, std] or fraction}}}."""
  b, i, stutter = adjacent_pairs(tokens_BT)
  samples = {
    "self": self_attention_samples(self_BNTT, b, i, k_values),
    "cross": cross_attention_samples(cross_BNTS, b, i, k_values),
  }
  groups = {"stutter": stutter, "other": ~stutter}
  out = {}
  for table, values in samples.items():
    out[table] = {}
    for group, member in groups.items():
      if table == "self":
        member = np.concatenate([member, member])  # both directions
      row = {"pairs": int(member.sum() // (2 if table == "self" else 1))}
      for name, v in values.items():
        if name.startswith("top"):
          row[name] = float(v[member].mean()) if member.any() else float("nan")
        else:
          row[name] = _summary(v[member])
      out[table][group] = row
  return out


def merge_statistics(parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> dict[str, Any]:
  """pair_statistics over several batches (tokens, self, cross) of possibly different lengths:
  the arrays are padded to a common T (PAD tokens, zero weights) and S, then pooled."""
  T = max(t.shape[1] for t, _, _ in parts)
  S = max(c.shape[-1] for _, _, c in parts)
  pad = lambda x, widths: np.pad(x, [(0, 0)] * (x.ndim - len(widths)) + widths)
  tokens = np.concatenate([pad(t, [(0, T - t.shape[1])]) for t, _, _ in parts])
  selfs = np.concatenate([pad(a, [(0, T - a.shape[2]), (0, T - a.shape[3])]) for _, a, _ in parts])
  cross = np.concatenate([pad(c, [(0, T - c.shape[2]), (0, S - c.shape[3])]) for _, _, c in parts])
  return pair_statistics(tokens, selfs, cross)
