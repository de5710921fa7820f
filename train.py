"""Fits models: k-pseudolikelihood on Ising data, MLM fine-tuning, PaDIR training.

  python train.py --config configs/NAME.py --workdir DIR [--config.key=value ...]

The config names its job (`config.job = "package.module:function"`); the config file's header
comment gives the exact command and what it reproduces.
"""

import entry

if __name__ == "__main__":
  entry.cli()
