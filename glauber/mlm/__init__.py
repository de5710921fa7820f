"""The recipe of the embedded default English MLM: its text, its LoRA training, its scoring."""
