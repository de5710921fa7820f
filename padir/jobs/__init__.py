"""PaDIR jobs: one `run(config, workdir)` per config family (train.py runs them)."""
