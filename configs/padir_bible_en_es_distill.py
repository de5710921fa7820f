"""PaDIR trained on an AR teacher's translations (sequence-level distillation, paper App. L.2).

    python -m padir.data.bible --out data/bible_en_es        # once
    python train.py --config configs/padir_bible_en_es_ar.py --workdir runs/padir_bible_en_es_ar
    python train.py --config configs/padir_bible_en_es_distill.py \
        --workdir runs/padir_bible_en_es_distill

The job (padir.jobs.distill) first beam-decodes the training sources with the teacher's latest
checkpoint into distill.corpus_dir (train.tsv with teacher targets, valid/test copied, the
teacher's vocabulary, distill.json with counts), once, then trains PaDIR there exactly as
configs/padir_bible_en_es.py does. A missing teacher checkpoint is an error that says how to make
it. A killed distillation resumes from its partial translations (distill.corpus_dir +
".train.partial.jsonl").

Budget on 2 CPU cores: beam search with 5 beams (the paper's setting) over the 29.7k sources
takes over half an hour here (docs/timings.md), so the CPU config decodes with 2 beams and then trains
PaDIR exactly as configs/padir_bible_en_es.py does. On an accelerator set
--config.distill.beam_size=5. Results: (runs/padir_bible_en_es_distill, 2026-11-21, dropout 0.1,
teacher at validation BLEU 5.5) 28,753 of 29,757 sources kept (835 too long, 169 without EOS);
validation BLEU 1.12 after 1,000 steps (twice the undistilled run's 0.53). (2026-11-23, dropout
0, teacher at 9.3, --config.distill.beam_size=1: 9 min of translation) 27,710 kept (835 too
long, 1,212 without EOS: greedy loops); validation BLEU 0.43 / 0.54 / 0.59 / 0.64 at steps
250-1,000, length accuracy 0.087; test BLEU 0.91 against the teacher's 7.98 greedy. (2026-11-24,
this config as shipped, the same teacher: 19 min of translation + 25 of training, not quiet)
28,729 kept (835 too long, 193 without EOS); validation BLEU 0.33 / 0.57 / 0.86 / 1.26 at
steps 250-1,000, length accuracy 0.062; test BLEU 0.97 (docs/padir_training.md: how far from the
paper's 2-BLEU claim, and why).
"""

import ml_collections

from configs import padir_bible_en_es


def get_config() -> ml_collections.ConfigDict:
  config = padir_bible_en_es.get_config()
  # first the teacher's translations, then training as padir.jobs.train
  config.job = "padir.jobs.distill"

  config.distill = ml_collections.ConfigDict()
  config.distill.teacher_workdir = "runs/padir_bible_en_es_ar"  # the AR teacher's run directory
  config.distill.teacher_step = 0  # checkpoint step; 0: the latest
  config.distill.beam_size = 2  # the paper's AR baselines use 5; 2 keeps the CPU run in budget
  config.distill.length_penalty = 0.6  # beam search: score / ((5 + n) / 6) ** length_penalty (GNMT)
  config.distill.batch_size = 64  # sources per beam-search call
  config.distill.corpus_dir = "data/bible_en_es_distilled"  # "": WORKDIR/distilled
  # True: the student learns from the translations and the references both (corpus_dir + "_refs")
  config.distill.mix_references = False
  return config
