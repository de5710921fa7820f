"""PaDIR with issue 26's training recipe on the synthetic cipher task (no regression check).

    python -m padir.synthetic --out data/synthetic      # once
    python train.py --config configs/padir_synthetic_ar.py --workdir runs/padir_synthetic_ar
    python train.py --config configs/padir_synthetic_recipe.py \
        --workdir runs/padir_synthetic_recipe

configs/padir_synthetic.py with the length as an offset (-8..+8 tokens: the targets are 0-2
words longer than their sources), glancing 0.5 -> 0.3 and a warm start from the AR baseline
(configs/padir_bible_en_es_recipe.with_recipe). Target: within 1 BLEU of AR greedy at no more
training wall-clock than the AR (1,500 steps, ~12 min quiet), so 1,000 steps here. Time and
result: to be filled (see README, PaDIR, "Training recipe", for the probes run so far).
"""

import ml_collections

from configs import padir_bible_en_es_recipe, padir_synthetic


def get_config() -> ml_collections.ConfigDict:
  config = padir_synthetic.get_config()
  config.train.num_train_steps = 1_000
  config.train.eval_every = 250
  config.train.checkpoint_every = 250
  return padir_bible_en_es_recipe.with_recipe(
    config, "runs/padir_synthetic_ar", max_length_offset=8
  )
