"""The Figure L.3 job end to end on a small grid: run directory contents, and the simulated
mean hitting steps agree with the exact law computed from the transition matrix."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from configs import ising_hitting
from ising.jobs import hitting as experiments

ROOT = Path(__file__).resolve().parents[2]


def small_config():
  c = ising_hitting.get_config()
  c.n, c.clique_size, c.field = 6, 3, 1.0
  c.couplings = (0.3, 1.0)
  c.ks = (1, 3, 6)
  c.num_chains, c.budget = 400, 60
  return c


@pytest.mark.slow  # the hitting job end to end against the exact law
def test_hitting_job_writes_run_dir_and_matches_exact_law(tmp_path):
  c = small_config()
  res = experiments.run(c, tmp_path)
  for name in ("config.json", "results.json", "report.md", "hitting_times.png"):
    assert (tmp_path / name).stat().st_size > 0
  saved = json.loads((tmp_path / "results.json").read_text())
  assert saved["budget"] == 60
  for variant, by_J in res["variants"].items():
    for J, by_sampler in by_J.items():
      for name, e in by_sampler.items():
        se = max(e["std_steps"], 1.0) / np.sqrt(c.num_chains)
        assert abs(e["mean_steps"] - e["exact_mean_steps"]) <= 4 * se + 0.5, (variant, J, name)
        assert abs(e["frac_reached"] - e["exact_prob_reached"]) <= 0.08, (variant, J, name)


def test_bad_experiment_config_is_rejected_before_any_work(tmp_path):
  c = small_config()
  c.ks = (1, 7)
  with pytest.raises(ValueError, match=r"\[7\]"):
    experiments.run(c, tmp_path)
  assert not (tmp_path / "results.json").exists()


@pytest.mark.slow  # sample.py end to end in a child interpreter
def test_sample_py_entry_point_runs_a_config(tmp_path):
  out = tmp_path / "run"
  cmd = [
    sys.executable,
    "sample.py",
    "--config",
    "configs/ising_hitting.py",
    "--workdir",
    str(out),
    "--config.n=5",
    "--config.clique_size=2",
    "--config.couplings=(0.5,)",
    "--config.ks=(1,2)",
    "--config.num_chains=50",
    "--config.budget=20",
    "--config.variants=('clique_fields',)",
  ]
  subprocess.run(cmd, cwd=ROOT, check=True, timeout=300, capture_output=True)
  assert json.loads((out / "config.json").read_text())["n"] == 5
  assert (
    "parallel" in json.loads((out / "results.json").read_text())["variants"]["clique_fields"]["0.5"]
  )


def test_run_dir_refuses_to_overwrite_results_of_another_config(tmp_path):
  from gmlm.runs import RunDir

  run = RunDir(tmp_path, {"a": 1})
  run.write_results({"x": 1})
  with pytest.raises(ValueError, match="different config"):
    RunDir(tmp_path, {"a": 2})
  assert json.loads((tmp_path / "results.json").read_text()) == {"x": 1}
