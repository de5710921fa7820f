"""`python sample.py --config configs/glauber_incompatibility.py --workdir DIR`: paper A's
theory-side measurements of one MLM, stage by stage (`glauber.stages.theory`): the rectangle test
(protocol 1, with causal controls), influence and contraction (2, with ΔR against α_ij), score
margins (3) and the drift certificate (4).

A killed run resumes after its last finished stage, and inside the rectangle stage after its
last finished model (`glauber.stages`); results.json holds each stage's results under its name.
"""

from __future__ import annotations

from glauber import stages
from glauber.jobs import finished
from glauber.stages import theory

ENTRY_POINT = "sample.py"

STAGES = theory.STAGES


def validate(config) -> None:
  """Checks every key the job reads; loads nothing and writes nothing."""
  stages.validate(config, STAGES)


def run(config, workdir: str) -> dict:
  validate(config)
  if (stored := finished(config, workdir)) is not None:
    return stored
  title = "Incompatibility and mixing diagnostics"
  return stages.run(config, workdir, STAGES, title, desc="incompatibility")
