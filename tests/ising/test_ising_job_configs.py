"""Every Ising job refuses a bad config before any work: `gmlm.cli.run` raises ConfigError
naming the key and the value, and the run directory is not created. The hitting report says
why its exact columns are nan (N > 12) and how the chains start when p | R_-1 cannot be
enumerated (N > 20)."""

import pytest

from configs import ising_hitting, ising_mple_asymptotics, ising_mple_error
from gmlm import cli
from gmlm.checks import ConfigError
from ising.jobs import hitting

BAD = [
  (ising_hitting, "sample.py", "n", 1),
  (ising_hitting, "sample.py", "clique_size", 11),
  (ising_hitting, "sample.py", "ks", (1, 11)),
  (ising_hitting, "sample.py", "ks", ()),
  (ising_hitting, "sample.py", "variants", ("all_fields", "no_fields")),
  (ising_hitting, "sample.py", "couplings", (0.5, -1.0)),
  (ising_hitting, "sample.py", "num_chains", 0),
  (ising_hitting, "sample.py", "budget", 0),
  (ising_hitting, "sample.py", "field", float("nan")),
  (ising_mple_error, "train.py", "n_sites", 13),  # Tr Sigma_k enumerates 2^N states, N <= 12
  (ising_mple_error, "train.py", "n_sites", 1),
  (ising_mple_error, "train.py", "ks", (1, 5)),
  (ising_mple_error, "train.py", "ks", (0, 1)),
  (ising_mple_error, "train.py", "masks", "sampled,some"),
  (ising_mple_error, "train.py", "masks", ""),
  (ising_mple_error, "train.py", "repetitions", 1),
  (ising_mple_error, "train.py", "sample_sizes", (100, 0)),
  (ising_mple_error, "train.py", "couplings", ()),
  (ising_mple_asymptotics, "train.py", "n_sites", 13),
  (ising_mple_asymptotics, "train.py", "n_large", 0),
  (ising_mple_asymptotics, "train.py", "random_models", -1),
  (ising_mple_asymptotics, "train.py", "field", float("inf")),
]


@pytest.mark.parametrize(
  "module,entry,key,value",
  BAD,
  ids=[f"{m.__name__.split('.')[-1]}.{k}={v!r}" for m, _, k, v in BAD],
)
def test_bad_value_is_refused_up_front_naming_key_and_value(tmp_path, module, entry, key, value):
  config = module.get_config()
  config[key] = value
  workdir = tmp_path / "run"
  with pytest.raises(ConfigError) as info:
    cli.run(config, str(workdir), entry)
  assert info.value.key == key
  assert f"config.{key}={value!r}" in str(info.value)
  assert not workdir.exists()


def test_kmple_run_too_large_for_the_exact_covariance_says_why(tmp_path):
  config = ising_mple_error.get_config()
  config.n_sites, config.ks = 13, (1, 2)
  with pytest.raises(ConfigError, match=r"n_sites=13: must be <= 12.*2\^N states"):
    cli.run(config, str(tmp_path / "run"), "train.py")


def tiny_hitting(n):
  c = ising_hitting.get_config()
  c.n, c.clique_size, c.field, c.couplings, c.ks = n, 2, 1.0, (0.5,), (1,)
  c.variants, c.include_parallel, c.num_chains, c.budget = ("clique_fields",), False, 8, 4
  return c


def test_hitting_report_says_why_exact_columns_are_nan_above_n12(tmp_path):
  hitting.run(tiny_hitting(13), str(tmp_path))
  report = (tmp_path / "report.md").read_text()
  assert "`exact` columns are nan" in report and "N <= 12" in report
  assert "drawn from p | R_-1" in report  # N = 13 is still enumerable


def test_hitting_report_says_chains_start_uniform_above_n20(tmp_path):
  res = hitting.run(tiny_hitting(21), str(tmp_path))
  report = (tmp_path / "report.md").read_text()
  assert res["start"] == "uniform"
  assert "drawn uniformly" in report and "p | R_-1" not in report.replace(
    "p | R_-1 needs all 2^N states", ""
  )
