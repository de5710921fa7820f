"""The upsampled decoder's slot layout, shared by CTC (padir.decoding.ctc) and the DAG decoder
(padir.model.dag): each source position repeated k times, in order, PAD kept, so a source of n
tokens gets floor(k n) live slots (vertices) at the front. A fractional k repeats the positions
floor(k) or ceil(k) times, spread evenly (`slot_repeats`; k = 2.5: 2, 3, 2, 3, ...)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def slot_repeats(S: int, k: float) -> np.ndarray:
  """[S] how many slots each source position gets: floor((i + 1) k) - floor(i k), so the first
  n positions get floor(n k) slots in all (k n for an integer k) and a fractional k spreads its
  extra slots evenly (k = 1.5: 2, 1, 2, 1, ...)."""
  if not k >= 1:
    raise ValueError(f"the upsampling factor must be >= 1, got {k}")
  ends = np.floor(np.arange(S + 1) * np.float64(k) + 1e-9).astype(np.int64)
  return np.diff(ends)


def num_slots(S: int, k: float) -> int:
  """floor(k S): the slots of S source positions."""
  return int(slot_repeats(S, k).sum())


def upsample(inputs_BS: jax.Array, k: float) -> jax.Array:
  """[B, floor(k S)] the decoder's first input: each source token repeated k times (an integer
  k) or by `slot_repeats` (a fractional k >= 1), in order, PAD kept."""
  if float(k).is_integer() and k >= 1:
    return jnp.repeat(inputs_BS, int(k), axis=1)
  repeats = slot_repeats(inputs_BS.shape[1], k)
  return jnp.repeat(inputs_BS, repeats, axis=1, total_repeat_length=int(repeats.sum()))
