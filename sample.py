"""Runs samplers and measurements: Ising chains, Glauber chains on MLMs, MLM evaluation.

  python sample.py --config configs/NAME.py --workdir DIR [--config.key=value ...]
  python sample.py --help          # the configs this entry point runs

Training and fitting configs run with train.py; this entry point refuses them.
"""

from gmlm import cli

if __name__ == "__main__":
  cli.main("sample.py")
