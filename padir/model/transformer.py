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
- ctc_upsample = k > 0 (off by default): the `nar` decoder runs over k x source-length alignment
  slots and is trained with CTC (padir.decoding.ctc); its positional embeddings cover decoder_length.
- dag_upsample = k >= 2 (off by default): the `nar` decoder runs over floor(k x source-length) vertices
  of DA-Transformer's directed acyclic graph, with a link head (padir.model.dag_links) for the
  transitions; trained by padir.model.dag, decoded by padir.decoding.dag.

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
("vocab", "embed", "heads", "head_dim", "mlp", "length", "length_classes"); padir.training.sharding maps
them to mesh axes. They change no computation.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import jax
import jax.numpy as jnp
from flax import nnx, struct

from padir.data import tokenizer as tokenizer_lib
from padir.model import dag_links, layer_stack

Array = jax.Array
NEG_INF = -1e9
# config.model.remat: what a layer's backward pass keeps from its forward pass. "none": every
# activation (no recompute); "full": the layer's input only (the forward recomputed);
# "dots_saveable": the matmul outputs (the rest recomputed).
_NOTHING_SAVED = object()
REMAT_POLICIES = {
  "none": None,
  "full": _NOTHING_SAVED,
  "dots_saveable": jax.checkpoint_policies.dots_saveable,
}


def _axes(*names: str) -> dict[str, tuple[str, ...]]:
  """Variable metadata naming each dimension of a parameter (see padir.training.sharding)."""
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
  # k > 0: the nar decoder runs over floor(k x source) slots with CTC (padir.decoding.ctc); k = 0 or >= 1,
  # fractional allowed (1.5)
  ctc_upsample: float = 0
  # K > ctc_upsample: in training each batch's ratio is the smallest of ctc_upsample, + 0.5, ..., K
  # that fits all its targets (padir.decoding.ctc.batch_ratio); 0 = the fixed ratio
  ctc_upsample_max: float = 0
  # k >= 2: the nar decoder is DA-Transformer's directed acyclic decoder over floor(k x source)
  # vertices (padir.model.dag), fractional allowed (2.5); 0 = off
  dag_upsample: float = 0
  # "scan": each layer kind's parameters stored stacked on a leading axis (padir.model.
  # layer_stack) and the layers run by one jax.lax.scan (traced and compiled once per kind);
  # "loop": stored per layer, run by a Python loop; "auto": the scan on an accelerator, the loop
  # on a CPU (measured faster per step there). True / False (configs written before "auto")
  # mean scan / loop. Checkpoints are per layer in both (either layout restores the other's).
  scan_layers: bool | str = "auto"
  remat: Literal["none", "full", "dots_saveable"] = "none"  # REMAT_POLICIES: per-layer remat
  # "layer": in training, each layer's dropout masks come from one draw of random bits
  # (draw_dropout; the compiled step expands the bit generator once a layer, not once a site);
  # "site": each dropout site draws its own (nnx.Dropout; the masks of runs before this option).
  # Both drop each element independently with probability dropout_rate.
  dropout_draw: Literal["layer", "site"] = "layer"  # one of DROPOUT_DRAWS
  # With dropout_draw "layer", the bit generator of the draws (a layer's, the embeddings';
  # DROPOUT_RNGS): "threefry", XLA's RngBitGenerator with its ThreeFry algorithm on the
  # stream's key; "xla_default", the same op at XLA's default algorithm (jax.random.bits of an
  # rbg key; Philox on a CPU, where it costs 3x ThreeFry's time: the masks of runs before this
  # option, the embeddings' by nnx.Dropout). The same dropout either way.
  dropout_rng: Literal["threefry", "xla_default"] = "threefry"

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
  def scanned(self) -> bool:
    """Whether the layers run as a scan: scan_layers, with "auto" resolved on the platform the
    step runs on (a scan on GPU / TPU, the loop on CPU)."""
    if self.scan_layers == "auto":
      return jax.default_backend() != "cpu"
    return self.scan_layers in ("scan", True)

  @property
  def remat_policy(self) -> Any:
    """The jax.checkpoint policy of one layer (None: no rematerialisation)."""
    if self.remat not in REMAT_POLICIES:
      raise ValueError(f"remat must be one of {tuple(REMAT_POLICIES)}, got {self.remat!r}")
    return REMAT_POLICIES[self.remat]

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
  def decoder_length(self) -> int:
    """Decoder positions (learned embeddings): max_target_length, or with ctc_upsample (or
    dag_upsample) = k the k max_source_length alignment slots if there are more."""
    if not self.ctc_upsample and not self.dag_upsample:
      return self.max_target_length
    k = float(max(self.ctc_upsample, self.ctc_upsample_max) or self.dag_upsample)
    slots = math.floor(self.max_source_length * k + 1e-9)
    return max(self.max_target_length, slots)

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


DROPOUT_DRAWS = ("layer", "site")  # config.model.dropout_draw (ModelConfig)
DROPOUT_RNGS = ("threefry", "xla_default")  # config.model.dropout_rng (ModelConfig)


def dropout_bits(key: Array, n: int, rng: str = "threefry") -> Array:
  """n random uint32 words from `key` (a typed key of any implementation). "threefry": XLA's
  RngBitGenerator with its ThreeFry algorithm, seeded by the key's data (zero-padded to the
  op's 4 words); "xla_default": jax.random.bits (an rbg key's bits: the same op at XLA's default
  algorithm, Philox on a CPU, ~3x the time a word there: docs/padir_training.md)."""
  if rng == "xla_default":
    return jax.random.bits(key, (n,), jnp.uint32)
  if rng != "threefry":
    raise ValueError(f"dropout_rng must be one of {DROPOUT_RNGS}, got {rng!r}")
  data = jax.random.key_data(key).reshape(-1).astype(jnp.uint32)
  data = jnp.concatenate([data, jnp.zeros((max(0, 4 - data.size),), jnp.uint32)])[:4]
  algorithm = jax.lax.RandomAlgorithm.RNG_THREE_FRY
  return jax.lax.rng_bit_generator(data, (n,), jnp.uint32, algorithm=algorithm)[1]


def draw_dropout(
  drop: nnx.Dropout, *shapes: tuple[int, ...], rng: str = "threefry"
) -> tuple[Array, ...] | None:
  """A layer's dropout keep-masks, one per shape, from ONE draw of `drop`'s stream (one key, one
  block of random bits cut into the shapes, `dropout_bits` with generator `rng`); None in eval
  mode or at rate 0 (nothing dropped). Each element is kept with probability 1 - rate (to
  2^-32), independently, as nnx.Dropout keeps it; one draw instead of one per dropout site
  takes the random-bit generator's expansion out of the compiled program all but once a layer
  (on a CPU a fifth of the scanned bf16 step's instructions; docs/padir_training.md)."""
  if drop.deterministic or drop.rate == 0.0:
    return None
  sizes = [math.prod(shape) for shape in shapes]
  bits = dropout_bits(drop.rngs(), sum(sizes), rng)
  keep = bits < jnp.uint32(min(round((1.0 - drop.rate) * 2**32), 2**32 - 1))
  starts = [sum(sizes[:i]) for i in range(len(sizes))]
  return tuple(keep[a : a + n].reshape(shape) for a, n, shape in zip(starts, sizes, shapes))


def _one_draw(cfg: ModelConfig) -> bool:
  if cfg.dropout_draw not in DROPOUT_DRAWS:
    raise ValueError(f"dropout_draw must be one of {DROPOUT_DRAWS}, got {cfg.dropout_draw!r}")
  if cfg.dropout_rng not in DROPOUT_RNGS:
    raise ValueError(f"dropout_rng must be one of {DROPOUT_RNGS}, got {cfg.dropout_rng!r}")
  return cfg.dropout_draw == "layer"


def dropped(drop: nnx.Dropout, x: Array, keep: Array | None) -> Array:
  """x through dropout with a keep-mask from draw_dropout (kept elements scaled by 1 / (1 -
  rate), as nnx.Dropout does); keep None: drop's own call (eval mode: x unchanged)."""
  if keep is None:
    return drop(x)
  if drop.rate >= 1.0:
    return jnp.zeros_like(x)
  return jax.lax.select(keep, x / (1.0 - drop.rate), jnp.zeros_like(x))


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
    self.sow_weights = (
      False  # True: attend() sows its softmax weights (padir.evaluation.stutter_attention)
    )

  def w(self, param: nnx.Param) -> Array:
    """A weight in the compute dtype (the float32 master copy stays the parameter)."""
    return param[...].astype(self.dtype)

  def __call__(
    self, q_BQD: Array, k_BKD: Array, v_BKD: Array, mask_BQK: Array, keep: Array | None = None
  ) -> Array:
    """keep: the attention weights' dropout keep-mask [B, N, Q, K] (draw_dropout); None: this
    module's own dropout."""
    return self.attend(q_BQD, self.keys(k_BKD), self.values(v_BKD), mask_BQK, keep)

  # Layouts (issue 30): every projection is a plain [rows, D] x [D, N H] product whose output
  # keeps the rows first ("...NH"); asking XLA for heads before positions in the product's output
  # made it copy the transposed D x D weight on every call, inside every decoding loop's body.
  # Keys are stored transposed (k_BNHK: the scores' contraction dimension before the keys) and
  # values as v_BNKH, so the two attention products read them as they lie.

  def project(self, x_xD: Array, param: nnx.Param) -> Array:
    """x [..., D] -> [..., N, H] through a [D, N, H] weight."""
    return jnp.einsum("...D,DNH->...NH", x_xD.astype(self.dtype), self.w(param))

  def keys(self, k_BKD: Array) -> Array:
    """Projected keys, transposed: k_BNHK (the layout a KV cache is kept in)."""
    return jnp.transpose(self.project(k_BKD, self.w_k_DNH), (0, 2, 3, 1))

  def values(self, v_BKD: Array) -> Array:
    """Projected values v_BNKH (the layout a KV cache is kept in)."""
    return jnp.transpose(self.project(v_BKD, self.w_v_DNH), (0, 2, 1, 3))

  def scores(self, q_BQD: Array, k_BNHK: Array) -> Array:
    """[B, N, Q, K] the scaled query-key scores, float32. B = 1 serves every row when the queries
    and keys are the same for all (the positional attention's: positions only)."""
    q_BQNH = self.project(q_BQD, self.w_q_DNH)
    return jnp.einsum(
      "BQNH,BNHK->BNQK", q_BQNH, k_BNHK, preferred_element_type=jnp.float32
    ) / jnp.sqrt(jnp.float32(q_BQNH.shape[-1]))

  def attend(
    self,
    q_BQD: Array,
    k_BNHK: Array,
    v_BNKH: Array,
    mask_BQK: Array,
    keep: Array | None = None,
  ) -> Array:
    """Attention over already projected keys and values (a KV cache holds those); the scores
    and their softmax in float32."""
    return self.attend_scores(self.scores(q_BQD, k_BNHK), v_BNKH, mask_BQK, keep)

  def attend_scores(
    self, logits_xNQK: Array, v_BNKH: Array, mask_BQK: Array, keep: Array | None = None
  ) -> Array:
    """attend() given the scores (batch B, or 1 for scores every row shares)."""
    logits_BNQK = jnp.where(mask_BQK[:, None], logits_xNQK, NEG_INF)
    probs_BNQK = jax.nn.softmax(logits_BNQK, axis=-1)
    if self.sow_weights:
      self.sow(nnx.Intermediate, "weights_BNQK", probs_BNQK)
    probs_BNQK = dropped(self.dropout, probs_BNQK, keep).astype(self.dtype)
    out_BNQH = jnp.einsum("BNQK,BNKH->BNQH", probs_BNQK, v_BNKH)
    return self.output(jnp.transpose(out_BNQH, (0, 2, 1, 3)))

  def attend_one(self, q_MNH: Array, k_MNHK: Array, v_MNKH: Array, mask_MK: Array) -> Array:
    """attend() for one query position per row, the query already projected: [M, N, H]."""
    logits_MNK = jnp.einsum(
      "MNH,MNHK->MNK", q_MNH, k_MNHK, preferred_element_type=jnp.float32
    ) / jnp.sqrt(jnp.float32(q_MNH.shape[-1]))
    probs_MNK = jax.nn.softmax(jnp.where(mask_MK[:, None], logits_MNK, NEG_INF), axis=-1)
    return jnp.einsum("MNK,MNKH->MNH", probs_MNK.astype(self.dtype), v_MNKH)

  def output(self, out_xNH: Array) -> Array:
    """[..., N, H] -> [..., D]: the heads' outputs through w_o, as one [rows, N H] x [N H, D]
    product (both reshapes are free). The einsum over the two contracted axes made XLA copy
    the weight on every call, inside decoding loops too (issue 30)."""
    *lead, N, H = out_xNH.shape
    w_XD = self.w(self.w_o_NHD).reshape(N * H, -1)
    return out_xNH.reshape(*lead, N * H) @ w_XD


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

  def __call__(self, x_BLD: Array, keep: Array | None = None) -> Array:
    """keep: the hidden units' dropout keep-mask [B, L, d_ff] (draw_dropout); None: this
    module's own dropout."""
    return self.down(dropped(self.dropout, jax.nn.relu(self.up(x_BLD)), keep))


class EncoderLayer(nnx.Module):
  """Pre-LN: x += attn(LN(x)); x += FFN(LN(x))."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.norm_self = _layer_norm(cfg, rngs)
    self.self_attention = Attention(cfg, rngs=rngs)
    self.norm_ffn = _layer_norm(cfg, rngs)
    self.ffn = FeedForward(cfg, rngs=rngs)
    self.dropout = nnx.Dropout(cfg.dropout_rate, rngs=rngs)
    self.one_draw = _one_draw(cfg)
    self.dropout_rng = cfg.dropout_rng

  def __call__(self, x_BSD: Array, mask_BSS: Array) -> Array:
    """In training with dropout_draw "layer", the layer's dropout masks come from one draw
    (draw_dropout)."""
    B, S, D = x_BSD.shape
    N, F = self.self_attention.w_q_DNH.shape[1], self.ffn.up.out_features
    shapes = (B, N, S, S), (B, S, D), (B, S, F), (B, S, D)
    keep = draw_dropout(self.dropout, *shapes, rng=self.dropout_rng) if self.one_draw else None
    probs, attended, hidden, ffn = keep or (None,) * 4
    h_BSD = self.norm_self(x_BSD)
    a_BSD = self.self_attention(h_BSD, h_BSD, h_BSD, mask_BSS, probs)
    x_BSD = x_BSD + dropped(self.dropout, a_BSD, attended)
    return x_BSD + dropped(self.dropout, self.ffn(self.norm_ffn(x_BSD), hidden), ffn)


@struct.dataclass
class LayerPrefix:
  """A decoder layer's projections of the decoded prefix (position t written at step t): what a
  beam search reorders with its beams. Keys transposed (heads, head dimension, positions), values
  positions before the head dimension: the layouts the attention products read directly."""

  self_k_MNHT: Array
  self_v_MNTH: Array
  pos_v_MNTH: Array | None = None  # None without positional attention


@struct.dataclass
class LayerFixed:
  """A decoder layer's arrays that do not depend on the prefix: cross-attention keys and values
  of the encoder states (projected once; project_encoder fills these two only) and, for the
  KV-cached step (init_cache), the self-attention's query / key / value weights side by side
  ([D, 3 N H], one product per step) and the positional attention's weights of every query
  position over the positions up to it (they depend on positions only: computed once)."""

  cross_k_MNHS: Array
  cross_v_MNSH: Array
  self_qkv_DX: Array | None = None
  pos_probs_TNT: Array | None = None  # None without positional attention


@struct.dataclass
class KVCache:
  """The decoding state of Transformer.decode_step for M prefixes: per decoder layer, the
  prefix part and the fixed part, and the encoder mask."""

  prefix: tuple[LayerPrefix, ...]
  fixed: tuple[LayerFixed, ...]
  enc_mask_MS: Array


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
    self.one_draw = _one_draw(cfg)
    self.dropout_rng = cfg.dropout_rng

  def __call__(
    self,
    x_BTD: Array,
    pos_1TD: Array,
    enc_BSD: Array | None,
    mask_BTT: Array,
    mask_BTS: Array,
    fixed: LayerFixed | None = None,
  ) -> Array:
    """fixed: this layer's cross-attention keys and values already projected (then enc_BSD is
    not read); None projects enc_BSD here. In training with dropout_draw "layer", the layer's
    dropout masks come from one draw (draw_dropout)."""
    (B, T, D), S = x_BTD.shape, mask_BTS.shape[-1]
    N, F = self.self_attention.w_q_DNH.shape[1], self.ffn.up.out_features
    positional = self.positional_attention is not None
    shapes = [(B, N, T, T), (B, T, D)] * (2 if positional else 1)
    shapes += [(B, N, T, S), (B, T, D), (B, T, F), (B, T, D)]
    keep = draw_dropout(self.dropout, *shapes, rng=self.dropout_rng) if self.one_draw else None
    keep = list(keep or (None,) * len(shapes))
    h_BTD = self.norm_self(x_BTD)
    a_BTD = self.self_attention(h_BTD, h_BTD, h_BTD, mask_BTT, keep.pop(0))
    x_BTD = x_BTD + dropped(self.dropout, a_BTD, keep.pop(0))
    if positional:
      # Queries and keys are positions only: their scores once, shared by the B rows.
      att = self.positional_attention
      scores_1NTT = att.scores(pos_1TD, att.keys(pos_1TD))
      values_BNTH = att.values(self.norm_positional(x_BTD))
      a_BTD = att.attend_scores(scores_1NTT, values_BNTH, mask_BTT, keep.pop(0))
      x_BTD = x_BTD + dropped(self.dropout, a_BTD, keep.pop(0))
    h_BTD = self.norm_cross(x_BTD)
    if fixed is None:
      cross_BTD = self.cross_attention(h_BTD, enc_BSD, enc_BSD, mask_BTS, keep.pop(0))
    else:
      cross_BTD = self.cross_attention.attend(
        h_BTD, fixed.cross_k_MNHS, fixed.cross_v_MNSH, mask_BTS, keep.pop(0)
      )
    x_BTD = x_BTD + dropped(self.dropout, cross_BTD, keep.pop(0))
    hidden, ffn = keep
    return x_BTD + dropped(self.dropout, self.ffn(self.norm_ffn(x_BTD), hidden), ffn)

  def step(
    self, x_MD: Array, t: Array, prefix: LayerPrefix, fixed: LayerFixed, enc_mask_MS: Array
  ) -> tuple[Array, LayerPrefix]:
    """The causal (ar) layer at position t alone, given the projections of positions < t in
    `prefix` and init_cache's `fixed`; returns the output and the prefix cache with position t
    written. Equals __call__ at position t with the causal mask."""
    M, N, H, T = prefix.self_k_MNHT.shape
    seen_MT = jnp.broadcast_to(jnp.arange(T)[None] <= t, (M, T))
    att = self.self_attention
    qkv_MX = self.norm_self(x_MD).astype(att.dtype) @ fixed.self_qkv_DX
    q_MNH, k_MNH, v_MNH = (a.reshape(M, N, H) for a in jnp.split(qkv_MX, 3, axis=-1))
    prefix = prefix.replace(
      self_k_MNHT=jax.lax.dynamic_update_slice_in_dim(prefix.self_k_MNHT, k_MNH[..., None], t, 3),
      self_v_MNTH=jax.lax.dynamic_update_slice_in_dim(prefix.self_v_MNTH, v_MNH[:, :, None], t, 2),
    )
    x_MD = x_MD + att.output(att.attend_one(q_MNH, prefix.self_k_MNHT, prefix.self_v_MNTH, seen_MT))
    if self.positional_attention is not None:
      # Queries and keys come from positions only: the weights are init_cache's, for every row.
      att = self.positional_attention
      v_MNH = att.project(self.norm_positional(x_MD), att.w_v_DNH)
      pos_v_MNTH = jax.lax.dynamic_update_slice_in_dim(prefix.pos_v_MNTH, v_MNH[:, :, None], t, 2)
      prefix = prefix.replace(pos_v_MNTH=pos_v_MNTH)
      probs_NT = jax.lax.dynamic_index_in_dim(fixed.pos_probs_TNT, t, 0, keepdims=False)
      out_MNH = jnp.einsum("NT,MNTH->MNH", probs_NT.astype(att.dtype), pos_v_MNTH)
      x_MD = x_MD + att.output(out_MNH)
    att = self.cross_attention
    q_MNH = att.project(self.norm_cross(x_MD), att.w_q_DNH)
    out_MNH = att.attend_one(q_MNH, fixed.cross_k_MNHS, fixed.cross_v_MNSH, enc_mask_MS)
    x_MD = x_MD + att.output(out_MNH)
    return x_MD + self.ffn(self.norm_ffn(x_MD)), prefix


def run_layers(
  layers: nnx.List | layer_stack.LayerStack,
  call: Any,
  x: Array,
  consts: tuple[Any, ...] = (),
  per_layer: tuple[Any, ...] | None = None,
  *,
  remat: str = "none",
) -> Array:
  """x through the layers in order: x = call(layer, x, per_layer[i], *consts) for each layer i.

  A LayerStack (config.model.scan_layers = "scan") runs as one jax.lax.scan over its stacked
  arrays: the layer is traced and compiled once, not once per layer, and the scan reads the
  stored arrays as they are (its gradient is their gradient). A list of layers runs as a Python
  loop. remat (config.model.remat): each layer under jax.checkpoint with that policy. The
  dropout streams advance alike in both, so both give the same result, masks included."""
  L = len(layers)
  per_layer = (None,) * L if per_layer is None else tuple(per_layer)
  if not L:
    return x
  if remat not in REMAT_POLICIES:
    raise ValueError(f"remat must be one of {tuple(REMAT_POLICIES)}, got {remat!r}")
  policy = REMAT_POLICIES[remat]
  stacked = isinstance(layers, layer_stack.LayerStack)
  if policy is None and not stacked:
    for layer, xi in zip(layers, per_layer):
      x = call(layer, x, xi, *consts)
    return x

  def body(graphdef, params, rest, x, xi, consts):
    m = nnx.merge(graphdef, params, rest)
    y = call(m, x, xi, *consts)
    return y, nnx.split(m, nnx.Param, ...)[2]

  def checkpointed(graphdef, prevent_cse):
    f = lambda *args: body(graphdef, *args)
    if policy is None:
      return f
    return jax.checkpoint(
      f, policy=None if policy is _NOTHING_SAVED else policy, prevent_cse=prevent_cse
    )

  # Dropout streams advance only in training; in eval mode nothing is written back (a decoding
  # loop's body may not write the model's variables).
  modules = layers.stack if stacked else list(layers)
  advancing = any(
    isinstance(m, nnx.Dropout) and not m.deterministic and m.rate > 0
    for _, m in nnx.iter_graph(modules)
  )
  if not stacked:
    for layer, xi in zip(layers, per_layer):
      g, params, rest = nnx.split(layer, nnx.Param, ...)
      x, rest = checkpointed(g, True)(params, rest, x, xi, consts)
      if advancing:
        nnx.update(layer, rest)
    return x
  graphdef, params_L, rest_L = nnx.split(layers.stack, nnx.Param, ...)
  stack = lambda *a: jnp.stack(a)
  xs_L = None if all(xi is None for xi in per_layer) else jax.tree.map(stack, *per_layer)
  step = checkpointed(graphdef, False)

  def scan_body(x, inputs):
    params, rest, xi = inputs
    return step(params, rest, x, xi, consts)

  x, rest_L = jax.lax.scan(scan_body, x, (params_L, rest_L, xs_L))
  if advancing:
    nnx.update(layers.stack, rest_L)
  return x


def run_stages(
  model: "Transformer", stage: Any, carry: Any, xs: Any, *, scan: bool
) -> tuple[Any, Any]:
  """carry, y_i = stage(model, carry, x_i) for each x_i of xs (stacked on the leading axis), ys
  stacked alike: a multi-stage loss's passes (PaDIR's stages, CTC's).

  scan (config.loss.scan_stages), when the model's layers are scanned too and there are two
  passes or more: one jax.lax.scan, the model traced and compiled once for all the passes, the
  model's state other than its parameters (the dropout streams) in the carry so it advances as
  in the loop; else a Python loop. Both give the same result, dropout masks included."""
  n = jax.tree.leaves(xs)[0].shape[0]
  if not (scan and model.cfg.scanned and n > 1):
    ys = []
    for i in range(n):
      carry, y = stage(model, carry, jax.tree.map(lambda a: a[i], xs))
      ys.append(y)
    return carry, jax.tree.map(lambda *a: jnp.stack(a), *ys)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)

  def body(c, x):
    inner, rest = c
    m = nnx.merge(graphdef, params, rest)
    inner, y = stage(m, inner, x)
    return (inner, nnx.split(m, nnx.Param, ...)[2]), y

  (carry, rest), ys = jax.lax.scan(body, (carry, rest), xs)
  nnx.update(model, rest)
  return carry, ys


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
      normal(rngs.params(), (cfg.decoder_length, cfg.d_model)), **_axes("length", "embed")
    )
    # Built per layer in both layouts (the same initial weights and dropout streams), then
    # stacked when the layers run as a scan (padir.model.layer_stack).
    keep = layer_stack.LayerStack if cfg.scanned else nnx.List
    encoder_layers = [EncoderLayer(cfg, rngs=rngs) for _ in range(cfg.num_encoder_layers)]
    decoder_layers = [DecoderLayer(cfg, rngs=rngs) for _ in range(cfg.num_decoder_layers)]
    self.encoder_layers = keep(encoder_layers) if encoder_layers else nnx.List([])
    self.decoder_layers = keep(decoder_layers) if decoder_layers else nnx.List([])
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
    if cfg.dag_upsample:  # the DAG decoder's transitions between vertices (padir.model.dag)
      self.dag_links = dag_links.LinkHead(cfg.d_model, cfg.num_heads, rngs=rngs)

  def _embed(self, tokens_BL: Array, pos_LD: Array) -> Array:
    """Embeddings plus positions, through dropout: with a draw a layer at the ThreeFry generator,
    a mask of that draw (dropout_bits); else nnx.Dropout's own (XLA's default generator)."""
    x_BLD = (self.embed_VD[...][tokens_BL] + pos_LD[None]).astype(self.cfg.compute_dtype)
    if self.cfg.dropout_draw == "layer" and self.cfg.dropout_rng == "threefry":
      keep = draw_dropout(self.dropout, x_BLD.shape, rng="threefry")
      return dropped(self.dropout, x_BLD, None if keep is None else keep[0])
    return self.dropout(x_BLD)

  def encode(self, inputs_BL: Array) -> tuple[Array, Array]:
    """inputs [B, L<=max_source_length] -> states [B, S=L+1, D] ([LEN] first), mask [B, S]."""
    B = inputs_BL.shape[0]
    tokens_BS = jnp.concatenate(
      [jnp.full((B, 1), tokenizer_lib.LEN_ID, inputs_BL.dtype), inputs_BL], axis=1
    )
    mask_BS = tokens_BS != tokenizer_lib.PAD_ID
    x_BSD = self._embed(tokens_BS, self.source_pos_SD[...][: tokens_BS.shape[1]])
    x_BSD = run_layers(
      self.encoder_layers,
      lambda layer, x_BSD, _, mask_BSS: layer(x_BSD, mask_BSS),
      x_BSD,
      (mask_BS[:, None, :] & mask_BS[:, :, None],),
      remat=self.cfg.remat,
    )
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
    return_hidden: bool = False,
  ) -> Array | tuple[Array, Array]:
    """One decoder pass -> logits [B, T, V]: the output layer (`output_logits`) over
    decode_hidden's states (return_hidden: and those states [B, T, D]).

    nar: hyp is the current hypothesis, PAD beyond its length; every position sees every
    non-PAD position. ar: hyp is [BOS] + target[:-1]; position t sees positions <= t.
    The logits are float32, [B, T, padded_vocab_size] (NEG_INF past vocab_size).
    fixed: project_encoder's cross-attention keys and values of these B rows, computed once
    for several passes (PaDIR refinement); then enc_BSD may be None.
    """
    h_BTD = self.decode_hidden(hyp_BT, enc_BSD, enc_mask_BS, fixed)
    return (self._logits(h_BTD), h_BTD) if return_hidden else self._logits(h_BTD)

  def decode_hidden(
    self,
    hyp_BT: Array,
    enc_BSD: Array | None,
    enc_mask_BS: Array,
    fixed: tuple[LayerFixed, ...] | None = None,
  ) -> Array:
    """decode() before its output layer: the final LayerNorm's states [B, T, D] (the losses
    that never hold the whole vocabulary's logits read these: losses.chunked_token_loss)."""
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
    x_BTD = run_layers(
      self.decoder_layers,
      lambda layer, x_BTD, f, *consts: layer(x_BTD, *consts, f),
      x_BTD,
      (pos_TD[None], enc_BSD, mask_BTT, mask_BTS),
      fixed,
      remat=self.cfg.remat,
    )
    return self.decoder_norm(x_BTD)

  def project_encoder(self, enc_MSD: Array) -> tuple[LayerFixed, ...]:
    """Per decoder layer, the cross-attention keys and values of the encoder states (the
    positional keys left None): projected once, read by every decoder pass or step."""
    return tuple(
      LayerFixed(
        cross_k_MNHS=layer.cross_attention.keys(enc_MSD),
        cross_v_MNSH=layer.cross_attention.values(enc_MSD),
      )
      for layer in self.decoder_layers
    )

  def _logits(self, h_xD: Array) -> Array:
    """The output layer: tied to the embeddings, scaled by 1 / sqrt(d_model), float32; with
    vocab_multiple, padded_vocab_size columns, the padding NEG_INF."""
    return output_logits(self.cfg, h_xD, self.embed_VD[...])

  # Incremental AR decoding: a KV cache per decoder layer, cross-attention projected once.

  def init_cache(self, enc_MSD: Array, enc_mask_MS: Array, max_len: int) -> KVCache:
    """The decoding state of decode_step for M prefixes of at most max_len tokens. Everything
    a step reads that does not depend on the prefix is arranged here, once, outside the
    decoding loop (a loop body recomputes whatever it is given to compute)."""
    if self.cfg.decoder != "ar":
      raise ValueError("a KV cache needs a model with decoder='ar'")
    M, N, H = enc_MSD.shape[0], self.cfg.num_heads, self.cfg.head_dim
    dtype = self.cfg.compute_dtype
    zeros_MNTH = jnp.zeros((M, N, max_len, H), dtype)
    zeros_MNHT = jnp.zeros((M, N, H, max_len), dtype)
    pos_TD = self.target_pos_TD[...][:max_len]
    causal_TT = jnp.tril(jnp.ones((max_len, max_len), bool))
    prefix, fixed = [], []
    for layer, cross in zip(self.decoder_layers, self.project_encoder(enc_MSD)):
      sa, pa = layer.self_attention, layer.positional_attention
      qkv_DX = jnp.concatenate(
        [sa.w(w).reshape(w.shape[0], -1) for w in (sa.w_q_DNH, sa.w_k_DNH, sa.w_v_DNH)], axis=1
      )
      pos_probs_TNT = None
      if pa is not None:
        logits_NTT = pa.scores(pos_TD[None], pa.keys(pos_TD[None]))[0]
        pos_probs_NTT = jax.nn.softmax(jnp.where(causal_TT[None], logits_NTT, NEG_INF), -1)
        pos_probs_TNT = jnp.transpose(pos_probs_NTT, (1, 0, 2))
      prefix.append(
        LayerPrefix(
          self_k_MNHT=zeros_MNHT,
          self_v_MNTH=zeros_MNTH,
          pos_v_MNTH=zeros_MNTH if pa is not None else None,
        )
      )
      fixed.append(cross.replace(self_qkv_DX=qkv_DX, pos_probs_TNT=pos_probs_TNT))
    return KVCache(prefix=tuple(prefix), fixed=tuple(fixed), enc_mask_MS=enc_mask_MS)

  def decode_step(self, token_M: Array, t: Array, cache: KVCache) -> tuple[Array, KVCache]:
    """Logits [M, V] for position t given its input token (BOS at t=0, else the token at t-1)
    and the cache of positions < t: decode()'s row t for a causal decoder, in O(t) work."""
    pos_1D = jax.lax.dynamic_slice_in_dim(self.target_pos_TD[...], t, 1)
    x_MD = self._embed(token_M[:, None], pos_1D)[:, 0]
    prefix = []
    for layer, p, f in zip(self.decoder_layers, cache.prefix, cache.fixed):
      x_MD, p = layer.step(x_MD, t, p, f, cache.enc_mask_MS)
      prefix.append(p)
    logits_MV = self._logits(self.decoder_norm(x_MD))[:, : self.cfg.vocab_size]
    return logits_MV, cache.replace(prefix=tuple(prefix))


def output_logits(cfg: ModelConfig, h_xD: Array, embed_VD: Array) -> Array:
  """Transformer._logits as a function of the states and the embeddings (a loss can
  recompute it chunk by chunk under jax.checkpoint)."""
  V, Vp = cfg.vocab_size, cfg.padded_vocab_size
  if Vp > V:
    embed_VD = jnp.pad(embed_VD, ((0, Vp - V), (0, 0)))
  logits_xV = jnp.einsum(
    "...D,VD->...V",
    h_xD.astype(cfg.compute_dtype),
    embed_VD.astype(cfg.compute_dtype),
    preferred_element_type=jnp.float32,
  ) / jnp.sqrt(jnp.float32(cfg.d_model))
  return logits_xV if Vp == V else jnp.where(jnp.arange(Vp) < V, logits_xV, NEG_INF)


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


def with_layout(model: Transformer, scan_layers: bool | str) -> Transformer:
  """The same model (weights, dropout streams, train / eval mode) in the storage layout that
  scan_layers names (padir.model.layer_stack); the arrays are shared or sliced, not copied
  into new random weights."""
  cfg = dataclasses.replace(model.cfg, scan_layers=scan_layers)
  graphdef, _ = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0, dropout=0))))
  state = nnx.state(model)
  convert = layer_stack.stack_layers if cfg.scanned else layer_stack.unstack_layers
  out = nnx.merge(graphdef, convert(state))
  if model.dropout.deterministic:
    out.eval()
  return out
