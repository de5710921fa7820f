"""Bad input and interruptions from the command line: one line on stderr, no traceback, exit 2
(130 for Ctrl-C), nothing written (issue 41, defects 5, 6, 7 and 9). A second run in a directory
another process is running in is refused, naming that process, until that process ends."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import xla_flags
from harness import REPO

from gmlm import cli, runs
from gmlm.checks import UserError


def _env() -> dict:
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO), "XLA_FLAGS": xla_flags()}
  env.pop("GMLM_FAULT", None)
  return env


def sample(*args: str, timeout: float = 200) -> subprocess.CompletedProcess:
  return subprocess.run(
    [sys.executable, "sample.py", *args],
    cwd=REPO,
    env=_env(),
    capture_output=True,
    text=True,
    timeout=timeout,
  )


@pytest.mark.parametrize(
  "args, line",
  [
    (["--config.num_chains=abc"], "error: config.num_chains=abc: must be an integer"),
    (["--config.temperature=warm"], "error: config.temperature=warm: must be a number"),
    (["--config.num_chains=100000000"], "error: config.num_chains=100000000: needs at least"),
    (["--config.num_chains=0", "--print_config"], "error: config.num_chains=0: must be an"),
    (["--config=README.md"], "error: --config=README.md: SyntaxError: "),
    (["--workdir", "/proc/gmlm_run"], "error: --workdir /proc/gmlm_run: no directory can be made"),
  ],
  ids=["not an int", "not a float", "too many chains", "print_config", "syntax error", "/proc"],
)
def test_a_bad_input_is_one_line_exit_2_and_nothing_written(args, line, tmp_path):
  workdir = tmp_path / "run"
  config = [] if any(a.startswith("--config=") for a in args) else ["--config=configs/glauber.py"]
  full = [*config, "--workdir", str(workdir), *args]
  result = sample(*full)
  assert result.returncode == 2, result.stderr[-3000:]
  assert result.stderr.startswith(line) and result.stderr.count("\n") == 1, result.stderr[-3000:]
  assert not workdir.exists()
  if "--print_config" in args:  # the overridden value is marked, then validated
    assert re.search(r"^  num_chains = 0 \(set\)", result.stdout, re.M), result.stdout
    assert re.search(r"^  seed = 0( +#.*)?$", result.stdout, re.M), result.stdout


_HOLDER = """
import sys, time
from gmlm import runs
runs.lock(sys.argv[1])
print("locked", flush=True)
time.sleep(120)
"""


def test_a_second_run_in_a_busy_workdir_is_refused_naming_the_first_process(tmp_path):
  from configs.ising_hitting import get_config

  config, workdir = get_config(), tmp_path / "run"
  workdir.mkdir()
  holder = subprocess.Popen(
    [sys.executable, "-c", _HOLDER, str(workdir)], cwd=REPO, env=_env(), stdout=subprocess.PIPE
  )
  try:
    assert holder.stdout.readline() == b"locked\n"
    with pytest.raises(UserError, match=rf"in use by another run \(process {holder.pid}\)"):
      cli.prepare(config, str(workdir), "sample.py")
    with pytest.raises(UserError, match=rf"process {holder.pid}"):  # the race past prepare too
      runs.RunDir(workdir, config)
    assert sorted(p.name for p in workdir.iterdir()) == [runs.LOCK]
  finally:
    holder.kill()
    holder.wait()
  cli.prepare(config, str(workdir), "sample.py")  # the kernel released the dead process's lock
  runs.RunDir(workdir, config)
  runs.unlock_all()


@pytest.mark.slow  # a real run, interrupted
def test_ctrl_c_is_one_line_saying_where_and_how_to_resume(splade_dir, tmp_path):
  workdir = tmp_path / "run"
  args = ["--config", "configs/glauber.py", "--workdir", str(workdir)]
  args += [f"--config.model={splade_dir}", "--config.embedding_model=", "--config.num_chains=2"]
  args += ["--config.num_steps=100000", "--config.record_every=10", "--config.chunk_records=1"]
  # SIGINT as a terminal delivers it, even when this suite was started in the background (where
  # the shell set it to be ignored, and a child would inherit that)
  interruptible = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
  proc = subprocess.Popen(
    [sys.executable, "sample.py", *args],
    cwd=REPO,
    env=_env(),
    stderr=subprocess.PIPE,
    text=True,
    preexec_fn=interruptible,
  )
  deadline = time.time() + 180
  while not (workdir / "metrics.jsonl").is_file() and time.time() < deadline:
    time.sleep(0.2)  # a record is written: the chains are running
  proc.send_signal(signal.SIGINT)
  _, err = proc.communicate(timeout=120)
  assert proc.returncode == 130, err[-3000:]
  assert "Traceback" not in err, err[-3000:]
  last = err.strip().splitlines()[-1]
  assert last.startswith("interrupted at step ") and last.endswith(
    "; rerun the same command to resume"
  ), err[-3000:]


_DAMAGED_RESTORES = """
import pathlib, sys
import jax.numpy as jnp
from gmlm.checkpoints import Checkpoints

root = pathlib.Path(sys.argv[1])
tree = {f"w{i}": jnp.arange(20000.0 * (i + 1)).reshape(-1, 100) for i in range(30)}
for attempt in range(6):  # the tracebacks came in most runs of a few attempts, not all
  d = root / str(attempt)
  c = Checkpoints(d)
  c.save(1, {"state": tree})
  c.save(2, {"state": tree})
  c.close()
  big = max((f for f in (d / "2").rglob("*") if f.is_file()), key=lambda f: f.stat().st_size)
  big.write_bytes(big.read_bytes()[: big.stat().st_size // 3])
  c = Checkpoints(d)
  assert c.restore_latest({"state": tree})[0] == 1
  c.close()
"""


def test_a_truncated_checkpoint_is_skipped_without_event_loop_tracebacks(tmp_path):
  """orbax closed its event loop while TensorStore still finished the other reads of a damaged
  checkpoint: "Event loop is closed" tracebacks around the one-line warning (issue 41, 7)."""
  result = subprocess.run(
    [sys.executable, "-c", _DAMAGED_RESTORES, str(tmp_path)],
    cwd=REPO,
    env=_env(),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stderr.count("is unreadable") == 6, result.stderr[-3000:]
  assert "Event loop is closed" not in result.stderr, result.stderr[:3000]
  assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr
