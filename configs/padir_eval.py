"""Quality, speed and attention of trained PaDIR / AR models, in one report (paper App. L.4-L.5).

  python sample.py --config configs/padir_eval.py --workdir runs/padir_eval_synthetic \
      --config.checkpoints=runs/padir_synthetic,runs/padir_synthetic_ar,runs/padir_synthetic_distill

Each checkpoint (a training run directory: config.json + checkpoints/, its latest step) is
decoded on its corpus's `split` the way its kind decodes (config.decoder "auto"): a CTC model by
CTC decoding, PaDIR with each of `padir_passes` (`num_lengths` length candidates), AR greedily
and with `beam_size` beams; any mix of runs evaluates with this one command. Writes report.md
(a Table L.1-format table: model, hypotheses, passes, BLEU, chrF, stutter, p50 / p99 ms at
batch 1; the self- and cross-attention tables of stutter vs other adjacent pairs of the PaDIR
outputs, Tables 4-5; figures), results.json, and one cell per checkpoint under cells/ (a killed
run resumes at the first unfinished checkpoint). Timings mean something on a quiet machine only.
Also writes hypotheses/ (each row's outputs, one line per sentence, and the references) and a
paired-bootstrap table (bootstrap_resamples): every row against the first AR greedy row, and
each decoder across models. Result (runs/padir_eval_synthetic, 2026-11-24, the three synthetic
runs as configured now, 1,024 test pairs): 8m27s on a quiet machine; AR greedy 99.89, PaDIR
84.53 with the paper's decoder and 99.53 with "length-prior-reset" (-0.36 against AR greedy,
95% interval [-0.62, -0.15]), distilled 83.65 / 99.13 (the 2026-11-24 evaluation; docs/padir_decoding.md).
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.job = "padir.jobs.evaluate"  # the job sample.py runs
  # Comma-separated training run directories (PaDIR or AR, any order); RUN@STEP evaluates the
  # run's checkpoint at STEP instead of its latest, RUN@S1+S2+... the average of those
  # checkpoints' parameters (checkpoint averaging).
  c.checkpoints = "runs/padir_synthetic,runs/padir_synthetic_ar,runs/padir_synthetic_distill"
  # "auto": each checkpoint's own rows (CTC: ctc-P per padir_passes; PaDIR: padir-P per pass count
  # and variant; AR: greedy and beam), or "ctc", "padir", "greedy", "beam": that kind's rows only
  # (a checkpoint that cannot decode it is refused before anything is written).
  c.decoder = "auto"
  c.split = "test"  # the held-out split of each run's corpus: "test" or "valid"
  c.max_sentences = 0  # 0 = every sentence of the split
  c.padir_passes = (4, 10)  # refinement passes (at most: early stopping) of the PaDIR rows
  c.num_lengths = 5  # PaDIR length candidates (# Hyp. in Table L.1)
  # PaDIR decoders per pass count (padir.decoding.refinement.VARIANTS): "paper" (the released
  # decoder), "length-prior" (+ log p(n | x) in the score), "length-prior-reset" (and drop only
  # the positions the last pass reset).
  c.padir_variants = ("paper", "length-prior-reset")
  c.beam_size = 5  # AR beam rows (the AR models also decode greedily)
  c.batch_size = 64  # sentences per decoding call; also the throughput batch
  c.latency_sentences = 100  # sentences timed one by one at batch 1 (p50 / p99)
  c.attention_sentences = 512  # PaDIR outputs analysed for Tables 4-5
  c.seed = 0  # integer >= 0: the PaDIR rows' initial noise
  # PaDIR decodes each call at its longest candidate length rounded up to a multiple of trim
  # (padir.evaluation.latency.Trimmed: the same tokens, less work; each width compiles once); 0: always at
  # max_target_length.
  c.trim = 8
  # CTC models (padir.decoding.ctc): the blank's logit lowered by this at every slot (longer outputs;
  # 0 = the model's argmax). Choose it on the valid split (docs/padir_training.md).
  c.ctc_blank_penalty = 0.0
  # CTC models: when not empty, the penalty is instead chosen on the valid split from this grid
  # (highest BLEU, ties to the smaller; the sweep goes to report.md), e.g. (0, 0.5, 1, 1.25, 1.5, 2).
  c.ctc_blank_penalty_grid = ()
  # DAG models (padir.decoding.dag): besides each strategy, a "dag-beam-lm" row, the beam joined
  # by an n-gram model of this order over the run's training targets (padir.decoding.ngram) at
  # this weight, finished translations ranked by score / length^dag_length_norm; order 0: no
  # such row.
  c.dag_lm_order = 5  # the n-gram model's order; 0 = no "dag-beam-lm" row
  c.dag_lm_weight = 1.5  # its weight: log P(y | x) + w log P_lm(y)
  c.dag_length_norm = 1.5  # that row's score / |y|^this (the translate job's default)
  c.dag_beam_from_run = True  # a run validated on a grid: its pick replaces the two above
  # DAG models: when not empty ("w:b,...", decode.dag_beam_grid's form), the weight and the
  # exponent are instead chosen on the whole valid split (up to max_sentences) from this grid
  # (highest BLEU, ties to the first; the sweep goes to report.md), e.g. training validation's
  # configs/padir_family.BEAM_GRID, which it chooses from on decode.num_examples pairs only.
  c.dag_beam_grid = ""
  # Paired-bootstrap resamples of the report's BLEU comparisons (padir.evaluation.metrics.paired_bootstrap;
  # every row against the first AR greedy row, and each decoder across models); 0: none.
  c.bootstrap_resamples = 1000
  return c
