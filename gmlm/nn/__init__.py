"""Our flax.nnx BERT, RoBERTa, ModernBERT, GPT-2 and Llama, loaded from Hugging Face checkpoints.

  model, tokenizer = load("path/or/hub-id")     # float32; dtype=jnp.bfloat16 computes in bf16
  logits_BKV = masked_logits(model, tokens_BL, positions_BK, attention_mask_BL)  # MLM head at K
  logp_B = sequence_logprob(causal_model, tokens_BL, attention_mask_BL)          # GPT-2, Llama
  e_BD = embed(minilm, tokenizer, ["a sentence", "another"])                     # unit norm

The array functions are jitted and compose with the caller's jit, vmap and mesh sharding.
"""

from gmlm.nn.bert import Bert, BertConfig
from gmlm.nn.causal import logits as causal_logits, sequence_logprob, token_logprobs
from gmlm.nn.embedding import embed, mean_pool
from gmlm.nn.gpt2 import GPT2, GPT2Config
from gmlm.nn.llama import Llama, LlamaConfig, load_gguf
from gmlm.nn.loading import architecture, from_config, load, load_model, load_tokenizer
from gmlm.nn.mlm import full_logits, masked_logits
from gmlm.nn.modernbert import ModernBert, ModernBertConfig
from gmlm.nn import presets  # noqa: F401,E402  (registers "default")
from gmlm.nn.loading import presets as preset_names, register_preset

__all__ = [
  "Bert", "BertConfig", "GPT2", "GPT2Config", "Llama", "LlamaConfig", "ModernBert",
  "ModernBertConfig", "architecture", "causal_logits", "embed", "from_config", "full_logits",
  "load", "load_gguf", "load_model", "load_tokenizer", "masked_logits", "mean_pool",
  "sequence_logprob", "token_logprobs",
]
