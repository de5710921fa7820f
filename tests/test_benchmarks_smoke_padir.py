"""Smoke test of the PaDIR training benchmarks (training options, the task family, compile and
memory): each runs end to end at tiny sizes and prints its tables. A file of their own, so that
pytest-xdist's per-file scheduling spreads these minutes-long runs over both workers."""

import json
import re

import padir_util
import pytest
from test_benchmarks_smoke import run_benchmark


@pytest.mark.slow  # five tiny trainings, each with its own compilations
def test_padir_training_tiny_prints_one_row_per_chosen_option_with_its_share_of_peak():
  """--only picks rows (each option's training is tested in tests/padir/): the three that
  combine the others (the recipe: offset, glancing, warm start; CTC with glancing; the DAG with
  glancing), the paper's row and its repeat; the left-out options print no row."""
  chosen = ("recipe", "ctc + glancing", "dag k=2.5 + glancing")
  out = run_benchmark(
    "padir_training.py", "--tiny", "--dag-upsample", "2.5", "--only", ",".join(chosen), timeout=900
  )
  assert re.search(r"matmul peak: [\d.]+ GFLOP/s", out), out
  for name in ("paper",) + chosen + ("paper, again",):
    assert re.search(
      rf"\| {re.escape(name)} \| [\d.]+ \| \d+ \| [\d.]+ \| [\d.]+% \| [\d.]+ \|", out
    ), out
  for name in ("offset", "glancing", "warm start", "ctc"):
    assert f"| {name} |" not in out, out
  assert re.search(r"\| paper \| .* \| 1\.00x \| \+0\.00 \|", out), out
  assert re.search(r"ratio vs paper  recipe\s+time \d+\.\d+x", out), out
  assert "peak RSS" in out


def test_padir_training_only_names_an_unknown_option_and_the_choices_in_one_line():
  bench = padir_util.benchmark_module("padir_training")
  rows = bench.options(8, "ar", (2.5,))
  assert [n for n, _ in bench.chosen(rows, "")] == [n for n, _ in rows]
  assert [n for n, _ in bench.chosen(rows, " ctc ,glancing")] == [
    "paper", "glancing", "ctc", "paper, again"
  ]  # fmt: skip
  with pytest.raises(SystemExit, match=r"^--only: no option 'cct'; choose from paper, offset"):
    bench.chosen(rows, "ctc,cct")


@pytest.mark.slow  # six tiny trainings with early stopping, each with its compilations
def test_padir_family_tiny_prints_a_row_per_task_and_model_against_ar_greedy():
  # trainings of many steps: at XLA's defaults (3m38s), not the suite's setting (4m25s)
  out = run_benchmark("padir_family.py", "--tiny", timeout=900, xla_defaults=True)
  # each task's table as soon as its rows are in, then the whole table
  assert (
    0 <= out.index("sov done:\n|") < out.index("mirror done:\n|") < out.index("| mirror | ar |")
  )
  assert out.count("| sov | ar |") == 3  # its task's table, the whole table, the errors table
  for task in ("sov", "mirror"):
    assert re.search(rf"\| {task} \| ar \| [\d.]+ \| reference \| \d+ \| \d+ \| \d+ \| - \|", out)
    assert re.search(rf"\| {task} \| dag beam \|( [\d.]+ \|){{4}} [\d.]+ / [\d.]+ \|", out), out
    # (a "@ AR's CPU" row, where a model outspent the AR, has the same columns)
    for model in ("ctc", "dag", "dag beam", "dag beam+lm"):
      assert re.search(
        rf"\| {task} \| {re.escape(model)}( \([\d.]+:[\d.]+\))? \| [\d.]+ \| [+-][\d.]+ \[[+-][\d.]+, [+-][\d.]+\] \| \d+ \| \d+ "
        rf"\| \d+ \| ([\d.]+|-) \|",
        out,
      ), out
    # the n-gram beam's wrong translations put down to search or model, shares summing to the
    # wrong ones (padir.evaluation.dag_search)
    row = re.search(
      rf"\| {task} \| dag beam\+lm( \([\d.]+:[\d.]+\))? \|((?: [\d.]+ \|){{5}})\n",
      out[out.index("Why the DAG beam's translations are wrong") :],
    )
    assert row, out
    wrong, *parts = (float(x) for x in row.group(2).split("|")[:-1])
    assert abs(wrong - sum(parts)) <= 0.3, row.group(0)


@pytest.mark.slow  # eleven compiles of a tiny training step: minutes on a loaded CPU
def test_padir_compile_tiny_prints_every_table_with_its_ratios(tmp_path):
  out = run_benchmark("padir_compile.py", "--tiny", "--json", str(tmp_path / "r.json"), timeout=900)
  for dtype in ("float32", "bfloat16"):
    ratios = (
      rf"\| {dtype} \| loop / scan \| today / default \| [\d.]+x \| [\d.]+x \(total [\d.]+x\)"
    )
    assert re.search(ratios, out), out
    # the baseline row: the loop with a dropout draw per site, as the step was
    assert re.search(rf"\| {dtype} \| loop, dropout per site \| per array \|", out), out
  assert re.search(r"\| scan \| full \| 16 \| [\d.]+ \| [\d.]+x \| [\d.]+ \|", out), out
  assert re.search(r"\| 16 \| 2 \| full \| 16 \|( [\d.]+ \|){3} yes \|", out), out
  assert re.search(r"\| synthetic \| 4 \|( [\d.]+ \|){3}( [\d.]+x \|){2}", out), out
  results = json.loads((tmp_path / "r.json").read_text())
  # 2 dtypes x (the loop, the scan over stacked layers); the loop's and the best remat row;
  # the 8-device plan under full remat; the step as it was, the loop and the scan
  counts = {k: len(results[k]) for k in ("compile", "memory", "plan", "step")}
  assert counts == {"compile": 4, "memory": 2, "plan": 1, "step": 3}, counts


def test_dag_validation_tiny_decodes_the_grid_both_ways_alike_and_prints_the_ratio():
  """benchmarks/dag_validation.py: a setting at a time and the grid in one pass give the same
  translations (its exit status says so) and it prints both rows' seconds and speed-ups."""
  out = run_benchmark("dag_validation.py", "--tiny", "--repeats", "1", timeout=600)
  assert "every setting's translations the same both ways: True" in out, out
  assert re.search(r"\| a setting at a time \| [\d.]+ \| 1\.00x \| [\d.]+ \|", out), out
  assert re.search(r"\| the grid in one pass \| [\d.]+ \| [\d.]+x \| [\d.]+ \|", out), out


@pytest.mark.slow  # six tiny training steps compiled (two models, three dropout settings)
def test_padir_dropout_tiny_prints_each_models_three_settings_and_the_before_now_ratio():
  out = run_benchmark("padir_dropout.py", "--tiny", "--models", "ar,dag,dag:1", timeout=900)
  for model in ("ar", "dag", "dag:1"):
    for setting in (
      "no dropout",
      "dropout 0.1, xla_default (before)",
      "dropout 0.1, threefry (now)",
    ):
      assert re.search(
        rf"\| {model} \| {re.escape(setting)} \| [\d.]+ \| [\d.]+x \| [\d.]+ \|", out
      ), out
    assert re.search(rf"\| {model} \| no dropout \| [\d.]+ \| 1\.00x \|", out), out
    assert re.search(rf"{model}: a step with dropout, before / now: [\d.]+x", out), out
  for model in ("dag", "dag:1"):
    assert re.search(rf"; {model} none\): {model} / ar [\d.]+x", out), out
  assert "peak RSS" in out


@pytest.mark.slow  # two tiny steps compiled
def test_padir_dropouts_rows_time_and_measure_a_training_step_with_its_backward_pass():
  """A row's timed program updates the parameters, and the temporary memory it reports is the
  whole step's: more than XLA's for the same step's loss alone (its forward pass, the backward
  dead code there), compiled independently here."""
  import jax
  from flax import nnx

  bench = padir_util.benchmark_module("padir_dropout")
  row = bench.Row("ar", bench.SETTINGS[2], 8, True)
  before = jax.tree.map(lambda x: x.copy(), nnx.state(row.net, nnx.Param))
  row.run(2)
  after = nnx.merge(row.graphdef, row.state)[0]
  paths = jax.tree_util.tree_leaves_with_path
  unchanged = [
    jax.tree_util.keystr(k)
    for (k, a), (_, b) in zip(paths(before), paths(nnx.state(after, nnx.Param)))
    if not bool((a != b).any())
  ]
  assert all("length_head" in k for k in unchanged) and row.t == 2, unchanged  # (AR: no head)

  def loss_only(state, batch, key, dropout_key, t):
    return row.pure(state, batch, key, dropout_key, t)[1]["loss"]

  forward = jax.jit(loss_only).lower(row.state, row.batch, row.key, row.dropout_key, 0)
  forward_mb = forward.compile().memory_analysis().temp_size_in_bytes / 2**20
  assert row.temp_mb > 1.5 * forward_mb, (row.temp_mb, forward_mb)


def test_padir_dropout_names_an_unknown_model_in_one_line(capsys):
  bench = padir_util.benchmark_module("padir_dropout")
  with pytest.raises(SystemExit):
    bench.main(["--models", "ar,ctc"])
  assert "--models: no model 'ctc'; choose from ar, dag, dag:N" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    bench.main(["--models", "ar:2"])
  assert "--models: no model 'ar:2'" in capsys.readouterr().err
  assert bench.parse_model("dag:2") == ("dag", 2) and bench.parse_model("ar") == ("ar", 0)
  assert bench.config_of("dag:2", 0.1, "threefry", 48, False).model.num_decoder_layers == 2
