"""Writing a model back as a Hugging Face checkpoint (BERT and RoBERTa, e.g. after fine-tuning).

  save_pretrained(model, "DIR", tokenizer)   # config.json + model.safetensors (+ tokenizer)

The files load with `gmlm.nn.load` and with transformers' `*ForMaskedLM.from_pretrained`; the
tensors are the inverse of `bert.load_weights` (ours [in..., out...] -> torch Linear [out, in]).
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import numpy as np

from gmlm.nn.bert import BERT_NAMES, ROBERTA_NAMES, Bert, BertConfig, Names


def hf_tensors(model: Bert, names: Names = BERT_NAMES) -> dict[str, np.ndarray]:
  """The inverse of `load_weights`: Hugging Face-named float32 tensors of a (trained) model."""
  a = lambda p: np.asarray(p[...], np.float32)
  lin = (
    lambda p, n_in=1: np.ascontiguousarray(  # ours [in..., out...] -> torch [out, in]
      a(p).reshape(math.prod(p.shape[:n_in]), -1).T
    )
  )
  p = names.body
  out = {
    p + "embeddings.word_embeddings.weight": a(model.word_VD),
    p + "embeddings.position_embeddings.weight": a(model.position_PD),
    p + "embeddings.token_type_embeddings.weight": a(model.token_type_TD),
    p + "embeddings.LayerNorm.weight": a(model.embed_norm_scale_D),
    p + "embeddings.LayerNorm.bias": a(model.embed_norm_bias_D),
  }
  for i, layer in enumerate(model.layers):
    q = f"{p}encoder.layer.{i}."
    for proj, kernel, bias in (
      ("query", layer.q_DNH, layer.q_bias_NH),
      ("key", layer.k_DNH, layer.k_bias_NH),
      ("value", layer.v_DNH, layer.v_bias_NH),
    ):
      out[f"{q}attention.self.{proj}.weight"] = lin(kernel)
      out[f"{q}attention.self.{proj}.bias"] = a(bias).reshape(-1)
    out.update(
      {
        q + "attention.output.dense.weight": lin(layer.o_NHD, 2),
        q + "attention.output.dense.bias": a(layer.o_bias_D),
        q + "attention.output.LayerNorm.weight": a(layer.attn_norm_scale_D),
        q + "attention.output.LayerNorm.bias": a(layer.attn_norm_bias_D),
        q + "intermediate.dense.weight": lin(layer.up_DF),
        q + "intermediate.dense.bias": a(layer.up_bias_F),
        q + "output.dense.weight": lin(layer.down_FD),
        q + "output.dense.bias": a(layer.down_bias_D),
        q + "output.LayerNorm.weight": a(layer.mlp_norm_scale_D),
        q + "output.LayerNorm.bias": a(layer.mlp_norm_bias_D),
      }
    )
  if model.head is not None:
    h = model.head
    out.update(
      {
        names.head_dense + ".weight": lin(h.dense_DE),
        names.head_dense + ".bias": a(h.dense_bias_E),
        names.head_norm + ".weight": a(h.norm_scale_E),
        names.head_norm + ".bias": a(h.norm_bias_E),
        names.bias: a(h.bias_V),
      }
    )
    if h.decoder_VE is not None:  # untied: PyTorch adds the decoder's own bias
      out[names.decoder + ".weight"] = a(h.decoder_VE)
      out[names.decoder + ".bias"] = a(h.bias_V)
  return out


def hf_config(c: BertConfig) -> dict[str, Any]:
  """A config.json for `hf_tensors` that both our loader and transformers read."""
  roberta = c.roberta_positions
  if (c.head_act or c.hidden_act) != ("gelu" if roberta else c.hidden_act):
    raise ValueError(
      f"A {'RoBERTa' if roberta else 'BERT'} config.json cannot express an MLM "
      f"head activation {c.head_act!r} with hidden_act {c.hidden_act!r} "
      "(BERT's head uses hidden_act, RoBERTa's exact GELU)."
    )
  return {
    "architectures": [
      ("Roberta" if roberta else "Bert") + ("ForMaskedLM" if c.with_mlm_head else "Model")
    ],
    "model_type": "roberta" if roberta else "bert",
    "vocab_size": c.vocab_size,
    "hidden_size": c.hidden_size,
    "num_hidden_layers": c.num_layers,
    "num_attention_heads": c.num_heads,
    "intermediate_size": c.intermediate_size,
    "max_position_embeddings": c.max_positions,
    "type_vocab_size": c.type_vocab_size,
    "layer_norm_eps": c.layer_norm_eps,
    "hidden_act": c.hidden_act,
    "pad_token_id": c.pad_token_id,
    "tie_word_embeddings": c.tie_word_embeddings,
    "position_embedding_type": "absolute",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
  }


def save_pretrained(model: Bert, directory, tokenizer=None) -> None:
  """Writes config.json + model.safetensors (+ the tokenizer), for `load` and transformers."""
  from safetensors.numpy import save_file

  directory = pathlib.Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  names = ROBERTA_NAMES if model.config.roberta_positions else BERT_NAMES
  save_file(
    hf_tensors(model, names), str(directory / "model.safetensors"), metadata={"format": "pt"}
  )
  (directory / "config.json").write_text(json.dumps(hf_config(model.config), indent=2))
  if tokenizer is not None:
    tokenizer.save_pretrained(str(directory))
