"""`python sample.py --config configs/glauber.py --workdir DIR`: Glauber chains on an MLM.

Writes trajectory/chunk_*.npz (free tokens every record_every steps), samples.jsonl (the text
of each chain at each recorded step, step 0 included), results.json, report.md (example
trajectories) and, when config.embedding_model is set, drift.png: the semantic drift
1 - cos(E(x_t), E(x_0)) over time. Killed runs resume from their last chunk (orbax
checkpoint of the chain state); the continuation is bitwise that of an uninterrupted run.
"""

from __future__ import annotations

import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from gmlm import nn as gm
from glauber import chains, init_states, recording
from glauber import rejection_free as nfold
from gmlm.runs import RunDir, atomic_write_text, markdown_table

ENTRY_POINT = "sample.py"

MODES = ("plain", "rejection_free", "auto")


def load_model(name: str, dtype: str = "float32"):
  name = name or "default"   # the embedded English MLM (glauber/models/default.py)
  try:
    model, tokenizer = gm.load(name, dtype=jnp.dtype(dtype))
  except (OSError, FileNotFoundError) as e:
    raise ValueError(f"cannot load model {name!r}: {e}") from e
  if tokenizer is None:
    raise ValueError(f"model {name!r} ships no tokenizer; Glauber chains need one")
  return model, tokenizer


def initial_tokens(config, tokenizer, lay, candidates) -> np.ndarray:
  if config.init == "text":
    return init_states.from_text(tokenizer, lay, config.init_text, config.num_chains,
                                 pad=config.pad_text)
  if config.init == "random":
    return init_states.random_tokens(np.random.default_rng(config.seed), lay, candidates,
                                     config.num_chains)
  if config.init == "mask":
    return init_states.all_mask(lay, config.num_chains)
  raise ValueError(f"config.init={config.init!r}; choose 'text', 'random' or 'mask'")


def _mesh(num_chains: int) -> Mesh | None:
  devices = jax.devices()
  if len(devices) == 1 or num_chains % len(devices):
    return None
  return Mesh(np.array(devices), ("data",))


def run(config, workdir: str) -> dict:
  rd = RunDir(workdir, config)
  if config.mode not in MODES:
    raise ValueError(f"config.mode={config.mode!r}; choose one of {MODES}")
  if config.num_steps < config.record_every or config.record_every < 1:
    raise ValueError(f"need 1 <= record_every ({config.record_every}) <= num_steps "
                     f"({config.num_steps})")
  if config.mode != "plain" and config.method != "glauber":
    raise ValueError(f"mode={config.mode!r} applies to method='glauber' only (got "
                     f"{config.method!r}); use mode='plain'")
  model, tokenizer = load_model(config.model, config.get("dtype", "float32"))
  vocab_size = model.config.vocab_size
  candidates = chains.candidate_ids(tokenizer, vocab_size, exclude_special=config.exclude_special,
                                    exclude_pattern=config.exclude_pattern or None)
  lay = init_states.layout(tokenizer, config.num_sites, config.prefix,
                           init_states.max_sequence_length(model))
  x0_BL = initial_tokens(config, tokenizer, lay, candidates)
  spec = chains.make_spec(candidates, vocab_size, lay.mask_id, lay.offset, lay.num_sites,
                          config.temperature, config.top_k, config.top_p)
  mode, median_stay = config.mode, None
  if mode == "auto":   # costs n forward rows for each of up to 64 chains
    mode, median_stay = nfold.choose_mode(model, spec, x0_BL, config.auto_threshold or None)

  state = chains.init_state(x0_BL)
  traj, manager = recording.Trajectory(rd.path), recording.checkpoint_manager(rd.path)
  restored = recording.restore(manager, state)
  done, state = restored if restored is not None else (0, state)
  traj.drop_from(done)
  num_records = config.num_steps // config.record_every
  per_chunk = max(1, config.chunk_records)
  num_chunks = -(-num_records // per_chunk)
  key, mesh = jax.random.key(config.seed), _mesh(config.num_chains)
  t0, steps_run = time.time(), 0
  for chunk in range(done, num_chunks):
    R = min(per_chunk, num_records - chunk * per_chunk)
    if mode == "rejection_free":
      state, rec = nfold.run(key, model, spec, state, R, config.record_every,
                             record_logprobs=config.record_logprobs, mesh=mesh)
    else:
      state, rec = chains.run(key, model, spec, state, R, config.record_every,
                              method=config.method, k=config.block_size,
                              record_logprobs=config.record_logprobs, mesh=mesh)
    steps_R = (chunk * per_chunk + 1 + np.arange(R)) * config.record_every
    traj.write(chunk, steps_R, rec["tokens_RBN"], rec.get("logp_RBN"))
    recording.save(manager, chunk + 1, state)
    steps_run += R * config.record_every
    rd.log_metrics(int(steps_R[-1]), {"chunk": chunk, "iterations": int(state.t)})
  seconds = time.time() - t0

  data = traj.load()
  steps = np.concatenate([[0], data["steps_R"]])
  free_RBN = np.concatenate([x0_BL[None, :, lay.offset:lay.offset + lay.num_sites],
                             data["tokens_RBN"]])
  texts_RB = np.asarray(recording.decode(tokenizer, free_RBN), object).reshape(free_RBN.shape[:2])
  lines = [json.dumps({"chain": b, "step": int(steps[r]), "text": texts_RB[r, b]})
           for b in range(texts_RB.shape[1]) for r in range(len(steps))]
  atomic_write_text(rd.file("samples.jsonl"), "\n".join(lines) + "\n")
  changed = float(np.mean(free_RBN[1:] != free_RBN[:-1])) if len(steps) > 1 else 0.0
  results = {"mode": mode, "median_stay_probability_at_start": median_stay,
             "num_chains": config.num_chains, "num_steps": int(steps[-1]),
             "simulated_steps_per_second": (config.num_chains * steps_run / seconds
                                            if steps_run else None),
             "kernel_iterations": int(state.t),
             "fraction_of_sites_changed_between_records": changed,
             "num_candidates": int(candidates.size)}
  drift_RB = None
  if config.embedding_model:
    emb_model, emb_tok = gm.load(config.embedding_model)
    prefix_text = config.prefix + " " if config.prefix else ""
    flat = [prefix_text + t for t in texts_RB.reshape(-1)]
    e_XD = np.concatenate([np.asarray(gm.embed(emb_model, emb_tok, flat[i:i + 256]))
                           for i in range(0, len(flat), 256)])
    e_RBD = e_XD.reshape(*texts_RB.shape, -1)
    drift_RB = 1.0 - np.einsum("rbd,bd->rb", e_RBD, e_RBD[0])
    results["final_mean_drift"] = float(drift_RB[-1].mean())
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, drift_RB, color="tab:blue", alpha=0.15, lw=0.8)
    ax.plot(steps, drift_RB.mean(1), color="k", lw=2, label="mean over chains")
    ax.set_xlabel("Glauber step t")
    ax.set_ylabel("1 - cos(E(x_t), E(x_0))")
    ax.set_title(f"Semantic drift, T = {config.temperature}, n = {lay.num_sites}")
    ax.legend()
    rd.savefig(fig, "drift.png")
    plt.close(fig)
  rd.write_results(results)
  rd.write_report(_report(config, results, steps, texts_RB, drift_RB is not None))
  return results


def _report(config, results, steps, texts_RB, with_drift: bool) -> str:
  shown = sorted(set(np.linspace(0, len(steps) - 1, min(6, len(steps))).astype(int)))
  out = [f"# Glauber chains: {config.model or 'SPLADE-tiny (default)'}\n",
         f"T = {config.temperature}, n = {config.num_sites} free sites, prefix "
         f"{config.prefix!r}, {config.num_chains} chains x {results['num_steps']} steps, method "
         f"{config.method}, mode **{results['mode']}** (median stay probability at the start: "
         f"{results['median_stay_probability_at_start']}).\n",
         markdown_table(["figure", "value"], [[k, v] for k, v in sorted(results.items())])]
  for b in range(min(3, texts_RB.shape[1])):
    out.append(f"\n## Chain {b}\n")
    out.append(markdown_table(["step", "text"],
                              [[int(steps[r]), texts_RB[r, b].replace("|", "\\|")] for r in shown]))
  if with_drift:
    out.append("\n![semantic drift](drift.png)\n")
  return "\n".join(out)
