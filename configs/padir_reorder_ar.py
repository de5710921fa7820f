"""The AR baseline on the synthetic reordering task (configs/padir_reorder.py); the teacher and
the warm start of configs/padir_reorder_recipe.py.

    python -m padir.synthetic --out data/synthetic_reorder --grammar reorder     # once
    python train.py --config configs/padir_reorder_ar.py --workdir runs/padir_reorder_ar

configs/padir_synthetic_ar.py on the reordering corpus. Time and result: to be filled.
"""

import ml_collections

from configs import padir_reorder, padir_synthetic_ar


def get_config() -> ml_collections.ConfigDict:
  return padir_reorder.on_reorder(padir_synthetic_ar.get_config())
