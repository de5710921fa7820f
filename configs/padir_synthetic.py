"""PaDIR on the synthetic cipher task (padir.synthetic): a task both PaDIR and AR must solve.

    python -m padir.synthetic --out data/synthetic      # once: 60k train pairs, ~1 s
    python train.py --config configs/padir_synthetic.py --workdir runs/padir_synthetic

The task (vocabulary map, adjective-noun swaps, fertility-2 words; padir.synthetic) is a
deterministic function of the source, so a 3+3-layer model should translate it almost perfectly;
the issue's target is PaDIR (4 passes, 5 lengths) within 1 BLEU of AR greedy
(configs/padir_synthetic_ar.py) and the distilled PaDIR (configs/padir_synthetic_distill.py) no
worse. Evaluate the three with configs/padir_eval.py.

Budget: 1.6M parameters, batch 64 x 36 tokens; 3,000 steps at ~2.05 steps/s on 2 quiet cores,
about 25 minutes with the evaluations (2026-11-23; the issue sized the task for 20). Shorter
schedules miss the target (quiet, 2026-11-23/24: 0.46 s a step with the evaluations;
test BLEU on the 1,024 pairs, length-prior-reset / paper's decoder, AR greedy 99.89):
--config.train.num_train_steps=2000, 15.1 min: 95.76 / 77.47; 2500, 19.1 min: 98.49 / 81.63
(1.4 BLEU short); 3,000 here would take ~23 min. The learning-rate schedule ends with the run,
so a short run is not the long run's checkpoint (step 2,000 of the 3,000-step run: 98.9).
Result (runs/padir_synthetic, 2026-11-23): validation BLEU with the paper's decoder 15.8 / 71.6
/ 79.8 / 81.2 / 82.4 / 83.7 at steps 500-3,000 (token loss 0.007, length accuracy 0.996 at the
end); on the 1,024 test pairs (benchmarks/padir_options.py) 84.5 with the paper's decoder and
99.4 with the length prior and drop="reset" (decode.decoder = "length-prior-reset", which this
config's validation now uses), against 99.89 for AR greedy (configs/padir_synthetic_ar.py).
With dropout 0.1 (the Bible configs' value) the same model reached 44.8 at step 1,000.
"""

import ml_collections

from configs import padir_bible_en_es


def get_config() -> ml_collections.ConfigDict:
  config = padir_bible_en_es.get_config()
  d = config.data
  d.corpus_dir = "data/synthetic"  # from `python -m padir.synthetic --out data/synthetic`
  d.prepare_bible = False
  d.source_lang = "en"
  d.target_lang = "cx"
  d.vocab_size = 176  # ~2 pieces per word; the corpus allows at most ~187
  d.max_source_length = 36  # the longest pair is ~34 tokens: none dropped
  d.max_target_length = 36

  m = config.model
  m.num_encoder_layers = 3
  m.num_decoder_layers = 3
  m.num_heads = 4
  m.d_model = 128
  m.d_ff = 512
  m.dropout_rate = 0.0  # a deterministic task: dropout 0.1 slowed PaDIR (BLEU 45 at step 1,000)

  t = config.train
  t.batch_size = 64
  t.num_train_steps = 3_000  # PaDIR learns slower than AR (which converges by 1,000)
  t.warmup_steps = 150
  t.peak_lr = 3e-3
  t.log_every = 100
  t.eval_every = 500
  t.eval_batches = 4
  t.checkpoint_every = 500

  config.decode.num_examples = 256
  config.decode.batch_size = 64
  config.decode.num_lengths = 5  # the paper's 5 length candidates
  # Validation BLEU with the length prior and drop="reset": the paper's decoder loses ~15 BLEU
  # here (README, PaDIR); configs/padir_eval.py reports both.
  config.decode.decoder = "length-prior-reset"
  return config
