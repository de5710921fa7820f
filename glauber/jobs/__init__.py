"""Glauber jobs: one `run(config, workdir)` per config family (sample.py / train.py run them).

sample.py: `sample` (chains, configs/glauber.py), `coupling` (configs/glauber_coupling.py),
`mlm_eval` (configs/mlm_eval.py), `incompatibility` (paper A protocols 1-4,
configs/glauber_incompatibility.py), `exact` (protocols 5-6, configs/glauber_exact.py), `study` (paper A in one command:
part 1 and part 2, configs/glauber_study.py), `unmasking` (unmasking samplers at matched compute
and their exact laws, configs/glauber_unmasking.py); train.py: `mlm_train` (configs/mlm_minilm.py, mlm_default.py).
Each job module has ENTRY_POINT, `validate(config)` (every key it reads, nothing loaded or
written) and `run(config, workdir)`; they share code through the domain and `gmlm` only.
"""

from __future__ import annotations

from gmlm.runs import RunDir, check_workdir


def finished(config, workdir: str) -> dict | None:
  """The stored results of a finished run of `config` in workdir, or None (a run writes
  results.json last). Refuses a workdir holding a run of another config; writes nothing."""
  check_workdir(workdir, config)
  stored = RunDir(workdir, writer=False).read_results()
  if stored is not None:
    print(f"{workdir} holds a finished run of this config; its results are kept, not recomputed.")
  return stored
