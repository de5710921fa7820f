"""`python train.py --config configs/ising_mple_error.py --workdir DIR`: k-MPLE error vs samples."""

from ising.jobs.mple import error_vs_samples as run  # noqa: F401

ENTRY_POINT = "train.py"
