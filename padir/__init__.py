"""PaDIR: Parallel Decoding by Iterative Refinement (paper Sec. 3.2-3.3, App. L.1-L.2).

A non-autoregressive encoder-decoder Transformer refines a random target hypothesis in a few
parallel decoder passes; an AR decoder on the same backbone is the baseline.

Subpackages, in the data flow of a translation system; a module imports its own floor and the
ones above it in this list only (tests/test_layering.py checks it):
- data: tokenizer (SentencePiece with fixed special ids), corpus (local corpora -> grain
  batches), tfds_corpus (a local corpus as array_record files; the only module that loads
  tensorflow_datasets), vocab (a config's vocabulary, trained once), bible (the offline en-es
  corpus), synthetic (the synthetic tasks), grammar (a family of reordering tasks from knobs);
- model: transformer (flax.nnx encoder-decoder, length head, the AR KV cache), layer_stack
  (layers stored stacked for the scan; converting states between the layouts), losses (noising
  rule, multi-stage and AR losses), dag and dag_links (DA-Transformer's directed acyclic
  decoder: path marginal, glancing, link head), restore (a trained run's model for other code);
- decoding: refinement (PaDIR decoding: the released decoder's rules, options beyond them),
  autoregressive (greedy and beam AR), ctc (CTC over an upsampled decoder: loss, collapse,
  decoding), dag (greedy, lookahead and Viterbi paths of the DAG decoder), decoders (the one
  interface: `Decoder`, `decode_fn`, trimmed decoding);
- evaluation: metrics (SacreBLEU, chrF, stutter), translation (a split translated, validation
  loss and BLEU during training), curves (figure and report.md), stutter_attention (attention
  statistics of stutter vs other adjacent pairs), latency (latency and throughput of decoders);
- training: loop (`fit(config, rd)`: the loop, checkpoints, resume; `validate`), early_stopping
  (the stopping rule on validation BLEU), optim
  (schedule, AdaFactor), sharding (logical axis rules / FSDP on the gmlm.core.mesh mesh),
  warm_start, distill (sequence-level distillation from the AR baseline);
- jobs/train.py, jobs/distill.py: the jobs train.py runs; jobs/translate.py: sample.py's
  translation of stdin or a file with a trained checkpoint; jobs/evaluate.py: test-set BLEU and
  speed of trained runs.

Shape letters (array names end in them: `enc_BSD` is [batch, source length, model width]):
  B  batch: sources (or sentence pairs) of a batch
  S  source positions, [LEN] included
  T  target positions (a hypothesis, a decoded prefix, the positional-attention keys)
  L  positions of either side, where a function serves both
  Q  query positions, K key positions (inside Attention)
  D  model width; N attention heads; H head width; V vocabulary
  C  length classes: target lengths 0 .. max_target_length
  G  candidates decoded per source (refinement: num_lengths x length_offsets x num_starts)
  W  beams per source (beam_size); E ranked extensions of the beams (2W); U the W finished
     slots and the E extensions together
  M  rows decoded together: B sources x G candidates, or x W beams
  A  alignment slots of a CTC decoder (ctc), vertices of the DAG decoder (dag): k x source
     positions; Z the same vertices as the target of an edge (dag links [B, A, Z])
  P  pairs of a corpus (corpus.bucket_batches), sentences of a split (latency, jobs/evaluate)
  X  samples of an attention statistic: adjacent position pairs, x 2 directions for the
     self-attention ones (attention)
  1  an axis of size one; `_` any number of axes (`x_M___`); lowercase x any leading axes
"""

from padir.data.corpus import CorpusError, make_dataset
from padir.data.tokenizer import Tokenizer, train_tokenizer
from padir.decoding.autoregressive import beam_search, drop_stutter, greedy_ar
from padir.decoding.refinement import RefineOptions, refine, refine_jit
from padir.evaluation.metrics import bleu, chrf, stutter_rate
from padir.evaluation.translation import translate
from padir.model.losses import ar_loss, initial_hypothesis, multi_stage_loss, padir_loss
from padir.model.transformer import KVCache, ModelConfig, Transformer

__all__ = [
  "CorpusError",
  "LocalParallelCorpus",
  "local_data_sources",
  "make_dataset",
  "beam_search",
  "drop_stutter",
  "greedy_ar",
  "RefineOptions",
  "refine",
  "refine_jit",
  "bleu",
  "chrf",
  "stutter_rate",
  "translate",
  "ar_loss",
  "initial_hypothesis",
  "multi_stage_loss",
  "padir_loss",
  "KVCache",
  "ModelConfig",
  "Transformer",
  "Tokenizer",
  "train_tokenizer",
]

_TFDS = ("LocalParallelCorpus", "local_data_sources")


def __getattr__(name: str):
  """The tfds names load tensorflow_datasets on first use only."""
  if name in _TFDS:
    from padir.data import tfds_corpus

    return getattr(tfds_corpus, name)
  raise AttributeError(f"module 'padir' has no attribute {name!r}")
