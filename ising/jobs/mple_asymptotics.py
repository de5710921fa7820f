"""`python train.py --config configs/ising_mple_asymptotics.py --workdir DIR`: exact asymptotics."""

from ising.jobs.mple import asymptotics as run  # noqa: F401

ENTRY_POINT = "train.py"
