"""Early stopping on validation BLEU (issue 43): every model trained to convergence, so that
"within 1 BLEU of AR" compares converged models.

The rule, over the validation BLEU of the evaluations so far, in order: an evaluation improves
when its BLEU exceeds the best BLEU of the earlier improvements by more than `min_delta` (0.2);
the first evaluation always improves. Training stops after the evaluation at which `patience`
(= config.train.early_stopping_patience, k; 0 = off) evaluations in a row have not improved.
`state` is a pure function of that history, and the history is what metrics.jsonl holds:
`fit` recomputes it from the run directory's records after a resume (the records past the
restored checkpoint are dropped first), so a killed run stops at the same step as one that was
never killed. The parameters at the stop are the last ones, not the best evaluation's.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

MIN_DELTA = 0.2
KEY = "train.early_stopping_patience"
METRIC = "valid_bleu"


@dataclasses.dataclass(frozen=True)
class EarlyStopping:
  best: float  # the BLEU of the last improvement (-inf before any evaluation)
  best_index: int  # its evaluation's index (-1 before any)
  wait: int  # evaluations since the last improvement
  stop: bool  # patience > 0 and wait >= patience


def state(history: Sequence[float], patience: int, min_delta: float = MIN_DELTA) -> EarlyStopping:
  """The rule of the module docstring applied to the validation BLEU history."""
  if patience < 0:
    raise ValueError(f"early stopping patience must be >= 0 (0 = off), got {patience}")
  best, best_index, wait = float("-inf"), -1, 0
  for i, bleu in enumerate(history):
    if bleu > best + min_delta:
      best, best_index, wait = float(bleu), i, 0
    else:
      wait += 1
  return EarlyStopping(best, best_index, wait, stop=patience > 0 and wait >= patience)


def history(records: Iterable[dict], metric: str = METRIC) -> list[float]:
  """The metric of each evaluation record (metrics.jsonl), by step, the last record of a step."""
  by_step = {r["step"]: r[metric] for r in records if metric in r}
  return [by_step[s] for s in sorted(by_step)]
