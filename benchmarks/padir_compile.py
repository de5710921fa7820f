"""Issue 40's CPU targets, side by side in one process: what scanned layers, remat, the chunked
token loss and gradient accumulation do to PaDIR's training step.

  python benchmarks/padir_compile.py [--json OUT]     # paper size: tens of minutes on 2 cores
  python benchmarks/padir_compile.py --tiny           # a tiny model: a smoke run in seconds

Tables (each printed as soon as it is measured, flushed; --json gets every row):
1. compile: the paper-size training step (6+6 layers, d 512, FFN 2,048, 8 heads, 32k vocabulary,
   B 256, T = S = 64, dropout 0.1, two stages, AdaFactor), float32 and bfloat16, one device, with
   the layers unrolled (a Python loop; the baseline row with a dropout draw per site, as the step
   was) and scanned: seconds to trace and lower, seconds to
   compile, the lowered module's size (characters of StableHLO) and the compiled module's
   (instructions), the ratio unrolled / scanned; and scanned with the loss's two stages a scan
   too (loss.scan_stages: the decoder traced once, not per stage).
2. memory: the same step (float32, scanned unless the row says loop) under each remat policy,
   with and without the chunked token loss (loss.logits_chunk): XLA's compiled plan
   (memory_analysis: temporaries, i.e. activations and workspace) per sentence pair at B 256,
   and the seconds of one step on this CPU at B = 8 (a separate compile at that batch).
3. plan on 8 devices: the paper's batch of 2,048 pairs as 8 micro-batches of 256
   (train.grad_accum_steps = 8), data-parallel over 8 simulated CPU devices
   (XLA_FLAGS=--xla_force_host_platform_device_count=8, set here before jax loads): bytes per
   device (arguments, outputs, temporaries) against an H100's 80 GB.
4. step time: the synthetic and Bible configs' training step (their shapes, random batches):
   as it was (the loop, a dropout draw per site), unrolled and scanned, the median of timed
   steps after a warm-up, and the ratios.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (
  os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from configs import padir_bible_en_es, padir_synthetic  # noqa: E402
from gmlm.runs import markdown_table  # noqa: E402
from padir.model import transformer as model_lib  # noqa: E402
from padir.training import loop as training  # noqa: E402
from padir.training import optim  # noqa: E402

H100_BYTES = 80e9


def paper_config(tiny: bool, **over):
  """configs/padir_bible_en_es.py at the paper's size (tiny: 2+2 layers, d 32, V 200, B 8, T 8)."""
  c = padir_bible_en_es.get_config()
  if tiny:
    c.model.update(num_encoder_layers=2, num_decoder_layers=2, num_heads=2, d_model=32, d_ff=64)
    c.data.update(vocab_size=200, max_source_length=8, max_target_length=8)
    c.train.batch_size = 8
  else:
    c.model.update(num_encoder_layers=6, num_decoder_layers=6, num_heads=8, d_model=512, d_ff=2048)
    c.data.update(vocab_size=32000, max_source_length=64, max_target_length=64)
    c.train.batch_size = 256
  c.model.dropout_rate = 0.1
  for k, v in over.items():
    section, name = k.split(".")
    c[section][name] = v
  return c


def step_program(config, concrete: bool = False):
  """(the pure training step state, batch, key, dropout key, step -> state, loss; its state:
  abstract shapes, or real arrays with concrete)."""
  cfg = model_lib.ModelConfig.from_run_config(config, config.data.vocab_size)

  def make():
    model = model_lib.Transformer(
      cfg, rngs=nnx.Rngs(params=0, dropout=jax.random.key(0, impl="rbg"))
    )
    return model, nnx.Optimizer(model, optim.make_optimizer(config.train), wrt=nnx.Param)

  train_step, _ = training.make_steps(config)
  graphdef, state = nnx.split(make() if concrete else nnx.eval_shape(make))

  def pure(state, batch, key, dropout_key, step):
    model, optimizer = nnx.merge(graphdef, state)
    metrics = train_step(model, optimizer, batch, key, dropout_key, step)
    return nnx.state((model, optimizer)), metrics["loss"]

  return pure, state


def batch_of(config, B: int, sharding=None, concrete: bool = False):
  S, T = config.data.max_source_length, config.data.max_target_length
  if concrete:
    rng = np.random.default_rng(0)
    V = config.data.vocab_size
    return {
      "inputs": jnp.asarray(rng.integers(6, V, (B, S)), jnp.int32),
      "targets": jnp.asarray(rng.integers(6, V, (B, T)), jnp.int32),
    }
  return {
    "inputs": jax.ShapeDtypeStruct((B, S), jnp.int32, sharding=sharding),
    "targets": jax.ShapeDtypeStruct((B, T), jnp.int32, sharding=sharding),
  }


KEYS = (jax.random.key(0), jax.random.key(1, impl="rbg"), np.int32(0))


def compile_row(config, B: int, state_sharding=None, batch_sharding=None) -> tuple[dict, object]:
  pure, state = step_program(config)
  if state_sharding is not None:
    state = jax.tree.map(
      lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=state_sharding), state
    )
  t0 = time.perf_counter()
  lowered = jax.jit(pure).lower(state, batch_of(config, B, batch_sharding), *KEYS)
  t1 = time.perf_counter()
  compiled = lowered.compile()
  t2 = time.perf_counter()
  m = compiled.memory_analysis()
  return {
    "lower_s": round(t1 - t0, 2),
    "compile_s": round(t2 - t1, 2),
    "stablehlo_chars": len(lowered.as_text()),
    "hlo_instructions": sum(1 for line in compiled.as_text().splitlines() if " = " in line),
    "temp_bytes": m.temp_size_in_bytes,
    "argument_bytes": m.argument_size_in_bytes,
    "output_bytes": m.output_size_in_bytes,
  }, compiled


def median_row(config, B: int, repeats: int) -> dict:
  """compile_row `repeats` times (traced, lowered and compiled afresh each time): the median
  seconds of each phase (a compile on this CPU varies by ~10% from one to the next)."""
  rows = [compile_row(config, B)[0] for _ in range(max(1, repeats))]
  out = dict(rows[0])
  for k in ("lower_s", "compile_s"):
    out[k] = round(float(np.median([r[k] for r in rows])), 2)
  out["repeats"] = len(rows)
  return out


def step_seconds(config, B: int, calls: int) -> float:
  pure, state = step_program(config, concrete=True)
  step = jax.jit(pure, donate_argnums=0)
  batch = batch_of(config, B, concrete=True)
  state, loss = step(state, batch, *KEYS)
  loss.block_until_ready()
  times = []
  for _ in range(calls):
    t0 = time.perf_counter()
    state, loss = step(state, batch, *KEYS)
    loss.block_until_ready()
    times.append(time.perf_counter() - t0)
  return float(np.median(times))


def show(title: str, header: list[str], rows: list[list]) -> None:
  print(f"\n{title}\n" + markdown_table(header, rows), flush=True)


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--tiny", action="store_true", help="a tiny model: seconds (smoke test)")
  p.add_argument("--json", help="write every row here")
  p.add_argument("--skip", default="", help="comma-separated tables to leave out (1,2,3,4)")
  p.add_argument(
    "--repeats", type=int, default=1, help="table 1: compile each variant N times, the medians"
  )
  args = p.parse_args(argv)
  tiny, skip = args.tiny, set(filter(None, args.skip.split(",")))
  B = 8 if tiny else 256
  results: dict[str, list] = {"compile": [], "memory": [], "plan": [], "step": []}
  print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, {len(jax.devices())} devices")

  if "1" not in skip:
    rows = []
    # the step as it was (the loop, AdaFactor per array, each dropout site drawing its own
    # random bits: model.dropout_draw "site"), then with a layer's dropout masks from one draw
    # (the default) and AdaFactor once per layer kind's parameter, the scan over layers stored
    # stacked (the accelerator default: scan_layers "auto"; its AdaFactor runs once per stacked
    # array, vmapped over the layers), and that with the loss's two stages a scan too
    # (loss.scan_stages: the decoder traced once)
    variants = (
      ("loop", False, False),
      ("loop", True, False),
      ("scan", True, False),
      ("scan", True, True),
    )
    if tiny:  # the smoke run: today's step and the default only
      variants = (("loop", False, False), ("scan", True, False))
    for dtype in ("float32", "bfloat16"):
      got = {}
      for layout, by_shape, stages in variants:
        over = {
          "model.dtype": dtype,
          "model.scan_layers": layout,
          "train.optimizer_by_shape": by_shape,
          "loss.scan_stages": stages,
          "model.dropout_draw": "site" if (layout, by_shape) == ("loop", False) else "layer",
        }
        r = median_row(paper_config(tiny, **over), B, args.repeats)
        name = "scan (stacked)" + (", stages scanned" if stages else "")
        if layout == "loop":
          name = "loop, dropout per site" if over["model.dropout_draw"] == "site" else "loop"
        r.update(
          dtype=dtype,
          layout=name,
          optimizer="per layer kind" if by_shape else "per array",
        )
        results["compile"].append(r)
        got[layout, by_shape, stages] = r
        rows.append(
          [
            dtype,
            r["layout"],
            r["optimizer"],
            r["lower_s"],
            r["compile_s"],
            r["stablehlo_chars"],
            r["hlo_instructions"],
            f"{r['temp_bytes'] / B / 1e6:.2f}",
          ]
        )
      lo = got["loop", False, False]
      for key, label in (
        (("scan", True, False), "today / default"),
        (("scan", True, True), "today / stages scanned"),
      ):
        if key not in got:
          continue
        sc = got[key]
        ratio = (lo["lower_s"] + lo["compile_s"]) / (sc["lower_s"] + sc["compile_s"])
        rows.append(
          [
            dtype,
            "loop / scan",
            label,
            f"{lo['lower_s'] / sc['lower_s']:.2f}x",
            f"{lo['compile_s'] / sc['compile_s']:.2f}x (total {ratio:.2f}x)",
            f"{lo['stablehlo_chars'] / sc['stablehlo_chars']:.2f}x",
            f"{lo['hlo_instructions'] / sc['hlo_instructions']:.2f}x",
            "",
          ]
        )
      show(
        "Table 1: compile of the training step, one device",
        [
          "dtype",
          "layers",
          "AdaFactor",
          "trace+lower s",
          "compile s",
          "StableHLO chars",
          "HLO instructions",
          "temp MB / pair",
        ],
        rows,
      )
    if not tiny:
      # The ceiling of layer folding on this CPU: the loop with one layer of each kind compiles
      # what no scan can go below (one traced layer per kind), the rest of the step is fixed.
      r, _ = compile_row(
        paper_config(
          tiny,
          **{
            "model.scan_layers": "loop",
            "model.num_encoder_layers": 1,
            "model.num_decoder_layers": 1,
          },
        ),
        B,
      )
      lo = results["compile"][0]  # float32, the loop, AdaFactor per array: today's step
      floor = r["lower_s"] + r["compile_s"]
      r.update(dtype="float32", layout="loop, 1+1 layers (the floor of folding)")
      results["compile"].append(r)
      show(
        "Table 1b: the floor of layer folding (float32, one layer per kind, unrolled)",
        [
          "trace+lower s",
          "compile s",
          "HLO instructions",
          "today / floor (the most any scan gives)",
        ],
        [
          [
            r["lower_s"],
            r["compile_s"],
            r["hlo_instructions"],
            f"{(lo['lower_s'] + lo['compile_s']) / floor:.2f}x",
          ]
        ],
      )

  if "2" not in skip:
    rows, base = [], None
    small_B, calls = (4, 3) if tiny else (8, 3)
    chunk = 16 if tiny else 2048
    variants = [("loop", "none", 0), ("scan", "none", 0), ("scan", "full", chunk)]
    if tiny:  # the smoke run: the baseline and the best, each row two compiles
      variants = [variants[0], variants[2]]
    else:
      variants[2:2] = [("scan", "full", 0), ("scan", "dots_saveable", 0)]
      variants += [("scan", "dots_saveable", chunk)]
    for layout, remat, chunk in variants:
      over = {
        "model.scan_layers": layout,
        "model.remat": remat,
        "loss.logits_chunk": chunk,
      }
      r, _ = compile_row(paper_config(tiny, **over), B)
      small = paper_config(tiny, **over)
      small.train.batch_size = small_B
      r.update(
        layout=layout,
        remat=remat,
        logits_chunk=chunk,
        step_s=round(step_seconds(small, small_B, calls), 3),
        step_batch=small_B,
      )
      per_pair = r["temp_bytes"] / B
      base = base or per_pair
      results["memory"].append(r)
      rows.append(
        [
          layout,
          remat,
          chunk,
          f"{per_pair / 1e6:.2f}",
          f"{base / per_pair:.2f}x",
          r["step_s"],
          r["compile_s"],
        ]
      )
      show(
        f"Table 2: activations per sentence pair (compiled plan, B {B}, float32) and step "
        f"time at B {small_B} on this CPU",
        [
          "layers",
          "remat",
          "logits_chunk",
          "temp MB / pair",
          "smaller than loop",
          f"s/step (B {small_B})",
          "compile s",
        ],
        rows,
      )

  if "3" not in skip:
    devices = jax.devices()[:8]
    mesh = jax.sharding.Mesh(np.array(devices), ("data",))
    K, big_B = (2, 16) if tiny else (8, 2048)
    rows = []
    policies = [("full", 16)] if tiny else [("full", 2048), ("dots_saveable", 2048)]
    for remat, chunk in policies:  # (the smoke run: one 8-device compile)
      over = {
        "model.scan_layers": "scan",  # as the table says ("auto" would pick the loop on a CPU)
        "train.grad_accum_steps": K,
        "model.remat": remat,
        "loss.logits_chunk": chunk,
        "train.batch_size": big_B,
      }
      r, _ = compile_row(
        paper_config(tiny, **over), big_B, NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
      )
      total = r["temp_bytes"] + r["argument_bytes"] + r["output_bytes"]
      r.update(remat=remat, logits_chunk=chunk, K=K, batch=big_B, per_device_bytes=total)
      results["plan"].append(r)
      rows.append(
        [
          big_B,
          K,
          remat,
          chunk,
          f"{r['argument_bytes'] / 1e9:.2f}",
          f"{r['temp_bytes'] / 1e9:.2f}",
          f"{total / 1e9:.2f}",
          "yes" if total <= H100_BYTES else "NO",
        ]
      )
      show(
        f"Table 3: the paper's batch on {len(devices)} simulated devices, data parallel, "
        "float32, scanned",
        [
          "batch",
          "micro-batches",
          "remat",
          "logits_chunk",
          "arguments GB/device",
          "temporaries GB/device",
          "total GB/device",
          "fits 80 GB",
        ],
        rows,
      )

  if "4" not in skip:
    rows = []
    configs = [("synthetic", padir_synthetic)]
    configs += [] if tiny else [("bible", padir_bible_en_es)]
    for name, module in configs:
      times = {}
      # the step as it was (the loop, a dropout draw per site), the loop and the scan as now
      for label, layout, draw in (
        ("as it was", "loop", "site"),
        ("loop", "loop", "layer"),
        ("scan", "scan", "layer"),
      ):
        c = module.get_config()
        c.model.scan_layers = layout
        c.model.dropout_draw = draw
        if tiny:
          c.model.update(num_encoder_layers=2, num_decoder_layers=2, d_model=32, d_ff=64)
          c.data.update(vocab_size=200, max_source_length=8, max_target_length=8)
          c.train.batch_size = 4
        times[label] = step_seconds(c, c.train.batch_size, 3 if tiny else 10)
        results["step"].append(
          {
            "config": name,
            "layout": label,
            "dropout_draw": draw,
            "step_s": times[label],
            "batch": c.train.batch_size,
          }
        )
      rows.append(
        [
          name,
          c.train.batch_size,
          *(f"{times[k]:.4f}" for k in ("as it was", "loop", "scan")),
          f"{times['as it was'] / times['loop']:.2f}x",
          f"{times['loop'] / times['scan']:.2f}x",
        ]
      )
      show(
        "Table 4: training step time on this CPU (median)",
        [
          "config",
          "batch",
          "as it was (loop, dropout per site) s/step",
          "loop s/step",
          "scan s/step",
          "as it was / loop",
          "loop / scan",
        ],
        rows,
      )

  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump(results, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
