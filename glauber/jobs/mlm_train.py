"""`python train.py --config configs/mlm_minilm.py --workdir DIR`: MLM fine-tuning (LoRA or full)."""

from glauber.mlm.training import train as run  # noqa: F401

ENTRY_POINT = "train.py"
