"""A deep-encoder / one-layer-decoder PaDIR on the synthetic task (issue 30).

    python -m padir.data.synthetic --out data/synthetic      # once
    python train.py --config configs/padir_synthetic_deep_shallow.py \
        --workdir runs/padir_synthetic_deep_shallow

Kasai et al. (2021) moved an AR model's depth from the decoder to the encoder
(configs/padir_synthetic_ar_deep_shallow.py): each decoding step gets cheap while the encoder
runs once. A PaDIR decode runs the encoder once and the decoder 2-4 times over every candidate
position, so the same move should pay at least as much: this config asks whether it does.
6 encoder layers + 1 decoder layer have about the parameters of the 3 + 3 model
(configs/padir_synthetic.py; tests/padir/test_padir_synthetic.py checks within 5%: an encoder
layer is 4 D^2 + 2 D F, a PaDIR decoder layer 12 D^2 + 2 D F with its positional attention).
Everything else (data, optimizer, 2,000 steps, validation decoder) is the 3 + 3 model's.
Result (runs/padir_synthetic_deep_shallow, 2026-11-25, 18.5 min beside the test suite, so not
a quiet time): validation BLEU 20.8 / 63.9 / 89.4 / 92.5 at steps 500-2,000, against 61.2 / 96.1 /
98.9 / 99.5 for the 3 + 3 model: the shallow decoder learns less, and at batch 1 its 6-layer
encoder eats the cheaper passes (the frontier of 2026-11-25: test BLEU 91.4 at 2.03 ms p50 for
one length and 2 passes, against 99.5 at 2.18 ms for the 3 + 3 model).
"""

import ml_collections

from configs import padir_synthetic


def get_config() -> ml_collections.ConfigDict:
  config = padir_synthetic.get_config()
  config.model.num_encoder_layers = 6  # deep encoder ...
  # ... one decoder layer: the 3+3 model's parameters, cheaper passes
  config.model.num_decoder_layers = 1
  return config
