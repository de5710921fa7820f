"""Ising jobs: one `run(config, workdir)` per config family (sample.py / train.py run them)."""
