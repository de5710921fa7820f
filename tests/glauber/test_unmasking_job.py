"""The unmasking job (configs/glauber_unmasking.py) on SPLADE-tiny at toy sizes: every sampler
spends the matched budget, the report holds both parts and the figure; a run killed after its
second cell resumes (tests/faults/test_unmasking_faults.py); the bad sampler values are
one line each, before anything is written."""

from __future__ import annotations

import json

import pytest
from glauber_util import unmasking_config

from gmlm import cli
from gmlm.checks import ConfigError


@pytest.fixture(scope="module")
def straight(splade_dir, minilm_dir, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("unmasking") / "straight"
  cli.run(unmasking_config(splade_dir, minilm_dir), str(workdir), "sample.py")
  return workdir


@pytest.mark.slow  # the job end to end: ~30 s of CPU
def test_the_job_reports_every_sampler_at_the_matched_budget_and_the_exact_laws(straight):
  results = json.loads((straight / "results.json").read_text())
  assert [r["forward_rows"] for r in results["full"]] == [8, 8, 8]
  assert [r["plan"] for r in results["full"]] == [
    "ancestral confidence + glauber 4 plain",
    "parallel S=2 cosine random + remask 1x2 confidence + glauber 1 plain",  # 2 + 5 + 1 rows
    "glauber 8 from random tokens",
  ]
  (table,) = results["exact"]["tables"]
  names = [r["sampler"] for r in table["rows"]]
  assert names[0] == "uniform random start" and "ancestral confidence" in names
  for r in table["rows"]:
    assert 0 <= r["tv_pi"] <= 1 and 0 <= r["tv_pl"] <= 1
  report = (straight / "report.md").read_text()
  assert "Full MLM at matched compute" in report and "Exact output laws" in report
  assert (straight / "unmasking_tv.png").stat().st_size > 10_000


@pytest.mark.parametrize(
  "sampler, message",
  [
    ("parallel 5 linear random", r"steps=5: must be in \[1, 4\]"),
    ("parallel 2 exp random", "schedule='exp': unknown"),
    ("ancestral entropy", "order='entropy': unknown order rule"),
    ("ancestral random remask 0.5 worst", "remask_order='worst'"),
    ("ancestral random remask 2 random", "remask FRACTION='2': must be a number in"),
    ("parallel 2 linear", "not a sampler"),
    ("ancestral random remask 0.5 confidence", "one remasking round costs 5 forward rows"),
  ],
)
def test_a_bad_sampler_is_one_line_and_nothing_is_written(
  splade_dir, minilm_dir, tmp_path, sampler, message
):
  config = unmasking_config(splade_dir, minilm_dir)
  config.samplers = ("ancestral random", sampler)
  with pytest.raises(ConfigError, match=message) as info:
    cli.prepare(config, str(tmp_path / "run"), "sample.py")
  assert info.value.key == "samplers" and "\n" not in str(info.value)
  assert not (tmp_path / "run").exists()
