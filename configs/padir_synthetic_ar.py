"""The AR baseline on the synthetic cipher task; also the distillation teacher.

    python -m padir.synthetic --out data/synthetic      # once
    python train.py --config configs/padir_synthetic_ar.py --workdir runs/padir_synthetic_ar

Same data, sizes and optimizer as configs/padir_synthetic.py, a causal decoder trained with
teacher forcing; evaluation decodes greedily (the issue's comparison: PaDIR within 1 BLEU of AR
greedy). Budget: an AR step costs ~0.55 of a PaDIR step (README Timings, the Bible configs),
so the 1,500 steps take an estimated 8-11 minutes on 2 quiet cores. Result: not yet run.
"""

import ml_collections

from configs import padir_synthetic


def get_config() -> ml_collections.ConfigDict:
  config = padir_synthetic.get_config()
  config.model.decoder = "ar"
  config.model.dropout_rate = 0.1  # as run; AR converges by step 1,000 either way
  config.train.num_train_steps = 1_500
  config.decode.beam_size = 1
  return config
