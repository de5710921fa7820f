"""ModernBERT: a pre-norm encoder with rotary positions, alternating global and sliding-window
attention, a GeGLU MLP, bias-free LayerNorms, and a dense-GELU-norm MLM head.

Layer i attends globally when layer_types[i] == "full_attention" (every third layer by default,
starting with the first), else only to keys within `local_attention // 2` positions.
Shape letters: `gmlm/nn/__init__.py` (C: the parts of a fused projection, query/key/value or
the GeGLU input/gate).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from gmlm.nn import _layers, _params
from gmlm.nn._checkpoint import Tensors

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class ModernBertConfig:
  vocab_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  intermediate_size: int
  max_positions: int
  global_layers: tuple[bool, ...]  # per layer: full attention (else sliding window)
  window: int = 64  # a local layer sees keys with |i - j| <= window
  global_rope_theta: float = 160_000.0
  local_rope_theta: float = 10_000.0
  norm_eps: float = 1e-5
  norm_bias: bool = False
  attention_bias: bool = False
  mlp_bias: bool = False
  classifier_bias: bool = False
  decoder_bias: bool = True
  hidden_act: str = "gelu"
  classifier_act: str = "gelu"
  pad_token_id: int = 50283
  tie_word_embeddings: bool = True
  with_mlm_head: bool = True
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @classmethod
  def from_hf(cls, hf: dict[str, Any], **overrides) -> "ModernBertConfig":
    n = hf["num_hidden_layers"]
    if hf.get("layer_types"):
      global_layers = tuple(t == "full_attention" for t in hf["layer_types"])
    else:  # configs written before transformers 5
      every = hf.get("global_attn_every_n_layers", 3)
      global_layers = tuple(i % every == 0 for i in range(n))
    rope = hf.get("rope_parameters") or {}
    global_theta = (rope.get("full_attention") or {}).get(
      "rope_theta", hf.get("global_rope_theta", 160_000.0)
    )
    local_theta = (rope.get("sliding_attention") or {}).get(
      "rope_theta", hf.get("local_rope_theta")
    )
    for kind in ("full_attention", "sliding_attention"):
      rope_type = (rope.get(kind) or {}).get("rope_type", "default")
      if rope_type != "default":
        raise ValueError(
          f"rope_parameters[{kind!r}].rope_type={rope_type!r} is not supported; "
          "only 'default' rotary embeddings are implemented."
        )
    fields = dict(
      vocab_size=hf["vocab_size"],
      hidden_size=hf["hidden_size"],
      num_layers=n,
      num_heads=hf["num_attention_heads"],
      intermediate_size=hf["intermediate_size"],
      max_positions=hf.get("max_position_embeddings", 8192),
      global_layers=global_layers,
      window=hf.get("local_attention", 128) // 2,
      global_rope_theta=float(global_theta),
      local_rope_theta=float(local_theta if local_theta is not None else global_theta),
      norm_eps=hf.get("norm_eps", 1e-5),
      norm_bias=hf.get("norm_bias", False),
      attention_bias=hf.get("attention_bias", False),
      mlp_bias=hf.get("mlp_bias", False),
      classifier_bias=hf.get("classifier_bias", False),
      decoder_bias=hf.get("decoder_bias", True),
      hidden_act=hf.get("hidden_activation", "gelu"),
      classifier_act=hf.get("classifier_activation", "gelu"),
      pad_token_id=hf.get("pad_token_id") if hf.get("pad_token_id") is not None else 0,
      tie_word_embeddings=hf.get("tie_word_embeddings", True),
    )
    fields.update(overrides)
    return cls(**fields)

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads


class Norm(nnx.Module):
  def __init__(self, c: ModernBertConfig):
    self.eps = c.norm_eps
    self.scale_D = _layers.ones((c.hidden_size,), c.param_dtype)
    self.bias_D = _layers.zeros((c.hidden_size,), c.param_dtype) if c.norm_bias else None

  def __call__(self, x_BLD: Array) -> Array:
    return _layers.layer_norm(x_BLD, self.scale_D, self.bias_D, self.eps)


class ModernBertLayer(nnx.Module):
  def __init__(self, c: ModernBertConfig, i: int, rngs: nnx.Rngs):
    D, N, H, F, pd = c.hidden_size, c.num_heads, c.head_dim, c.intermediate_size, c.param_dtype
    self.c, self.is_global = c, c.global_layers[i]
    self.attn_norm = Norm(c) if i > 0 else None  # the embedding norm serves layer 0
    self.qkv_DCNH = _layers.param(rngs, (D, 3, N, H), pd)
    self.qkv_bias_CNH = _layers.zeros((3, N, H), pd) if c.attention_bias else None
    self.o_NHD = _layers.param(rngs, (N, H, D), pd)
    self.o_bias_D = _layers.zeros((D,), pd) if c.attention_bias else None
    self.mlp_norm = Norm(c)
    self.wi_DCF = _layers.param(rngs, (D, 2, F), pd)
    self.wi_bias_CF = _layers.zeros((2, F), pd) if c.mlp_bias else None
    self.wo_FD = _layers.param(rngs, (F, D), pd)
    self.wo_bias_D = _layers.zeros((D,), pd) if c.mlp_bias else None

  def __call__(
    self, x_BLD: Array, positions_BL: Array, keep_BLS: Array, rows_BK: Array | None = None
  ) -> Array:
    """Output at every position, or at rows_BK only ([B, K, D]; keys/values from all)."""
    c, dt = self.c, self.c.dtype
    w = lambda p: 0 if p is None else p[...].astype(dt)
    h_BLD = x_BLD if self.attn_norm is None else self.attn_norm(x_BLD)
    qkv_BLCNH = jnp.einsum("BLD,DCNH->BLCNH", h_BLD, w(self.qkv_DCNH)) + w(self.qkv_bias_CNH)
    theta = c.global_rope_theta if self.is_global else c.local_rope_theta
    q_BQNH = _layers.rope(
      _layers.take_rows(qkv_BLCNH[:, :, 0], rows_BK),
      _layers.take_rows(positions_BL, rows_BK),
      theta,
    )
    k_BLNH = _layers.rope(qkv_BLCNH[:, :, 1], positions_BL, theta)
    a_BQNH = _layers.attention(
      q_BQNH, k_BLNH, qkv_BLCNH[:, :, 2], _layers.take_rows(keep_BLS, rows_BK)
    )
    x_BQD = (
      _layers.take_rows(x_BLD, rows_BK)
      + _layers.merge_heads(a_BQNH, w(self.o_NHD))
      + w(self.o_bias_D)
    )
    u_BQCF = jnp.einsum("BLD,DCF->BLCF", self.mlp_norm(x_BQD), w(self.wi_DCF)) + w(self.wi_bias_CF)
    g_BQF = _layers.activation(c.hidden_act)(u_BQCF[:, :, 0]) * u_BQCF[:, :, 1]
    return x_BQD + jnp.einsum("BLF,FD->BLD", g_BQF, w(self.wo_FD)) + w(self.wo_bias_D)


class ModernBert(nnx.Module):
  """ModernBertModel / ModernBertForMaskedLM."""

  def __init__(self, c: ModernBertConfig, rngs: nnx.Rngs):
    D, V, pd = c.hidden_size, c.vocab_size, c.param_dtype
    self.config = c
    self.word_VD = _layers.param(rngs, (V, D), pd)
    self.embed_norm = Norm(c)
    self.layers = nnx.List([ModernBertLayer(c, i, rngs) for i in range(c.num_layers)])
    self.final_norm = Norm(c)
    if c.with_mlm_head:
      self.head_DE = _layers.param(rngs, (D, D), pd)
      self.head_bias_E = _layers.zeros((D,), pd) if c.classifier_bias else None
      self.head_norm = Norm(c)
      self.decoder_VE = None if c.tie_word_embeddings else _layers.param(rngs, (V, D), pd)
      self.decoder_bias_V = _layers.zeros((V,), pd) if c.decoder_bias else None

  def encode(
    self, tokens_BL: Array, attention_mask_BL: Array | None = None, rows_BK: Array | None = None
  ) -> Array:
    """Final hidden states h_BLD; with rows_BK, h_BKD (the last layer computes those rows only)."""
    c = self.config
    B, L = tokens_BL.shape
    _layers.check_length(L, c.max_positions, "context (max_position_embeddings)")
    positions_BL = jnp.broadcast_to(jnp.arange(L), (B, L))
    x_BLD = self.embed_norm(self.word_VD[...][tokens_BL]).astype(c.dtype)
    global_B1S = _layers.padding_keep(attention_mask_BL, B, L)
    i_L1, j_1S = jnp.arange(L)[:, None], jnp.arange(L)[None, :]
    local_BLS = global_B1S & (jnp.abs(i_L1 - j_1S) <= c.window)[None]
    for i, layer in enumerate(self.layers):
      x_BLD = layer(
        x_BLD,
        positions_BL,
        global_B1S if layer.is_global else local_BLS,
        rows_BK if i == len(self.layers) - 1 else None,
      )
    if not self.layers:
      x_BLD = _layers.take_rows(x_BLD, rows_BK)
    return self.final_norm(x_BLD)

  def mlm_logits(self, h_BKD: Array) -> Array:
    c, dt = self.config, self.config.dtype
    if not c.with_mlm_head:
      raise ValueError(
        "This model was loaded without an MLM head (architecture "
        "ModernBertModel); load a ModernBertForMaskedLM checkpoint for logits."
      )
    t_BKE = jnp.einsum("BKD,DE->BKE", h_BKD, self.head_DE[...].astype(dt))
    if self.head_bias_E is not None:
      t_BKE = t_BKE + self.head_bias_E[...].astype(dt)
    t_BKE = self.head_norm(_layers.activation(c.classifier_act)(t_BKE))
    out_VE = (self.word_VD if self.decoder_VE is None else self.decoder_VE)[...].astype(dt)
    logits_BKV = jnp.einsum("BKE,VE->BKV", t_BKE, out_VE, preferred_element_type=jnp.float32)
    if self.decoder_bias_V is not None:
      logits_BKV = logits_BKV + self.decoder_bias_V[...].astype(jnp.float32)
    return logits_BKV

  def __call__(self, tokens_BL: Array, attention_mask_BL: Array | None = None) -> Array:
    return self.mlm_logits(self.encode(tokens_BL, attention_mask_BL))


def _norm(t: Tensors, name: str, norm: Norm) -> None:
  _params.copy(t, name + ".weight", norm.scale_D)
  if norm.bias_D is not None:
    _params.copy(t, name + ".bias", norm.bias_D)


def load_weights(model: ModernBert, t: Tensors) -> ModernBert:
  c = model.config
  p = "model." if "model.embeddings.tok_embeddings.weight" in t else ""
  _params.copy(t, p + "embeddings.tok_embeddings.weight", model.word_VD)
  _norm(t, p + "embeddings.norm", model.embed_norm)
  for i, layer in enumerate(model.layers):
    q = f"{p}layers.{i}."
    if layer.attn_norm is not None:
      _norm(t, q + "attn_norm", layer.attn_norm)
    _params.linear(t, q + "attn.Wqkv.weight", layer.qkv_DCNH)
    _params.linear(t, q + "attn.Wo.weight", layer.o_NHD, n_in=2)
    _norm(t, q + "mlp_norm", layer.mlp_norm)
    _params.linear(t, q + "mlp.Wi.weight", layer.wi_DCF)
    _params.linear(t, q + "mlp.Wo.weight", layer.wo_FD)
    if c.attention_bias:
      _params.copy(t, q + "attn.Wqkv.bias", layer.qkv_bias_CNH, flat=True)
      _params.copy(t, q + "attn.Wo.bias", layer.o_bias_D)
    if c.mlp_bias:
      _params.copy(t, q + "mlp.Wi.bias", layer.wi_bias_CF, flat=True)
      _params.copy(t, q + "mlp.Wo.bias", layer.wo_bias_D)
  _norm(t, p + "final_norm", model.final_norm)
  if c.with_mlm_head:
    _params.linear(t, "head.dense.weight", model.head_DE)
    if model.head_bias_E is not None:
      _params.copy(t, "head.dense.bias", model.head_bias_E)
    _norm(t, "head.norm", model.head_norm)
    if model.decoder_VE is not None:
      _params.copy(t, "decoder.weight", model.decoder_VE)
    elif "decoder.weight" in t:
      t.used.add("decoder.weight")  # the tied copy of the token embeddings
    if model.decoder_bias_V is not None:
      _params.copy(t, "decoder.bias", model.decoder_bias_V)
  return _params.finish(model, t, ignore=("classifier.",))
