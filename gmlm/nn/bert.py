"""BERT (and its MiniLM family): a post-norm Transformer encoder with the masked-LM head.

The same module serves RoBERTa (`roberta.py`), which differs only in its position ids and in
its tensor names. Shape letters: `gmlm/nn/__init__.py`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from gmlm.nn import _layers, _params
from gmlm.nn._checkpoint import Tensors

Array = jax.Array

# LoRA targets: the projection name -> (kernel attribute, number of input axes of the kernel).
LORA_TARGETS = {
  "q": ("q_DNH", 1),
  "k": ("k_DNH", 1),
  "v": ("v_DNH", 1),
  "o": ("o_NHD", 2),
  "up": ("up_DF", 1),
  "down": ("down_FD", 1),
}


class LoRA(nnx.Variable):
  """A low-rank adapter factor (kept apart from nnx.Param so the base weights can stay frozen)."""


@dataclasses.dataclass(frozen=True)
class BertConfig:
  vocab_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  intermediate_size: int
  max_positions: int
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12
  hidden_act: str = "gelu"
  head_act: str | None = None  # the MLM head's activation; None: hidden_act (RoBERTa: "gelu")
  pad_token_id: int = 0
  tie_word_embeddings: bool = True
  with_mlm_head: bool = True
  roberta_positions: bool = False  # positions count non-pad tokens from pad_token_id + 1
  dtype: Any = jnp.float32  # compute dtype
  param_dtype: Any = jnp.float32

  @classmethod
  def from_hf(cls, hf: dict[str, Any], **overrides) -> "BertConfig":
    if hf.get("position_embedding_type", "absolute") != "absolute":
      raise ValueError(
        f"position_embedding_type={hf['position_embedding_type']!r} is not "
        "supported; only 'absolute' BERT/RoBERTa checkpoints load."
      )
    fields = dict(
      vocab_size=hf["vocab_size"],
      hidden_size=hf["hidden_size"],
      num_layers=hf["num_hidden_layers"],
      num_heads=hf["num_attention_heads"],
      intermediate_size=hf["intermediate_size"],
      max_positions=hf["max_position_embeddings"],
      type_vocab_size=hf.get("type_vocab_size", 2),
      layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
      hidden_act=hf.get("hidden_act", "gelu"),
      pad_token_id=hf.get("pad_token_id") if hf.get("pad_token_id") is not None else 0,
      tie_word_embeddings=hf.get("tie_word_embeddings", True),
    )
    fields.update(overrides)
    return cls(**fields)

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads


class BertLayer(nnx.Module):
  """Self-attention and MLP, each followed by residual add and LayerNorm (post-norm)."""

  def __init__(self, c: BertConfig, rngs: nnx.Rngs):
    D, N, H, F, pd = c.hidden_size, c.num_heads, c.head_dim, c.intermediate_size, c.param_dtype
    self.c = c
    self.q_DNH, self.k_DNH, self.v_DNH = (_layers.param(rngs, (D, N, H), pd) for _ in range(3))
    self.q_bias_NH, self.k_bias_NH, self.v_bias_NH = (_layers.zeros((N, H), pd) for _ in range(3))
    self.o_NHD, self.o_bias_D = _layers.param(rngs, (N, H, D), pd), _layers.zeros((D,), pd)
    self.attn_norm_scale_D, self.attn_norm_bias_D = _layers.ones((D,), pd), _layers.zeros((D,), pd)
    self.up_DF, self.up_bias_F = _layers.param(rngs, (D, F), pd), _layers.zeros((F,), pd)
    self.down_FD, self.down_bias_D = _layers.param(rngs, (F, D), pd), _layers.zeros((D,), pd)
    self.mlp_norm_scale_D, self.mlp_norm_bias_D = _layers.ones((D,), pd), _layers.zeros((D,), pd)
    self.lora = nnx.data(None)  # {name: {"a": LoRA[in, R], "b": LoRA[R, out]}} after `add_lora`
    self.lora_scale = 1.0

  def add_lora(self, rank: int, alpha: float, targets, rngs: nnx.Rngs) -> None:
    """Low-rank adapters W + (alpha / rank) A B on the named projections; B starts at zero."""
    adapters = {}
    for name in targets:
      kernel = getattr(self, LORA_TARGETS[name][0])
      n_in = LORA_TARGETS[name][1]
      fan_in, fan_out = math.prod(kernel.shape[:n_in]), math.prod(kernel.shape[n_in:])
      a = jax.random.normal(rngs.params(), (fan_in, rank), jnp.float32) / math.sqrt(fan_in)
      adapters[name] = nnx.Dict(a=LoRA(a), b=LoRA(jnp.zeros((rank, fan_out), jnp.float32)))
    self.lora = nnx.data(nnx.Dict(adapters))
    self.lora_scale = alpha / rank

  def merge_lora(self) -> None:
    """Folds the adapters into the base kernels (then the layer is a plain BERT layer again)."""
    for name, ab in (self.lora or {}).items():
      kernel = getattr(self, LORA_TARGETS[name][0])
      delta = self.lora_scale * (ab["a"][...] @ ab["b"][...])
      kernel[...] = (kernel[...].astype(jnp.float32) + delta.reshape(kernel.shape)).astype(
        kernel[...].dtype
      )
    self.lora = nnx.data(None)

  def _proj(self, name: str, spec: str | None, x: Array, kernel: nnx.Param) -> Array:
    """x projected by kernel (plus its LoRA adapter); spec None: the heads' output projection."""
    dt = self.c.dtype
    y = (
      _layers.merge_heads(x, kernel[...].astype(dt))
      if spec is None
      else jnp.einsum(spec, x, kernel[...].astype(dt))
    )
    if self.lora is not None and name in self.lora:
      ab = self.lora[name]
      x_BLI = x.reshape(*x.shape[:2], -1)
      r_BLR = jnp.einsum("BLI,IR->BLR", x_BLI, ab["a"][...].astype(dt))
      d_BLO = jnp.einsum("BLR,RO->BLO", r_BLR, (self.lora_scale * ab["b"][...]).astype(dt))
      y = y + d_BLO.reshape(y.shape)
    return y

  def __call__(self, x_BLD: Array, keep_BLS: Array, rows_BK: Array | None = None) -> Array:
    """The layer's output at every position, or at rows_BK only (then [B, K, D]: keys and values
    still come from every position, but queries, the output projection and the MLP run on K
    rows; the MLM needs nothing else from the last layer)."""
    c, dt = self.c, self.c.dtype
    w = lambda p: p[...].astype(dt)
    xq_BQD = _layers.take_rows(x_BLD, rows_BK)  # Q = L, or K
    q_BQNH = self._proj("q", "BLD,DNH->BLNH", xq_BQD, self.q_DNH) + w(self.q_bias_NH)
    k_BLNH = self._proj("k", "BLD,DNH->BLNH", x_BLD, self.k_DNH) + w(self.k_bias_NH)
    v_BLNH = self._proj("v", "BLD,DNH->BLNH", x_BLD, self.v_DNH) + w(self.v_bias_NH)
    a_BQNH = _layers.attention(q_BQNH, k_BLNH, v_BLNH, _layers.take_rows(keep_BLS, rows_BK))
    a_BQD = self._proj("o", None, a_BQNH, self.o_NHD) + w(self.o_bias_D)
    x_BQD = _layers.layer_norm(
      xq_BQD + a_BQD, self.attn_norm_scale_D, self.attn_norm_bias_D, c.layer_norm_eps
    )
    h_BQF = _layers.activation(c.hidden_act)(
      self._proj("up", "BLD,DF->BLF", x_BQD, self.up_DF) + w(self.up_bias_F)
    )
    m_BQD = self._proj("down", "BLF,FD->BLD", h_BQF, self.down_FD) + w(self.down_bias_D)
    return _layers.layer_norm(
      x_BQD + m_BQD, self.mlp_norm_scale_D, self.mlp_norm_bias_D, c.layer_norm_eps
    )


class BertMLMHead(nnx.Module):
  """dense -> activation -> LayerNorm -> output projection (tied to the word embeddings) + bias."""

  def __init__(self, c: BertConfig, rngs: nnx.Rngs):
    D, V, pd = c.hidden_size, c.vocab_size, c.param_dtype
    self.c = c
    self.dense_DE, self.dense_bias_E = _layers.param(rngs, (D, D), pd), _layers.zeros((D,), pd)
    self.norm_scale_E, self.norm_bias_E = _layers.ones((D,), pd), _layers.zeros((D,), pd)
    self.decoder_VE = None if c.tie_word_embeddings else _layers.param(rngs, (V, D), pd)
    self.bias_V = _layers.zeros((V,), pd)

  def __call__(self, h_BKD: Array, embedding_VD: nnx.Param) -> Array:
    c, dt = self.c, self.c.dtype
    t_BKE = jnp.einsum("BKD,DE->BKE", h_BKD, self.dense_DE[...].astype(dt))
    act = _layers.activation(c.head_act or c.hidden_act)
    t_BKE = act(t_BKE + self.dense_bias_E[...].astype(dt))
    t_BKE = _layers.layer_norm(t_BKE, self.norm_scale_E, self.norm_bias_E, c.layer_norm_eps)
    out_VE = (embedding_VD if self.decoder_VE is None else self.decoder_VE)[...].astype(dt)
    logits_BKV = jnp.einsum("BKE,VE->BKV", t_BKE, out_VE, preferred_element_type=jnp.float32)
    return logits_BKV + self.bias_V[...].astype(jnp.float32)


class Bert(nnx.Module):
  """BertModel / BertForMaskedLM (and RoBERTa with `roberta_positions`)."""

  def __init__(self, c: BertConfig, rngs: nnx.Rngs):
    D, pd = c.hidden_size, c.param_dtype
    self.config = c
    self.word_VD = _layers.param(rngs, (c.vocab_size, D), pd)
    self.position_PD = _layers.param(rngs, (c.max_positions, D), pd)
    self.token_type_TD = _layers.param(rngs, (c.type_vocab_size, D), pd)
    self.embed_norm_scale_D = _layers.ones((D,), pd)
    self.embed_norm_bias_D = _layers.zeros((D,), pd)
    self.layers = nnx.List([BertLayer(c, rngs) for _ in range(c.num_layers)])
    self.head = BertMLMHead(c, rngs) if c.with_mlm_head else None

  def positions(self, tokens_BL: Array) -> Array:
    c = self.config
    B, L = tokens_BL.shape
    if c.roberta_positions:  # fairseq: pads keep position pad_token_id, others count from it + 1
      _layers.check_length(
        L + c.pad_token_id + 1,
        c.max_positions,
        f"position table (RoBERTa offsets positions by pad_token_id + 1 = {c.pad_token_id + 1})",
      )
      real_BL = (tokens_BL != c.pad_token_id).astype(jnp.int32)
      return jnp.cumsum(real_BL, axis=1) * real_BL + c.pad_token_id
    _layers.check_length(L, c.max_positions, "position table")
    return jnp.broadcast_to(jnp.arange(L), (B, L))

  def encode(
    self,
    tokens_BL: Array,
    attention_mask_BL: Array | None = None,
    token_types_BL: Array | None = None,
    rows_BK: Array | None = None,
  ) -> Array:
    """Final hidden states h_BLD (compute dtype); with rows_BK, h_BKD at those positions only
    (the last layer then computes only those rows)."""
    c = self.config
    B, L = tokens_BL.shape
    types_BL = jnp.zeros_like(tokens_BL) if token_types_BL is None else token_types_BL
    x_BLD = (
      self.word_VD[...][tokens_BL].astype(jnp.float32)
      + self.position_PD[...][self.positions(tokens_BL)].astype(jnp.float32)
      + self.token_type_TD[...][types_BL].astype(jnp.float32)
    )
    x_BLD = _layers.layer_norm(
      x_BLD, self.embed_norm_scale_D, self.embed_norm_bias_D, c.layer_norm_eps
    ).astype(c.dtype)
    keep_B1S = _layers.padding_keep(attention_mask_BL, B, L)
    for i, layer in enumerate(self.layers):
      x_BLD = layer(x_BLD, keep_B1S, rows_BK if i == len(self.layers) - 1 else None)
    return x_BLD if self.layers else _layers.take_rows(x_BLD, rows_BK)

  def mlm_logits(self, h_BKD: Array) -> Array:
    """The MLM head on the given hidden states only: logits_BKV, float32."""
    if self.head is None:
      raise ValueError(
        "This model was loaded without an MLM head (architecture BertModel); "
        "load a *ForMaskedLM checkpoint to get token logits."
      )
    return self.head(h_BKD, self.word_VD)

  def __call__(self, tokens_BL: Array, attention_mask_BL: Array | None = None) -> Array:
    return self.mlm_logits(self.encode(tokens_BL, attention_mask_BL))

  def add_lora(
    self, rank: int, alpha: float = 0.0, targets=tuple(LORA_TARGETS), seed: int = 0
  ) -> None:
    """LoRA adapters (Hu et al. 2021) on every layer's projections; alpha defaults to rank."""
    unknown = sorted(set(targets) - set(LORA_TARGETS))
    if unknown or rank < 1:
      raise ValueError(
        f"LoRA needs rank >= 1 (got {rank}) and targets among "
        f"{sorted(LORA_TARGETS)} (unknown: {unknown})."
      )
    rngs = nnx.Rngs(seed)
    for layer in self.layers:
      layer.add_lora(rank, alpha or float(rank), targets, rngs)

  def merge_lora(self) -> None:
    for layer in self.layers:
      layer.merge_lora()


def with_new_head(body: Bert, seed: int) -> Bert:
  """A BertForMaskedLM whose body is `body` and whose head is freshly initialised (tied)."""
  config = dataclasses.replace(body.config, with_mlm_head=True, tie_word_embeddings=True)
  model = nnx.eval_shape(lambda: Bert(config, nnx.Rngs(0)))  # shapes only
  nnx.update(model, nnx.state(body))
  model.head = BertMLMHead(config, nnx.Rngs(seed))
  return model


@dataclasses.dataclass(frozen=True)
class Names:
  """Where a family keeps each tensor in a Hugging Face checkpoint."""

  body: str = "bert."
  head_dense: str = "cls.predictions.transform.dense"
  head_norm: str = "cls.predictions.transform.LayerNorm"
  decoder: str = "cls.predictions.decoder"
  bias: str = "cls.predictions.bias"


BERT_NAMES = Names()
ROBERTA_NAMES = Names(
  body="roberta.",
  head_dense="lm_head.dense",
  head_norm="lm_head.layer_norm",
  decoder="lm_head.decoder",
  bias="lm_head.bias",
)
IGNORED = ("pooler.", "cls.seq_relationship", "position_ids", "token_type_ids")


def load_weights(model: Bert, t: Tensors, names: Names = BERT_NAMES) -> Bert:
  """Fills an (abstract) Bert from checkpoint tensors, with or without the body prefix."""
  p = names.body if f"{names.body}embeddings.word_embeddings.weight" in t else ""
  _params.copy(t, p + "embeddings.word_embeddings.weight", model.word_VD)
  _params.copy(t, p + "embeddings.position_embeddings.weight", model.position_PD)
  _params.copy(t, p + "embeddings.token_type_embeddings.weight", model.token_type_TD)
  _params.copy(t, p + "embeddings.LayerNorm.weight", model.embed_norm_scale_D)
  _params.copy(t, p + "embeddings.LayerNorm.bias", model.embed_norm_bias_D)
  for i, layer in enumerate(model.layers):
    q = f"{p}encoder.layer.{i}."
    for proj, kernel, bias in (
      ("query", layer.q_DNH, layer.q_bias_NH),
      ("key", layer.k_DNH, layer.k_bias_NH),
      ("value", layer.v_DNH, layer.v_bias_NH),
    ):
      _params.linear(t, f"{q}attention.self.{proj}.weight", kernel)
      _params.copy(t, f"{q}attention.self.{proj}.bias", bias, flat=True)
    _params.linear(t, q + "attention.output.dense.weight", layer.o_NHD, n_in=2)
    _params.copy(t, q + "attention.output.dense.bias", layer.o_bias_D)
    _params.copy(t, q + "attention.output.LayerNorm.weight", layer.attn_norm_scale_D)
    _params.copy(t, q + "attention.output.LayerNorm.bias", layer.attn_norm_bias_D)
    _params.linear(t, q + "intermediate.dense.weight", layer.up_DF)
    _params.copy(t, q + "intermediate.dense.bias", layer.up_bias_F)
    _params.linear(t, q + "output.dense.weight", layer.down_FD)
    _params.copy(t, q + "output.dense.bias", layer.down_bias_D)
    _params.copy(t, q + "output.LayerNorm.weight", layer.mlp_norm_scale_D)
    _params.copy(t, q + "output.LayerNorm.bias", layer.mlp_norm_bias_D)
  if model.head is not None:
    h = model.head
    _params.linear(t, names.head_dense + ".weight", h.dense_DE)
    _params.copy(t, names.head_dense + ".bias", h.dense_bias_E)
    _params.copy(t, names.head_norm + ".weight", h.norm_scale_E)
    _params.copy(t, names.head_norm + ".bias", h.norm_bias_E)
    # PyTorch adds decoder.bias. A tied head ties it to `bias` (checkpoints may store either or
    # both); an untied one keeps a tensor of its own, and then `bias` is never used.
    tied = h.decoder_VE is None
    first, second = (
      (names.bias, names.decoder + ".bias") if tied else (names.decoder + ".bias", names.bias)
    )
    _params.copy(t, first if first in t else second, h.bias_V)
    if not tied:
      _params.copy(t, names.decoder + ".weight", h.decoder_VE)
    for unread in (second, names.decoder + ".weight"):  # the tied copies
      if unread in t:
        t.used.add(unread)
  return _params.finish(model, t, ignore=IGNORED)
