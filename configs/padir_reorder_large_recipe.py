"""configs/padir_reorder_recipe.py on the reordering task's large lexicon (222 source words, 3.4x; a
544-piece vocabulary).

    python -m padir.data.synthetic --out data/synthetic_reorder4 --grammar reorder --lexicon-scale 4
    python train.py --config configs/padir_reorder_large_ar.py --workdir runs/padir_reorder_large_ar
    python train.py --config configs/padir_reorder_large_recipe.py \
        --workdir runs/padir_reorder_large_recipe

Time and result: to be filled.
"""

import ml_collections

from configs import padir_bible_en_es_recipe, padir_reorder, padir_synthetic_recipe


def get_config() -> ml_collections.ConfigDict:
  config = padir_reorder.on_reorder(padir_synthetic_recipe.get_config(), large=True)
  return padir_bible_en_es_recipe.with_recipe(config, "runs/padir_reorder_large_ar", 16)
