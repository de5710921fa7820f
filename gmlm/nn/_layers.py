"""Building blocks shared by the model families: norms, attention, rotary embeddings, activations.

Shape letters as in the legend of `gmlm/nn/__init__.py`.
Norms, softmax and rotary embeddings run in float32 whatever the compute dtype.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

Array = jax.Array


def param(rngs: nnx.Rngs, shape: tuple[int, ...], dtype, std: float = 0.02) -> nnx.Param:
  """A normally initialised weight (values matter only for models trained from scratch)."""
  return nnx.Param(std * jax.random.normal(rngs.params(), shape, dtype))


def zeros(shape: tuple[int, ...], dtype) -> nnx.Param:
  return nnx.Param(jnp.zeros(shape, dtype))


def ones(shape: tuple[int, ...], dtype) -> nnx.Param:
  return nnx.Param(jnp.ones(shape, dtype))


def layer_norm(x_BLD: Array, scale_D: nnx.Param, bias_D: nnx.Param | None, eps: float) -> Array:
  x = x_BLD.astype(jnp.float32)
  mean = x.mean(-1, keepdims=True)
  var = jnp.square(x - mean).mean(-1, keepdims=True)
  y = (x - mean) * jax.lax.rsqrt(var + eps) * scale_D[...].astype(jnp.float32)
  if bias_D is not None:
    y = y + bias_D[...].astype(jnp.float32)
  return y.astype(x_BLD.dtype)


def rms_norm(x_BLD: Array, scale_D: nnx.Param, eps: float) -> Array:
  x = x_BLD.astype(jnp.float32)
  y = x * jax.lax.rsqrt(jnp.square(x).mean(-1, keepdims=True) + eps)
  return (y * scale_D[...].astype(jnp.float32)).astype(x_BLD.dtype)


def gelu_erf(x: Array) -> Array:
  """Exact GELU, x (1 + erf(x / sqrt 2)) / 2, written with erf as PyTorch writes it: on XLA CPU
  twice as fast as jax.nn.gelu's erfc form (which is more accurate only where GELU is below
  1e-6 in magnitude); 2% of BERT-base's forward at batch 16."""
  return 0.5 * x * (1.0 + jax.lax.erf(x * jnp.asarray(1.0 / math.sqrt(2.0), x.dtype)))


def activation(name: str):
  """Hugging Face activation names -> functions (exact erf GELU for "gelu", as in PyTorch)."""
  table = {
    "gelu": gelu_erf,
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_fast": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
  }
  if name not in table:
    raise ValueError(f"Unsupported activation {name!r}; supported: {sorted(table)}.")
  return table[name]


def mask_bias(keep_BLS: Array) -> Array:
  """0 where attention is allowed, a large negative number where not (float32)."""
  return jnp.where(keep_BLS, 0.0, jnp.finfo(jnp.float32).min).astype(jnp.float32)


def attention(
  q_BLNH: Array, k_BSMH: Array, v_BSMH: Array, keep_BLS: Array, scale: float | None = None
) -> Array:
  """Softmax attention; query heads share key/value heads in groups of G = N / M (GQA).

  keep_BLS: which key positions each query may attend to (broadcastable to [B, L, S]).
  """
  B, L, N, H = q_BLNH.shape
  M = k_BSMH.shape[2]
  q_BLMGH = q_BLNH.reshape(B, L, M, N // M, H)
  scale = 1.0 / math.sqrt(H) if scale is None else scale
  s_BMGLS = (
    jnp.einsum("BLMGH,BSMH->BMGLS", q_BLMGH, k_BSMH, preferred_element_type=jnp.float32) * scale
  )
  s_BMGLS = s_BMGLS + mask_bias(keep_BLS)[:, None, None, :, :]
  p_BMGLS = jax.nn.softmax(s_BMGLS, axis=-1).astype(v_BSMH.dtype)
  o_BLMGH = jnp.einsum("BMGLS,BSMH->BLMGH", p_BMGLS, v_BSMH)
  return o_BLMGH.reshape(B, L, N, H)


def merge_heads(a_BLNH: Array, o_NHD: Array) -> Array:
  """The attention output projection, sum over heads and head width, as one [I = N H, D] matmul.

  Written as the two-axis einsum "BLNH,NHD->BLD", XLA CPU lays the contraction out as (H, N)
  and transposes the kernel on every call (a 2.4 MB copy per BERT-base layer); BERT-base's
  forward at batch 16 ran 4% slower that way."""
  B, L, N, H = a_BLNH.shape
  return jnp.einsum("BLI,ID->BLD", a_BLNH.reshape(B, L, N * H), o_NHD.reshape(N * H, -1))


def take_rows(x_BL___: Array, rows_BK: Array | None) -> Array:
  """x at positions rows_BK along axis 1 (x unchanged if rows_BK is None or axis 1 has size 1,
  e.g. a padding mask [B, 1, S] that broadcasts over queries)."""
  if rows_BK is None or x_BL___.shape[1] == 1:
    return x_BL___
  idx = rows_BK.astype(jnp.int32).reshape(rows_BK.shape + (1,) * (x_BL___.ndim - 2))
  return jnp.take_along_axis(x_BL___, idx, axis=1)


def rope(x_BLNH: Array, positions_BL: Array, theta: float) -> Array:
  """Rotary position embedding, rotate-half convention (first and second half of H paired;
  h = H / 2 rotation frequencies)."""
  H = x_BLNH.shape[-1]
  inv_freq = 1.0 / (theta ** (jnp.arange(0, H, 2, dtype=jnp.float32) / H))
  angle_BLh = positions_BL.astype(jnp.float32)[..., None] * inv_freq
  cos_BL1h, sin_BL1h = jnp.cos(angle_BLh)[:, :, None, :], jnp.sin(angle_BLh)[:, :, None, :]
  x = x_BLNH.astype(jnp.float32)
  x1, x2 = x[..., : H // 2], x[..., H // 2 :]
  y = jnp.concatenate([x1 * cos_BL1h - x2 * sin_BL1h, x2 * cos_BL1h + x1 * sin_BL1h], axis=-1)
  return y.astype(x_BLNH.dtype)


def padding_keep(attention_mask_BL: Array | None, B: int, L: int) -> Array:
  """keep_B1S: key positions that are real tokens (all when no mask is given)."""
  if attention_mask_BL is None:
    return jnp.ones((B, 1, L), bool)
  return attention_mask_BL.astype(bool)[:, None, :]


def causal_keep(attention_mask_BL: Array | None, B: int, L: int) -> Array:
  """keep_BLS: causal and not padding."""
  causal_LS = jnp.tril(jnp.ones((L, L), bool))
  return causal_LS[None] & padding_keep(attention_mask_BL, B, L)


def check_length(L: int, max_positions: int, what: str) -> None:
  if L > max_positions:
    raise ValueError(
      f"Sequence length {L} exceeds the {what} ({max_positions} positions). "
      f"Truncate inputs to at most {max_positions} tokens "
      "(e.g. tokenizer(..., truncation=True, max_length=...))."
    )
