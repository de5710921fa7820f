"""`python train.py --config configs/padir_bible_en_es_distill.py --workdir DIR`: distillation."""

from padir.distill import train as run  # noqa: F401

ENTRY_POINT = "train.py"
