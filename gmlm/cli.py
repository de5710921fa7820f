"""The command line shared by the two entry points.

  python sample.py --config configs/NAME.py --workdir DIR [--config.key=value ...]  # measure
  python train.py  --config configs/NAME.py --workdir DIR [--config.key=value ...]  # fit, train

A config names its job by module (`config.job = "glauber.jobs.sample"`); the module defines
`ENTRY_POINT` ("sample.py" or "train.py"), `run(config, workdir)` and optionally
`validate(config)` (and `RESUMABLE_KEYS`, the config keys that may change between the legs of
one run; `ADDED_KEYS`, options added after runs had begun, which a run begun before them resumes
without: `gmlm.runs.as_begun`). Before anything is loaded or written, the entry point checks that the job
is one of its own, validates the whole config and checks the run directory
(`gmlm.runs.check_workdir`); a user error is printed as one line and exits 2. Ctrl-C prints
"interrupted at step S; rerun the same command to resume" and exits 130.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import io
import itertools
import os
import re
import sys
import textwrap
import tokenize
from pathlib import Path
from typing import Any

from gmlm.checks import UserError

ENTRY_POINTS = ("sample.py", "train.py")
_HELP = ("-h", "--help", "-help", "--helpshort", "--helpfull", "-?")


def _fail(message: str) -> None:
  print(f"error: {message}", file=sys.stderr)
  raise SystemExit(2)


def job_entry_point(job: str) -> str | None:
  """ENTRY_POINT of a job module, read from its source (the module is not imported)."""
  try:
    spec = importlib.util.find_spec(job)
  except (ImportError, ValueError):
    return None
  if spec is None or not spec.origin or not spec.origin.endswith(".py"):
    return None
  tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
  for node in tree.body:
    if isinstance(node, ast.Assign) and any(
      getattr(t, "id", None) == "ENTRY_POINT" for t in node.targets
    ):
      return ast.literal_eval(node.value)
  return None


def resolve_job(config: Any, entry: str):
  """The job module of `config`, checked to belong to `entry`."""
  job = config.get("job") if hasattr(config, "get") else None
  if not job or not isinstance(job, str):
    raise UserError(
      "config.job is missing: a config names its job module, e.g. "
      "config.job = 'glauber.jobs.sample'."
    )
  if ":" in job:
    raise UserError(
      f"config.job={job!r}: name the job module only (e.g. "
      f"{job.split(':')[0]!r}); its function is always run(config, workdir)."
    )
  owner = job_entry_point(job)
  if owner is None:
    raise UserError(
      f"config.job={job!r} is not a job module (a module with ENTRY_POINT and "
      "run(config, workdir)); see the shipped configs/."
    )
  if owner != entry:
    raise UserError(
      f"config.job={job!r} is a {_kind(owner)} job: run it with "
      f"`python {owner} --config ... --workdir ...`, not {entry}."
    )
  return importlib.import_module(job)


def _kind(entry: str) -> str:
  return "training/fitting" if entry == "train.py" else "sampling/measurement"


def prepare(config: Any, workdir: str, entry: str):
  """Resolves and validates the job and checks the run directory, writing nothing there; points
  jax's persistent compilation cache at the config's directory (gmlm.compile_cache)."""
  from gmlm import compile_cache, runs

  if not workdir:
    raise UserError(
      "--workdir is required: the directory where config.json, results.json, "
      "figures and report.md are written."
    )
  module = resolve_job(config, entry)
  validate = getattr(module, "validate", None)
  if validate is not None:
    validate(config)
  added = getattr(module, "ADDED_KEYS", {})
  runs.as_begun(workdir, config, added)  # a run begun before an option resumes as it began
  runs.check_workdir(workdir, config, getattr(module, "RESUMABLE_KEYS", ()), added)
  compile_cache.enable(config)
  return module


def run(config: Any, workdir: str, entry: str) -> Any:
  """Runs config's job in workdir as `entry` would (the entry points' body, for tests)."""
  from gmlm import runs

  module = prepare(config, workdir, entry)
  try:
    return module.run(config, workdir)
  finally:
    runs.unlock_all()


def config_docs(configs_dir: Path, entry: str) -> list[tuple[str, str]]:
  """(config file, the first sentence of its header) for the configs whose job belongs to
  `entry`."""
  out = []
  for path in sorted(configs_dir.glob("*.py")):
    if path.name.startswith("_"):
      continue
    job = _config_job(path)
    if job and job_entry_point(job) == entry:
      out.append((f"configs/{path.name}", purpose(path)))
  return out


def purpose(path: Path) -> str:
  """The first sentence of a config file's header (its docstring, else its leading comments),
  however many lines it spans."""
  text = path.read_text(encoding="utf-8")
  doc = ast.get_docstring(ast.parse(text)) or "\n".join(
    line.lstrip("# ")
    for line in itertools.takewhile(lambda x: x.startswith("#"), text.splitlines())
  )
  paragraph = " ".join(doc.strip().split("\n\n")[0].split())
  for match in re.finditer(r"[.!?](?=\s|$)", paragraph):  # not inside parentheses ("App. L")
    head = paragraph[: match.end()]
    if head.count("(") == head.count(")"):
      return head
  return paragraph


def _config_job(path: Path, depth: int = 0) -> str | None:
  """The job module a config file names (`c.job = "..."`), read without importing it; a config
  that extends another (`from configs import base`) asks that one, through any chain."""
  if not path.is_file() or depth > 8:
    return None
  tree = ast.parse(path.read_text(encoding="utf-8"))
  for node in ast.walk(tree):
    if (
      isinstance(node, ast.Assign)
      and isinstance(node.value, ast.Constant)
      and any(isinstance(t, ast.Attribute) and t.attr == "job" for t in node.targets)
    ):
      return node.value.value
  for node in tree.body:
    if isinstance(node, ast.ImportFrom) and node.module == "configs":
      return _config_job(path.parent / f"{node.names[0].name}.py", depth + 1)
  return None


def help_text(entry: str, configs_dir: Path) -> str:
  other = "train.py" if entry == "sample.py" else "sample.py"
  lines = [
    f"usage: python {entry} --config configs/NAME.py --workdir DIR [--config.KEY=VALUE ...]",
    "",
    f"Runs a {_kind(entry)} config; every run writes DIR/config.json, results.json, "
    "figures and report.md.",
    "",
    "flags:",
    "  --config PATH          a config file (its header gives the command and the result)",
    "  --workdir DIR          the run directory (a killed run resumes there)",
    "  --config.KEY=VALUE     override a config field (e.g. --config.temperature=0.5)",
    "  --config X.py --help   X's fields, their defaults and comments",
    "  --print_config         print the config with the overrides applied, then stop",
    "",
    f"configs for {entry}:",
  ]
  docs = config_docs(configs_dir, entry)
  width = max((len(name) for name, _ in docs), default=0)
  for name, doc in docs:
    lines += textwrap.wrap(
      doc,
      100,
      initial_indent=f"  {name.ljust(width)}  ",
      subsequent_indent=" " * (width + 4),
      break_on_hyphens=False,
    ) or [f"  {name}"]
  lines += [] if docs else ["  (none)"]
  lines += ["", f"({_kind(other)} configs run with {other}; see its --help)"]
  return "\n".join(lines)


def _config_path(argv: list[str]) -> str | None:
  """The --config file (the last one given, as absl reads it)."""
  path = None
  for i, a in enumerate(argv):
    if a.startswith("--config="):
      path = a.split("=", 1)[1]
    elif a == "--config" and i + 1 < len(argv):
      path = argv[i + 1]
  return path


def main(entry: str, argv: list[str] | None = None) -> None:
  """The entry point `entry` ("sample.py" or "train.py")."""
  argv = list(sys.argv if argv is None else argv)
  configs_dir = Path(argv[0]).resolve().parent / "configs"
  path = _config_path(argv)
  if any(a in _HELP for a in argv[1:]) or len(argv) == 1:
    if path is not None and os.path.isfile(path.split(":")[0]):  # that config's fields
      print(config_listing(path, _load_config(path, entry)))
      raise SystemExit(0)
    print(help_text(entry, configs_dir))
    raise SystemExit(0 if len(argv) > 1 else 2)
  if path is None:
    _fail(
      f"--config is required: python {entry} --config configs/NAME.py --workdir DIR "
      f"(python {entry} --help lists the configs)."
    )
  if not os.path.isfile(path.split(":")[0]):
    _fail(f"--config={path}: no such file (python {entry} --help lists the configs).")
  print_config = "--print_config" in argv
  argv = [a for a in argv if a != "--print_config"]
  os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found" line
  from absl import app, flags, logging
  from ml_collections import config_flags

  config_flag = config_flags.DEFINE_config_file("config", None, "Path to a configs/*.py file.")
  workdir_flag = flags.DEFINE_string("workdir", None, "The run directory.")

  def _main(rest):
    logging.set_verbosity(logging.WARNING)  # orbax and tfds log every file operation at INFO
    logging.get_absl_logger().addFilter(_not_interrupted)
    if len(rest) > 1:
      _fail(f"unexpected arguments {rest[1:]}; flags look like --config.KEY=VALUE.")
    config, workdir = config_flag.value, workdir_flag.value
    if print_config:  # the values as the run would see them, checked as the run would check them
      print(config_listing(path, config, overridden(argv)))
      try:
        module = resolve_job(config, entry)
        getattr(module, "validate", lambda config: None)(config)
      except UserError as e:
        _fail(str(e))
      return
    from gmlm import runs

    try:
      module = prepare(config, workdir, entry)
      module.run(config, workdir)
    except UserError as e:
      _fail(str(e))
    runs.unlock_all()
    written = ", ".join(sorted(p for p in os.listdir(workdir) if not p.startswith(".")))
    # stderr: a job may write its product to stdout (translations), and this line is a note
    print(f"Run directory {workdir}/: {written}", file=sys.stderr)

  try:
    app.run(_main, argv=argv, flags_parser=_parse_flags)
  except UserError as e:
    _fail(str(e))
  except KeyboardInterrupt:  # Ctrl-C: what is on disk stays, and the same command resumes
    _interrupted()


def _not_interrupted(record) -> bool:
  """A log record that is not Ctrl-C's traceback (orbax logs one when it stops a save's wait)."""
  return not (record.exc_info and record.exc_info[0] is KeyboardInterrupt)


def _interrupted() -> None:
  """One line for Ctrl-C, then exit 130 at once: a kill at any point resumes (tests/faults), and
  the interpreter's own shutdown under live checkpoint threads could crash or print tracebacks."""
  from gmlm import runs

  tqdm = sys.modules.get("tqdm")
  for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
    bar.close()  # a progress bar's last repaint, before the line, not after it
  at = "" if runs.last_step is None else f" at step {runs.last_step}"
  print(f"interrupted{at}; rerun the same command to resume", file=sys.stderr)
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(130)


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's parser, with a bad flag or config override reported as one line."""
  from absl import flags

  entry = Path(argv[0]).name
  try:
    return flags.FLAGS(argv)
  except (AttributeError, KeyError) as e:  # an override of a key the config does not have
    path = _config_path(argv)
    _fail(unknown_field(_load_config(path, entry), argv) or f"{_first_line(e)} ({path})")
  except (flags.Error, ValueError, TypeError) as e:
    _fail(
      conversion_error(str(e))
      or f"{_first_line(e)} (python {entry} --help lists the flags and configs)."
    )
  except Exception as e:  # the config file itself (a syntax error, --config README.md)
    _fail(f"--config={_config_path(argv)}: {type(e).__name__}: {_first_line(e)}")
  return []


_KINDS = {"int": "an integer", "float": "a number", "bool": "True or False"}


def conversion_error(message: str) -> str | None:
  """`config.num_chains=abc: must be an integer` for absl's own message when an override's
  value does not convert to the field's type (None for any other message)."""
  m = re.match(r"flag --config\.([\w.]+)=(.*?): (.*)", " ".join(message.split()))
  if not m:
    return None
  key, value, why = m.groups()
  kind = next((k for k in _KINDS if f"for {k}()" in why or f"{k}()" in why), None)
  if kind is None and "could not convert string to float" in why:
    kind = "float"
  if kind is None and re.search(r"\bbool", why):
    kind = "bool"
  if kind is None:
    return f"config.{key}={value}: {why}"
  return f"config.{key}={value}: must be {_KINDS[kind]}"


def overridden(argv: list[str]) -> set[str]:
  """The dotted keys a command line sets (--config.KEY=VALUE)."""
  return {
    a[len("--config.") :].split("=", 1)[0] for a in argv if a.startswith("--config.") and "=" in a
  }


def _first_line(e: Exception) -> str:
  return " ".join(str(e).split())


# --------------------------------------------------------------------------------------------
# A config's fields: defaults, comments, and the nearest name to a misspelt one


def _load_config(path: str, entry: str):
  """get_config() of a config file (`X.py` or `X.py:ARG`), as --config loads it."""
  file, _, arg = path.partition(":")
  root = str(Path(file).resolve().parent.parent)  # `from configs import base` needs the root
  if root not in sys.path:
    sys.path.insert(0, root)
  try:
    spec = importlib.util.spec_from_file_location(f"_config_{Path(file).stem}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg) if arg else module.get_config()
  except Exception as e:  # the user's file: any error is theirs, in one line
    _fail(f"--config={path}: {type(e).__name__}: {_first_line(e)}")


def flat_fields(config, prefix: str = "") -> list[tuple[str, Any]]:
  """(dotted key, value) of every leaf of a ConfigDict, groups included as their own keys."""
  out = []
  for key in config.keys():
    value = config[key]
    if hasattr(value, "keys") and hasattr(value, "to_dict"):
      out += [(prefix + key, None)] + flat_fields(value, f"{prefix}{key}.")
    else:
      out.append((prefix + key, value))
  return out


def unknown_field(config, argv: list[str]) -> str | None:
  """`the config has no field 'temprature'; did you mean 'temperature'?` for the first
  --config.KEY override that names no field (None if every one does)."""
  known = [k for k, _ in flat_fields(config)]
  for a in argv:
    if not a.startswith("--config."):
      continue
    parts = a[len("--config.") :].split("=", 1)[0].split(".")
    node = config
    for i, part in enumerate(parts):
      if not hasattr(node, "keys"):
        break  # inside a value (a tuple index): absl's own error applies
      if part in node:
        node = node[part]
        continue
      key = ".".join(parts[: i + 1])
      near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
      hint = f"did you mean {near[0]!r}?" if near else "--help with --config lists its fields."
      return f"the config has no field {key!r}; {hint}"
  return None


def _dotted(node: ast.AST) -> tuple[str, list[str]] | None:
  """`config.data.x` as ("config", ["data", "x"]); None for anything but a name's attributes."""
  parts = []
  while isinstance(node, ast.Attribute):
    parts.append(node.attr)
    node = node.value
  return (node.id, parts[::-1]) if isinstance(node, ast.Name) else None


def assignment_comments(path: Path) -> dict[int, tuple[str, str]]:
  """{each line of a field assignment in one config file: (dotted key, its comment, "" if none)}.
  A field's comment is the one on its assignment's lines, else the comment lines right above
  it; after `d = config.data`, `d.x` is the key `data.x`."""
  text = path.read_text(encoding="utf-8")
  comments = {
    tok.start[0]: tok.string.lstrip("#").strip()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline)
    if tok.type == tokenize.COMMENT
  }
  lines = text.splitlines()

  def comment_of(node: ast.stmt) -> str:
    on = [comments[i] for i in range(node.lineno, node.end_lineno + 1) if i in comments]
    above, i = [], node.lineno - 1
    while not on and i >= 1 and lines[i - 1].lstrip().startswith("#"):
      above.append(comments[i])
      i -= 1
    return " ".join(on or above[::-1])

  out: dict[int, tuple[str, str]] = {}
  aliases: dict[str, list[str]] = {}  # d -> ["data"] after `d = config.data`
  assigns = [n for n in ast.walk(ast.parse(text)) if isinstance(n, (ast.Assign, ast.AugAssign))]
  for node in sorted(assigns, key=lambda n: n.lineno):
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    for target in targets:
      if isinstance(target, ast.Name):
        source = _dotted(node.value) if isinstance(node, ast.Assign) else None
        if source and source[1]:
          aliases[target.id] = aliases.get(source[0], []) + source[1]
        else:
          aliases.pop(target.id, None)
        continue
      dotted = _dotted(target)
      if dotted and dotted[1]:
        key = ".".join(aliases.get(dotted[0], []) + dotted[1])
        for line in range(node.lineno, node.end_lineno + 1):
          out[line] = (key, comment_of(node))
  return out


def field_comments(path: Path, arg: str = "") -> dict[str, str]:
  """{dotted key: comment} of a config: each field's comment is the one of the assignment that
  set it last while get_config() ran, in this file or a config it extends (`from configs
  import base`); a field set again without a comment has none, not its base's."""
  if not path.is_file():
    return {}
  folder = path.resolve().parent
  tables: dict[str, dict[int, tuple[str, str]]] = {}
  last: dict[str, str] = {}

  def trace(frame, event, _arg):
    file = frame.f_code.co_filename
    if Path(file).parent != folder:
      return None
    if event == "line":
      if file not in tables:
        tables[file] = assignment_comments(Path(file))
      hit = tables[file].get(frame.f_lineno)
      if hit:
        last[hit[0]] = hit[1]
    return trace

  root = str(folder.parent)  # `from configs import base` needs the root
  if root not in sys.path:
    sys.path.insert(0, root)
  spec = importlib.util.spec_from_file_location(f"_config_{path.stem}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  previous = sys.gettrace()
  sys.settrace(trace)
  try:
    module.get_config(arg) if arg else module.get_config()
  finally:
    sys.settrace(previous)
  return {key: comment for key, comment in last.items() if comment}


def _show(value: Any) -> str:
  if hasattr(value, "get") and type(value).__name__ == "FieldReference":
    value = value.get()
  text = repr(value)
  return text if len(text) <= 60 else text[:57] + "..."


def config_listing(path: str, config, overridden: set[str] = frozenset()) -> str:
  """A config's fields with their values (the file's defaults, or with the overrides applied,
  each marked `(set)`) and the comment each carries in its file."""
  file, _, arg = path.partition(":")
  file = Path(file)
  comments = field_comments(file, arg)
  rows = [
    (k, "" if v is None else f" = {_show(v)}" + (" (set)" if k in overridden else ""))
    for k, v in flat_fields(config)
  ]
  width = max((len(k) + len(v) for k, v in rows), default=0) + 2
  lines = textwrap.wrap(f"{path}: {purpose(file)}", 100, subsequent_indent="  ")
  lines += ["", "fields (override with --config.KEY=VALUE):"]
  for key, value in rows:
    left = f"  {key}{value}" if value else f"  {key}:"
    note = comments.get(key)
    lines.append(f"{left.ljust(min(width, 60))}  # {note}" if note else left)
  return "\n".join(lines)
