"""Runs samplers and measurements: Ising chains, Glauber chains on MLMs, PaDIR decoding.

  python sample.py --config configs/NAME.py --workdir DIR [--config.key=value ...]

The config names its job (`config.job = "package.module:function"`); the config file's header
comment gives the exact command and what it reproduces.
"""

import entry

if __name__ == "__main__":
  entry.cli()
