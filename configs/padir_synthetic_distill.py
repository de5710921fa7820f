"""PaDIR trained on the synthetic task's AR teacher translations (sequence-level distillation).

    python -m padir.synthetic --out data/synthetic      # once
    python train.py --config configs/padir_synthetic_ar.py --workdir runs/padir_synthetic_ar
    python train.py --config configs/padir_synthetic_distill.py \
        --workdir runs/padir_synthetic_distill

The job (padir.jobs.distill) beam-decodes the training sources with the teacher's latest
checkpoint into distill.corpus_dir once, then trains PaDIR there as configs/padir_synthetic.py
does. Target: no worse than the undistilled PaDIR. Budget (2026-11-23, 2 cores): the greedy
translation of the 60k sources ~4.6 minutes, then 3,000 PaDIR steps in 24 minutes (2.2
steps/s). Result (runs/padir_synthetic_distill, 2026-11-23): validation BLEU with the paper's
decoder 20.9 / 67.6 / 78.6 / 84.2 / 86.2 / 86.8 at steps 500-3,000; test BLEU (1,024 pairs,
configs/padir_eval.py) 86.92 with the paper's decoder and 99.54 with "length-prior-reset",
against 84.50 / 99.39 for the undistilled PaDIR and 99.89 for its AR teacher (greedy). With
--config.train.num_train_steps=2000 (15.5 min, the corpus reused; 2026-11-23/24): 79.57 / 95.64,
against the undistilled 2,000-step run's 77.47 / 95.76.
"""

import ml_collections

from configs import padir_bible_en_es_distill, padir_synthetic


def get_config() -> ml_collections.ConfigDict:
  config = padir_synthetic.get_config()
  config.job = "padir.jobs.distill"
  config.distill = padir_bible_en_es_distill.get_config().distill
  config.distill.teacher_workdir = "runs/padir_synthetic_ar"
  config.distill.beam_size = 1  # greedy: the task is deterministic; 5 beams cost 5x for nothing
  config.distill.batch_size = 256
  config.distill.corpus_dir = "data/synthetic_distilled"
  return config
