"""A deep-encoder / one-layer-decoder AR model on the synthetic task (Kasai et al. 2021).

    python -m padir.data.synthetic --out data/synthetic      # once
    python train.py --config configs/padir_synthetic_ar_deep_shallow.py \
        --workdir runs/padir_synthetic_ar_deep_shallow

The speed baseline the non-autoregressive literature calls the honest one: moving depth from the
decoder to the encoder makes each AR step cheap. 6 encoder layers + 1 decoder layer has about
the parameters of the 3 + 3 model (tests/padir/test_padir_synthetic.py checks within 5%: an
encoder layer is 4 D^2 + 2 D F, a decoder layer 12 D^2 + 2 D F with positional attention).
benchmarks/padir_speed.py times it beside the others. Budget: 1,500 steps. Retrained 2026-11-26
(night) at `nice -5` with an evaluation at `nice 19` beside it: 13m32s; validation BLEU
(greedy) 86.06 / 99.84 / 99.84 at steps 500 / 1,000 / 1,500 (2026-11-23: 85.9 / 99.8 / 99.8);
its speed: docs/padir_decoding.md (the frontier).
"""

import ml_collections

from configs import padir_synthetic_ar


def get_config() -> ml_collections.ConfigDict:
  config = padir_synthetic_ar.get_config()
  config.model.num_encoder_layers = 6  # deep encoder ...
  # ... one decoder layer: the 3+3 model's parameters, cheaper steps
  config.model.num_decoder_layers = 1
  return config
