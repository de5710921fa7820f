"""`python train.py --config configs/padir_bible_en_es.py --workdir DIR`: PaDIR / AR training.

A killed run resumes from its last checkpoint when the same command is rerun; a workdir holding
a run of another config, or a corpus that cannot be read (padir.data.corpus.check_corpus: a
missing split, which names the command that makes a synthetic corpus, an empty file, a line
without its tab, invalid UTF-8), is refused before anything is written, so the corrected
command runs in the same workdir.
"""

from __future__ import annotations

from typing import Any

import ml_collections

from padir.data import corpus
from padir.training import loop as training

ENTRY_POINT = "train.py"
RESUMABLE_KEYS = training.RESUMABLE_KEYS
ADDED_KEYS = training.ADDED_KEYS


def validate(config: ml_collections.ConfigDict) -> None:
  training.validate(config)


def run(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  """Trains (or resumes) in workdir; returns the last logged metrics. A warm start
  (config.init_from) from a run that does not fit is refused before anything is written."""
  corpus.check_corpus(config.data)
  training.check_warm_start(config)
  rd = training.open_run(config, workdir)
  try:
    return training.fit(config, rd)
  finally:
    rd.close()
