"""PaDIR's encoder-decoder Transformer (paper App. L.2) in flax.nnx, with an AR baseline.

- Pre-LayerNorm Transformer; learned positional embeddings; one token embedding shared by the
  encoder, the decoder and the output projection (a bilingual vocabulary).
- Encoder input: [LEN] + source tokens. The final state of [LEN] classifies the target length
  (0..max_target_length); at inference the top-k lengths are decoded in parallel. With
  max_length_offset = M > 0 (off by default) it classifies instead the offset of the target
  length from the source length (EOS included on both sides), classes -M..+M (fairseq's NAT
  models' `length_offset`); length_logits() then returns the log-probabilities this puts on
  each absolute length, the source length plus the offset clipped to [1, max_target_length]
  (offsets that clip to the same length add up), so decoding's top-k lengths and length prior
  work unchanged.
- Decoder `nar` (PaDIR): NON-causal self-attention over the current hypothesis, then positional
  attention (queries and keys from the positional embeddings, values from the hidden states;
  Gu et al. 2018), then cross-attention, then the FFN. One forward pass refines all positions.
- Decoder `ar` (baseline): the same layers with causal masks, fed the right-shifted target.

Paper size (6+6 layers, 8 heads, d=512, FFN 2048, 32k vocabulary): 67M parameters.
Shape letters: the legend in padir/__init__.py (B batch, S source length with [LEN], T target
length, D model, N heads, H head dim, V vocabulary, Q / K query / key positions).

Precision: parameters (the master weights the optimizer updates) are float32; `dtype="bfloat16"`
runs the matmuls and activations in bfloat16, while LayerNorm statistics, attention softmax and
the logits stay float32. `vocab_multiple` pads the output projection's vocabulary to a multiple
(e.g. 128: aligned matmul tiles on GPU / TPU) inside the matmul only: decode() returns
padded_vocab_size columns whose padding is NEG_INF (never an argmax, zero probability, the same
log-softmax at the real ids), decode_step() the real V.

Every parameter carries the logical names of its dimensions in its `logical_axes` metadata
("vocab", "embed", "heads", "head_dim", "mlp", "length", "length_classes"); padir.sharding maps
them to mesh axes. They change no computation.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import jax
import jax.numpy as jnp
from flax import nnx, struct

from padir import tokenizer as tokenizer_lib

Array = jax.Array
NEG_INF = -1e9


def _axes(*names: str) -> dict[str, tuple[str, ...]]:
  """Variable metadata naming each dimension of a parameter (see padir.sharding)."""
  return {"logical_axes": names}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  vocab_size: int
  max_source_length: int = 128  # tokens incl. EOS; the encoder adds one [LEN] position
  max_target_length: int = 128  # tokens incl. EOS; also the largest predictable length
  num_encoder_layers: int = 6
  num_decoder_layers: int = 6
  num_heads: int = 8
  d_model: int = 512
  d_ff: int = 2048
  dropout_rate: float = 0.1
  decoder: Literal["nar", "ar"] = "nar"
  positional_attention: bool = True
  dtype: str = "float32"  # compute dtype: "float32" or "bfloat16" (params stay float32)
  vocab_multiple: int = 1  # pad the output projection's vocabulary to a multiple of this
  max_length_offset: int = 0  # 0: absolute length classes; M > 0: offsets -M..+M (docstring)

  @classmethod
  def from_dict(cls, d: Any) -> "ModelConfig":
    d = dict(d)
    return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})

  @classmethod
  def from_run_config(cls, config: Any, vocab_size: int) -> "ModelConfig":
    """The model a run config describes: config.model with the data's maximum lengths."""
    return cls.from_dict(
      {
        **config.model.to_dict(),
        "vocab_size": vocab_size,
        "max_source_length": config.data.max_source_length,
        "max_target_length": config.data.max_target_length,
      }
    )

  @property
  def compute_dtype(self) -> Any:
    if self.dtype not in ("float32", "bfloat16"):
      raise ValueError(f"dtype must be 'float32' or 'bfloat16', got {self.dtype!r}")
    return jnp.dtype(self.dtype)

  @property
  def padded_vocab_size(self) -> int:
    """vocab_size rounded up to a multiple of vocab_multiple: the output matmul's width."""
    return -(-self.vocab_size // self.vocab_multiple) * self.vocab_multiple

  @property
  def num_length_classes(self) -> int:
    """The length head's outputs: lengths 0..max_target_length, or offsets -M..+M."""
    M = self.max_length_offset
    return 2 * M + 1 if M else self.max_target_length + 1

  @property
  def head_dim(self) -> int:
    if self.d_model % self.num_heads:
      raise ValueError(f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}")
    return self.d_model // self.num_heads


def _layer_norm(cfg: ModelConfig, rngs: nnx.Rngs) -> nnx.LayerNorm:
  """Statistics in float32 (flax promotes them), the output in the compute dtype."""
  return nnx.LayerNorm(
    cfg.d_model,
    scale_metadata=_axes("embed"),
    bias_metadata=_axes("embed"),
    dtype=cfg.compute_dtype,
    rngs=rngs,
  )


class Attention(nnx.Module):
  """Multi-head attention with separate query, key and value inputs."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    D, N, H = cfg.d_model, cfg.num_heads, cfg.head_dim
    w_in = nnx.initializers.variance_scaling(1.0, "fan_in", "normal", in_axis=0, out_axis=(1, 2))
    w_out = nnx.initializers.variance_scaling(1.0, "fan_in", "normal", in_axis=(0, 1), out_axis=2)
    self.w_q_DNH = nnx.Param(w_in(rngs.params(), (D, N, H)), **_axes("embed", "heads", "head_dim"))
    self.w_k_DNH = nnx.Param(w_in(rngs.params(), (D, N, H)), **_axes("embed", "heads", "head_dim"))
    self.w_v_DNH = nnx.Param(w_in(rngs.params(), (D, N, H)), **_axes("embed", "heads", "head_dim"))
    self.w_o_NHD = nnx.Param(w_out(rngs.params(), (N, H, D)), **_axes("heads", "head_dim", "embed"))
    self.dropout = nnx.Dropout(cfg.dropout_rate, rngs=rngs)
    self.dtype = cfg.compute_dtype
    self.sow_weights = False  # True: attend() sows its softmax weights (padir.attention)

  def w(self, param: nnx.Param) -> Array:
    """A weight in the compute dtype (the float32 master copy stays the parameter)."""
    return param[...].astype(self.dtype)

  def __call__(self, q_BQD: Array, k_BKD: Array, v_BKD: Array, mask_BQK: Array) -> Array:
    return self.attend(q_BQD, self.keys(k_BKD), self.values(v_BKD), mask_BQK)

  def keys(self, k_BKD: Array) -> Array:
    """Projected keys k_BNKH, heads before positions (the layout a KV cache is read in)."""
    return jnp.einsum("BKD,DNH->BNKH", k_BKD.astype(self.dtype), self.w(self.w_k_DNH))

  def values(self, v_BKD: Array) -> Array:
    return jnp.einsum("BKD,DNH->BNKH", v_BKD.astype(self.dtype), self.w(self.w_v_DNH))

  def attend(self, q_BQD: Array, k_BNKH: Array, v_BNKH: Array, mask_BQK: Array) -> Array:
    """Attention over already projected keys and values (a KV cache holds those); the scores
    and their softmax in float32."""
    q_BQNH = jnp.einsum("BQD,DNH->BQNH", q_BQD.astype(self.dtype), self.w(self.w_q_DNH))
    logits_BNQK = jnp.einsum(
      "BQNH,BNKH->BNQK", q_BQNH, k_BNKH, preferred_element_type=jnp.float32
    ) / jnp.sqrt(jnp.float32(q_BQNH.shape[-1]))
    logits_BNQK = jnp.where(mask_BQK[:, None], logits_BNQK, NEG_INF)
    probs_BNQK = jax.nn.softmax(logits_BNQK, axis=-1)
    if self.sow_weights:
      self.sow(nnx.Intermediate, "weights_BNQK", probs_BNQK)
    probs_BNQK = self.dropout(probs_BNQK).astype(self.dtype)
    out_BQNH = jnp.einsum("BNQK,BNKH->BQNH", probs_BNQK, v_BNKH)
    return jnp.einsum("BQNH,NHD->BQD", out_BQNH, self.w(self.w_o_NHD))


class FeedForward(nnx.Module):
  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.up = nnx.Linear(
      cfg.d_model,
      cfg.d_ff,
      kernel_metadata=_axes("embed", "mlp"),
      bias_metadata=_axes("mlp"),
      dtype=cfg.compute_dtype,
      rngs=rngs,
    )
    self.down = nnx.Linear(
      cfg.d_ff,
      cfg.d_model,
      kernel_metadata=_axes("mlp", "embed"),
      bias_metadata=_axes("embed"),
      dtype=cfg.compute_dtype,
      rngs=rngs,
    )
    self.dropout = nnx.Dropout(cfg.dropout_rate, rngs=rngs)

  def __call__(self, x_BLD: Array) -> Array:
    return self.down(self.dropout(jax.nn.relu(self.up(x_BLD))))


class EncoderLayer(nnx.Module):
  """Pre-LN: x += attn(LN(x)); x += FFN(LN(x))."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.norm_self = _layer_norm(cfg, rngs)
    self.self_attention = Attention(cfg, rngs=rngs)
    self.norm_ffn = _layer_norm(cfg, rngs)
    self.ffn = FeedForward(cfg, rngs=rngs)
    self.dropout = nnx.Dropout(cfg.dropout_rate, rngs=rngs)

  def __call__(self, x_BSD: Array, mask_BSS: Array) -> Array:
    h_BSD = self.norm_self(x_BSD)
    x_BSD = x_BSD + self.dropout(self.self_attention(h_BSD, h_BSD, h_BSD, mask_BSS))
    return x_BSD + self.dropout(self.ffn(self.norm_ffn(x_BSD)))


@struct.dataclass
class LayerPrefix:
  """A decoder layer's projections of the decoded prefix (position t written at step t): what a
  beam search reorders with its beams."""

  self_k_MNTH: Array
  self_v_MNTH: Array
  pos_v_MNTH: Array | None = None  # None without positional attention


@struct.dataclass
class LayerFixed:
  """A decoder layer's projections that do not depend on the prefix: cross-attention keys and
  values of the encoder states (projected once) and the positional-attention keys."""

  cross_k_MNSH: Array
  cross_v_MNSH: Array
  pos_k_NTH: Array | None = None  # None without positional attention


@struct.dataclass
class KVCache:
  """The decoding state of Transformer.decode_step for M prefixes: per decoder layer, the
  prefix part and the fixed part, and the encoder mask."""

  prefix: tuple[LayerPrefix, ...]
  fixed: tuple[LayerFixed, ...]
  enc_mask_M1S: Array


class DecoderLayer(nnx.Module):
  """Pre-LN: self-attention, positional attention, cross-attention, FFN."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.norm_self = _layer_norm(cfg, rngs)
    self.self_attention = Attention(cfg, rngs=rngs)
    if cfg.positional_attention:
      self.norm_positional = _layer_norm(cfg, rngs)
      self.positional_attention = Attention(cfg, rngs=rngs)
    else:
      self.positional_attention = None
    self.norm_cross = _layer_norm(cfg, rngs)
    self.cross_attention = Attention(cfg, rngs=rngs)
    self.norm_ffn = _layer_norm(cfg, rngs)
    self.ffn = FeedForward(cfg, rngs=rngs)
    self.dropout = nnx.Dropout(cfg.dropout_rate, rngs=rngs)

  def __call__(
    self,
    x_BTD: Array,
    pos_BTD: Array,
    enc_BSD: Array | None,
    mask_BTT: Array,
    mask_BTS: Array,
    fixed: LayerFixed | None = None,
  ) -> Array:
    """fixed: this layer's cross-attention keys and values already projected (then enc_BSD is
    not read); None projects enc_BSD here."""
    h_BTD = self.norm_self(x_BTD)
    x_BTD = x_BTD + self.dropout(self.self_attention(h_BTD, h_BTD, h_BTD, mask_BTT))
    if self.positional_attention is not None:
      h_BTD = self.norm_positional(x_BTD)
      x_BTD = x_BTD + self.dropout(self.positional_attention(pos_BTD, pos_BTD, h_BTD, mask_BTT))
    h_BTD = self.norm_cross(x_BTD)
    if fixed is None:
      cross_BTD = self.cross_attention(h_BTD, enc_BSD, enc_BSD, mask_BTS)
    else:
      cross_BTD = self.cross_attention.attend(
        h_BTD, fixed.cross_k_MNSH, fixed.cross_v_MNSH, mask_BTS
      )
    x_BTD = x_BTD + self.dropout(cross_BTD)
    return x_BTD + self.dropout(self.ffn(self.norm_ffn(x_BTD)))

  def step(
    self,
    x_M1D: Array,
    pos_1D: Array,
    t: Array,
    prefix: LayerPrefix,
    fixed: LayerFixed,
    enc_mask_M1S: Array,
  ) -> tuple[Array, LayerPrefix]:
    """The causal (ar) layer at position t alone, given the projections of positions < t in
    `prefix`; returns the output and the prefix cache with position t written. Equals
    __call__ at position t with the causal mask."""
    M, _, T, _ = prefix.self_k_MNTH.shape
    put = lambda c_MNTH, new_MN1H: jax.lax.dynamic_update_slice_in_dim(c_MNTH, new_MN1H, t, 2)
    seen_T = jnp.arange(T) <= t
    h_M1D = self.norm_self(x_M1D)
    prefix = prefix.replace(
      self_k_MNTH=put(prefix.self_k_MNTH, self.self_attention.keys(h_M1D)),
      self_v_MNTH=put(prefix.self_v_MNTH, self.self_attention.values(h_M1D)),
    )
    x_M1D = x_M1D + self.self_attention.attend(
      h_M1D, prefix.self_k_MNTH, prefix.self_v_MNTH, jnp.broadcast_to(seen_T[None, None], (M, 1, T))
    )
    if self.positional_attention is not None:
      # Queries and keys come from positions only: the weights are the same for every prefix.
      att = self.positional_attention
      h_M1D = self.norm_positional(x_M1D)
      prefix = prefix.replace(pos_v_MNTH=put(prefix.pos_v_MNTH, att.values(h_M1D)))
      q_NH = jnp.einsum("D,DNH->NH", pos_1D[0].astype(att.dtype), att.w(att.w_q_DNH))
      logits_NT = jnp.einsum(
        "NH,NTH->NT", q_NH, fixed.pos_k_NTH, preferred_element_type=jnp.float32
      ) / jnp.sqrt(jnp.float32(q_NH.shape[-1]))
      probs_NT = jax.nn.softmax(jnp.where(seen_T[None], logits_NT, NEG_INF), axis=-1)
      out_MNH = jnp.einsum("NT,MNTH->MNH", probs_NT.astype(att.dtype), prefix.pos_v_MNTH)
      x_M1D = x_M1D + jnp.einsum("MNH,NHD->MD", out_MNH, att.w(att.w_o_NHD))[:, None]
    h_M1D = self.norm_cross(x_M1D)
    x_M1D = x_M1D + self.cross_attention.attend(
      h_M1D, fixed.cross_k_MNSH, fixed.cross_v_MNSH, enc_mask_M1S
    )
    return x_M1D + self.ffn(self.norm_ffn(x_M1D)), prefix


class Transformer(nnx.Module):
  """encode() once per source; decode() once per refinement step (nar) or per token (ar)."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    if cfg.decoder not in ("nar", "ar"):
      raise ValueError(f"decoder must be 'nar' or 'ar', got {cfg.decoder!r}")
    self.cfg = cfg
    normal = nnx.initializers.normal(stddev=1.0)
    self.embed_VD = nnx.Param(
      normal(rngs.params(), (cfg.vocab_size, cfg.d_model)), **_axes("vocab", "embed")
    )
    self.source_pos_SD = nnx.Param(
      normal(rngs.params(), (cfg.max_source_length + 1, cfg.d_model)), **_axes("length", "embed")
    )
    self.target_pos_TD = nnx.Param(
      normal(rngs.params(), (cfg.max_target_length, cfg.d_model)), **_axes("length", "embed")
    )
    self.encoder_layers = nnx.List(
      [EncoderLayer(cfg, rngs=rngs) for _ in range(cfg.num_encoder_layers)]
    )
    self.decoder_layers = nnx.List(
      [DecoderLayer(cfg, rngs=rngs) for _ in range(cfg.num_decoder_layers)]
    )
    self.encoder_norm = _layer_norm(cfg, rngs)
    self.decoder_norm = _layer_norm(cfg, rngs)
    self.length_head = nnx.Linear(
      cfg.d_model,
      cfg.num_length_classes,
      kernel_metadata=_axes("embed", "length_classes"),
      bias_metadata=_axes("length_classes"),
      dtype=jnp.float32,
      rngs=rngs,
    )
    self.dropout = nnx.Dropout(cfg.dropout_rate, rngs=rngs)

  def _embed(self, tokens_BL: Array, pos_LD: Array) -> Array:
    x_BLD = self.embed_VD[...][tokens_BL] + pos_LD[None]
    return self.dropout(x_BLD.astype(self.cfg.compute_dtype))

  def encode(self, inputs_BL: Array) -> tuple[Array, Array]:
    """inputs [B, L<=max_source_length] -> states [B, S=L+1, D] ([LEN] first), mask [B, S]."""
    B = inputs_BL.shape[0]
    tokens_BS = jnp.concatenate(
      [jnp.full((B, 1), tokenizer_lib.LEN_ID, inputs_BL.dtype), inputs_BL], axis=1
    )
    mask_BS = tokens_BS != tokenizer_lib.PAD_ID
    x_BSD = self._embed(tokens_BS, self.source_pos_SD[...][: tokens_BS.shape[1]])
    for layer in self.encoder_layers:
      x_BSD = layer(x_BSD, mask_BS[:, None, :] & mask_BS[:, :, None])
    return self.encoder_norm(x_BSD), mask_BS

  def length_head_logits(self, enc_BSD: Array) -> Array:
    """[B, num_length_classes]: the length head's logits (absolute lengths or offsets), float32."""
    return self.length_head(enc_BSD[:, 0].astype(jnp.float32))

  def length_logits(self, enc_BSD: Array, enc_mask_BS: Array | None = None) -> Array:
    """[B, max_target_length + 1]: logits over the target length (EOS included), float32.
    With max_length_offset, the log-probabilities of each length (offsets_to_lengths); these
    need enc_mask_BS (the source lengths)."""
    logits_BK = self.length_head_logits(enc_BSD)
    if not self.cfg.max_length_offset:
      return logits_BK
    if enc_mask_BS is None:
      raise ValueError("length offsets need the encoder mask: length_logits(enc_BSD, enc_mask_BS)")
    return offsets_to_lengths(logits_BK, source_lengths(enc_mask_BS), self.cfg.max_target_length)

  def decode(
    self,
    hyp_BT: Array,
    enc_BSD: Array | None,
    enc_mask_BS: Array,
    fixed: tuple[LayerFixed, ...] | None = None,
  ) -> Array:
    """One decoder pass -> logits [B, T, V].

    nar: hyp is the current hypothesis, PAD beyond its length; every position sees every
    non-PAD position. ar: hyp is [BOS] + target[:-1]; position t sees positions <= t.
    The logits are float32, [B, T, padded_vocab_size] (NEG_INF past vocab_size).
    fixed: project_encoder's cross-attention keys and values of these B rows, computed once
    for several passes (PaDIR refinement); then enc_BSD may be None.
    """
    T = hyp_BT.shape[1]
    pos_TD = self.target_pos_TD[...][:T]
    valid_BT = hyp_BT != tokenizer_lib.PAD_ID
    mask_BTT = valid_BT[:, None, :] & valid_BT[:, :, None]
    if self.cfg.decoder == "ar":
      mask_BTT = mask_BTT & jnp.tril(jnp.ones((T, T), bool))[None]
    # Queries at PAD positions attend to something (their own position) so softmax stays finite.
    mask_BTT = mask_BTT | jnp.eye(T, dtype=bool)[None]
    mask_BTS = jnp.broadcast_to(enc_mask_BS[:, None, :], (hyp_BT.shape[0], T, enc_mask_BS.shape[1]))
    x_BTD = self._embed(hyp_BT, pos_TD)
    pos_BTD = jnp.broadcast_to(pos_TD[None], x_BTD.shape)
    fixed = fixed or (None,) * len(self.decoder_layers)
    for layer, f in zip(self.decoder_layers, fixed):
      x_BTD = layer(x_BTD, pos_BTD, enc_BSD, mask_BTT, mask_BTS, f)
    return self._logits(self.decoder_norm(x_BTD))

  def project_encoder(self, enc_MSD: Array) -> tuple[LayerFixed, ...]:
    """Per decoder layer, the cross-attention keys and values of the encoder states (the
    positional keys left None): projected once, read by every decoder pass or step."""
    return tuple(
      LayerFixed(
        cross_k_MNSH=layer.cross_attention.keys(enc_MSD),
        cross_v_MNSH=layer.cross_attention.values(enc_MSD),
      )
      for layer in self.decoder_layers
    )

  def _logits(self, h_xD: Array) -> Array:
    """The output layer: tied to the embeddings, scaled by 1 / sqrt(d_model), float32; with
    vocab_multiple, padded_vocab_size columns, the padding NEG_INF."""
    cfg = self.cfg
    V, Vp = cfg.vocab_size, cfg.padded_vocab_size
    embed_VD = self.embed_VD[...]
    if Vp > V:
      embed_VD = jnp.pad(embed_VD, ((0, Vp - V), (0, 0)))
    logits_xV = jnp.einsum(
      "...D,VD->...V",
      h_xD.astype(cfg.compute_dtype),
      embed_VD.astype(cfg.compute_dtype),
      preferred_element_type=jnp.float32,
    ) / jnp.sqrt(jnp.float32(cfg.d_model))
    return logits_xV if Vp == V else jnp.where(jnp.arange(Vp) < V, logits_xV, NEG_INF)

  # Incremental AR decoding: a KV cache per decoder layer, cross-attention projected once.

  def init_cache(self, enc_MSD: Array, enc_mask_MS: Array, max_len: int) -> KVCache:
    """The decoding state of decode_step for M prefixes of at most max_len tokens."""
    if self.cfg.decoder != "ar":
      raise ValueError("a KV cache needs a model with decoder='ar'")
    M, N, H = enc_MSD.shape[0], self.cfg.num_heads, self.cfg.head_dim
    zeros_MNTH = jnp.zeros((M, N, max_len, H), enc_MSD.dtype)
    pos_TD = self.target_pos_TD[...][:max_len]
    prefix, fixed = [], []
    for layer, cross in zip(self.decoder_layers, self.project_encoder(enc_MSD)):
      positional = layer.positional_attention is not None
      prefix.append(
        LayerPrefix(
          self_k_MNTH=zeros_MNTH,
          self_v_MNTH=zeros_MNTH,
          pos_v_MNTH=zeros_MNTH if positional else None,
        )
      )
      fixed.append(
        cross.replace(
          pos_k_NTH=layer.positional_attention.keys(pos_TD[None])[0] if positional else None
        )
      )
    return KVCache(prefix=tuple(prefix), fixed=tuple(fixed), enc_mask_M1S=enc_mask_MS[:, None, :])

  def decode_step(self, token_M: Array, t: Array, cache: KVCache) -> tuple[Array, KVCache]:
    """Logits [M, V] for position t given its input token (BOS at t=0, else the token at t-1)
    and the cache of positions < t: decode()'s row t for a causal decoder, in O(t) work."""
    pos_1D = jax.lax.dynamic_slice_in_dim(self.target_pos_TD[...], t, 1)
    x_M1D = self._embed(token_M[:, None], pos_1D)
    prefix = []
    for layer, p, f in zip(self.decoder_layers, cache.prefix, cache.fixed):
      x_M1D, p = layer.step(x_M1D, pos_1D, t, p, f, cache.enc_mask_M1S)
      prefix.append(p)
    logits_MV = self._logits(self.decoder_norm(x_M1D)[:, 0])[:, : self.cfg.vocab_size]
    return logits_MV, cache.replace(prefix=tuple(prefix))


def source_lengths(enc_mask_BS: Array) -> Array:
  """[B] source lengths (EOS included) from the encoder mask ([LEN] excluded)."""
  return enc_mask_BS.sum(-1).astype(jnp.int32) - 1


def offset_lengths(source_lengths_B: Array, max_offset: int, max_len: int) -> Array:
  """[B, 2M+1] the target length of each offset class -M..+M, clipped to [1, max_len]."""
  offsets_K = jnp.arange(-max_offset, max_offset + 1)
  return jnp.clip(source_lengths_B[:, None] + offsets_K[None], 1, max_len)


def offset_classes(source_lengths_B: Array, target_lengths_B: Array, max_offset: int) -> Array:
  """[B] the offset class of each target length: target - source clipped to [-M, M], plus M."""
  offset_B = jnp.clip(target_lengths_B - source_lengths_B, -max_offset, max_offset)
  return (offset_B + max_offset).astype(jnp.int32)


def offsets_to_lengths(offset_logits_BK: Array, source_lengths_B: Array, max_len: int) -> Array:
  """[B, max_len + 1] log p(n | x) of each target length n under the offset distribution:
  the offsets whose clipped length is n add up; lengths no offset reaches (0 among them) get
  -inf."""
  max_offset = (offset_logits_BK.shape[-1] - 1) // 2
  logp_BK = jax.nn.log_softmax(offset_logits_BK.astype(jnp.float32), -1)
  lengths_BK = offset_lengths(source_lengths_B, max_offset, max_len)
  hit_BKC = lengths_BK[..., None] == jnp.arange(max_len + 1)
  logp_BKC = jnp.where(hit_BKC, logp_BK[..., None], -jnp.inf)
  return jax.nn.logsumexp(logp_BKC, axis=1)


def count_params(model: nnx.Module) -> int:
  return sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def abstract_param_count(cfg: ModelConfig) -> int:
  """Parameter count without allocating (e.g. for the 67M paper size)."""
  abstract = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
  return count_params(abstract)
