"""The AR baseline on Reina-Valera -> KJV (Spanish -> English); the ES->EN distillation teacher.

    python -m padir.data.bible --out data/bible_es_en --direction es-en --cache data/bible_en_es/cache
    python train.py --config configs/padir_bible_es_en_ar.py --workdir runs/padir_bible_es_en_ar

configs/padir_bible_en_es_ar.py in the other direction (configs/padir_bible_es_en.py).

Time and result (2026-11-26, 2 cores at nice -10, beside short tests at nice 0-19 for about 15
of its minutes): 37m58s for 2,000 steps (1.0-1.2 s a step). Validation BLEU (5 beams, 256
pairs) 8.39 at step 1,000 and 10.89 at 2,000 (token loss 4.02 / 3.66). EN->ES took 39m51s.

To convergence: configs/padir_family.py:bible_es_en,ar trains this backbone to its early stop
(greedy validation every 250 steps, stopped after 3 without a 0.2-BLEU gain; 8,000 at most:
5,500 steps, 51 min, test BLEU 23.64 greedy on 2026-12-02, docs/padir_family_bible.md).
"""

import ml_collections

from configs import padir_bible_en_es_ar, padir_bible_es_en


def get_config() -> ml_collections.ConfigDict:
  return padir_bible_es_en.es_en(padir_bible_en_es_ar.get_config())
