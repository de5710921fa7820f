"""The persistent compilation cache: a resumed, repeated or evaluated run loads its compiled
programs from disk instead of compiling them again (PaDIR's paper-size training step took
85-116 s to compile on an H100).

  compile_cache.enable(config)   # gmlm.cli.prepare does it for every job; the suite calls it too

The directory is `config.compilation_cache_dir` when the config has that key ("" turns the
cache off), else JAX_COMPILATION_CACHE_DIR when it is set, else `default_dir()`:
$XDG_CACHE_HOME/gmlm/jax (~/.cache/gmlm/jax without XDG_CACHE_HOME). jax keys each program by
its HLO, the jax version and the device, so runs of any config share one directory; it stores
programs that took at least jax_persistent_cache_min_compile_time_secs to compile (jax's
default: 1 s; JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS sets it). The directory is fixed at
the process's first compile after enable().
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import jax

from gmlm import checks

KEY = "compilation_cache_dir"


def default_dir() -> Path:
  """$XDG_CACHE_HOME/gmlm/jax, or ~/.cache/gmlm/jax."""
  home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return Path(home) / "gmlm" / "jax"


def directory(config: Any = None) -> str | None:
  """The cache directory a config asks for (module docstring); None: no cache."""
  if config is not None and hasattr(config, "get") and config.get(KEY) is not None:
    value = config.get(KEY)
    checks.check(
      isinstance(value, str),
      KEY,
      value,
      "must be a directory path, or '' to compile without the persistent cache",
    )
    return os.path.expanduser(value) or None
  return os.environ.get("JAX_COMPILATION_CACHE_DIR") or str(default_dir())


def enable(config: Any = None) -> str | None:
  """Points jax's persistent compilation cache at directory(config); returns it (None: off).
  A directory that cannot be made leaves the cache off, saying so once, and the job runs."""
  path = directory(config)
  if path is not None:
    try:
      os.makedirs(path, exist_ok=True)
    except OSError as e:
      logging.warning("compilation cache off: cannot make %s (%s)", path, e)
      path = None
  jax.config.update("jax_compilation_cache_dir", path)
  return path
