"""PaDIR trained on the synthetic task's AR teacher translations (sequence-level distillation).

    python -m padir.synthetic --out data/synthetic      # once
    python train.py --config configs/padir_synthetic_ar.py --workdir runs/padir_synthetic_ar
    python train.py --config configs/padir_synthetic_distill.py \
        --workdir runs/padir_synthetic_distill

The job (padir.jobs.distill) beam-decodes the training sources with the teacher's latest
checkpoint into distill.corpus_dir once, then trains PaDIR there as configs/padir_synthetic.py
does. Target: no worse than the undistilled PaDIR. Budget: the greedy translation of the 60k
sources (36 decoder steps per batch of 256) is estimated at 5-10 minutes, then the PaDIR
training as configs/padir_synthetic.py (13-20 minutes). Result: not yet run.
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
