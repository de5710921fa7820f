"""What every measurement module shares: reading its keys from a config, and pyplot on the
file-only backend."""

from __future__ import annotations

from gmlm import checks


def config_args(config, under: str, defaults: dict) -> dict:
  """The values of the keys of `defaults` read under `under` in the config."""
  return {name: checks.get(config, under + name) for name in defaults}


def pyplot():
  """matplotlib.pyplot on the file-only backend."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  return plt
