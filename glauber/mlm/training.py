"""Masked-LM fine-tuning with k masked positions per sequence (k-pseudolikelihood on text).

Each step masks k random real tokens of every sequence at once and maximises
  sum_{i in S} log p(x_i | x_{-S}),  |S| = k,
the k-pseudolikelihood; k = 1 is the ordinary pseudolikelihood that Glauber dynamics samples.
A body without an MLM head (e.g. all-MiniLM-L6-v2) gets a fresh head tied to its embeddings.
The job is glauber/jobs/mlm_train.py (`python train.py --config configs/mlm_minilm.py ...`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from gmlm import checks
from gmlm import nn as gm
from gmlm.nn import bert

Array = jax.Array


def read_lines(path: str, min_chars: int) -> list[str]:
  """The stripped lines of a UTF-8 file with at least min_chars characters (invalid UTF-8 is a
  UserError naming the file and line)."""
  return [line.strip() for line in checks.read_lines(path) if len(line.strip()) >= min_chars]


def pack_sentences(tokenizer, documents: list[list[str]], seq_len: int) -> list[str]:
  """Consecutive sentences of each document joined greedily into texts of <= seq_len tokens."""
  texts = []
  for doc in documents:
    lengths = [len(ids) for ids in tokenizer(doc, add_special_tokens=False)["input_ids"]]
    current, used = [], 0
    for sentence, n in zip(doc, lengths):
      if current and used + n > seq_len - 2:
        texts.append(" ".join(current))
        current, used = [], 0
      current.append(sentence)
      used += n
    if current:
      texts.append(" ".join(current))
  return texts


def training_texts(config, tokenizer) -> tuple[list[str], list[str]]:
  """(train, eval) texts: lines of config.data.path, or the offline English corpus."""
  if config.data.path == "english":
    from glauber.mlm import english

    docs = english.corpus("train")
    n_eval = max(1, int(len(docs) * config.data.eval_fraction))  # validation docs, not held-out
    rng = np.random.default_rng(1234)
    order = rng.permutation(len(docs))
    train_docs = [docs[i] for i in sorted(order[n_eval:])]
    eval_lines = [s for i in sorted(order[:n_eval]) for s in docs[i]]
    return pack_sentences(tokenizer, train_docs, config.seq_len), eval_lines
  lines = read_lines(config.data.path, config.data.min_chars)
  if config.data.max_lines:
    lines = lines[: config.data.max_lines]
  n_eval = max(int(len(lines) * config.data.eval_fraction), config.batch_size)
  if len(lines) < n_eval + config.batch_size:
    raise ValueError(
      f"{config.data.path} has {len(lines)} usable lines; need at least "
      f"{n_eval + config.batch_size} for batch_size={config.batch_size}."
    )
  return lines[:-n_eval], lines[-n_eval:]


def tokenize(tokenizer, lines: list[str], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
  enc = tokenizer(
    lines, truncation=True, max_length=seq_len, padding="max_length", return_tensors="np"
  )
  return enc["input_ids"].astype(np.int32), enc["attention_mask"].astype(np.int32)


def maskable(tokens_BL: Array, attention_mask_BL: Array, special_ids: Array) -> Array:
  """Real tokens that are not special ([CLS], [SEP], ...): the positions that may be masked."""
  return attention_mask_BL.astype(bool) & ~jnp.isin(tokens_BL, special_ids)


def choose_positions(key: Array, ok_BL: Array, k: int) -> tuple[Array, Array]:
  """k distinct maskable positions per row, uniformly (positions_BK, valid_BK)."""
  u_BL = jax.random.uniform(key, ok_BL.shape)
  score_BL = jnp.where(ok_BL, u_BL, -1.0)
  score_BK, positions_BK = jax.lax.top_k(score_BL, k)
  return positions_BK, score_BK >= 0.0  # rows with fewer than k maskable tokens mask fewer


def mask_tokens(tokens_BL: Array, positions_BK: Array, valid_BK: Array, mask_id: int) -> Array:
  B = tokens_BL.shape[0]
  rows_BK = jnp.broadcast_to(jnp.arange(B)[:, None], positions_BK.shape)
  new_BK = jnp.where(valid_BK, mask_id, tokens_BL[rows_BK, positions_BK])
  return tokens_BL.at[rows_BK, positions_BK].set(new_BK)


def kpl_loss(
  model,
  tokens_BL: Array,
  attention_mask_BL: Array,
  key: Array,
  k: int,
  mask_id: int,
  special_ids: Array,
) -> tuple[Array, dict[str, Array]]:
  """Mean over masked tokens of -log p(x_i | x_{-S}); also top-1 accuracy."""
  positions_BK, valid_BK = choose_positions(
    key, maskable(tokens_BL, attention_mask_BL, special_ids), k
  )
  masked_BL = mask_tokens(tokens_BL, positions_BK, valid_BK, mask_id)
  logits_BKV = gm.masked_logits(model, masked_BL, positions_BK, attention_mask_BL)
  targets_BK = jnp.take_along_axis(tokens_BL, positions_BK, axis=1)
  logp_BK = -optax.softmax_cross_entropy_with_integer_labels(logits_BKV, targets_BK)
  w_BK = valid_BK.astype(jnp.float32)
  n = jnp.maximum(w_BK.sum(), 1.0)
  accuracy = ((logits_BKV.argmax(-1) == targets_BK) * w_BK).sum() / n
  return -(logp_BK * w_BK).sum() / n, {"accuracy": accuracy, "masked": w_BK.sum()}


def load_for_training(config) -> tuple[bert.Bert, Any]:
  dtype = jnp.dtype(config.dtype)
  model, tokenizer = gm.load(config.model, dtype=dtype, allow_pickle=config.allow_pickle)
  if not isinstance(model, bert.Bert):
    raise ValueError(
      f"config.model={config.model!r} is a {type(model).__name__}; MLM "
      "fine-tuning supports BERT/RoBERTa checkpoints."
    )
  if model.head is None:
    model = bert.with_new_head(model, config.seed)
  if config.get("lora_rank", 0):
    model.add_lora(config.lora_rank, config.get("lora_alpha", 0.0), seed=config.seed)
  if tokenizer is None or tokenizer.mask_token_id is None:
    raise ValueError(f"config.model={config.model!r} ships no tokenizer with a mask token.")
  return model, tokenizer


def trainable(config):
  """What the optimizer updates: every Param, or (LoRA) adapters + head + biases and norms."""
  if not config.get("lora_rank", 0):
    return nnx.Param

  def lora_filter(path, value) -> bool:
    if isinstance(value, bert.LoRA):
      return True
    name = str(path[-1])
    return (
      isinstance(value, nnx.Param)
      and ("head" in path or "bias" in name or "norm" in name)
      and name != "word_VD"
    )

  return lora_filter


def make_optimizer(config) -> optax.GradientTransformation:
  schedule = optax.warmup_cosine_decay_schedule(
    0.0,
    config.learning_rate,
    config.warmup_steps,
    max(config.num_steps, config.warmup_steps + 1),
    end_value=config.learning_rate * 0.1,
  )
  return optax.chain(
    optax.clip_by_global_norm(config.grad_clip),
    optax.adamw(schedule, weight_decay=config.weight_decay),
  )


@nnx.jit(static_argnums=(5, 6, 8))
def train_step(
  model,
  optimizer: nnx.Optimizer,
  tokens_BL: Array,
  attention_mask_BL: Array,
  key: Array,
  k: int,
  mask_id: int,
  special_ids: Array,
  wrt=nnx.Param,
):
  """One AdamW step on the k-PL loss (gradients only for `wrt`); updates in place."""
  (loss, aux), grads = nnx.value_and_grad(kpl_loss, has_aux=True, argnums=nnx.DiffState(0, wrt))(
    model, tokens_BL, attention_mask_BL, key, k, mask_id, special_ids
  )
  optimizer.update(model, grads)
  return loss, aux


_eval_step = nnx.jit(kpl_loss, static_argnums=(4, 5))


def evaluate(
  model,
  tokens: np.ndarray,
  mask: np.ndarray,
  key: Array,
  k: int,
  mask_id: int,
  special_ids: Array,
  batch_size: int,
) -> dict[str, float]:
  """Held-out k-PL loss and accuracy (fixed key, so runs compare on the same masks)."""
  losses, accs, counts = [], [], []
  for i in range(0, len(tokens) - batch_size + 1, batch_size):
    loss, aux = _eval_step(
      model,
      tokens[i : i + batch_size],
      mask[i : i + batch_size],
      jax.random.fold_in(key, i),
      k,
      mask_id,
      special_ids,
    )
    losses.append(float(loss) * float(aux["masked"]))
    accs.append(float(aux["accuracy"]) * float(aux["masked"]))
    counts.append(float(aux["masked"]))
  n = max(sum(counts), 1.0)
  return {"eval_loss": sum(losses) / n, "eval_accuracy": sum(accs) / n, "eval_masked": n}
