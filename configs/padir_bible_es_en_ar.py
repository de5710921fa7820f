"""The AR baseline on Reina-Valera -> KJV (Spanish -> English); the ES->EN distillation teacher.

    python -m padir.bible --out data/bible_es_en --direction es-en --cache data/bible_en_es/cache
    python train.py --config configs/padir_bible_es_en_ar.py --workdir runs/padir_bible_es_en_ar

configs/padir_bible_en_es_ar.py in the other direction (configs/padir_bible_es_en.py). Time and
result: to be filled (not run yet; EN->ES took 40 min for 2,000 steps).
"""

import ml_collections

from configs import padir_bible_en_es_ar, padir_bible_es_en


def get_config() -> ml_collections.ConfigDict:
  return padir_bible_es_en.es_en(padir_bible_en_es_ar.get_config())
