"""PaDIR with CTC over an upsampled decoder (padir.decoding.ctc; issue 26) on the synthetic cipher task,
trained from scratch on the corpus itself (no teacher, no warm start): the undistilled synthetic
target is PaDIR within 1 BLEU of AR greedy at no more training wall-clock than the AR's.

    python -m padir.data.synthetic --out data/synthetic      # once
    python train.py --config configs/padir_synthetic_ctc.py --workdir runs/padir_synthetic_ctc

The synthetic configs' model and optimizer (configs/padir_synthetic.py: 3+3 layers, d = 128,
peak 5e-3) with configs/padir_bible_en_es_ctc_distill.with_ctc: the decoder over 2 x source slots,
one training stage, one decoding pass, batches by length buckets. 1,500 steps, the AR baseline's
(configs/padir_synthetic_ar.py, ~12 min on 2 quiet cores, 2026-11-24). No blank penalty: the
task is deterministic, so the argmax alignment's length should be right; padir_eval's
ctc_blank_penalty_grid checks that on valid.

Time and result (2026-11-26, 2 quiet cores): 8m42s for 1,500 steps (2.9-3.2 steps a second),
against 13m01s for the AR baseline retrained the same evening. Validation BLEU 96.21 / 99.68 /
99.84 at steps 500 / 1,000 / 1,500 (AR: 94.34 / 99.73 / 99.73). Test, 500 sources (the frontier
of benchmarks/padir_speed.py): 99.70 in one pass against AR greedy's 100.00, -0.30 [-0.63,
-0.08]: within 1 BLEU in two thirds of the AR's time. A second pass collapses (21.2): one
training stage, so decode one pass.
"""

import ml_collections

from configs import padir_bible_en_es_ctc_distill, padir_synthetic


def synthetic_ctc(
  config: ml_collections.ConfigDict, steps: int = 1_500, upsample: float = 2
) -> ml_collections.ConfigDict:
  """A synthetic PaDIR config turned into CTC from scratch (in place)."""
  config = padir_bible_en_es_ctc_distill.with_ctc(config, init_from="", upsample=upsample)
  config.data.bucket_boundaries = (16, 24, 32)  # sources of up to 36-48 tokens
  config.train.num_train_steps = steps  # the caller's steps: 1,500 (the AR's) unless it says
  config.loss.glancing_anneal_steps = steps  # glancing (off by default) anneals over the whole run
  # no blank penalty: a deterministic task (padir_eval's grid checks it)
  config.decode.blank_penalty = 0.0
  return config


def get_config() -> ml_collections.ConfigDict:
  return synthetic_ctc(padir_synthetic.get_config())
