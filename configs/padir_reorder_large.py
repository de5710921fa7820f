"""configs/padir_reorder.py on the reordering task's large lexicon (222 source words, 3.4x; a
544-piece vocabulary).

    python -m padir.data.synthetic --out data/synthetic_reorder4 --grammar reorder --lexicon-scale 4
    python train.py --config configs/padir_reorder_large.py --workdir runs/padir_reorder_large

Trained 2026-11-27 (night) at `nice -5`, beside the fresh-clone suite at nice 0 and an evaluation:
31m51s of wall-clock, of which 6m55s paused (SIGSTOP) for two benchmark windows, so 24m56s
running; validation BLEU 0.16 / 1.58 / 6.57 / 7.56 at steps 500-2,000 (lengths exact 0.67,
within 2 tokens 0.996 at 2,000), against the AR's 13.51 in 14m58s and CTC's 68.07 in 10m40s
(docs/padir_training.md).
"""

import ml_collections

from configs import padir_reorder, padir_synthetic


def get_config() -> ml_collections.ConfigDict:
  return padir_reorder.on_reorder(padir_synthetic.get_config(), large=True)
