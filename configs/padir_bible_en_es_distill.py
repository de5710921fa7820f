"""PaDIR trained on an AR teacher's translations (sequence-level distillation, paper App. L.2).

    python -m padir.bible --out data/bible_en_es        # once
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
takes over half an hour here (README, Timings), so the CPU config decodes with 2 beams and then trains
PaDIR exactly as configs/padir_bible_en_es.py does. On an accelerator set
--config.distill.beam_size=5. Result (runs/padir_bible_en_es_distill, 2026-11-21): 28,753 of
29,757 sources kept (835 too long, 169 without EOS); validation BLEU 1.12 after 1,000 steps
(twice the undistilled run's 0.53), stutter 0.019 (0.071 undistilled), validation token loss
against the human references 7.42.
"""

import ml_collections

from configs import padir_bible_en_es


def get_config() -> ml_collections.ConfigDict:
  config = padir_bible_en_es.get_config()
  config.job = "padir.jobs.distill"

  config.distill = ml_collections.ConfigDict()
  config.distill.teacher_workdir = "runs/padir_bible_en_es_ar"  # the AR teacher's run directory
  config.distill.teacher_step = 0  # checkpoint step; 0: the latest
  config.distill.beam_size = 1  # greedy: 9 min here (2 beams took 23); the paper's: 5
  config.distill.length_penalty = 0.6
  config.distill.batch_size = 64  # sources per beam-search call
  config.distill.corpus_dir = "data/bible_en_es_distilled"  # "": WORKDIR/distilled
  return config
