"""Fill-mask accuracy of an MLM on held-out English: one random non-special token per sentence.

The job is glauber/jobs/mlm_eval.py (`python sample.py --config configs/mlm_eval.py ...`).
Held-out text: the last 10% of the offline Wikipedia pages and of the news articles
(`glauber/mlm/english.py`), never trained on. For each sentence one position is drawn uniformly
among its non-special tokens (fixed seed, so every model is scored on the same masks); the
model sees the sentence with that token replaced by [MASK]. Top-1 / top-5 are over the chains'
candidate vocabulary (special and [unused*] tokens excluded, as in `glauber.chains`), the mean
log-probability over the full softmax.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from glauber import chains
from gmlm import nn as gm

PROBES = [
  "The [MASK] is shining and the sky is blue.",
  "He went to the [MASK] to buy some bread.",
  "Paris is the capital of [MASK].",
  "The war ended in 1945 when the [MASK] surrendered.",
  "She plays the [MASK] in an orchestra.",
]


def masked_examples(
  tokenizer, sentences: list[str], max_len: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """(tokens_BL with one [MASK] each, attention_BL, position_B, target_B)."""
  enc = tokenizer(
    sentences, truncation=True, max_length=max_len, padding="longest", return_tensors="np"
  )
  tokens, attn = enc["input_ids"].astype(np.int32), enc["attention_mask"].astype(np.int32)
  special = np.isin(tokens, np.asarray(tokenizer.all_special_ids))
  ok = attn.astype(bool) & ~special
  rng = np.random.default_rng(seed)
  positions = np.array([rng.choice(np.flatnonzero(row)) for row in ok], np.int32)
  rows = np.arange(len(tokens))
  targets = tokens[rows, positions].copy()
  tokens[rows, positions] = tokenizer.mask_token_id
  return tokens, attn, positions, targets


@jax.jit
def _score(model, tokens_BL, attn_BL, positions_B, targets_B, candidates_C):
  logits_BV = gm.masked_logits(model, tokens_BL, positions_B[:, None], attn_BL)[:, 0]
  logp_BV = jax.nn.log_softmax(logits_BV, axis=-1)
  logp_B = jnp.take_along_axis(logp_BV, targets_B[:, None], axis=1)[:, 0]
  top5_B5 = candidates_C[jax.lax.top_k(logits_BV[:, candidates_C], 5)[1]]
  return logp_B, top5_B5


def fill_mask(
  model, tokenizer, sentences: list[str], *, seed: int = 0, batch_size: int = 64, max_len: int = 128
) -> dict[str, float]:
  """top1, top5 (candidate vocabulary), mean_logp and count over one mask per sentence."""
  if not sentences:
    raise ValueError("fill_mask needs at least one sentence")
  cand = jnp.asarray(chains.candidate_ids(tokenizer, model.config.vocab_size))
  order = np.argsort([len(s) for s in sentences], kind="stable")  # similar lengths per batch
  top1 = top5 = 0
  logps = []
  for i in range(0, len(order), batch_size):
    batch = [sentences[j] for j in order[i : i + batch_size]]
    seed_i = seed * 1_000_003 + i
    tokens, attn, pos, tgt = masked_examples(tokenizer, batch, max_len, seed_i)
    pad = batch_size - len(batch)  # fixed shapes: pad the batch, drop the padding's scores
    if pad:
      tokens, attn = np.pad(tokens, ((0, pad), (0, 0))), np.pad(attn, ((0, pad), (0, 0)))
      pos, tgt = np.pad(pos, (0, pad)), np.pad(tgt, (0, pad))
    L = -(-tokens.shape[1] // 16) * 16  # bucket lengths to limit recompiles
    tokens = np.pad(tokens, ((0, 0), (0, L - tokens.shape[1])))
    attn = np.pad(attn, ((0, 0), (0, L - attn.shape[1])))
    logp_B, top5_B5 = (np.asarray(a) for a in _score(model, tokens, attn, pos, tgt, cand))
    n = len(batch)
    logps.append(logp_B[:n])
    top1 += int((top5_B5[:n, 0] == tgt[:n]).sum())
    top5 += int((top5_B5[:n] == tgt[:n, None]).any(1).sum())
  count = len(sentences)
  return {
    "top1": top1 / count,
    "top5": top5 / count,
    "mean_logp": float(np.concatenate(logps).mean()),
    "count": count,
  }


def probes(model, tokenizer, texts=PROBES, k: int = 3) -> list[tuple[str, list[str]]]:
  cand = chains.candidate_ids(tokenizer, model.config.vocab_size)
  out = []
  for text in texts:
    enc = tokenizer([text], return_tensors="np")
    tokens = enc["input_ids"].astype(np.int32)
    pos = np.flatnonzero(tokens[0] == tokenizer.mask_token_id)[:1].astype(np.int32)
    logits = np.asarray(gm.masked_logits(model, tokens, pos[None], enc["attention_mask"]))[0, 0]
    best = cand[np.argsort(-logits[cand])[:k]]
    out.append((text, tokenizer.convert_ids_to_tokens(best.tolist())))
  return out
