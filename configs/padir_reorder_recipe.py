"""PaDIR with issue 26's recipe on the synthetic reordering task: the length as an offset
(-16..+16: the targets are 1-22 tokens longer), glancing 0.5 -> 0.3, a warm start from
configs/padir_reorder_ar.py's run.

    python -m padir.synthetic --out data/synthetic_reorder --grammar reorder     # once
    python train.py --config configs/padir_reorder_ar.py --workdir runs/padir_reorder_ar
    python train.py --config configs/padir_reorder_recipe.py --workdir runs/padir_reorder_recipe

Target: within 1 BLEU of the AR's greedy decoding at no more training wall-clock. Time and
result: to be filled.
"""

import ml_collections

from configs import padir_bible_en_es_recipe, padir_reorder, padir_synthetic_recipe


def get_config() -> ml_collections.ConfigDict:
  config = padir_reorder.on_reorder(padir_synthetic_recipe.get_config())
  return padir_bible_en_es_recipe.with_recipe(config, "runs/padir_reorder_ar", 16)
