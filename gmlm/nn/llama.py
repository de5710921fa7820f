"""Llama (LlamaForCausalLM): RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention.

Loads Hugging Face safetensors checkpoints and llama.cpp GGUF files (quantised tensors are
dequantised to float32 by `gmlm.nn.gguf`, numpy only: no `gguf` package, no torch). Shape letters: `gmlm/nn/__init__.py`; M the
key/value heads (grouped-query attention).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from gmlm.nn import _layers, _params, gguf
from gmlm.nn._checkpoint import Tensors

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
  vocab_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  intermediate_size: int
  max_positions: int
  rope_theta: float = 10_000.0
  rms_norm_eps: float = 1e-6
  act: str = "silu"
  attention_bias: bool = False
  mlp_bias: bool = False
  tie_word_embeddings: bool = False
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @classmethod
  def from_hf(cls, hf: dict[str, Any], **overrides) -> "LlamaConfig":
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
      raise ValueError(
        f"Llama rope_type={rope_type!r} (RoPE scaling) is not supported; only "
        "'default' rotary embeddings are implemented."
      )
    heads = hf["num_attention_heads"]
    fields = dict(
      vocab_size=hf["vocab_size"],
      hidden_size=hf["hidden_size"],
      num_layers=hf["num_hidden_layers"],
      num_heads=heads,
      num_kv_heads=hf.get("num_key_value_heads") or heads,
      head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
      intermediate_size=hf["intermediate_size"],
      max_positions=hf.get("max_position_embeddings", 2048),
      rope_theta=float(rope.get("rope_theta", hf.get("rope_theta", 10_000.0))),
      rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
      act=hf.get("hidden_act", "silu"),
      attention_bias=hf.get("attention_bias", False),
      mlp_bias=hf.get("mlp_bias", False),
      tie_word_embeddings=hf.get("tie_word_embeddings", False),
    )
    fields.update(overrides)
    return cls(**fields)


class LlamaBlock(nnx.Module):
  def __init__(self, c: LlamaConfig, rngs: nnx.Rngs):
    D, N, M, H, F = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size
    pd = c.param_dtype
    self.c = c
    self.attn_norm_D = _layers.ones((D,), pd)
    self.q_DNH, self.k_DMH, self.v_DMH = (
      _layers.param(rngs, (D, N, H), pd),
      _layers.param(rngs, (D, M, H), pd),
      _layers.param(rngs, (D, M, H), pd),
    )
    self.o_NHD = _layers.param(rngs, (N, H, D), pd)
    bias = c.attention_bias
    self.q_bias_NH = _layers.zeros((N, H), pd) if bias else None
    self.k_bias_MH = _layers.zeros((M, H), pd) if bias else None
    self.v_bias_MH = _layers.zeros((M, H), pd) if bias else None
    self.o_bias_D = _layers.zeros((D,), pd) if bias else None
    self.mlp_norm_D = _layers.ones((D,), pd)
    self.gate_DF, self.up_DF = _layers.param(rngs, (D, F), pd), _layers.param(rngs, (D, F), pd)
    self.down_FD = _layers.param(rngs, (F, D), pd)
    mb = c.mlp_bias
    self.gate_bias_F = _layers.zeros((F,), pd) if mb else None
    self.up_bias_F = _layers.zeros((F,), pd) if mb else None
    self.down_bias_D = _layers.zeros((D,), pd) if mb else None

  def __call__(self, x_BLD: Array, positions_BL: Array, keep_BLS: Array) -> Array:
    c, dt = self.c, self.c.dtype
    w = lambda p: 0 if p is None else p[...].astype(dt)
    h_BLD = _layers.rms_norm(x_BLD, self.attn_norm_D, c.rms_norm_eps)
    q_BLNH = jnp.einsum("BLD,DNH->BLNH", h_BLD, w(self.q_DNH)) + w(self.q_bias_NH)
    k_BLMH = jnp.einsum("BLD,DMH->BLMH", h_BLD, w(self.k_DMH)) + w(self.k_bias_MH)
    v_BLMH = jnp.einsum("BLD,DMH->BLMH", h_BLD, w(self.v_DMH)) + w(self.v_bias_MH)
    q_BLNH = _layers.rope(q_BLNH, positions_BL, c.rope_theta)
    k_BLMH = _layers.rope(k_BLMH, positions_BL, c.rope_theta)
    a_BLNH = _layers.attention(q_BLNH, k_BLMH, v_BLMH, keep_BLS)
    x_BLD = x_BLD + _layers.merge_heads(a_BLNH, w(self.o_NHD)) + w(self.o_bias_D)
    h_BLD = _layers.rms_norm(x_BLD, self.mlp_norm_D, c.rms_norm_eps)
    g_BLF = jnp.einsum("BLD,DF->BLF", h_BLD, w(self.gate_DF)) + w(self.gate_bias_F)
    u_BLF = jnp.einsum("BLD,DF->BLF", h_BLD, w(self.up_DF)) + w(self.up_bias_F)
    m_BLF = _layers.activation(c.act)(g_BLF) * u_BLF
    return x_BLD + jnp.einsum("BLF,FD->BLD", m_BLF, w(self.down_FD)) + w(self.down_bias_D)


class Llama(nnx.Module):
  def __init__(self, c: LlamaConfig, rngs: nnx.Rngs):
    D, V, pd = c.hidden_size, c.vocab_size, c.param_dtype
    self.config = c
    self.word_VD = _layers.param(rngs, (V, D), pd)
    self.blocks = nnx.List([LlamaBlock(c, rngs) for _ in range(c.num_layers)])
    self.final_norm_D = _layers.ones((D,), pd)
    self.lm_head_VD = None if c.tie_word_embeddings else _layers.param(rngs, (V, D), pd)

  def hidden(self, tokens_BL: Array, attention_mask_BL: Array | None = None) -> Array:
    c = self.config
    B, L = tokens_BL.shape
    positions_BL = jnp.broadcast_to(jnp.arange(L), (B, L))
    x_BLD = self.word_VD[...][tokens_BL].astype(c.dtype)
    keep_BLS = _layers.causal_keep(attention_mask_BL, B, L)
    for block in self.blocks:
      x_BLD = block(x_BLD, positions_BL, keep_BLS)
    return _layers.rms_norm(x_BLD, self.final_norm_D, c.rms_norm_eps)

  def lm_logits(self, h_BKD: Array) -> Array:
    out_VD = (self.word_VD if self.lm_head_VD is None else self.lm_head_VD)[...]
    return jnp.einsum(
      "BKD,VD->BKV", h_BKD, out_VD.astype(self.config.dtype), preferred_element_type=jnp.float32
    )

  def __call__(self, tokens_BL: Array, attention_mask_BL: Array | None = None) -> Array:
    return self.lm_logits(self.hidden(tokens_BL, attention_mask_BL))


def load_weights(model: Llama, t: Tensors) -> Llama:
  c = model.config
  p = "model." if "model.embed_tokens.weight" in t else ""
  _params.copy(t, p + "embed_tokens.weight", model.word_VD)
  for i, b in enumerate(model.blocks):
    q = f"{p}layers.{i}."
    _params.copy(t, q + "input_layernorm.weight", b.attn_norm_D)
    _params.linear(t, q + "self_attn.q_proj.weight", b.q_DNH)
    _params.linear(t, q + "self_attn.k_proj.weight", b.k_DMH)
    _params.linear(t, q + "self_attn.v_proj.weight", b.v_DMH)
    _params.linear(t, q + "self_attn.o_proj.weight", b.o_NHD, n_in=2)
    if c.attention_bias:
      for proj, bias in (("q", b.q_bias_NH), ("k", b.k_bias_MH), ("v", b.v_bias_MH)):
        _params.copy(t, q + f"self_attn.{proj}_proj.bias", bias, flat=True)
      _params.copy(t, q + "self_attn.o_proj.bias", b.o_bias_D)
    _params.copy(t, q + "post_attention_layernorm.weight", b.mlp_norm_D)
    _params.linear(t, q + "mlp.gate_proj.weight", b.gate_DF)
    _params.linear(t, q + "mlp.up_proj.weight", b.up_DF)
    _params.linear(t, q + "mlp.down_proj.weight", b.down_FD)
    if c.mlp_bias:
      for proj, bias in (("gate", b.gate_bias_F), ("up", b.up_bias_F), ("down", b.down_bias_D)):
        _params.copy(t, q + f"mlp.{proj}_proj.bias", bias)
  _params.copy(t, p + "norm.weight", model.final_norm_D)
  if model.lm_head_VD is not None:
    _params.copy(t, "lm_head.weight", model.lm_head_VD)
  elif "lm_head.weight" in t:
    t.used.add("lm_head.weight")
  return _params.finish(model, t, ignore=("rotary_emb.inv_freq",))


# --- GGUF (llama.cpp) ---------------------------------------------------------------------------

_GGUF_NAMES = {  # GGUF per-block name -> Hugging Face name
  "attn_norm": "input_layernorm",
  "attn_q": "self_attn.q_proj",
  "attn_k": "self_attn.k_proj",
  "attn_v": "self_attn.v_proj",
  "attn_output": "self_attn.o_proj",
  "ffn_norm": "post_attention_layernorm",
  "ffn_gate": "mlp.gate_proj",
  "ffn_up": "mlp.up_proj",
  "ffn_down": "mlp.down_proj",
}


def _unpermute_rope(w_OI: np.ndarray, heads: int) -> np.ndarray:
  """Undoes llama.cpp's reordering of q/k rows (interleaved rotary pairs -> rotate-half halves)."""
  half = w_OI.shape[0] // heads // 2
  w_Nh2I = w_OI.reshape(heads, half, 2, *w_OI.shape[1:])  # 2: the two members of a rotary pair
  return w_Nh2I.swapaxes(1, 2).reshape(w_OI.shape)


def read_gguf(path: str | pathlib.Path) -> tuple[dict[str, Any], Tensors]:
  """A GGUF Llama file -> (HF-style config dict, HF-named float32 tensors)."""
  meta, raw = gguf.read(path)
  meta = {k: v for k, v in meta.items() if not k.startswith("tokenizer.")}
  arch = meta.get("general.architecture")
  if arch != "llama":
    raise ValueError(f"{path}: general.architecture={arch!r}; only 'llama' GGUF files load.")
  heads, kv_heads = meta["llama.attention.head_count"], meta.get("llama.attention.head_count_kv")
  kv_heads = kv_heads or heads
  arrays: dict[str, np.ndarray] = {}
  for name, tensor in raw.items():
    w = gguf.dequantize(*tensor)
    if name == "token_embd.weight":
      arrays["model.embed_tokens.weight"] = w
    elif name == "output_norm.weight":
      arrays["model.norm.weight"] = w
    elif name == "output.weight":
      arrays["lm_head.weight"] = w
    elif name.startswith("blk."):
      _, i, kind, suffix = name.split(".", 3)
      if kind not in _GGUF_NAMES:
        continue
      if kind in ("attn_q", "attn_k") and suffix == "weight":
        w = _unpermute_rope(w, heads if kind == "attn_q" else kv_heads)
      arrays[f"model.layers.{i}.{_GGUF_NAMES[kind]}.{suffix}"] = w
  D = meta["llama.embedding_length"]
  vocab = meta.get("llama.vocab_size") or arrays["model.embed_tokens.weight"].shape[0]
  hf = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": vocab,
    "hidden_size": D,
    "num_hidden_layers": meta["llama.block_count"],
    "num_attention_heads": heads,
    "num_key_value_heads": kv_heads,
    "head_dim": meta.get("llama.attention.key_length") or D // heads,
    "intermediate_size": meta["llama.feed_forward_length"],
    "max_position_embeddings": meta.get("llama.context_length", 2048),
    "rope_theta": float(meta.get("llama.rope.freq_base", 10_000.0)),
    "rms_norm_eps": float(meta["llama.attention.layer_norm_rms_epsilon"]),
    "tie_word_embeddings": "lm_head.weight" not in arrays,
  }
  return hf, Tensors({}, str(path), arrays=arrays)


def load_gguf(path: str | pathlib.Path, *, dtype=jnp.float32, param_dtype=jnp.float32) -> Llama:
  hf, tensors = read_gguf(path)
  config = LlamaConfig.from_hf(hf, dtype=dtype, param_dtype=param_dtype)
  model = nnx.eval_shape(lambda: Llama(config, nnx.Rngs(0)))
  return load_weights(model, tensors)
