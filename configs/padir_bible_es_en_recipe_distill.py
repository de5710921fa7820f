"""PaDIR with issue 26's recipe on the ES->EN AR teacher's translations (Spanish -> English).

    python -m padir.bible --out data/bible_es_en --direction es-en --cache data/bible_en_es/cache
    python train.py --config configs/padir_bible_es_en_ar.py --workdir runs/padir_bible_es_en_ar
    python train.py --config configs/padir_bible_es_en_recipe_distill.py \
        --workdir runs/padir_bible_es_en_recipe_distill

configs/padir_bible_en_es_recipe_distill.py in the other direction: the teacher's 2-beam
translations of the ES->EN training sources go to data/bible_es_en_distilled. Time and result:
to be filled (not run yet).
"""

import ml_collections

from configs import padir_bible_en_es_recipe, padir_bible_en_es_recipe_distill, padir_bible_es_en


def get_config() -> ml_collections.ConfigDict:
  config = padir_bible_es_en.es_en(padir_bible_en_es_recipe_distill.get_config())
  config.distill.teacher_workdir = "runs/padir_bible_es_en_ar"
  config.distill.corpus_dir = "data/bible_es_en_distilled"
  return padir_bible_en_es_recipe.with_recipe(
    config, "runs/padir_bible_es_en_ar", max_length_offset=16
  )
