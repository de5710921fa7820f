"""configs/padir_reorder.py on the reordering task's large lexicon (222 source words, 3.4x; a
544-piece vocabulary).

    python -m padir.synthetic --out data/synthetic_reorder4 --grammar reorder --lexicon-scale 4
    python train.py --config configs/padir_reorder_large.py --workdir runs/padir_reorder_large

Time and result: to be filled.
"""

import ml_collections

from configs import padir_reorder, padir_synthetic


def get_config() -> ml_collections.ConfigDict:
  return padir_reorder.on_reorder(padir_synthetic.get_config(), large=True)
