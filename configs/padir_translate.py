"""Translate with a trained PaDIR or AR checkpoint: stdin (or a file) to stdout, line by line.

    python sample.py --config configs/padir_translate.py --workdir runs/translate \
      --config.checkpoint=runs/padir_bible_en_es --config.output=hypotheses.es < sources.en

(`sample.py` runs the job padir.jobs.translate.) config.decoder chooses the decoder; its default
"auto" is the run's recommended one, so every PaDIR / AR run translates with this command: a CTC
checkpoint (e.g. configs/padir_synthetic_ctc_2x1.py's) decodes by CTC, a PaDIR checkpoint refines
with the options below, whose defaults are the paper's (the authors' released decoder), and an
AR checkpoint decodes greedily, or by beam search with --config.beam_size=5. A decoder the
checkpoint cannot use (e.g. --config.decoder=ctc on an AR run) is refused in one line. Empty
or over-long lines get a message on stderr naming the line and an empty output line; a line
most of whose words hold characters the vocabulary lacks (they become <unk>) is translated with
a warning on stderr; input that is not UTF-8 (a file or stdin) is refused in one line naming
the line, before anything is translated. Result: one output line per input line (to stdout
without --config.output; sample.py's closing "Run directory" line goes to stderr); runs/translate/results.json counts them and lists the skipped ones.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.job = "padir.jobs.translate"  # the job sample.py runs
  config.checkpoint = ""  # a training run directory (train.py's --workdir): required
  config.step = 0  # its checkpoint at this step; 0 = the latest
  config.input = ""  # a UTF-8 text file, one source per line; "" = stdin
  config.output = ""  # where the translations go; "" = stdout
  config.batch_size = 32  # sources per decoding call
  config.seed = 0  # line i decodes with fold_in(key(seed), i)
  config.progress_bar = True  # tqdm on stderr
  # "auto": the run's recommended decoder (CTC for a CTC model, the DAG's for a DAG model,
  # refinement for a PaDIR model, greedy for an AR model, beam search if beam_size > 1); or
  # "ctc", "dag", "padir", "greedy", "beam".
  config.decoder = "auto"
  # PaDIR: decode each batch at its longest candidate length rounded up to a multiple of trim
  # (padir.decoding.decoders.Trimmed), CTC on sources cut to their width rounded up to it
  # (SourceTrimmed): the same tokens, less work; each width compiles once; 0 = off.
  config.trim = 8

  # AR checkpoints.
  config.beam_size = 1  # 1 = greedy; the paper's AR baselines use 5
  config.length_penalty = 0.6  # beam score / ((5 + n) / 6) ** length_penalty

  # CTC checkpoints (padir.decoding.ctc.decode).
  config.ctc_passes = 1  # decoder passes at most (README: one pass reaches AR's BLEU)
  config.ctc_blank_penalty = 0.0  # lowers the blank's logit at every slot; 0 = the argmax

  # DAG checkpoints (padir.decoding.dag.decode): "beam" (DA-Transformer's beam search over
  # translations, beam of 5), "lookahead", "greedy" or "viterbi"; the beam joined by an n-gram
  # model of the target language counted on the run's training targets (order 0: none), with
  # this weight (padir.decoding.ngram), finished translations ranked by their score divided by
  # their length to this power. The defaults are the family benchmark's choice on the sov
  # task's validation split (docs/padir_training.md, the family section).
  config.dag_strategy = "beam"  # or "lookahead", "greedy", "viterbi"
  config.dag_lm_order = 5  # the n-gram model's order; 0 = the plain beam
  config.dag_lm_weight = 1.5  # its weight: log P(y | x) + w log P_lm(y)
  config.dag_length_norm = 1.5  # the beam's score / |y|^this; 0 = the sum itself
  # A run validated on a grid of beam settings (decode.dag_beam_grid, as the family's DAG is)
  # recorded the best at each evaluation: True decodes with that (weight, length
  # normalisation) of the checkpoint's step in place of the two above; False: the two above.
  config.dag_beam_from_run = True  # False: dag_lm_weight and dag_length_norm as set
  # When not empty ("w:b,...", e.g. configs/padir_family.DECODE_GRID), the weight and the
  # exponent are instead chosen at load on the whole valid split of the run's corpus from this
  # grid (highest BLEU, ties to the first; results.json's dag_beam_chosen_on_valid).
  config.dag_beam_grid = ""

  # PaDIR checkpoints: padir.decoding.refinement.RefineOptions (defaults: the paper's decoder).
  config.num_steps = 4  # decoder passes at most
  config.num_lengths = 5  # top-k predicted lengths
  config.length_offsets = 1  # odd: lengths n-o .. n+o around each (the reference's beam_length)
  config.num_starts = 1  # independent random starts per length
  config.init = "random"  # noise of the initial hypothesis: "random" tokens or "mask"
  config.stutter = "initial"  # reset a repeat to its initial noise token; "mask"; "keep"
  config.drop = "initial"  # drop positions still at their noise token; "reset"; "none"
  config.score = "sum"  # rank candidates by summed token log-probability; "mean"
  config.brevity_alpha = 0.0  # GNMT brevity penalty exponent; 0 = off
  config.early_stop = True  # stop a hypothesis when a pass changes nothing
  config.cache_cross = True  # project cross-attention keys / values once for all passes
  config.remask = "none"  # "confidence": Mask-Predict re-noising on a linear schedule
  config.temperature = 0.0  # > 0: sampled refinement (gmlm.core.draws)
  config.top_k = 0  # sampling truncation; 0 = off
  config.top_p = 1.0  # nucleus truncation; 1 = off
  config.rerank = "none"  # "ar": rerank candidates by an AR model's log-probability
  config.rerank_checkpoint = ""  # the AR run for rerank="ar" (same vocabulary)
  config.length_prior = False  # add the length predictor's log p(n | x) to each score
  # "compact": passes decode the candidates still changing only (same tokens; ~4-8% less CPU
  # time at batch 64 on the synthetic model, measured beside other work); "mask": all of them
  config.row_stop = "compact"
  return config
