"""Shared builders for the Ising tests."""

import numpy as np

from ising.model import ising


def random_model(n: int, seed: int, scale: float = 0.3):
  """Random fields ~ N(0, 0.5^2) and symmetric couplings ~ N(0, scale^2), zero diagonal."""
  rng = np.random.default_rng(seed)
  J = rng.normal(0, scale, (n, n))
  J = (J + J.T) / 2
  np.fill_diagonal(J, 0)
  return ising(rng.normal(0, 0.5, n), J)
