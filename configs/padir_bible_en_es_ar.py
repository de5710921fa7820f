"""The AR baseline on PaDIR's backbone, KJV -> Reina-Valera; also the distillation teacher.

    python -m padir.data.bible --out data/bible_en_es        # once
    python train.py --config configs/padir_bible_en_es_ar.py --workdir runs/padir_bible_en_es_ar

Same data, sizes and optimizer as configs/padir_bible_en_es.py; the decoder is causal and trained
with teacher forcing, and evaluation decodes with 5 beams (the paper's AR baselines, Table 1).
configs/padir_bible_en_es_distill.py then trains PaDIR on this model's translations.

Budget: a step is cheaper than PaDIR's: 2,000 steps took 40 min on 2 cores (2026-11-23, partly
beside other work). Result (2026-11-23, dropout 0 from the base config): validation BLEU 6.19 /
9.27 with 5 beams at steps 1,000 / 2,000, validation token loss 4.13; on the 680 test pairs
(configs/padir_eval.py) BLEU 7.98 greedy, 9.32 with 5 beams. The run of 2026-11-21 with dropout
0.1 reached 5.48 at 2,000 steps. Beam search decodes with a KV cache, one position per step.

To convergence: configs/padir_family.py:bible_en_es,ar trains this backbone to its early stop
(greedy validation every 250 steps, stopped after 3 without a 0.2-BLEU gain; 8,000 at most:
5,000 steps, 47 min, test BLEU 19.26 greedy on 2026-12-01, docs/padir_family_bible.md).
"""

import ml_collections

from configs import padir_bible_en_es


def get_config() -> ml_collections.ConfigDict:
  config = padir_bible_en_es.get_config()
  config.model.decoder = "ar"  # "ar": the autoregressive baseline on the same backbone
  config.decode.beam_size = 5  # paper: 5 hypotheses for the AR baselines
  config.train.num_train_steps = (
    2_000  # within an hour on 2 CPU cores (a step is cheaper than PaDIR's)
  )
  config.train.warmup_steps = 300  # AR learns more slowly at first with a short warm-up
  # validation (5 beams: slow on a CPU) at the middle and the end only
  config.train.eval_every = 1_000
  config.decode.length_penalty = 0.6  # beam search: score / ((5 + n) / 6) ** length_penalty (GNMT)
  return config
