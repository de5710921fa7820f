"""Beyond one process: two processes on 127.0.0.1 joined by jax.distributed (CPU collectives:
gloo, jax 0.10's default), one CPU device each, against one process with two simulated devices.

  JAX_COORDINATOR_ADDRESS=127.0.0.1:PORT JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=i \\
    python train.py --config ... --config.mesh.data=-1 ...      # i = 0 and 1, same command
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest
from conftest import xla_flags
from harness import REPO

SCRIPT = pathlib.Path(__file__).with_name("two_processes.py")


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env(**extra) -> dict:
  env = {
    **os.environ,
    "JAX_PLATFORMS": "cpu",
    **extra,
    "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]),
  }
  if "XLA_FLAGS" not in extra:
    env["XLA_FLAGS"] = xla_flags()  # one device, compiled as the suite compiles
  if "GMLM_FAULT" not in extra:
    env.pop("GMLM_FAULT", None)
  return env


def run_two(*args: str, timeout: float = 400) -> None:
  """The script in two processes joined through a free port; both must exit 0 in time."""
  port = _free_port()
  procs = [
    subprocess.Popen(
      [sys.executable, str(SCRIPT), *args],
      cwd=REPO,
      text=True,
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      env=_env(
        JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(i)
      ),
    )
    for i in range(2)
  ]
  try:
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  for i, (p, out) in enumerate(zip(procs, outs)):
    assert p.returncode == 0, f"process {i} exited {p.returncode}:\n{out[-4000:]}"


def run_one(*args: str, timeout: float = 400) -> None:
  """The script alone, with two simulated devices (the same global mesh)."""
  result = subprocess.run(
    [sys.executable, str(SCRIPT), *args],
    cwd=REPO,
    text=True,
    capture_output=True,
    timeout=timeout,
    env=_env(XLA_FLAGS=xla_flags(2)),
  )
  assert result.returncode == 0, result.stderr[-4000:]


@pytest.mark.slow  # three interpreters, each loading SPLADE-tiny and compiling the chains
def test_glauber_chains_split_over_two_processes_equal_one_process(splade_dir, tmp_path):
  (tmp_path / "two").mkdir()
  (tmp_path / "one").mkdir()
  run_two("chains", str(splade_dir), str(tmp_path / "two"))
  run_one("chains", str(splade_dir), str(tmp_path / "one"))
  two, one = np.load(tmp_path / "two" / "chains.npz"), np.load(tmp_path / "one" / "chains.npz")
  assert (int(two["processes"]), int(two["devices"])) == (2, 2)
  assert (int(one["processes"]), int(one["devices"])) == (1, 2)
  np.testing.assert_array_equal(two["tokens_RBN"], one["tokens_RBN"])
  assert int(two["t"]) == int(one["t"])


@pytest.mark.slow  # two PaDIR trainings (three interpreters, ~70 s of CPU each)
def test_padir_training_on_a_data_mesh_over_two_processes_equals_one_process(toy_corpus, tmp_path):
  """Both runs compile one SPMD program for the same 2-device data mesh and read the same global
  batches row for row; their only cross-device reductions add two operands (gradients, metrics),
  and a + b == b + a in IEEE arithmetic, so in-process and gloo all-reduces give the same bits:
  metrics and parameters are compared exactly. The two processes run first, on a fresh copy of
  the corpus: process 0 trains the vocabulary and builds the tfds cache before process 1 reads
  them (both making them at once raced on the same files)."""
  import shutil

  from harness import metrics_lines

  corpus = tmp_path / "corpus"
  corpus.mkdir()
  for split in ("train", "valid", "test"):
    shutil.copy(pathlib.Path(toy_corpus) / f"{split}.tsv", corpus)
  # ~7 minutes when the 2 cores are shared with other work: XLA compiles dominate.
  run_two("padir", str(corpus), str(tmp_path / "two"), timeout=900)
  run_one("padir", str(corpus), str(tmp_path / "one"), timeout=900)
  two_lines, one_lines = metrics_lines(tmp_path / "two"), metrics_lines(tmp_path / "one")
  assert len(one_lines) == 3  # train at steps 2 and 4, valid at step 4
  assert two_lines == one_lines
  two, one = np.load(tmp_path / "two" / "params.npz"), np.load(tmp_path / "one" / "params.npz")
  assert sorted(two.files) == sorted(one.files)
  for k in one.files:
    np.testing.assert_array_equal(two[k], one[k], err_msg=k)
