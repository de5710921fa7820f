"""Our flax.nnx BERT, RoBERTa, ModernBERT, GPT-2 and Llama, loaded from Hugging Face checkpoints.

  model, tokenizer = load("path/or/hub-id")     # float32; dtype=jnp.bfloat16 computes in bf16
  logits_BKV = masked_logits(model, tokens_BL, positions_BK, attention_mask_BL)  # MLM head at K
  logp_B = sequence_logprob(causal_model, tokens_BL, attention_mask_BL)          # GPT-2, Llama
  e_BD = embed(minilm, tokenizer, ["a sentence", "another"])                     # unit norm

The array functions are jitted and compose with the caller's jit, vmap and mesh sharding.
"""

from glauber.models.bert import Bert, BertConfig
from glauber.models.causal import logits as causal_logits, sequence_logprob, token_logprobs
from glauber.models.embedding import embed, mean_pool
from glauber.models.gpt2 import GPT2, GPT2Config
from glauber.models.llama import Llama, LlamaConfig, load_gguf
from glauber.models.loading import architecture, from_config, load, load_model, load_tokenizer
from glauber.models.mlm import full_logits, masked_logits
from glauber.models.modernbert import ModernBert, ModernBertConfig

__all__ = [
  "Bert", "BertConfig", "GPT2", "GPT2Config", "Llama", "LlamaConfig", "ModernBert",
  "ModernBertConfig", "architecture", "causal_logits", "embed", "from_config", "full_logits",
  "load", "load_gguf", "load_model", "load_tokenizer", "masked_logits", "mean_pool",
  "sequence_logprob", "token_logprobs",
]
