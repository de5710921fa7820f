"""benchmarks/padir_family.py's comparison: the AR's validation BLEU at a model's CPU seconds is
the AR's last evaluation reached by then (its CPU per step constant), and the interval against
AR greedy is the paired bootstrap's."""

from padir_util import benchmark_module

from padir.evaluation import metrics

family = benchmark_module("padir_family")


def _row(model, hyps, cpu, steps=100, evals=()):
  return family.Row("t", model, 0.0, hyps, steps, 0.0, cpu, list(evals))


def test_ar_at_equal_cpu_is_its_last_evaluation_reached_by_then():
  refs = ["a b c d", "e f g h", "a c e g"]
  ar = _row(
    "ar", ["a b c d", "e f x h", "a c e g"], 100.0, evals=[(20, 10.0), (40, 30.0), (60, 50.0)]
  )
  ctc = _row("ctc", ["a b c d", "e f g h", "a x e g"], 45.0)  # AR at 1 CPU s a step: step 40
  dag = _row("dag", refs, 10.0)  # before the AR's first evaluation
  family.compare([ar, ctc, dag], refs, "cx", resamples=50)
  assert (ar.ar_at_cpu, ctc.ar_at_cpu, dag.ar_at_cpu) == ("50.00", "30.00", "-")
  p = metrics.paired_bootstrap(ctc.hypotheses, ar.hypotheses, refs, "cx", 50)
  assert ctc.delta == f"{p.delta:+.2f} [{p.low:+.2f}, {p.high:+.2f}]" and ar.delta == "reference"
  assert "| t | ctc | 0.00 | " + ctc.delta in family.table([ar, ctc])
