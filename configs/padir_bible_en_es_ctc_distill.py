"""PaDIR with CTC over an upsampled decoder (padir.ctc; issue 26, item 4) on the AR teacher's
translations, warm-started from the teacher: KJV -> Reina-Valera (English -> Spanish).

    python -m padir.bible --out data/bible_en_es        # once
    python train.py --config configs/padir_bible_en_es_ar.py --workdir runs/padir_bible_en_es_ar
    python train.py --config configs/padir_bible_en_es_ctc_distill.py \
        --workdir runs/padir_bible_en_es_ctc_distill

Why CTC: with the recipe (configs/padir_bible_en_es_recipe_distill.py) the length head was right
on 8.4% of test lengths and within 2 tokens on 32%, so most hypotheses were decoded at a wrong
length before any token was chosen. CTC predicts no length: the decoder runs over 2 x source
slots (the source tokens repeated, model.ctc_upsample = 2: 98.7% of the distilled pairs fit, the
rest are left out of the loss) and the alignment decides the length. Two stages, as PaDIR's
multi-stage loss (stage 2 reads stage 1's argmax alignment); decoding runs at most 2 passes.
No glancing (loss.glancing_ratio works with CTC, over the best alignment, but is not measured
on the Bible yet) and no length offsets (no length head); the warm start copies the teacher's embeddings, encoder and decoder layers (the slot
positions start fresh). The distilled corpus is configs/padir_bible_en_es_distill.py's.

Time and result (2026-11-25, 2 cores at nice -10, not quiet: tests at nice 15, then the
fresh-clone suite at nice 19 beside it): 43m52s wall for 1,000 steps (2.4-2.6 s a step, against
the recipe's ~1.6: two decoder passes over 128 slots), peak RSS 3.3 GB. Validation BLEU 1.55 /
2.41 / 3.80 / 3.98 at steps 250-1,000, below the recipe's 1.52 / 3.80 / 4.78 / 4.33 from step
500 on. The outputs are too short: the collapsed length is within 2 tokens of the reference on
4% of validation sentences (the recipe's length head: 30%); the blank wins too many slots
("Cuando él Jesús Jesús,, y le él le le él dijo, ¿, ¿ te." for a 40-word verse). Training loss
2.24 per token and falling at the end: CTC wants more steps (or glancing over the best
alignment, Gu & Kong 2021) than this budget gives. Test table: README, PaDIR.
"""

import ml_collections

from configs import padir_bible_en_es_distill


def with_ctc(config: ml_collections.ConfigDict, init_from: str, upsample: int = 2):
  """Turns a PaDIR training config into the CTC one (in place)."""
  config.model.ctc_upsample = upsample
  # One stage: decoding runs one pass (below), so a second training stage only doubled the step
  # (2.4-2.6 s against ~1.6 for the recipe); its minutes go to more steps instead.
  config.loss.num_stages = 1
  # Batches of similar length, each padded to its bucket (mean 38 tokens against 64 padded):
  # the decoder runs over 2x as many slots as source tokens, so padding costs it twice.
  config.data.bucket_boundaries = (24, 32, 40, 48, 56)
  config.train.num_train_steps = 2_000
  config.train.eval_every = 500
  config.decode.num_steps = 1  # passes (padir.ctc.decode): a second one lost BLEU on valid
  # The blank's logit lowered by 1 at every slot when decoding: the argmax outputs were half the
  # reference length (valid BLEU 4.44 at 0, 6.31 at 1.0, 6.21 at 1.5, 5.87 at 2.0).
  config.decode.blank_penalty = 1.0
  # Glancing over the best alignment (padir.ctc.glance; 0 = off, as measured so far):
  # --config.loss.glancing_ratio=0.5 turns it on, annealed to glancing_ratio_end.
  config.loss.glancing_ratio = 0.0
  config.loss.glancing_ratio_end = 0.3
  config.loss.glancing_anneal_steps = config.train.num_train_steps
  config.init_from = init_from
  return config


def get_config() -> ml_collections.ConfigDict:
  return with_ctc(padir_bible_en_es_distill.get_config(), "runs/padir_bible_en_es_ar")
