"""PaDIR (the paper's recipe) on Reina-Valera -> KJV (Spanish -> English): the other direction.

    python -m padir.bible --out data/bible_es_en --direction es-en \
        --cache data/bible_en_es/cache                  # once (reuses the .deb files)
    python train.py --config configs/padir_bible_es_en.py --workdir runs/padir_bible_es_en

configs/padir_bible_en_es.py with the corpus written Spanish first (the same verses in the same
splits) and its own 8k vocabulary. Time and result: to be filled (not run yet).
"""

import ml_collections

from configs import padir_bible_en_es


def es_en(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """A Bible config turned to Spanish -> English (in place)."""
  config.data.corpus_dir = "data/bible_es_en"  # `python -m padir.bible --direction es-en`
  config.data.source_lang = "es"
  config.data.target_lang = "en"
  return config


def get_config() -> ml_collections.ConfigDict:
  return es_en(padir_bible_en_es.get_config())
