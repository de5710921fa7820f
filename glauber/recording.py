"""Trajectories on disk and resumable chain state.

Every `record_every` steps the free tokens of all chains (and optionally each site's
log p^T of its current token) are kept; each segment of records is written as one npz chunk
(`trajectory/chunk_000012.npz`, atomically), so a crash loses at most the current chunk.
The chain state after the last written chunk is saved (`gmlm.checkpoints`); with the key schedule
fold_in(key, t) a resumed run continues bit for bit. On resume (`resume`) every chunk the
checkpoint counts is verified (present, zip CRCs intact): from a missing or damaged chunk on, the
run is recomputed from the newest checkpoint at or before it, or from the start, saying so.
"""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from glauber.chains import ChainState
from gmlm.checkpoints import Checkpoints
from gmlm.checks import UserError
from gmlm.runs import fault_point


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
    fault_point("chunk_written")
    return self.chunk_file(index)

  def problem(self, index: int) -> str | None:
    """Why chunk `index` cannot be read back ("missing", "damaged: ..."), or None."""
    f = self.chunk_file(index)
    if not f.is_file():
      return "missing"
    try:
      with zipfile.ZipFile(f) as z:
        bad = z.testzip()  # reads every member and checks its CRC
      if bad is not None:
        return f"damaged: member {bad} fails its CRC check"
      with np.load(f) as z:
        for name in z.files:
          z[name]
    except Exception as e:  # zipfile, zlib and numpy raise many types for damaged files
      return f"damaged: {type(e).__name__}: {e}"
    return None

  def first_problem(self, count: int) -> tuple[int, str] | None:
    """(index, why) of the first of chunks 0..count-1 that cannot be read back, or None."""
    for index in range(count):
      if (why := self.problem(index)) is not None:
        return index, why
    return None

  def drop_from(self, index: int) -> None:
    """Removes chunks >= index (written after the checkpoint a run resumes from)."""
    for f in sorted(self.path.glob("chunk_*.npz")):
      if int(f.stem.split("_")[1]) >= index:
        f.unlink()

  def load(self) -> dict[str, np.ndarray]:
    """All chunks concatenated along the record axis (steps_R, tokens_RBN[, logp_RBN]).
    Raises UserError naming the first chunk that is missing (a gap) or damaged."""
    files = sorted(self.path.glob("chunk_*.npz"))
    if not files:
      return {"steps_R": np.zeros(0, np.int64), "tokens_RBN": np.zeros((0, 0, 0), np.int32)}
    count = int(files[-1].stem.split("_")[1]) + 1
    if (bad := self.first_problem(count)) is not None:
      index, why = bad
      raise UserError(
        f"trajectory chunk {self.chunk_file(index)} is {why}; rerun the job in "
        "this --workdir to recompute it from the checkpoint before it."
      )
    parts = [dict(np.load(self.chunk_file(i))) for i in range(count)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def decode(tokenizer, tokens_XN) -> list[str]:
  """Texts of free-token rows, decoded on demand."""
  return tokenizer.batch_decode(
    np.asarray(tokens_XN).reshape(-1, np.shape(tokens_XN)[-1]),
    skip_special_tokens=False,
    clean_up_tokenization_spaces=True,
  )


def checkpoints(directory: str | os.PathLike) -> Checkpoints:
  """The chain-state checkpoints of a run directory (`directory/checkpoints`, the last two)."""
  return Checkpoints(Path(directory) / "checkpoints", max_to_keep=2)


def _tree(state: ChainState) -> dict[str, np.ndarray]:
  return {
    "tokens_BL": np.asarray(state.tokens_BL),
    "steps_B": np.asarray(state.steps_B),
    "t": np.asarray(state.t),
  }


def save(ckpt: Checkpoints, chunk: int, state: ChainState) -> None:
  """Saves the state after `chunk` chunks are on disk (the checkpoint step is that count)."""
  ckpt.save(chunk, {"state": _tree(state)})


def _state(tree: dict) -> ChainState:
  return ChainState(
    jnp.asarray(tree["tokens_BL"]), jnp.asarray(tree["steps_B"]), jnp.asarray(tree["t"])
  )


def restore(ckpt: Checkpoints, like: ChainState) -> tuple[int, ChainState] | None:
  """(chunks done, state) of the newest intact checkpoint, or None."""
  restored = ckpt.restore_latest({"state": _tree(like)})
  if restored is None:
    return None
  return restored[0], _state(restored[1]["state"])


def resume(ckpt: Checkpoints, traj: Trajectory, initial: ChainState) -> tuple[int, ChainState]:
  """(chunks done, state) a run continues from: the newest intact checkpoint, moved back to
  the newest checkpoint at or before the first missing or damaged chunk it counts (to the
  start, `initial`, when there is none), with a warning naming that chunk. Chunks and
  checkpoints past that point are removed."""
  restored = restore(ckpt, initial)
  done, state = restored if restored is not None else (0, initial)
  if (bad := traj.first_problem(done)) is not None:
    index, why = bad
    older = [s for s in ckpt.all_steps() if s <= index]
    done, state = 0, initial
    if older:
      done, state = older[-1], _state(ckpt.restore(older[-1], {"state": _tree(initial)})["state"])
    print(
      f"warning: trajectory chunk {traj.chunk_file(index)} is {why}; recomputing from chunk "
      f"{done} ({'its checkpoint' if done else 'the start'})",
      file=sys.stderr,
    )
    ckpt.delete_after(done)
  traj.drop_from(done)
  return done, state


def run_recorded(
  directory: str | os.PathLike,
  key,
  model,
  spec,
  x0_BL,
  num_records: int,
  record_every: int,
  chunk_records: int,
  *,
  mode: str = "plain",
  record_logprobs: bool = False,
  progress=None,
) -> dict[str, np.ndarray]:
  """Chains from x0_BL for num_records records, every record_every steps ("plain" Glauber or
  "rejection_free"), written chunk by chunk (chunk_records records each) under `directory`
  with a checkpoint after each chunk: a killed call resumes after its last written chunk and
  continues bit for bit (the key schedule is fold_in(key, t)). Returns the whole trajectory
  (`Trajectory.load`). progress(steps): called after each chunk with the steps it ran."""
  from glauber import chains, rejection_free

  traj, ckpt = Trajectory(directory), checkpoints(directory)
  done, state = resume(ckpt, traj, chains.init_state(x0_BL))
  num_chunks = -(-num_records // chunk_records)
  if progress is not None and done:
    progress(min(num_records, done * chunk_records) * record_every)
  for chunk in range(done, num_chunks):
    R = min(chunk_records, num_records - chunk * chunk_records)
    if mode == "rejection_free":
      state, rec = rejection_free.run(
        key, model, spec, state, R, record_every, record_logprobs=record_logprobs
      )
    else:
      state, rec = chains.run(
        key, model, spec, state, R, record_every, record_logprobs=record_logprobs
      )
    steps_R = (chunk * chunk_records + 1 + np.arange(R)) * record_every
    traj.write(chunk, steps_R, rec.tokens_RBN, rec.logp_RBN)
    save(ckpt, chunk + 1, state)
    if progress is not None:
      progress(R * record_every)
  ckpt.close()
  return traj.load()
