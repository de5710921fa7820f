"""Fits models: k-pseudolikelihood on Ising data, MLM fine-tuning, PaDIR training.

  python train.py --config configs/NAME.py --workdir DIR [--config.key=value ...]

The config file's header comment gives the exact command and what it reproduces.
"""

from absl import app, flags
from ml_collections import config_flags

import entry

_CONFIG = config_flags.DEFINE_config_file("config", None, "Path to a configs/*.py file.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory for config, results, figures, report.")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  entry.main(_CONFIG.value, _WORKDIR.value, ("ising.", "glauber.", "padir."))


if __name__ == "__main__":
  flags.mark_flags_as_required(["config", "workdir"])
  app.run(main)
