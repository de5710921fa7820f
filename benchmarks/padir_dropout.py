"""What dropout costs a training step, by its bit generator (model.dropout_rng), side by side in
one process.

  python benchmarks/padir_dropout.py [--models ar,dag,dag:2] [--length 48] [--steps 20] [--repeats 3]
  python benchmarks/padir_dropout.py --tiny        # a tiny model: a smoke run

For each model of the reordering family (configs/padir_family.py's sov config: 3+3 layers,
d = 128, B = 64; "ar" the reference, "dag" DA-Transformer's decoder over 2 vertices a source
token; "dag:N" the same with N decoder layers, the encoder's 3 kept) the jitted training step (padir.training.loop.make_steps, the loop's own) runs on a batch
of random pieces, source and target --length long (the family pads a batch to its longest
pair, 40-56 pieces on sov), in three settings:
- no dropout (the PaDIR configs' default);
- dropout 0.1, dropout_rng "xla_default": a layer's masks from jax.random.bits of an rbg key,
  XLA's RngBitGenerator at its default algorithm (Philox on a CPU): every run before the key;
- dropout 0.1, dropout_rng "threefry": the same op at its ThreeFry algorithm (the default now).
The rows run round-robin, --steps steps a turn for --repeats turns after one warm-up step
each, so a load that comes and goes falls on every row alike; each row's time is the median
over its turns of the mean step. Columns: seconds a step, the ratio to the model's no-dropout
row (what dropout costs), and XLA's compiled temporary memory of the step (its peak working
set beside the state: the forward pass, the backward and the update, the program the rows time,
compiled once). The masks themselves are checked in tests/padir/test_padir_dropout.py
(the same dropout either way). A last line compares each DAG's step without dropout to the
AR's with it, as the family trains them. Time it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from configs import padir_family  # noqa: E402
from gmlm.runs import markdown_table  # noqa: E402
from padir.model import transformer as model_lib  # noqa: E402
from padir.training import loop, optim  # noqa: E402

SETTINGS = (  # name, dropout rate, generator
  ("no dropout", 0.0, "threefry"),
  ("dropout 0.1, xla_default (before)", 0.1, "xla_default"),
  ("dropout 0.1, threefry (now)", 0.1, "threefry"),
)


def parse_model(spec: str) -> tuple[str, int]:
  """ "ar", "dag" or "dag:N" -> (the family's model, decoder layers; 0: the backbone's)."""
  name, _, layers = spec.partition(":")
  if name not in ("ar", "dag") or (layers and (name != "dag" or not layers.isdigit())):
    raise ValueError(f"--models: no model {spec!r}; choose from ar, dag, dag:N (N decoder layers)")
  return name, int(layers or 0)


def config_of(model: str, rate: float, rng: str, length: int, tiny: bool):
  name, layers = parse_model(model)
  c = padir_family.get_config(f"sov,{name}")
  c.model.update(dropout_rate=rate, dropout_rng=rng)
  if layers:
    c.model.num_decoder_layers = layers
  c.data.update(max_source_length=length, max_target_length=length, vocab_size=267)
  if tiny:
    c.model.update(num_encoder_layers=1, num_heads=2, d_model=16, d_ff=32)
    c.model.num_decoder_layers = min(c.model.num_decoder_layers, 2)
    c.train.batch_size = 4
  return c


class Row:
  """One model in one setting: its model, optimizer and compiled step."""

  def __init__(self, model: str, setting: tuple, length: int, tiny: bool):
    self.model, (self.name, rate, rng) = model, setting
    self.config = c = config_of(model, rate, rng, length, tiny)
    cfg = model_lib.ModelConfig.from_run_config(c, c.data.vocab_size)
    self.net = model_lib.Transformer(
      cfg, rngs=nnx.Rngs(params=0, dropout=jax.random.key(0, impl="rbg"))
    )
    self.optimizer = nnx.Optimizer(self.net, optim.make_optimizer(c.train), wrt=nnx.Param)
    self.step, _ = loop.make_steps(c)
    rng_np = np.random.default_rng(0)
    B, V = c.train.batch_size, c.data.vocab_size
    tokens = rng_np.integers(6, V, (B, length)).astype(np.int32)
    tokens[:, -1] = 2  # EOS: a pair of `length` pieces, no padding
    self.batch = {"inputs": jnp.asarray(tokens), "targets": jnp.asarray(tokens[:, ::-1].copy())}
    self.batch["targets"] = self.batch["targets"].at[:, -1].set(2)
    self.key, self.dropout_key, self.t = jax.random.key(0), jax.random.key(1, impl="rbg"), 0
    self.times: list[float] = []
    self.net.train()
    self.graphdef, self.state = nnx.split((self.net, self.optimizer))
    # One compile serves both columns: the step the rows time is the one whose memory is read.
    self.compiled = (
      jax.jit(self.pure).lower(self.state, self.batch, self.key, self.dropout_key, 0).compile()
    )
    m = self.compiled.memory_analysis()
    self.temp_mb = m.temp_size_in_bytes / 2**20 if m is not None else float("nan")

  def pure(self, state, batch, key, dropout_key, t):
    """The loop's training step as a function of the state: the new state and the metrics
    out, so XLA keeps the backward pass and the update (a step that returned its loss alone
    would be compiled, and measured, as the forward pass)."""
    net, optimizer = nnx.merge(self.graphdef, state)
    metrics = self.step(net, optimizer, batch, key, dropout_key, t)
    return nnx.state((net, optimizer)), metrics

  def run(self, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
      self.state, metrics = self.compiled(
        self.state,
        self.batch,
        jax.random.fold_in(self.key, self.t),
        jax.random.fold_in(self.dropout_key, self.t),
        np.int32(self.t),
      )
      self.t += 1
    jax.block_until_ready(metrics)
    return (time.perf_counter() - t0) / steps


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument(
    "--models", default="ar,dag", help="of the family: ar, dag, dag:N (N decoder layers)"
  )
  parser.add_argument("--length", type=int, default=48, help="pieces a source and a target")
  parser.add_argument("--steps", type=int, default=20, help="steps a row runs a turn")
  parser.add_argument("--repeats", type=int, default=3, help="turns, round-robin over the rows")
  parser.add_argument("--tiny", action="store_true", help="a tiny model, few steps: a smoke run")
  args = parser.parse_args(argv)
  models = [m.strip() for m in args.models.split(",") if m.strip()]
  for m in models:
    try:
      parse_model(m)
    except ValueError as e:
      parser.error(str(e))
  if args.tiny:
    args.length, args.steps, args.repeats = 8, 2, 2
  rows = [Row(m, s, args.length, args.tiny) for m in models for s in SETTINGS]
  for row in rows:
    row.run(1)  # compile and warm up
  for _ in range(args.repeats):
    for row in rows:
      row.times.append(row.run(args.steps))
  table = []
  for row in rows:
    base = next(r for r in rows if r.model == row.model and r.name == SETTINGS[0][0])
    s = float(np.median(row.times))
    table.append(
      [
        row.model,
        row.name,
        f"{s:.3f}",
        f"{s / float(np.median(base.times)):.2f}x",
        f"{row.temp_mb:.1f}",
      ]
    )
  print(
    f"B = {rows[0].config.train.batch_size}, {args.length} pieces a side, "
    f"median over {args.repeats} turns of {args.steps} steps, jax {jax.__version__}, "
    f"{jax.devices()[0].platform}"
  )
  print(
    markdown_table(["model", "setting", "s / step", "vs no dropout", "compiled temp MB"], table)
  )
  for m in models:
    before = next(r for r in rows if r.model == m and "before" in r.name)
    now = next(r for r in rows if r.model == m and "now" in r.name)
    print(
      f"{m}: a step with dropout, before / now: "
      f"{np.median(before.times) / np.median(now.times):.2f}x"
    )
  if "ar" in models:  # the family trains the AR with dropout 0.1 and the DAG without
    ar = np.median(next(r for r in rows if r.model == "ar" and "now" in r.name).times)
    for m in models:
      if m != "ar":
        dag = np.median(next(r for r in rows if r.model == m and r.name == "no dropout").times)
        print(
          f"at the family's defaults (AR dropout 0.1, threefry; {m} none): {m} / ar {dag / ar:.2f}x"
        )
  print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
  return 0


if __name__ == "__main__":
  sys.exit(main())
