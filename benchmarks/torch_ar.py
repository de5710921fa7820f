"""The AR baseline's greedy decoder ported to eager PyTorch, on the same weights (issue 30).

A reference for the speed benchmark: what a new user gets by porting `padir.decoding.autoregressive.greedy_ar`
to PyTorch with a KV cache, so that the JAX decoder's speed is judged against an independent
implementation and not only against PaDIR. Same model (padir.model.transformer: pre-LN encoder with [LEN]
first, causal decoder with positional attention, tied output projection scaled by
1 / sqrt(d_model), float32), same rule (argmax over the ids a target may hold, PAD after the
first EOS, the loop ends when every row has its EOS). Eager execution allows what a compiled
loop cannot: step t attends over the t + 1 filled cache slots only.

`TorchGreedy(model)(inputs_BS)` -> tokens [B, T] (numpy int32); `logits=True` also returns the
logits [B, T, V] of every step (those after a row's EOS are the PAD-fed steps' logits).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from padir.data import tokenizer as tokenizer_lib

EPS = 1e-6  # flax.nnx.LayerNorm's default epsilon, which padir.model.transformer keeps


def _np(x: Any) -> np.ndarray:
  return np.asarray(x, np.float32)


class TorchGreedy:
  """Greedy KV-cached decoding of an AR padir Transformer in PyTorch (float32, CPU)."""

  def __init__(self, model: Any, num_threads: int | None = None):
    import torch

    if model.cfg.decoder != "ar":
      raise ValueError("TorchGreedy needs a model with decoder='ar'")
    if num_threads:
      torch.set_num_threads(num_threads)
    self.torch = torch
    cfg = model.cfg
    self.cfg = cfg
    t = lambda x: torch.from_numpy(_np(x).copy())
    D, N, H = cfg.d_model, cfg.num_heads, cfg.head_dim
    self.embed_VD = t(model.embed_VD[...])
    self.source_pos_SD = t(model.source_pos_SD[...])
    self.target_pos_TD = t(model.target_pos_TD[...])

    def norm(ln):
      return (t(ln.scale[...]), t(ln.bias[...]))

    def ffn(f):
      return (t(f.up.kernel[...]), t(f.up.bias[...]), t(f.down.kernel[...]), t(f.down.bias[...]))

    def proj(att, name):
      return t(getattr(att, name)[...]).reshape(D, N * H)

    self.encoder = [
      {
        "norm_self": norm(layer.norm_self),
        "qkv": torch.cat(
          [proj(layer.self_attention, w) for w in ("w_q_DNH", "w_k_DNH", "w_v_DNH")], 1
        ),
        "o": t(layer.self_attention.w_o_NHD[...]).reshape(N * H, D),
        "norm_ffn": norm(layer.norm_ffn),
        "ffn": ffn(layer.ffn),
      }
      for layer in model.encoder_layers
    ]
    self.encoder_norm = norm(model.encoder_norm)
    self.decoder_norm = norm(model.decoder_norm)
    T = cfg.max_target_length
    causal_TT = torch.tril(torch.ones(T, T, dtype=torch.bool))
    self.decoder = []
    for layer in model.decoder_layers:
      sa, ca = layer.self_attention, layer.cross_attention
      entry = {
        "norm_self": norm(layer.norm_self),
        "qkv": torch.cat([proj(sa, w) for w in ("w_q_DNH", "w_k_DNH", "w_v_DNH")], 1),
        "o": t(sa.w_o_NHD[...]).reshape(N * H, D),
        "norm_cross": norm(layer.norm_cross),
        "cross_q": proj(ca, "w_q_DNH"),
        "cross_kv": torch.cat([proj(ca, "w_k_DNH"), proj(ca, "w_v_DNH")], 1),
        "cross_o": t(ca.w_o_NHD[...]).reshape(N * H, D),
        "norm_ffn": norm(layer.norm_ffn),
        "ffn": ffn(layer.ffn),
        "pos": None,
      }
      pa = layer.positional_attention
      if pa is not None:
        pos_TD = self.target_pos_TD
        q_NTH = (pos_TD @ proj(pa, "w_q_DNH")).reshape(T, N, H).transpose(0, 1)
        k_NTH = (pos_TD @ proj(pa, "w_k_DNH")).reshape(T, N, H).transpose(0, 1)
        logits_NTT = q_NTH @ k_NTH.transpose(1, 2) / np.sqrt(H)
        probs_NTT = torch.softmax(logits_NTT.masked_fill(~causal_TT, -1e9), -1)
        entry["pos"] = {
          "norm": norm(layer.norm_positional),
          "v": proj(pa, "w_v_DNH"),
          "o": t(pa.w_o_NHD[...]).reshape(N * H, D),
          "probs_TNT": probs_NTT.transpose(0, 1).contiguous(),  # [query t, head, key]
        }
      self.decoder.append(entry)
    banned = np.isin(np.arange(cfg.vocab_size), tokenizer_lib.NEVER_PREDICTED)
    self.ban_V = torch.from_numpy(np.where(banned, -np.inf, 0.0).astype(np.float32))
    self.scale = 1.0 / np.sqrt(D)

  def _ln(self, x, params):
    return self.torch.nn.functional.layer_norm(x, (x.shape[-1],), params[0], params[1], EPS)

  def _ffn(self, x, params):
    up_w, up_b, down_w, down_b = params
    return self.torch.relu(x @ up_w + up_b) @ down_w + down_b

  def _heads(self, x_BLX, B):
    """[B, L, N H] -> [B, N, L, H]."""
    return x_BLX.reshape(B, -1, self.cfg.num_heads, self.cfg.head_dim).transpose(1, 2)

  def _attention(self, q_BNQH, k_BNKH, v_BNKH, bias_BQK):
    torch = self.torch
    logits = q_BNQH @ k_BNKH.transpose(-1, -2) / np.sqrt(self.cfg.head_dim)
    if bias_BQK is not None:
      logits = logits + bias_BQK[:, None]
    out_BNQH = torch.softmax(logits, -1) @ v_BNKH
    B, _, Q, _ = out_BNQH.shape
    return out_BNQH.transpose(1, 2).reshape(B, Q, -1)

  def encode(self, inputs_BS):
    """States [B, S + 1, D] ([LEN] first) and the additive mask bias [B, 1, S + 1]."""
    torch = self.torch
    B = inputs_BS.shape[0]
    tokens = torch.cat([torch.full((B, 1), tokenizer_lib.LEN_ID), inputs_BS], 1)
    valid_BS = tokens != tokenizer_lib.PAD_ID
    x = self.embed_VD[tokens] + self.source_pos_SD[: tokens.shape[1]][None]
    pair_BSS = valid_BS[:, None, :] & valid_BS[:, :, None]
    bias_BSS = torch.zeros(pair_BSS.shape).masked_fill(~pair_BSS, -1e9)
    for layer in self.encoder:
      h = self._ln(x, layer["norm_self"])
      q, k, v = (self._heads(a, B) for a in (h @ layer["qkv"]).chunk(3, -1))
      x = x + self._attention(q, k, v, bias_BSS) @ layer["o"]
      x = x + self._ffn(self._ln(x, layer["norm_ffn"]), layer["ffn"])
    bias_B1S = torch.zeros(B, 1, tokens.shape[1]).masked_fill(~valid_BS[:, None], -1e9)
    return self._ln(x, self.encoder_norm), bias_B1S

  def __call__(self, inputs_BS: Any, logits: bool = False):
    torch = self.torch
    with torch.inference_mode():
      return self._greedy(torch.from_numpy(np.asarray(inputs_BS, np.int64)), logits)

  def _greedy(self, inputs_BS, keep_logits: bool):
    torch = self.torch
    cfg = self.cfg
    B, T, N, H = inputs_BS.shape[0], cfg.max_target_length, cfg.num_heads, cfg.head_dim
    enc_BSD, enc_bias_B1S = self.encode(inputs_BS)
    cross = []
    for layer in self.decoder:
      k, v = (self._heads(a, B) for a in (enc_BSD @ layer["cross_kv"]).chunk(2, -1))
      cross.append((k, v))
    self_k = [torch.zeros(B, N, T, H) for _ in self.decoder]
    self_v = [torch.zeros(B, N, T, H) for _ in self.decoder]
    pos_v = [torch.zeros(B, N, T, H) for _ in self.decoder]
    out_BT = torch.full((B, T), tokenizer_lib.PAD_ID, dtype=torch.int64)
    done_B = torch.zeros(B, dtype=torch.bool)
    prev_B = torch.full((B,), tokenizer_lib.BOS_ID, dtype=torch.int64)
    all_logits = []
    for t in range(T):
      x = (self.embed_VD[prev_B] + self.target_pos_TD[t])[:, None]  # [B, 1, D]
      for i, layer in enumerate(self.decoder):
        h = self._ln(x, layer["norm_self"])
        q, k, v = (self._heads(a, B) for a in (h @ layer["qkv"]).chunk(3, -1))
        self_k[i][:, :, t : t + 1] = k
        self_v[i][:, :, t : t + 1] = v
        x = (
          x
          + self._attention(q, self_k[i][:, :, : t + 1], self_v[i][:, :, : t + 1], None)
          @ layer["o"]
        )
        pos = layer["pos"]
        if pos is not None:
          pos_v[i][:, :, t : t + 1] = self._heads(self._ln(x, pos["norm"]) @ pos["v"], B)
          probs_N1K = pos["probs_TNT"][t, :, None, : t + 1]
          out_BN1H = probs_N1K[None] @ pos_v[i][:, :, : t + 1]
          x = x + out_BN1H.transpose(1, 2).reshape(B, 1, N * H) @ pos["o"]
        h = self._ln(x, layer["norm_cross"])
        q = self._heads(h @ layer["cross_q"], B)
        x = x + self._attention(q, *cross[i], enc_bias_B1S) @ layer["cross_o"]
        x = x + self._ffn(self._ln(x, layer["norm_ffn"]), layer["ffn"])
      h = self._ln(x[:, 0], self.decoder_norm)
      logits_BV = (h @ self.embed_VD.T) * self.scale
      if keep_logits:
        all_logits.append(logits_BV)
      next_B = torch.argmax(logits_BV + self.ban_V, -1)
      next_B = torch.where(done_B, tokenizer_lib.PAD_ID, next_B)
      done_B = done_B | (next_B == tokenizer_lib.EOS_ID)
      out_BT[:, t] = next_B
      prev_B = next_B
      if bool(done_B.all()):
        break
    tokens = out_BT.numpy().astype(np.int32)
    if keep_logits:
      return tokens, torch.stack(all_logits, 1).numpy()
    return tokens


def torch_decode_fn(model) -> Any:
  """(inputs_BS, key) -> (tokens_BT, decoder passes): the latency measurement's signature
  (padir.evaluation.latency.measure(fn=...)) for AR greedy in eager PyTorch on the model's
  weights."""
  greedy = TorchGreedy(model)

  def torch_fn(inputs_BS, key):
    tokens_BT = greedy(np.asarray(inputs_BS))
    return tokens_BT, int((tokens_BT != tokenizer_lib.PAD_ID).sum(1).max())

  return torch_fn
