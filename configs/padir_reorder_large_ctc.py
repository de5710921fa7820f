"""PaDIR with CTC (configs/padir_synthetic_ctc.py) on the reordering task's 4x lexicon (222 source
words), from scratch.

    python -m padir.synthetic --out data/synthetic_reorder4 --grammar reorder --lexicon-scale 4
    python train.py --config configs/padir_reorder_large_ctc.py --workdir runs/padir_reorder_large_ctc

Time and result: to be filled (not run yet).
"""

import ml_collections

from configs import padir_reorder, padir_synthetic, padir_synthetic_ctc


def get_config() -> ml_collections.ConfigDict:
  return padir_synthetic_ctc.synthetic_ctc(
    padir_reorder.on_reorder(padir_synthetic.get_config(), large=True)
  )
