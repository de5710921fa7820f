"""User errors and config checks: one clear line naming the key, the value and the fix.

Jobs validate their whole config in `validate(config)` before any model load and before the run
directory is touched; the entry points print a `UserError` as one line (no traceback) and exit 2.

  check_int(config, "num_chains", lo=1)
  check_float(config, "temperature", lo=0, inf_ok=True)
  check_choice(config, "mode", ("plain", "rejection_free", "auto"))
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Sequence


class UserError(ValueError):
  """A mistake in the user's input (config, paths, files): reported as one line."""


class ConfigError(UserError):
  """A config value out of range: `config.KEY=VALUE: what is allowed`."""

  def __init__(self, key: str, value: Any, allowed: str):
    self.key, self.value, self.allowed = key, value, allowed
    super().__init__(f"config.{key}={value!r}: {allowed}")


def get(config: Any, key: str) -> Any:
  """config's value at a dotted key ("train.batch_size")."""
  node = config
  for part in key.split("."):
    if part not in node:
      raise ConfigError(key, None, "missing from the config; add it (see the shipped configs/)")
    node = node[part]
  return node


def check(ok: bool, key: str, value: Any, allowed: str) -> None:
  if not ok:
    raise ConfigError(key, value, allowed)


def check_bool(config: Any, key: str) -> bool:
  v = get(config, key)
  check(isinstance(v, bool), key, v, "must be True or False")
  return v


def check_int(config: Any, key: str, lo: int | None = None, hi: int | None = None) -> int:
  """An integer in [lo, hi] (bounds inclusive, None = unbounded)."""
  v = get(config, key)
  ok = isinstance(v, int) and not isinstance(v, bool)
  ok = ok and (lo is None or v >= lo) and (hi is None or v <= hi)
  check(ok, key, v, f"must be an integer{_range(lo, hi)}")
  return v


def check_float(
  config: Any,
  key: str,
  lo: float | None = None,
  hi: float | None = None,
  *,
  lo_open: bool = False,
  hi_open: bool = False,
  inf_ok: bool = False,
) -> float:
  """A real number in the interval [lo, hi] ((lo, ...) with lo_open; inf allowed with inf_ok)."""
  v = get(config, key)
  ok = isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)
  if ok and math.isinf(v):
    ok = inf_ok and v > 0
  elif ok:
    ok = (lo is None or (v > lo if lo_open else v >= lo)) and (
      hi is None or (v < hi if hi_open else v <= hi)
    )
  lo_s = "(" if lo_open else "["
  hi_s = ")" if hi_open else "]"
  span = (
    ""
    if lo is None and hi is None
    else f" in {lo_s}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{hi_s}"
  )
  check(ok, key, v, f"must be a number{span}" + (" (inf allowed)" if inf_ok else ""))
  return float(v)


def check_choice(config: Any, key: str, choices: Sequence[Any]) -> Any:
  v = get(config, key)
  check(v in choices, key, v, f"must be one of {', '.join(repr(c) for c in choices)}")
  return v


def check_ints(config: Any, key: str, lo: int | None = None, hi: int | None = None) -> list[int]:
  """A non-empty sequence of integers, each in [lo, hi]."""
  v = get(config, key)
  ok = (
    isinstance(v, (list, tuple))
    and len(v) > 0
    and all(
      isinstance(x, int)
      and not isinstance(x, bool)
      and (lo is None or x >= lo)
      and (hi is None or x <= hi)
      for x in v
    )
  )
  check(ok, key, v, f"must be a non-empty list of integers{_range(lo, hi)}")
  return list(v)


def check_floats(
  config: Any, key: str, lo: float | None = None, *, lo_open: bool = False, inf_ok: bool = False
) -> list[float]:
  """A non-empty sequence of reals above lo (inf allowed with inf_ok)."""
  v = get(config, key)

  def ok_one(x):
    if not isinstance(x, (int, float)) or isinstance(x, bool) or math.isnan(x):
      return False
    if math.isinf(x):
      return inf_ok and x > 0
    return lo is None or (x > lo if lo_open else x >= lo)

  ok = isinstance(v, (list, tuple)) and len(v) > 0 and all(ok_one(x) for x in v)
  bound = "" if lo is None else f" {'>' if lo_open else '>='} {lo}"
  check(ok, key, v, f"must be a non-empty list of numbers{bound}")
  return [float(x) for x in v]


def check_multiple(config: Any, key: str, of: str) -> int:
  """config[key] a multiple of config[of] (positive integers, checked before, key >= of); the
  message names the two nearest multiples."""
  v, m = get(config, key), get(config, of)
  check(
    v % m == 0,
    key,
    v,
    f"must be a multiple of {of}={m} (nothing is rounded); use "
    f"{key}={v // m * m} or {(v // m + 1) * m}",
  )
  return v


def check_file(config: Any, key: str, *, optional: bool = False) -> str | None:
  """A path to an existing file (or empty when optional)."""
  v = get(config, key)
  if optional and not v:
    return None
  check(isinstance(v, str) and os.path.isfile(v), key, v, "no such file; give an existing path")
  return v


def reads_as_path(name: str) -> bool:
  """Whether a model name reads as a local path, never a hub id: it starts with . / ~, has two
  slashes, ends in .gguf, or its first component exists here."""
  path = Path(name).expanduser()
  return (
    path.suffix == ".gguf"
    or name.count("/") > 1
    or name.startswith((".", "/", "~"))
    or (len(path.parts) > 1 and Path(path.parts[0]).is_dir())
  )


def missing_path(path: str | os.PathLike) -> str:
  """'/abs/a/b does not exist' and, when the nearest existing parent holds names close to the
  missing one, '; did you mean /abs/a/c?' (unrelated files are not listed)."""
  import difflib

  full = Path(os.path.abspath(Path(path).expanduser()))
  text = f"{full} does not exist"
  parent = next((p for p in full.parents if p.is_dir()), None)
  if parent is None or parent == Path(full.anchor):
    return text
  wanted = full.relative_to(parent).parts[0]
  try:
    names = [e.name for e in parent.iterdir() if not e.name.startswith(".")]
  except OSError:
    return text
  near = difflib.get_close_matches(wanted, names, n=3, cutoff=0.6)
  if near:
    text += "; did you mean " + " or ".join(str(parent / n) for n in near) + "?"
  return text


def check_model_path(config: Any, key: str, presets: Sequence[str] = ("default",)) -> str:
  """A model key: a preset name, a hub id (looked up when it loads) or a local path, which must
  exist (a directory, or a .gguf file); "" is allowed (the job's default or off)."""
  v = get(config, key)
  check(isinstance(v, str), key, v, "must be a model directory, a Hugging Face id or ''")
  if v and v not in presets and reads_as_path(v):
    path = Path(v).expanduser()
    ok = path.is_dir() or (path.is_file() and path.suffix == ".gguf")
    check(
      ok,
      key,
      v,
      f"{missing_path(v)}; give a directory holding config.json and the weights, a .gguf "
      "file, or a Hugging Face id (owner/name)",
    )
  return v


def memory_bytes() -> int | None:
  """This machine's memory in bytes (MemTotal), or None where it cannot be read."""
  try:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  except (ValueError, OSError, AttributeError):
    return None


def check_memory(key: str, value: Any, need: float, what: str) -> None:
  """Refuses a size whose memory estimate `need` (bytes, a lower bound: `what` says of what)
  exceeds this machine's memory, before anything is allocated."""
  have = memory_bytes()
  if have is not None and need > have:
    raise ConfigError(
      key,
      value,
      f"needs at least {_gib(need)} of memory ({what}), over this machine's {_gib(have)}; "
      "use a smaller value",
    )


def _gib(n: float) -> str:
  return f"{n / 2**30:,.1f} GiB" if n < 2**40 else f"{n / 2**40:,.1f} TiB"


def read_text(path: str | os.PathLike, error: type[UserError] = UserError) -> str:
  """A UTF-8 text file, with universal newlines ("\\r\\n" and "\\r" read as "\\n"); invalid UTF-8
  raises `error` naming the file, the line and the byte."""
  raw = Path(path).read_bytes()
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError as e:
    line = raw.count(b"\n", 0, e.start) + 1
    column = e.start - raw.rfind(b"\n", 0, e.start)
    raise error(
      f"{path}, line {line}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at column "
      f"{column}); save the file as UTF-8"
    ) from None
  return text.replace("\r\n", "\n").replace("\r", "\n")


def read_lines(path: str | os.PathLike, error: type[UserError] = UserError) -> list[str]:
  """The lines of a UTF-8 text file (`read_text`), without their line ends."""
  lines = read_text(path, error).split("\n")
  return lines[:-1] if lines[-1] == "" else lines


def _range(lo, hi) -> str:
  if lo is None and hi is None:
    return ""
  if hi is None:
    return f" >= {lo}"
  if lo is None:
    return f" <= {hi}"
  return f" in [{lo}, {hi}]"
