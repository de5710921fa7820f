"""A deep-encoder / one-layer-decoder PaDIR on the synthetic task (issue 30).

    python -m padir.synthetic --out data/synthetic      # once
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
Not yet trained (2026-11-24): queued by the lead; its frontier row comes from
`benchmarks/padir_speed.py --frontier --nar runs/padir_synthetic --nar
runs/padir_synthetic_deep_shallow ...` (README, PaDIR).
"""

import ml_collections

from configs import padir_synthetic


def get_config() -> ml_collections.ConfigDict:
  config = padir_synthetic.get_config()
  config.model.num_encoder_layers = 6
  config.model.num_decoder_layers = 1
  return config
