"""PaDIR: Parallel Decoding by Iterative Refinement (paper Sec. 3.2-3.3, App. L.1-L.2).

A non-autoregressive encoder-decoder Transformer refines a random target hypothesis in a few
parallel decoder passes; an AR decoder on the same backbone is the baseline.

Modules: bible (offline en-es corpus), data (local corpora -> tfds -> grain), tokenizer
(SentencePiece with fixed special ids), model (flax.nnx Transformer), losses (noising rule,
multi-stage loss), decode (refinement, greedy and beam AR), evaluate (SacreBLEU, stutter),
sharding (device mesh, logical axis rules / FSDP), train_lib (training, multi-host), distill
(sequence-level distillation from the AR baseline).
"""

from padir.data import CorpusError, LocalParallelCorpus, local_data_sources, make_dataset
from padir.decode import beam_search, drop_stutter, greedy_ar, refine
from padir.evaluate import bleu, stutter_rate, translate
from padir.losses import ar_loss, initial_hypothesis, multi_stage_loss, padir_loss
from padir.model import ModelConfig, Transformer
from padir.tokenizer import Tokenizer, train_tokenizer

__all__ = [
    "CorpusError", "LocalParallelCorpus", "local_data_sources", "make_dataset",
    "beam_search", "drop_stutter", "greedy_ar", "refine",
    "bleu", "stutter_rate", "translate",
    "ar_loss", "initial_hypothesis", "multi_stage_loss", "padir_loss",
    "ModelConfig", "Transformer",
    "Tokenizer", "train_tokenizer",
]
