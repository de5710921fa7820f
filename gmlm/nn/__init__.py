"""Our flax.nnx BERT, RoBERTa, ModernBERT, GPT-2 and Llama, loaded from Hugging Face checkpoints.

  model, tokenizer = load("path/or/hub-id")     # float32; dtype=jnp.bfloat16 computes in bf16
  fast = with_dtype(model, jnp.bfloat16)        # the same float32 weights, bf16 matmuls
  logits_BKV = masked_logits(model, tokens_BL, positions_BK, attention_mask_BL)  # MLM head at K
  logp_B = sequence_logprob(causal_model, tokens_BL, attention_mask_BL)          # GPT-2, Llama
  e_BD = embed(minilm, tokenizer, ["a sentence", "another"])                     # unit norm
  save_pretrained(bert_model, "DIR", tokenizer)  # back to a Hugging Face checkpoint

Modules: one family each (`bert`, `roberta`, `modernbert`, `gpt2`, `llama`); the heads by what
they compute (`masked`: MLM logits, `causal`: next-token log-probabilities, `embedding`:
sentence embeddings); `loading` (checkpoint -> model, and the preset registry), `presets` (the
"default" MLM), `delta` (a LoRA/head delta on a base), `export` (model -> checkpoint).
The array functions are jitted and compose with the caller's jit, vmap and mesh sharding.

Shape letters (array names end in them: `x_BLD` is [batch, length, width]):
  B batch (sequences)                    L sequence length (token positions)
  S key positions a query attends to     K queried positions (logits wanted at positions_BK)
  Q a layer's query rows: L, or K        D model width
  E the MLM head's transform width (= D) F MLP width
  N query heads                          M key/value heads (grouped-query attention, N = M G)
  G query heads per key/value head       H head width; h = H / 2 rotary frequencies
  C the parts of a fused projection (3: query, key, value; 2: GeGLU input, gate)
  V vocabulary                           P rows of the position table
  T token types                          R LoRA rank
  I, O a projection's flattened input and output features
  J the chunks a large batch runs in (on CPU)
  1 a broadcast axis; 2 a literal size (e.g. the two members of a rotary pair); ___ any axes
"""

from gmlm.nn import presets  # noqa: F401  (registers "default")
from gmlm.nn.bert import Bert, BertConfig
from gmlm.nn.causal import logits as causal_logits
from gmlm.nn.causal import sequence_logprob, token_logprobs
from gmlm.nn.embedding import embed, mean_pool
from gmlm.nn.export import save_pretrained
from gmlm.nn.gpt2 import GPT2, GPT2Config
from gmlm.nn.llama import Llama, LlamaConfig, load_gguf
from gmlm.nn.loading import (
  architecture,
  from_config,
  load,
  load_model,
  load_tokenizer,
  preset_names,
  register_preset,
  with_dtype,
)
from gmlm.nn.masked import full_logits, masked_logits
from gmlm.nn.modernbert import ModernBert, ModernBertConfig

__all__ = [
  "Bert",
  "BertConfig",
  "GPT2",
  "GPT2Config",
  "Llama",
  "LlamaConfig",
  "ModernBert",
  "ModernBertConfig",
  "architecture",
  "causal_logits",
  "embed",
  "from_config",
  "full_logits",
  "load",
  "load_gguf",
  "load_model",
  "load_tokenizer",
  "masked_logits",
  "mean_pool",
  "preset_names",
  "register_preset",
  "save_pretrained",
  "sequence_logprob",
  "token_logprobs",
  "with_dtype",
]
