"""padir.training.sharding + training with config.mesh: a training step on 8 simulated CPU devices (mesh
8x1, and 4x2 with the logical rules or FSDP, and 4x2 with the layers stored stacked) equals the
same step on one device.

The device count is fixed when jax is imported, so the runs happen in a subprocess with 8
devices (conftest.run_on_devices); the single-device run is the unchanged code path (no
config.mesh) in that process.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_on_devices
from padir_util import write_corpus

MESHES = {
  "8x1": dict(data=8, model=1),
  "4x2": dict(data=4, model=2, params="logical"),
  "4x2_fsdp": dict(data=4, model=2, params="fsdp"),
  # the layers stored stacked (model.scan_layers = "scan"): a leading "layers" axis, replicated
  "4x2_scan": dict(data=4, model=2, params="logical", scan=True),
}

_SCRIPT = r"""
import sys, numpy as np, jax, ml_collections
from flax import nnx
from jax.sharding import PartitionSpec as P
from configs import padir_bible_en_es
from padir.model import layer_stack, restore, transformer as model_lib
from padir.training import sharding as sharding_lib
from padir.jobs import train as train_job
corpus_dir, out_dir, meshes = sys.argv[1], sys.argv[2], eval(sys.argv[3])
assert jax.device_count() == 8, jax.devices()

def config(mesh):
  c = padir_bible_en_es.get_config()
  c.data.update(corpus_dir=corpus_dir, prepare_bible=False, vocab_size=40, max_source_length=16,
                max_target_length=16)
  c.model.update(num_encoder_layers=1, num_decoder_layers=1, num_heads=2, d_model=16, d_ff=32)
  # A large first step (AdaFactor's update is ~lr x the parameter scale), so that a wrong
  # gradient would show in the parameters. Dropout stays on (0.1).
  c.train.update(batch_size=8, num_train_steps=10, stop_at_step=1, warmup_steps=2, min_lr=0.05,
                 peak_lr=0.05, log_every=1, eval_every=1000, checkpoint_every=1000,
                 progress_bar=False)
  c.decode.num_examples = 0
  if mesh:
    mesh = dict(mesh)
    if mesh.pop("scan", False):
      c.model.scan_layers = "scan"
    c.mesh = ml_collections.ConfigDict(mesh)
  return c

created = {}
create_sharded = sharding_lib.create_sharded
def spy(make, mesh, params="logical", rules=sharding_lib.LOGICAL_RULES):
  created["objs"] = create_sharded(make, mesh, params, rules)
  return created["objs"]
sharding_lib.create_sharded = spy

def params_of(model):  # per layer in either storage layout
  state = layer_stack.unstack_layers(nnx.state(model, nnx.Param))
  return {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree.leaves_with_path(state)}

c = config(None)
init = model_lib.Transformer(model_lib.ModelConfig.from_run_config(c, 40), rngs=nnx.Rngs(
    params=c.seed, dropout=jax.random.key(c.seed, impl="rbg")))
np.savez(f"{out_dir}/init.npz", **params_of(init))
for name, mesh in [("single", None)] + list(meshes.items()):
  last = train_job.run(config(mesh), f"{out_dir}/{name}")
  model, _, _ = restore.load_model(f"{out_dir}/{name}")
  specs = {}
  if mesh:  # where the trained parameters live after the step
    (trained, optimizer), _ = created.pop("objs")
    dec, enc = trained.decoder_layers, trained.encoder_layers
    if isinstance(dec, layer_stack.LayerStack):  # the stored stacks themselves
      dec, enc = [dec.stack], [enc.stack]
    for k, v in {"embed": trained.embed_VD, "w_q": dec[0].self_attention.w_q_DNH,
                 "up": enc[0].ffn.up.kernel}.items():
      x = v[...]
      specs[k] = (x.shape, x.sharding.shard_shape(x.shape), len(x.sharding.device_set))
  np.savez(f"{out_dir}/{name}.npz", loss=last["train_loss"], grad_norm=last["train_grad_norm"],
           specs=str(specs), **params_of(model))
"""


@pytest.mark.slow  # four one-step trainings (compilations) in a subprocess
def test_one_training_step_on_8_devices_equals_one_device(tmp_path):
  # The toy corpus with a larger valid split: training refuses a valid split with fewer pairs
  # within the maximum lengths than one batch (the train split, drawn first, is the fixture's).
  (tmp_path / "corpus").mkdir()
  corpus = write_corpus(tmp_path / "corpus", {"train": 200, "valid": 48, "test": 16}, max_words=7)
  run_on_devices(_SCRIPT, 8, corpus, str(tmp_path), repr(MESHES), timeout=900, cwd=tmp_path)
  init = np.load(tmp_path / "init.npz")
  single = np.load(tmp_path / "single.npz")
  for name in MESHES:
    run = np.load(tmp_path / f"{name}.npz")
    np.testing.assert_allclose(run["loss"], single["loss"], rtol=1e-5)
    np.testing.assert_allclose(run["grad_norm"], single["grad_norm"], rtol=1e-5)
    for k in init.files:
      step_single, step_run = single[k] - init[k], run[k] - init[k]
      assert (step_single != 0).mean() > 0.9, k  # the step moved (nearly) every parameter
      np.testing.assert_allclose(run[k], single[k], rtol=1e-5, atol=1e-6, err_msg=f"{name} {k}")
      np.testing.assert_allclose(
        step_run,
        step_single,
        rtol=1e-3,
        atol=1e-4 * np.abs(step_single).max(),
        err_msg=f"{name} {k}",
      )
  # The meshes really split the parameters (global shape, per-device shape, devices): the
  # logical rules put vocabulary, heads and FFN units over "model", FSDP the largest dimension.
  specs = {name: eval(str(np.load(tmp_path / f"{name}.npz")["specs"])) for name in MESHES}
  assert specs["8x1"] == {
    "embed": ((40, 16), (40, 16), 8),
    "w_q": ((16, 2, 8), (16, 2, 8), 8),
    "up": ((16, 32), (16, 32), 8),
  }
  assert specs["4x2"] == {
    "embed": ((40, 16), (20, 16), 8),
    "w_q": ((16, 2, 8), (16, 1, 8), 8),
    "up": ((16, 32), (16, 16), 8),
  }
  assert specs["4x2_scan"] == {  # the 4x2 split, the layer axis whole
    "embed": ((40, 16), (20, 16), 8),
    "w_q": ((1, 16, 2, 8), (1, 16, 1, 8), 8),
    "up": ((1, 16, 32), (1, 16, 16), 8),
  }
  assert specs["4x2_fsdp"] == {
    "embed": ((40, 16), (20, 16), 8),
    "w_q": ((16, 2, 8), (8, 2, 8), 8),
    "up": ((16, 32), (16, 16), 8),
  }
