"""`python train.py --config configs/padir_bible_en_es.py --workdir DIR`: PaDIR / AR training."""

from padir.train_lib import train as run  # noqa: F401

ENTRY_POINT = "train.py"
