"""configs/padir_reorder_ar.py on the reordering task's large lexicon (222 source words, 3.4x; a
544-piece vocabulary).

    python -m padir.data.synthetic --out data/synthetic_reorder4 --grammar reorder --lexicon-scale 4
    python train.py --config configs/padir_reorder_large_ar.py --workdir runs/padir_reorder_large_ar

Time and result (2026-11-26, night, alone at nice -5 on 2 cores; short tests at nice 19 beside
it now and then): 14m58s for the 1,500 steps (1.4-1.8 steps a second), evaluations included.
Validation BLEU (5 beams) 0.78 / 9.07 / 13.51 at steps 500 / 1,000 / 1,500, token accuracy 0.79:
the 4x lexicon is far harder for the AR at this budget than the 66-word one (45.7 at 1,500).
"""

import ml_collections

from configs import padir_reorder, padir_synthetic_ar


def get_config() -> ml_collections.ConfigDict:
  return padir_reorder.on_reorder(padir_synthetic_ar.get_config(), large=True)
