"""PaDIR on the offline KJV -> Reina-Valera (English -> Spanish) Bible corpus, sized for a CPU.

    python -m padir.data.bible --out data/bible_en_es        # once: ~31k verse pairs
    python train.py --config configs/padir_bible_en_es.py --workdir runs/padir_bible_en_es

(`train.py` runs the job padir.jobs.train, i.e. padir.training.loop.fit.) The AR baseline on the
same backbone: add `--config.model.decoder=ar`. The paper's recipe (App. L.2) differs in size
only: 6+6 layers, d=512, FFN 2048, 8 heads, a 32k vocabulary, batch 2048, 500k steps, WMT data.

Budget: 8.4M parameters; 1,000 steps with evaluations every 250: 23 min on 2 CPU cores
(2026-11-23; per-step time: docs/timings.md); the distilled variant
(configs/padir_bible_en_es_distill.py) trains the same way after its teacher's translations are
made, so the two compare at equal cost.
Result (runs/padir_bible_en_es, 2026-11-23, dropout 0): validation BLEU 0.20 / 0.34 / 0.52 / 0.53
at steps 250-1,000, validation token loss 5.21, length accuracy 0.12; test BLEU 0.37 (paper's
decoder) / 0.36 (length-prior-reset), 0.91 distilled, 7.98 / 9.32 for the AR baseline (greedy /
5 beams): docs/padir_training.md, says how far this is from the paper and why. With dropout 0.1
(2026-11-21) the same run reached 0.53 too.
On an accelerator raise num_train_steps (the paper: 500k at batch 2048). A killed run resumes
from its last checkpoint when the same command is rerun.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.job = "padir.jobs.train"  # the job train.py runs
  config.seed = 0  # integer >= 0: initialisation, noising and batch order

  config.data = ml_collections.ConfigDict()
  config.data.corpus_dir = (
    "data/bible_en_es"  # train/valid/test.tsv from `python -m padir.data.bible`
  )
  config.data.prepare_bible = True  # run padir.data.bible.prepare if corpus_dir has no train.tsv
  config.data.source_lang = "en"  # source language code (the corpus's first column)
  config.data.target_lang = "es"  # target language code (the corpus's second column)
  config.data.vocab_path = ""  # default: CORPUS_DIR/spm{vocab_size}.model
  config.data.vocab_size = 8000  # paper: 32k
  config.data.train_vocab = True  # train the vocabulary on the train split if it is missing
  config.data.tfds_data_dir = ""  # default: CORPUS_DIR/tfds
  config.data.max_source_length = 64  # tokens incl. EOS; longer pairs are dropped (~3%)
  config.data.max_target_length = 64  # tokens incl. EOS; longer pairs are dropped
  # () pads every batch to the maximum lengths. E.g. (16, 32, 48): each batch holds pairs whose
  # longer side falls in one bucket and is padded to its boundary (one compilation per bucket).
  config.data.bucket_boundaries = ()

  config.model = ml_collections.ConfigDict()
  config.model.decoder = "nar"  # "nar" (PaDIR) or "ar" (baseline)
  config.model.num_encoder_layers = 3  # paper: 6
  config.model.num_decoder_layers = 3  # paper: 6
  config.model.num_heads = 4  # paper: 8
  config.model.d_model = 256  # paper: 512
  config.model.d_ff = 1024  # paper: 2048
  # 0: at ~2 epochs the runs are far from overfitting, and dropout slowed learning (AR valid
  # BLEU 9.3 at 2,000 steps without it, 5.5 with 0.1; on the synthetic task PaDIR 72 vs 45).
  config.model.dropout_rate = 0.0
  # the paper's positional-attention sublayer in every decoder layer
  config.model.positional_attention = True
  # Accelerators: "bfloat16" runs matmuls and activations in bf16 over float32 master weights
  # (softmax, LayerNorm statistics and the losses stay float32); vocab_multiple=128 pads the
  # output projection's vocabulary to aligned tiles (the padded logits are masked out).
  config.model.dtype = "float32"
  config.model.vocab_multiple = 1  # 1: no padding of the vocabulary
  # How the layers run (the same function and the same checkpoints either way):
  # scan_layers "scan" stacks each layer kind's parameters inside the step and runs one
  # jax.lax.scan (compiled once per kind, not once per layer), "loop" runs a Python loop, "auto"
  # the scan on an accelerator and the loop on a CPU (0.81-0.83x / 0.90-1.01x per step scanned
  # on the synthetic / Bible configs on 2 CPU cores: docs/padir_training.md); remat recomputes
  # each layer's activations in the backward pass: "none", "full" (keep the layer's input only) or
  # "dots_saveable" (keep the matmul outputs). Both may change between the legs of a run.
  config.model.scan_layers = "auto"
  config.model.remat = "none"  # per-layer rematerialisation policy (above)
  # "layer": each layer's dropout masks in training from one draw of random bits (the bit
  # generator compiled once a layer, not once a dropout site: docs/padir_training.md); "site":
  # one draw a site (the masks of runs before this key). The same dropout either way.
  config.model.dropout_draw = "layer"
  # The bit generator of a layer's draw: "threefry" (XLA's RngBitGenerator, ThreeFry), or
  # "xla_default" (its default algorithm, Philox on a CPU: the masks of runs before this key,
  # 3x the time; on the family's AR step two fifths of it, docs/padir_training.md).
  config.model.dropout_rng = "threefry"

  config.loss = ml_collections.ConfigDict()
  config.loss.keep_rate = 0.15  # "15% unmasking rate": the rest are random tokens
  config.loss.mask_rate = 0.0  # fraction of the replaced positions that get [MASK] instead
  config.loss.num_stages = 2  # the paper's multi-stage loss: stage 2 reads stage 1's output
  config.loss.stage_input = "argmax"  # or "sample"
  config.loss.stage_reduction = "mean"  # the paper's (1/S) sum over stages; or "sum"
  config.loss.length_weight = 1.0  # weight of the length head's loss beside the token loss
  # >0: each stage's token CE over chunks of this many positions, the chunk's logits recomputed
  # in the backward pass (no [B, T, V] float32 logits kept); 0: whole logits.
  config.loss.logits_chunk = 0
  # True, with scanned layers: the stages run as one scan too (the decoder traced once, not per
  # stage; the same function). Off by default: on 2 CPU cores it left the paper-size compile
  # unchanged and, without logits_chunk, held 23% more activations (docs/padir_training.md).
  config.loss.scan_stages = False

  config.train = ml_collections.ConfigDict()
  config.train.batch_size = 32  # paper: 2048
  # K > 1: the batch runs as K micro-batches of batch_size / K (a scan), one update: the same
  # update as the whole batch, within float32 summation, with a K-th of its activations.
  config.train.grad_accum_steps = 1
  # True: AdaFactor's update traced once per parameter shape, vmapped over the arrays of that
  # shape (the same update, half the step's compiled kernels); False: once per array.
  config.train.optimizer_by_shape = True
  config.train.num_train_steps = 1_000  # 23 min on 2 CPU cores (header); paper: 500k
  # >0: stop (with a checkpoint) there; 0: the end. A rerun with a later value (or 0) in the
  # same workdir continues the run (a resumable key: padir.training.loop.RESUMABLE_KEYS).
  config.train.stop_at_step = 0
  config.train.warmup_steps = 100  # paper: 10k
  config.train.peak_lr = 3e-3  # peak learning rate after warm-up
  config.train.min_lr = 1e-5  # the warm-up starts here and the cosine decay ends here
  config.train.log_every = 50  # a metrics.jsonl line every this many steps
  config.train.eval_every = 250  # validation loss and BLEU every this many steps
  config.train.eval_batches = 10  # validation batches for the validation loss
  # a checkpoint every this many steps (a killed run resumes from it)
  config.train.checkpoint_every = 500
  config.train.keep_checkpoints = 3  # checkpoints kept (the newest intact one is used)
  config.train.progress_bar = True  # tqdm on stderr (may change between legs of a run)

  # Device mesh (padir.training.sharding): data=0 runs on one device; data=-1 uses all devices that the
  # model axis leaves. params: "logical" (axis rules: vocab/heads/mlp over "model") or "fsdp".
  config.mesh = ml_collections.ConfigDict()
  config.mesh.data = 0  # data-parallel devices (0: one device; -1: all the model axis leaves)
  config.mesh.model = 1  # devices on the model axis (tensor parallel)
  config.mesh.params = "logical"  # "logical" axis rules or "fsdp"
  # "auto": jax.distributed.initialize() when the environment describes several processes
  # (JAX_COORDINATOR_ADDRESS, SLURM or Open MPI with >1 task); "on": always; "off": never.
  config.distributed = "auto"

  config.decode = ml_collections.ConfigDict()
  config.decode.num_examples = 256  # valid pairs translated for BLEU at each evaluation
  config.decode.batch_size = 32  # sentences per validation decoding call
  config.decode.num_steps = 4  # refinement steps T
  config.decode.num_lengths = 3  # length beam B_l
  # PaDIR: "paper" (padir.decoding.refinement defaults), a named variant of it (refinement.VARIANTS:
  # "length-prior", "length-prior-reset") or "legacy" (our first decoder).
  config.decode.decoder = (
    "length-prior-reset"  # the synthetic task's lesson (docs/padir_decoding.md)
  )
  config.decode.remask_stutter = True  # "legacy" only: re-mask stuttered tokens between passes
  config.decode.beam_size = 1  # AR baseline only: 1 = greedy; the paper's AR baselines use 5
  config.decode.length_penalty = 0.6  # AR beam search: score / ((5 + n) / 6) ** length_penalty
  return config
