"""The unmasking job (glauber.jobs.unmasking) killed after its second cell resumes to the run an
uninterrupted process writes: the same results.json and metrics.jsonl (timing aside), the
stored cells not recomputed."""

from __future__ import annotations

import pytest
from glauber_util import unmasking_config
from harness import assert_same_metrics, assert_same_results, killed

from gmlm import cli


@pytest.mark.slow  # two runs of the job, one in a child process
def test_a_killed_unmasking_run_resumes_to_the_uninterrupted_run(splade_dir, minilm_dir, tmp_path):
  config = unmasking_config(splade_dir, minilm_dir)
  straight, workdir = tmp_path / "straight", tmp_path / "run"
  cli.run(config, str(straight), "sample.py")
  killed(config, workdir, "sample.py", "cell_done:2")
  cells = sorted(p.name for p in (workdir / "cells").iterdir())
  assert cells == ["full_0.json", "full_1.json"]
  stored = {c: (workdir / "cells" / c).read_text() for c in cells}
  cli.run(config, str(workdir), "sample.py")
  assert_same_results(workdir, straight)
  assert_same_metrics(workdir, straight)
  assert {c: (workdir / "cells" / c).read_text() for c in cells} == stored  # not recomputed
