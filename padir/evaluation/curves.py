"""Training curves and a report from run directories' metrics.jsonl.

  python -m padir.evaluation.curves runs/padir_bible_en_es runs/padir_bible_en_es_ar \
      runs/padir_bible_en_es_distill --out runs/padir_bible_curves.png

One figure, three panels over the training step: training loss (token cross-entropy, plus the
length loss for PaDIR), validation token loss, validation BLEU; one line per run. Training
(padir.training.loop.fit) writes WORKDIR/curves.png and WORKDIR/report.md at the end of every run.

    python -m padir.evaluation.curves --minutes runs/padir_bible_en_es_ar runs/padir_bible_en_es_recipe         --out runs/padir_bible_en_es_minutes.png

`--minutes`: validation BLEU against the runs' wall-clock minutes instead (issue 26: a recipe
must learn at AR's pace in time, not in steps), with the length accuracy (exact and within 2
tokens) beside it for PaDIR runs. The minutes of a step are the run's clock there (its records'
wall_seconds, padir.training.throughput.RunClock: every leg's time, its start-up included, a
killed leg's steps past its last checkpoint once; not the time between legs); for a run begun
before the clock (2026-11-30), the sum of the logged intervals up to it (each log_every /
steps_per_second).

    python -m padir.evaluation.curves --cpu runs/padir_family/vos_fertile/ar \
        runs/padir_family/vos_fertile/dag --labels "AR,DAG" --out vos_fertile_cpu.png

`--cpu`: the same against the runs' CPU minutes (user + system, every leg: the records'
cpu_seconds), the axis of a PaDIR model's "no more training CPU than the AR"; a run without that
clock on every record is refused.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, Sequence

from gmlm.runs import RunDir

WALL, CPU = "wall_seconds", "cpu_seconds"  # the run's clock (padir.training.throughput)
DATA_REPORT = "data.json"  # the train split's pair counts (padir.training.loop.check_data)


def dropped_line(counts: dict[str, int]) -> str:
  """ "dropped D of N pairs longer than max_source_length=S / max_target_length=T tokens"."""
  return (
    f"dropped {counts['too_long']} of {counts['total']} pairs longer than "
    f"max_source_length={counts['max_source_length']} / "
    f"max_target_length={counts['max_target_length']} tokens"
  )


def read_metrics(workdir: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
  """(training records, evaluation records) of a run, one per step (the last one written)."""
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path} does not exist: {workdir!r} is not a training run directory")
  train, evals = {}, {}
  with open(path, encoding="utf-8") as f:
    for line in f:
      if not line.strip():
        continue
      r = json.loads(line)
      (train if "train_loss" in r else evals)[r["step"]] = r
  return [train[k] for k in sorted(train)], [evals[k] for k in sorted(evals)]


def wall_clock_minutes(
  train: Sequence[dict[str, Any]], evals: Sequence[dict[str, Any]] = ()
) -> dict[int, float]:
  """{step: minutes the run had trained} at each record (read_metrics' two lists): the clock
  the records carry (a step's evaluation record, written last, wins), or for a run without it
  on every record, the logged intervals summed: (step - previous step) / steps_per_second."""
  if train and all(WALL in r for r in [*train, *evals]):
    return {r["step"]: r[WALL] / 60.0 for r in [*train, *evals]}
  out, total, previous = {}, 0.0, 0
  for r in train:
    total += (r["step"] - previous) / r["steps_per_second"] / 60.0
    out[r["step"]] = total
    previous = r["step"]
  return out


def cpu_minutes(
  train: Sequence[dict[str, Any]], evals: Sequence[dict[str, Any]], workdir: str = "the run"
) -> dict[int, float]:
  """{step: CPU minutes (user + system, every leg) the run had spent} at each record, from the
  clock the records carry; a run without it on every record (begun before the clock) has none."""
  missing = [r["step"] for r in [*train, *evals] if CPU not in r]
  if missing:
    raise ValueError(
      f"{workdir}: {len(missing)} records (the first at step {missing[0]}) carry no {CPU}: "
      "the run predates the run clock; plot it against wall-clock minutes (--minutes) instead"
    )
  return {r["step"]: r[CPU] / 60.0 for r in [*train, *evals]}


def timed_evaluations(
  workdir: str, clock: str = WALL
) -> tuple[list[dict[str, Any]], dict[int, float]]:
  """(evaluation records, {step: minutes}) of a run, its metrics read once: minutes by its wall
  clock (WALL) or its CPU seconds (CPU)."""
  train, evals = read_metrics(workdir)
  if clock == CPU:
    return evals, cpu_minutes(train, evals, workdir)
  if clock != WALL:
    raise ValueError(f"clock={clock!r}: must be {WALL!r} or {CPU!r}")
  return evals, wall_clock_minutes(train, evals)


def bleu_points(evals: Sequence[dict[str, Any]], minutes: dict[int, float]):
  """(minutes, validation BLEU) of each evaluation that translated."""
  return [
    (minutes[r["step"]], r["valid_bleu"])
    for r in evals
    if "valid_bleu" in r and r["step"] in minutes
  ]


def bleu_by_minutes(workdir: str, clock: str = WALL) -> list[tuple[float, float]]:
  """(minutes, validation BLEU) of each evaluation of a run that translated: wall-clock
  minutes, or with clock=CPU the run's CPU minutes (the axis of "at the AR's CPU")."""
  return bleu_points(*timed_evaluations(workdir, clock))


def minutes_figure(workdirs: Sequence[str], labels: Sequence[str] | None = None, clock: str = WALL):
  """Validation BLEU and length accuracy (exact, within 2) against wall-clock minutes, or the
  runs' CPU minutes (clock=CPU). Where no run records a length accuracy (AR, CTC, DAG), the
  second panel is the BLEU curves' top 10 points instead, where "within 1 BLEU" can be seen."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  labels = list(labels or [os.path.basename(os.path.normpath(w)) for w in workdirs])
  fig, axes = plt.subplots(1, 2, figsize=(12, 4))
  curves, lengths = [], []
  for workdir, label in zip(workdirs, labels):
    evals, minutes = timed_evaluations(workdir, clock)
    points = bleu_points(evals, minutes)
    # One colour per run in both panels (the length panel skips runs without a length metric).
    (bleu_line,) = axes[0].plot([m for m, _ in points], [b for _, b in points], "o-", label=label)
    curves.append((points, label, bleu_line.get_color()))
    ev = [r for r in evals if "valid_length_accuracy" in r and r["step"] in minutes]
    if ev:
      lengths.append((ev, minutes, label, bleu_line.get_color()))
  for ev, minutes, label, color in lengths:
    x = [minutes[r["step"]] for r in ev]
    axes[1].plot(
      x, [r["valid_length_accuracy"] for r in ev], "o-", color=color, label=f"{label} exact"
    )
    if "valid_length_within2" in ev[0]:
      x2 = [r["valid_length_within2"] for r in ev]
      axes[1].plot(x, x2, "s--", color=color, label=f"{label} within 2")
  titles = ["validation BLEU", "validation length accuracy"]
  if not lengths:
    top = max((b for points, _, _ in curves for _, b in points), default=100.0)
    for points, label, color in curves:
      axes[1].plot([m for m, _ in points], [b for _, b in points], "o-", color=color, label=label)
    axes[1].set_ylim(top - 10.0, top + 0.5)
    titles[1] = "validation BLEU, the top 10 points"
  for ax, title in zip(axes, titles):
    ax.set_title(title)
    ax.set_xlabel("CPU minutes (user + system)" if clock == CPU else "wall-clock minutes")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  fig.tight_layout()
  return fig


def figure(workdirs: Sequence[str], labels: Sequence[str] | None = None):
  """The three panels, one line per run directory."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  labels = list(labels or [os.path.basename(os.path.normpath(w)) for w in workdirs])
  fig, axes = plt.subplots(1, 3, figsize=(15, 4))
  for workdir, label in zip(workdirs, labels):
    train, evals = read_metrics(workdir)
    axes[0].plot([r["step"] for r in train], [r["train_loss"] for r in train], label=label)
    ev = [r for r in evals if "valid_loss" in r]
    axes[1].plot([r["step"] for r in ev], [r["valid_loss"] for r in ev], "o-", label=label)
    bl = [r for r in evals if "valid_bleu" in r]
    axes[2].plot([r["step"] for r in bl], [r["valid_bleu"] for r in bl], "o-", label=label)
  for ax, title in zip(axes, ("training loss", "validation loss", "validation BLEU (SacreBLEU)")):
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    ax.legend()
  fig.tight_layout()
  return fig


def plot(
  workdirs: Sequence[str],
  out_path: str,
  labels: Sequence[str] | None = None,
  minutes: bool = False,
  clock: str = WALL,
) -> str:
  """The step figure, or with minutes=True BLEU against minutes of the clock (WALL or CPU)."""
  import matplotlib.pyplot as plt

  fig = minutes_figure(workdirs, labels, clock) if minutes else figure(workdirs, labels)
  fig.savefig(out_path, dpi=100)
  plt.close(fig)
  return out_path


def report(workdir: str) -> str:
  """Markdown: the run's evaluations (step, losses, accuracies, BLEU, stutter) and last example."""
  train, evals = read_metrics(workdir)
  cols = [
    c
    for c in (
      "valid_loss",
      "valid_token_loss",
      "valid_length_loss",
      "valid_accuracy",
      "valid_stage1_accuracy",
      "valid_stage2_accuracy",
      "valid_length_accuracy",
      "valid_length_within1",
      "valid_length_within2",
      "valid_bleu",
      "valid_stutter",
    )
    if any(c in r for r in evals)
  ]
  lines = [f"# {os.path.basename(os.path.normpath(workdir))}", ""]
  if train:
    last = train[-1]
    spent = max((r for r in [*train, *evals] if CPU in r), key=lambda r: r[CPU], default=None)
    lines += [
      f"{last['step']} training steps; last training loss {last['train_loss']:.3f}, "
      f"{1 / last['steps_per_second']:.2f} s/step over the last log interval"
      + (
        f"; {spent[WALL] / 60:.1f} wall minutes and {spent[CPU]:.0f} CPU seconds in all"
        if spent
        else ""
      )
      + ".",
      "",
    ]
  data_path = os.path.join(workdir, DATA_REPORT)
  if os.path.isfile(data_path):
    with open(data_path, encoding="utf-8") as f:
      counts = json.load(f)["train"]
    lines += [
      f"Training data: kept {counts['kept']} pairs; {dropped_line(counts)} (EOS included).",
      "",
    ]
  lines += ["| step | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
  for r in evals:
    cells = [f"{r[c]:.4g}" if c in r else "" for c in cols]
    lines.append(f"| {r['step']} | " + " | ".join(cells) + " |")
  example = next((r["example"] for r in reversed(evals) if "example" in r), None)
  if example:
    lines += ["", "Last example:", "", *(f"- {k}: {v}" for k, v in example.items())]
  lines += ["", "![curves](curves.png)", ""]
  return "\n".join(lines)


def write_report(rd: RunDir) -> None:
  """The run's curves.png and report.md, written atomically from its metrics.jsonl."""
  rd.savefig(figure([str(rd.path)]), "curves.png")
  rd.write_report(report(str(rd.path)))


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("workdirs", nargs="+")
  p.add_argument("--out", default="curves.png")
  p.add_argument("--reports", action="store_true", help="also write each run's report.md")
  p.add_argument("--minutes", action="store_true", help="BLEU against wall-clock minutes")
  p.add_argument(
    "--cpu", action="store_true", help="BLEU against the runs' CPU minutes (user + system)"
  )
  p.add_argument("--labels", default="", help="comma-separated, one per run (default: the dirs)")
  a = p.parse_args()
  labels = a.labels.split(",") if a.labels else None
  if labels and len(labels) != len(a.workdirs):
    p.error(
      f"--labels={a.labels!r}: {len(labels)} labels for {len(a.workdirs)} runs; give one a run"
    )
  try:
    out = plot(a.workdirs, a.out, labels, minutes=a.minutes or a.cpu, clock=CPU if a.cpu else WALL)
  except (ValueError, FileNotFoundError) as e:
    p.error(str(e))
  print(out)
  for w in a.workdirs:
    if a.reports:
      write_report(RunDir(w))
    print(report(w))


if __name__ == "__main__":
  main()
