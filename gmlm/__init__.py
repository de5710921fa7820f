"""gmlm: the shared floor of the generative-masked-LM framework.

Floor 1 (this package) imports no domain: run directories (`gmlm.runs`), checkpoints
(`gmlm.checkpoints`), user errors and config checks (`gmlm.checks`), the command line
(`gmlm.cli`), the sampling substrate (`gmlm.core`: blocks, draws, random bits, meshes) and the
model zoo (`gmlm.nn`). Floor 2 are the domains `ising`, `glauber` and `padir`, each importing
gmlm only; floor 3 are their `jobs` modules, one `run(config, workdir)` per config family.
"""
