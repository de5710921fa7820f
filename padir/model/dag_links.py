"""The link head of the directed acyclic decoder (padir.model.dag): transition log-probabilities
between the decoder's vertices, from its final states (Huang et al. 2022, eq. 3, with the
multi-head links of their released model).

    log E[v, u] = log sum_n g_n(v) softmax_{u > v, u live}(q_n(v) . k_n(u) / sqrt(H))
with q_n = h W_q[n], k_n = h W_k[n] and the head weights g(v) = softmax(h(v) W_g). Only forward
edges (u > v) between live vertices exist: the others get NEG (-1e9, finite so that no
gradient through a masked entry is NaN), and so does the whole row of the last live vertex
(nothing follows it). Shape letters: padir/__init__.py; A vertices, and Z the
same vertices as the target of an edge.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

Array = jax.Array
NEG = -1e9  # the log-probability of an edge that does not exist


class LinkHead(nnx.Module):
  def __init__(self, d_model: int, num_heads: int, *, rngs: nnx.Rngs):
    if d_model % num_heads:
      raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    N, H = num_heads, d_model // num_heads
    init = nnx.initializers.lecun_normal(in_axis=0, out_axis=(1, 2))
    self.w_q_DNH = nnx.Param(init(rngs.params(), (d_model, N, H)))
    self.w_k_DNH = nnx.Param(init(rngs.params(), (d_model, N, H)))
    self.w_g_DN = nnx.Param(nnx.initializers.lecun_normal()(rngs.params(), (d_model, N)))

  def __call__(self, h_BAD: Array, live_BA: Array) -> Array:
    """[B, A, Z] log-probabilities of the edges v -> u (module docstring), float32."""
    h_BAD = h_BAD.astype(jnp.float32)
    q_BANH = jnp.einsum("BAD,DNH->BANH", h_BAD, self.w_q_DNH[...])
    k_BZNH = jnp.einsum("BZD,DNH->BZNH", h_BAD, self.w_k_DNH[...])
    scores_BNAZ = jnp.einsum("BANH,BZNH->BNAZ", q_BANH, k_BZNH) / jnp.sqrt(q_BANH.shape[-1])
    A = h_BAD.shape[1]
    edge_BAZ = (
      jnp.triu(jnp.ones((A, A), bool), k=1)[None] & live_BA[:, None, :] & live_BA[:, :, None]
    )
    logp_BNAZ = jax.nn.log_softmax(jnp.where(edge_BAZ[:, None], scores_BNAZ, NEG), axis=-1)
    gate_BAN = jax.nn.log_softmax(jnp.einsum("BAD,DN->BAN", h_BAD, self.w_g_DN[...]), axis=-1)
    links_BAZ = jax.nn.logsumexp(logp_BNAZ + gate_BAN.transpose(0, 2, 1)[..., None], axis=1)
    return jnp.where(edge_BAZ, links_BAZ, NEG)
