"""PaDIR with CTC (configs/padir_synthetic_ctc.py) on the synthetic reordering task, from scratch.

    python -m padir.synthetic --out data/synthetic_reorder --grammar reorder     # once
    python train.py --config configs/padir_reorder_ctc.py --workdir runs/padir_reorder_ctc

Targets are 1-22 tokens longer than their sources (at most 46 tokens against 32): 2 x source
slots hold every target. 1,500 steps, the reordering AR's (configs/padir_reorder_ar.py, 14m34s
beside other work, 2026-11-25). Time and result: to be filled (not run yet).
"""

import ml_collections

from configs import padir_reorder, padir_synthetic, padir_synthetic_ctc


def get_config() -> ml_collections.ConfigDict:
  return padir_synthetic_ctc.synthetic_ctc(padir_reorder.on_reorder(padir_synthetic.get_config()))
