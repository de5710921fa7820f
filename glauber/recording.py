"""Trajectories on disk and resumable chain state.

Every `record_every` steps the free tokens of all chains (and optionally each site's
log p^T of its current token) are kept; each segment of records is written as one npz chunk
(`trajectory/chunk_000012.npz`, atomically), so a crash loses at most the current chunk.
The chain state after the last written chunk is saved (`gmlm.checkpoints`); with the key schedule
fold_in(key, t) a resumed run continues bit for bit.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from glauber.chains import ChainState
from gmlm.checkpoints import Checkpoints


class Trajectory:
  """The npz chunks under `directory/trajectory`."""

  def __init__(self, directory: str | os.PathLike):
    self.path = Path(directory) / "trajectory"
    self.path.mkdir(parents=True, exist_ok=True)

  def chunk_file(self, index: int) -> Path:
    return self.path / f"chunk_{index:06d}.npz"

  def write(self, index: int, steps_R, tokens_RBN, logp_RBN=None) -> Path:
    arrays = {"steps_R": np.asarray(steps_R), "tokens_RBN": np.asarray(tokens_RBN)}
    if logp_RBN is not None:
      arrays["logp_RBN"] = np.asarray(logp_RBN)
    fd, tmp = tempfile.mkstemp(dir=self.path, suffix=".npz.tmp")
    with os.fdopen(fd, "wb") as f:
      np.savez(f, **arrays)
    os.replace(tmp, self.chunk_file(index))
    return self.chunk_file(index)

  def drop_from(self, index: int) -> None:
    """Removes chunks >= index (written after the checkpoint a run resumes from)."""
    for f in sorted(self.path.glob("chunk_*.npz")):
      if int(f.stem.split("_")[1]) >= index:
        f.unlink()

  def load(self) -> dict[str, np.ndarray]:
    """All chunks concatenated along the record axis (steps_R, tokens_RBN[, logp_RBN])."""
    files = sorted(self.path.glob("chunk_*.npz"))
    if not files:
      return {"steps_R": np.zeros(0, np.int64), "tokens_RBN": np.zeros((0, 0, 0), np.int32)}
    parts = [dict(np.load(f)) for f in files]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def decode(tokenizer, tokens_XN) -> list[str]:
  """Texts of free-token rows, decoded on demand."""
  return tokenizer.batch_decode(np.asarray(tokens_XN).reshape(-1, np.shape(tokens_XN)[-1]),
                                skip_special_tokens=False, clean_up_tokenization_spaces=True)


def checkpoints(directory: str | os.PathLike) -> Checkpoints:
  """The chain-state checkpoints of a run directory (`directory/checkpoints`, the last two)."""
  return Checkpoints(Path(directory) / "checkpoints", max_to_keep=2)


def _tree(state: ChainState) -> dict[str, np.ndarray]:
  return {"tokens_BL": np.asarray(state.tokens_BL), "steps_B": np.asarray(state.steps_B),
          "t": np.asarray(state.t)}


def save(ckpt: Checkpoints, chunk: int, state: ChainState) -> None:
  """Saves the state after `chunk` chunks are on disk (the checkpoint step is that count)."""
  ckpt.save(chunk, {"state": _tree(state)})


def restore(ckpt: Checkpoints, like: ChainState) -> tuple[int, ChainState] | None:
  """(chunks done, state) of the latest checkpoint, or None."""
  chunk = ckpt.latest_step()
  if chunk is None:
    return None
  tree = ckpt.restore(chunk, {"state": _tree(like)})["state"]
  return chunk, ChainState(jnp.asarray(tree["tokens_BL"]), jnp.asarray(tree["steps_B"]),
                           jnp.asarray(tree["t"]))
