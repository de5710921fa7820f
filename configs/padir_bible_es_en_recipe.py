"""PaDIR with issue 26's recipe on Reina-Valera -> KJV (Spanish -> English).

    python -m padir.bible --out data/bible_es_en --direction es-en --cache data/bible_en_es/cache
    python train.py --config configs/padir_bible_es_en_ar.py --workdir runs/padir_bible_es_en_ar
    python train.py --config configs/padir_bible_es_en_recipe.py \
        --workdir runs/padir_bible_es_en_recipe

configs/padir_bible_en_es_recipe.py in the other direction, warm-started from the ES->EN AR run.
Time and result: to be filled (not run yet).
"""

import ml_collections

from configs import padir_bible_en_es_recipe, padir_bible_es_en


def get_config() -> ml_collections.ConfigDict:
  return padir_bible_en_es_recipe.with_recipe(
    padir_bible_es_en.get_config(), "runs/padir_bible_es_en_ar", max_length_offset=16
  )
