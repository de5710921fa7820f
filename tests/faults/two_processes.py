"""Run by test_two_processes.py, once per process (or once alone as the reference):

  python tests/faults/two_processes.py padir CORPUS OUT     # PaDIR, 4 steps on a data mesh
  python tests/faults/two_processes.py chains SPLADE OUT    # Glauber chains split over "data"

With JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID set, each process joins the
run (gmlm.core.mesh.initialize_distributed, CPU collectives over gloo) with one CPU device."""

import sys

import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])


def padir(corpus: str, out: str) -> None:
  from test_training_faults import padir_config

  from gmlm import cli
  from padir.model import restore

  config = padir_config(corpus)
  config.train.num_train_steps, config.train.eval_every = 4, 4
  config.mesh = {"data": -1, "model": 1, "params": "logical"}
  config.distributed = "auto"
  cli.run(config, out, "train.py")
  import jax
  from flax import nnx

  model, _, _ = restore.load_model(out)  # every process: orbax restores collectively
  leaves = jax.tree_util.tree_leaves_with_path(nnx.state(model, nnx.Param))
  params = {jax.tree_util.keystr(p): np.asarray(x) for p, x in leaves}
  if jax.process_index() == 0:
    np.savez(f"{out}/params.npz", **params)


def chains(model_dir: str, out: str) -> None:
  import jax
  from jax.experimental import multihost_utils

  from glauber import chains as chains_lib
  from glauber import init_states
  from glauber.layout import Layout
  from gmlm.core.mesh import data_mesh, initialize_distributed
  from gmlm.nn import load

  initialize_distributed("auto")
  model, tok = load(model_dir)
  lay = Layout.from_tokenizer(tok, 6, "albert einstein said that", 512)
  candidates = chains_lib.candidate_ids(tok, model.config.vocab_size)
  spec = chains_lib.make_spec(candidates, model.config.vocab_size, lay, 1.0, 0, 1.0)
  x0_BL = init_states.random_tokens(np.random.default_rng(0), lay, candidates, 4)
  mesh = data_mesh(4)
  assert mesh is not None and mesh.devices.size == jax.device_count()
  state, rec = chains_lib.run(
    jax.random.key(0), model, spec, chains_lib.init_state(x0_BL), 3, 2, method="glauber", mesh=mesh
  )
  tokens = multihost_utils.process_allgather(rec.tokens_RBN, tiled=True)
  if jax.process_index() == 0:
    np.savez(
      f"{out}/chains.npz",
      tokens_RBN=np.asarray(tokens),
      t=int(state.t),
      processes=jax.process_count(),
      devices=jax.device_count(),
    )


if __name__ == "__main__":
  {"padir": padir, "chains": chains}[sys.argv[1]](*sys.argv[2:])
