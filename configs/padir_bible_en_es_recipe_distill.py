"""PaDIR with issue 26's recipe (configs/padir_bible_en_es_recipe.py) trained on its AR teacher's
translations: the issue's target configuration (within 2 BLEU of the teacher, greedy).

    python -m padir.bible --out data/bible_en_es        # once
    python train.py --config configs/padir_bible_en_es_ar.py --workdir runs/padir_bible_en_es_ar
    python train.py --config configs/padir_bible_en_es_recipe_distill.py \
        --workdir runs/padir_bible_en_es_recipe_distill

The distilled corpus is configs/padir_bible_en_es_distill.py's (data/bible_en_es_distilled, 2
beams; reused if it is there with the same settings), the warm start is from the teacher
itself. Time and result: to be filled (not run yet).
"""

import ml_collections

from configs import padir_bible_en_es_distill, padir_bible_en_es_recipe


def get_config() -> ml_collections.ConfigDict:
  return padir_bible_en_es_recipe.with_recipe(
    padir_bible_en_es_distill.get_config(), "runs/padir_bible_en_es_ar", max_length_offset=16
  )
