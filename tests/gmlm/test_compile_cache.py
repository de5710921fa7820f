"""gmlm.compile_cache: every job's compiled programs persist on disk, so a second process running
the same jitted function loads it instead of compiling it (jax's cache_hits event counts it)."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import ml_collections
import pytest

from configs import padir_synthetic
from gmlm import cli, compile_cache
from gmlm.checks import ConfigError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CHILD = """
import sys
import jax, jax.numpy as jnp, ml_collections
from gmlm import compile_cache
hits = []
jax.monitoring.register_event_listener(
  lambda event, **kw: hits.append(event) if event.endswith("cache_hits") else None
)
compile_cache.enable(ml_collections.ConfigDict({"compilation_cache_dir": sys.argv[1]}))
f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
print(float(f(jnp.arange(64.0).reshape(8, 8))), len(hits))
"""


def _child(directory) -> tuple[float, int]:
  env = {**os.environ, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PLATFORMS": "cpu"}
  env["PYTHONPATH"] = REPO
  proc = subprocess.run(
    [sys.executable, "-c", _CHILD, str(directory)],
    env=env, capture_output=True, text=True, timeout=120, cwd=REPO,
  )  # fmt: skip
  assert proc.returncode == 0, proc.stderr[-3000:]
  value, hits = proc.stdout.split()
  return float(value), int(hits)


def test_a_second_process_loads_the_program_the_first_compiled(tmp_path):
  cache = tmp_path / "cache"
  first, hits_first = _child(cache)
  entries = os.listdir(cache)
  assert hits_first == 0 and entries, entries
  second, hits_second = _child(cache)
  assert hits_second >= 1 and second == first
  assert sorted(os.listdir(cache)) == sorted(entries)  # nothing compiled again


def test_the_directory_is_the_config_s_else_the_user_cache_home(tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
  config = ml_collections.ConfigDict({"seed": 0})
  assert compile_cache.directory(config) == str(tmp_path / "xdg" / "gmlm" / "jax")
  assert compile_cache.directory(None) == str(tmp_path / "xdg" / "gmlm" / "jax")
  config.compilation_cache_dir = str(tmp_path / "mine")
  assert compile_cache.directory(config) == str(tmp_path / "mine")
  config.compilation_cache_dir = ""
  assert compile_cache.directory(config) is None
  with pytest.raises(ConfigError, match="compilation_cache_dir=3"):
    compile_cache.directory(ml_collections.ConfigDict({"compilation_cache_dir": 3}))


def test_every_job_sets_the_cache_where_its_config_is_prepared(tmp_path):
  before = jax.config.jax_compilation_cache_dir
  config = padir_synthetic.get_config()
  config.compilation_cache_dir = str(tmp_path / "cache")
  try:
    cli.prepare(config, str(tmp_path / "run"), "train.py")
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "cache")
    assert os.path.isdir(tmp_path / "cache") and not os.path.exists(tmp_path / "run")
  finally:
    jax.config.update("jax_compilation_cache_dir", before)
