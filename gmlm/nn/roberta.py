"""RoBERTa: BERT's encoder with fairseq position ids and its own tensor names.

Positions of real tokens count from pad_token_id + 1 (so the table of 514 rows holds 512 tokens);
padding tokens sit at position pad_token_id. The MLM head is `lm_head.{dense,layer_norm,bias}`;
it applies exact GELU whatever config.hidden_act says (as transformers' RobertaLMHead does).
"""

from __future__ import annotations

from typing import Any

from gmlm.nn._checkpoint import Tensors
from gmlm.nn.bert import ROBERTA_NAMES, Bert, BertConfig
from gmlm.nn.bert import load_weights as _load_bert_weights


def config_from_hf(hf: dict[str, Any], **overrides) -> BertConfig:
  hf = {"type_vocab_size": 1, "layer_norm_eps": 1e-5, **hf}
  if hf.get("pad_token_id") is None:
    hf["pad_token_id"] = 1
  return BertConfig.from_hf(hf, **{"roberta_positions": True, "head_act": "gelu", **overrides})


def load_weights(model: Bert, t: Tensors) -> Bert:
  return _load_bert_weights(model, t, ROBERTA_NAMES)
