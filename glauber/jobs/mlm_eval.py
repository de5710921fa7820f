"""`python sample.py --config configs/mlm_eval.py --workdir DIR`: fill-mask accuracy of an MLM."""

from glauber.mlm.evaluation import evaluate_job as run  # noqa: F401

ENTRY_POINT = "sample.py"
