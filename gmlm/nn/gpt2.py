"""GPT-2 (GPT2LMHeadModel): a pre-norm causal Transformer with learned positions and a tied head.

Its checkpoints store Conv1D weights as [in, out], so no transposes are needed on load.
Shape letters: `gmlm/nn/__init__.py` (C: the query, key and value parts of the fused projection).
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
class GPT2Config:
  vocab_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  intermediate_size: int
  max_positions: int
  layer_norm_eps: float = 1e-5
  act: str = "gelu_new"
  scale_by_inverse_layer: bool = False
  tie_word_embeddings: bool = True
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @classmethod
  def from_hf(cls, hf: dict[str, Any], **overrides) -> "GPT2Config":
    if not hf.get("scale_attn_weights", True):
      raise ValueError("scale_attn_weights=False GPT-2 checkpoints are not supported.")
    fields = dict(
      vocab_size=hf["vocab_size"],
      hidden_size=hf["n_embd"],
      num_layers=hf["n_layer"],
      num_heads=hf["n_head"],
      intermediate_size=hf.get("n_inner") or 4 * hf["n_embd"],
      max_positions=hf["n_positions"],
      layer_norm_eps=hf.get("layer_norm_epsilon", 1e-5),
      act=hf.get("activation_function", "gelu_new"),
      scale_by_inverse_layer=hf.get("scale_attn_by_inverse_layer_idx", False),
      tie_word_embeddings=hf.get("tie_word_embeddings", True),
    )
    fields.update(overrides)
    return cls(**fields)

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads


class GPT2Block(nnx.Module):
  def __init__(self, c: GPT2Config, i: int, rngs: nnx.Rngs):
    D, N, H, F, pd = c.hidden_size, c.num_heads, c.head_dim, c.intermediate_size, c.param_dtype
    self.c, self.i = c, i
    self.ln1_scale_D, self.ln1_bias_D = _layers.ones((D,), pd), _layers.zeros((D,), pd)
    self.qkv_DCNH = _layers.param(rngs, (D, 3, N, H), pd)
    self.qkv_bias_CNH = _layers.zeros((3, N, H), pd)
    self.o_NHD, self.o_bias_D = _layers.param(rngs, (N, H, D), pd), _layers.zeros((D,), pd)
    self.ln2_scale_D, self.ln2_bias_D = _layers.ones((D,), pd), _layers.zeros((D,), pd)
    self.fc_DF, self.fc_bias_F = _layers.param(rngs, (D, F), pd), _layers.zeros((F,), pd)
    self.proj_FD, self.proj_bias_D = _layers.param(rngs, (F, D), pd), _layers.zeros((D,), pd)

  def __call__(self, x_BLD: Array, keep_BLS: Array) -> Array:
    c, dt = self.c, self.c.dtype
    w = lambda p: p[...].astype(dt)
    h_BLD = _layers.layer_norm(x_BLD, self.ln1_scale_D, self.ln1_bias_D, c.layer_norm_eps)
    qkv_BLCNH = jnp.einsum("BLD,DCNH->BLCNH", h_BLD, w(self.qkv_DCNH)) + w(self.qkv_bias_CNH)
    scale = c.head_dim**-0.5 / ((self.i + 1) if c.scale_by_inverse_layer else 1)
    a_BLNH = _layers.attention(
      qkv_BLCNH[:, :, 0], qkv_BLCNH[:, :, 1], qkv_BLCNH[:, :, 2], keep_BLS, scale
    )
    x_BLD = x_BLD + _layers.merge_heads(a_BLNH, w(self.o_NHD)) + w(self.o_bias_D)
    h_BLD = _layers.layer_norm(x_BLD, self.ln2_scale_D, self.ln2_bias_D, c.layer_norm_eps)
    u_BLF = _layers.activation(c.act)(
      jnp.einsum("BLD,DF->BLF", h_BLD, w(self.fc_DF)) + w(self.fc_bias_F)
    )
    return x_BLD + jnp.einsum("BLF,FD->BLD", u_BLF, w(self.proj_FD)) + w(self.proj_bias_D)


class GPT2(nnx.Module):
  def __init__(self, c: GPT2Config, rngs: nnx.Rngs):
    D, pd = c.hidden_size, c.param_dtype
    self.config = c
    self.word_VD = _layers.param(rngs, (c.vocab_size, D), pd)
    self.position_PD = _layers.param(rngs, (c.max_positions, D), pd)
    self.blocks = nnx.List([GPT2Block(c, i, rngs) for i in range(c.num_layers)])
    self.lnf_scale_D, self.lnf_bias_D = _layers.ones((D,), pd), _layers.zeros((D,), pd)
    self.lm_head_VD = None if c.tie_word_embeddings else _layers.param(rngs, (c.vocab_size, D), pd)

  def hidden(self, tokens_BL: Array, attention_mask_BL: Array | None = None) -> Array:
    c = self.config
    B, L = tokens_BL.shape
    _layers.check_length(L, c.max_positions, "position table")
    x_BLD = self.word_VD[...][tokens_BL] + self.position_PD[...][jnp.arange(L)][None]
    x_BLD = x_BLD.astype(c.dtype)
    keep_BLS = _layers.causal_keep(attention_mask_BL, B, L)
    for block in self.blocks:
      x_BLD = block(x_BLD, keep_BLS)
    return _layers.layer_norm(x_BLD, self.lnf_scale_D, self.lnf_bias_D, c.layer_norm_eps)

  def lm_logits(self, h_BKD: Array) -> Array:
    out_VD = (self.word_VD if self.lm_head_VD is None else self.lm_head_VD)[...]
    return jnp.einsum(
      "BKD,VD->BKV", h_BKD, out_VD.astype(self.config.dtype), preferred_element_type=jnp.float32
    )

  def __call__(self, tokens_BL: Array, attention_mask_BL: Array | None = None) -> Array:
    return self.lm_logits(self.hidden(tokens_BL, attention_mask_BL))


def load_weights(model: GPT2, t: Tensors) -> GPT2:
  p = "transformer." if "transformer.wte.weight" in t else ""
  _params.copy(t, p + "wte.weight", model.word_VD)
  _params.copy(t, p + "wpe.weight", model.position_PD)
  for i, b in enumerate(model.blocks):
    q = f"{p}h.{i}."
    _params.copy(t, q + "ln_1.weight", b.ln1_scale_D)
    _params.copy(t, q + "ln_1.bias", b.ln1_bias_D)
    _params.conv1d(t, q + "attn.c_attn.weight", b.qkv_DCNH)
    _params.copy(t, q + "attn.c_attn.bias", b.qkv_bias_CNH, flat=True)
    _params.conv1d(t, q + "attn.c_proj.weight", b.o_NHD, n_in=2)
    _params.copy(t, q + "attn.c_proj.bias", b.o_bias_D)
    _params.copy(t, q + "ln_2.weight", b.ln2_scale_D)
    _params.copy(t, q + "ln_2.bias", b.ln2_bias_D)
    _params.conv1d(t, q + "mlp.c_fc.weight", b.fc_DF)
    _params.copy(t, q + "mlp.c_fc.bias", b.fc_bias_F)
    _params.conv1d(t, q + "mlp.c_proj.weight", b.proj_FD)
    _params.copy(t, q + "mlp.c_proj.bias", b.proj_bias_D)
  _params.copy(t, p + "ln_f.weight", model.lnf_scale_D)
  _params.copy(t, p + "ln_f.bias", model.lnf_bias_D)
  if model.lm_head_VD is not None:
    _params.copy(t, "lm_head.weight", model.lm_head_VD)
  elif "lm_head.weight" in t:
    t.used.add("lm_head.weight")
  return _params.finish(model, t, ignore=(".attn.bias", ".attn.masked_bias"))
