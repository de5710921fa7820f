"""Fits and trains: k-pseudolikelihood on Ising data, MLM fine-tuning, PaDIR training.

  python train.py --config configs/NAME.py --workdir DIR [--config.key=value ...]
  python train.py --help           # the configs this entry point runs

Sampling and measurement configs run with sample.py; this entry point refuses them.
"""

from gmlm import cli

if __name__ == "__main__":
  cli.main("train.py")
