"""`python sample.py --config configs/glauber.py --workdir DIR`: Glauber chains on an MLM.

Writes trajectory/chunk_*.npz (free tokens every record_every steps), samples.jsonl (the text
of each chain at each recorded step, step 0 included, the frozen prefix in front), results.json,
report.md (example trajectories; how much of each starting text fit the n free sites) and, when
config.embedding_model is set, drift.png: the semantic drift 1 - cos(E(x_t), E(x_0)) over time,
E that model's sentence embedding. Killed runs resume from their last chunk (a checkpoint of the
chain state); the continuation is bitwise that of an uninterrupted run, metrics.jsonl included;
a missing or damaged chunk is recomputed from the checkpoint before it. A rerun of a finished
run returns its stored results (its measured throughput included) without recomputing.

The chunks are pipelined for accelerators: a chunk is one jitted call with no host round trip
inside; its records and final state travel to the host in one asynchronous copy started as
soon as it is dispatched, the next chunk takes over the state's device buffers (donated), and
the previous chunk's records are written while it runs.
"""

from __future__ import annotations

import json
import re
import time

import jax
import numpy as np

from glauber import chains, init_states, oracle, recording, rejection_free
from glauber.jobs import finished
from glauber.layout import Layout, max_sequence_length
from glauber.oracle import load_mlm, model_name, validate_model
from gmlm import checks
from gmlm.checks import UserError
from gmlm.core.mesh import data_mesh
from gmlm.runs import RunDir, markdown_table

ENTRY_POINT = "sample.py"

MODES = ("plain", "rejection_free", "auto")
INITS = ("text", "random", "mask")


def validate(config) -> None:
  """Checks every key the job reads; loads nothing and writes nothing."""
  validate_model(config)
  init_states.check_temperature(config)
  checks.check_int(config, "top_k", lo=0)
  checks.check_float(config, "top_p", lo=0, hi=1, lo_open=True)
  for key in ("exclude_special", "pad_text", "record_logprobs"):
    checks.check(isinstance(checks.get(config, key), bool), key, config[key], "must be True/False")
  _check_pattern(config, "exclude_pattern")
  checks.check(
    isinstance(checks.get(config, "prefix"), str), "prefix", config.prefix, "must be a string"
  )
  checks.check_model_path(config, "embedding_model")  # a missing one refused now, not at the end
  checks.check_int(config, "num_sites", lo=1)
  oracle.check_sites(config, "num_sites")
  if checks.check_choice(config, "init", INITS) == "text":
    text = checks.get(config, "init_text")
    ok = (
      isinstance(text, str)
      and text.strip()
      or (isinstance(text, (list, tuple)) and text and all(isinstance(t, str) for t in text))
    )
    checks.check(
      bool(ok),
      "init_text",
      text,
      "must be a text, texts separated by '|', a text "
      "file (one text per line) or a non-empty list of texts",
    )
    try:
      init_states.read_texts(text)
    except UserError as e:
      raise checks.ConfigError("init_text", text, str(e)) from None
  checks.check_int(config, "num_chains", lo=1)
  oracle.check_chain_memory(config, "num_chains")
  num_steps = checks.check_int(config, "num_steps", lo=1)
  checks.check_int(config, "record_every", lo=1, hi=num_steps)
  checks.check_multiple(config, "num_steps", "record_every")  # was rounded down silently
  checks.check_int(config, "chunk_records", lo=1)
  method = checks.check_choice(config, "method", chains.METHODS)
  k = checks.check_int(config, "block_size", lo=1, hi=config.num_sites)
  checks.check(
    k == 1 or method in ("block", "sweep"),
    "block_size",
    k,
    f"method={method!r} updates one site (glauber) or all sites (parallel) per step; "
    "a block size k > 1 applies to 'block' and 'sweep' only",
  )
  mode = checks.check_choice(config, "mode", MODES)
  checks.check(
    mode == "plain" or method == "glauber",
    "mode",
    mode,
    f"applies to method='glauber' only (got {method!r}); use mode='plain'",
  )
  checks.check_float(config, "auto_threshold", lo=0, hi=1)
  checks.check_int(config, "seed", lo=0)


def _check_pattern(config, key: str) -> None:
  pattern = checks.get(config, key)
  checks.check(isinstance(pattern, str), key, pattern, "must be a regular expression ('' = none)")
  try:
    re.compile(pattern)
  except re.error as e:
    raise checks.ConfigError(key, pattern, f"not a regular expression: {e}") from e


def initial_tokens(config, tokenizer, lay: Layout, candidates) -> np.ndarray:
  if config.init == "text":
    return init_states.from_text(
      tokenizer, lay, config.init_text, config.num_chains, pad=config.pad_text
    )
  if config.init == "random":
    return init_states.random_tokens(
      np.random.default_rng(config.seed), lay, candidates, config.num_chains
    )
  return init_states.all_mask(lay, config.num_chains)


def run(config, workdir: str) -> dict:
  validate(config)
  if (stored := finished(config, workdir)) is not None:
    return stored
  model, tokenizer = load_mlm(config.model, config.dtype, config.allow_pickle)
  vocab_size = model.config.vocab_size
  candidates = chains.candidate_ids(
    tokenizer,
    vocab_size,
    exclude_special=config.exclude_special,
    exclude_pattern=config.exclude_pattern or None,
  )
  lay = Layout.from_tokenizer(
    tokenizer, config.num_sites, config.prefix, max_sequence_length(model)
  )
  x0_BL = initial_tokens(config, tokenizer, lay, candidates)
  spec = chains.make_spec(
    candidates, vocab_size, lay, config.temperature, config.top_k, config.top_p
  )
  rd = RunDir(workdir, config)
  results = sample(config, rd, model, spec, x0_BL)
  results["num_candidates"] = int(candidates.size)
  if config.init == "text":
    results["init_texts"] = init_states.text_cuts(tokenizer, lay, config.init_text)

  data = recording.Trajectory(rd.path).load()
  steps_R = np.concatenate([[0], data["steps_R"]])
  free_RBN = np.concatenate([np.asarray(spec.free(x0_BL))[None], data["tokens_RBN"]])
  prefix = config.prefix + " " if config.prefix else ""
  texts_RB = np.asarray(
    [prefix + t for t in recording.decode(tokenizer, free_RBN)], object
  ).reshape(free_RBN.shape[:2])
  rd.write_text(
    "samples.jsonl",
    "".join(
      json.dumps({"chain": b, "step": int(steps_R[r]), "text": texts_RB[r, b]}) + "\n"
      for b in range(texts_RB.shape[1])
      for r in range(len(steps_R))
    ),
  )
  results["fraction_of_sites_changed_between_records"] = (
    float(np.mean(free_RBN[1:] != free_RBN[:-1])) if len(steps_R) > 1 else 0.0
  )
  if config.embedding_model:
    drift_RB = semantic_drift(config.embedding_model, texts_RB, config.allow_pickle)
    results["final_mean_drift"] = float(drift_RB[-1].mean())
    results["embedding_model"] = config.embedding_model
    rd.savefig(drift_figure(config, lay, steps_R, drift_RB), "drift.png")
  rd.write_report(report(config, results, steps_R, texts_RB))
  rd.write_results(results)  # last: a run with results.json is finished
  return results


def sample(config, rd: RunDir, model, spec: chains.Spec, x0_BL: np.ndarray) -> dict:
  """Runs (or resumes) the chains chunk by chunk into rd's trajectory; the run's figures."""
  from tqdm import tqdm

  mode, median_stay = config.mode, None
  if mode == "auto":  # costs n forward rows for each of up to 64 chains
    mode, median_stay = rejection_free.choose_mode(
      model, spec, x0_BL, config.auto_threshold or None
    )
  state = chains.init_state(x0_BL)
  traj, ckpt = recording.Trajectory(rd.path), recording.checkpoints(rd.path)
  done, state = recording.resume(ckpt, traj, state)
  num_records = config.num_steps // config.record_every
  per_chunk = config.chunk_records
  rd.truncate_metrics(min(done * per_chunk, num_records) * config.record_every)
  num_chunks = -(-num_records // per_chunk)
  key, mesh = jax.random.key(config.seed), data_mesh(config.num_chains)
  t0, steps_run = time.time(), 0
  total = num_records * config.record_every
  bar = tqdm(
    total=total,
    initial=min(total, done * per_chunk * config.record_every),
    desc=f"Glauber chains ({mode})",
    unit="step",
  )
  pending = None  # the chunk whose records are on their way to the host
  for chunk in range(done, num_chunks):
    R = min(per_chunk, num_records - chunk * per_chunk)
    if mode == "rejection_free":
      state, rec = rejection_free.run(
        key,
        model,
        spec,
        state,
        R,
        config.record_every,
        record_logprobs=config.record_logprobs,
        mesh=mesh,
      )
    else:  # dispatched, not finished; the chunk takes over the previous state's buffers
      state, rec = chains.run(
        key,
        model,
        spec,
        state,
        R,
        config.record_every,
        method=config.method,
        k=config.block_size,
        record_logprobs=config.record_logprobs,
        mesh=mesh,
        donate=True,
      )
    for x in jax.tree.leaves((rec.tokens_RBN, rec.logp_RBN, state)):
      x.copy_to_host_async()  # one transfer per chunk, started as soon as the chunk ends
    if pending is not None:  # written while this chunk runs
      _write_chunk(rd, traj, ckpt, *pending)
    steps_R = (chunk * per_chunk + 1 + np.arange(R)) * config.record_every
    # On the host before the next chunk takes over the state's buffers (waits for this chunk).
    pending = (chunk, steps_R, rec, jax.tree.map(np.asarray, state))
    steps_run += R * config.record_every
    bar.update(R * config.record_every)
  if pending is not None:
    _write_chunk(rd, traj, ckpt, *pending)
  bar.close()
  ckpt.close()
  seconds = time.time() - t0
  return {
    "mode": mode,
    "median_stay_probability_at_start": median_stay,
    "num_chains": config.num_chains,
    "num_steps": num_records * config.record_every,
    "simulated_steps_per_second": (config.num_chains * steps_run / seconds if steps_run else None),
    "kernel_iterations": int(state.t),
  }


def _write_chunk(
  rd: RunDir,
  traj: recording.Trajectory,
  ckpt,
  chunk: int,
  steps_R: np.ndarray,
  rec: chains.Records,
  state: chains.ChainState,
) -> None:
  """The chunk's records, its metrics line, then the checkpoint of the state after it: a kill
  anywhere resumes from a checkpoint whose chunks and metrics lines are all on disk (those
  written past it are dropped and redone)."""
  traj.write(chunk, steps_R, rec.tokens_RBN, rec.logp_RBN)
  rd.log_metrics(int(steps_R[-1]), {"chunk": chunk, "iterations": int(state.t)})
  recording.save(ckpt, chunk + 1, state)


def semantic_drift(
  embedding_model: str, texts_RB: np.ndarray, allow_pickle: bool = False
) -> np.ndarray:
  """drift_RB = 1 - cos(E(x_r), E(x_0)) of each chain's texts, E the model's unit-norm
  sentence embedding (`gmlm.nn.embed`)."""
  from gmlm import nn as gm

  emb_model, emb_tok = gm.load(embedding_model, allow_pickle=allow_pickle)
  flat = list(texts_RB.reshape(-1))
  e_XD = np.concatenate(
    [np.asarray(gm.embed(emb_model, emb_tok, flat[i : i + 256])) for i in range(0, len(flat), 256)]
  )
  e_RBD = e_XD.reshape(*texts_RB.shape, -1)
  return 1.0 - np.einsum("rbd,bd->rb", e_RBD, e_RBD[0])


def drift_figure(config, lay: Layout, steps_R, drift_RB):
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6, 3.5))
  ax.plot(steps_R, drift_RB, color="tab:blue", alpha=0.15, lw=0.8)
  ax.plot(steps_R, drift_RB.mean(1), color="k", lw=2, label="mean over chains")
  ax.set_xlabel("Glauber step t")
  ax.set_ylabel("1 - cos(E(x_t), E(x_0))")
  ax.set_title(
    f"Semantic drift, T = {config.temperature}, n = {lay.num_sites}\nE: {config.embedding_model}",
    fontsize=10,
  )
  ax.legend()
  return fig


SHOWN_CHAINS = 3  # chains whose texts the report shows (samples.jsonl holds every chain)


def report(config, results: dict, steps_R, texts_RB) -> str:
  shown = sorted(set(np.linspace(0, len(steps_R) - 1, min(6, len(steps_R))).astype(int)))
  stay = results["median_stay_probability_at_start"]
  stay = "not measured" if stay is None else f"{stay:.4g}"
  out = [
    f"# Glauber chains: {model_name(config.model)}\n",
    f"T = {config.temperature}, n = {config.num_sites} free sites after the frozen prefix "
    f"{config.prefix!r}, {config.num_chains} chains x {results['num_steps']} steps, method "
    f"{config.method}, mode **{results['mode']}** (median stay probability at the start: "
    f"{stay}). Sample texts show the prefix in front of the free sites.\n",
  ]
  for i, cut in enumerate(results.get("init_texts", [])):
    if cut["tokens_cut"]:
      out.append(
        f"Starting text {i} is longer than n = {config.num_sites} tokens: "
        f"{cut['tokens_cut']} tokens were cut; the chains start from "
        f"{cut['kept']!r}.\n"
      )
    if cut.get("unknown"):
      out.append(
        f"Starting text {i}: {len(cut['unknown'])} word(s) are not in the model's vocabulary "
        f"and start as its unknown token: {', '.join(map(repr, cut['unknown']))}.\n"
      )
  if "final_mean_drift" in results:
    out.append(
      f"Semantic drift 1 - cos(E(x_t), E(x_0)) with E = the mean-pooled, unit-norm "
      f"sentence embedding of `{config.embedding_model}` (prefix included).\n"
    )
  rows = [[k, v] for k, v in sorted(results.items()) if k != "init_texts"]
  out.append(markdown_table(["figure", "value"], rows))
  B, shown_B = texts_RB.shape[1], min(SHOWN_CHAINS, texts_RB.shape[1])
  which = "the only chain" if B == 1 else f"chains 0-{shown_B - 1} of {B}"
  out.append(
    f"\nBelow: the texts of {which} at {len(shown)} of the {len(steps_R)} recorded steps; "
    f"samples.jsonl holds every chain at every record"
    + (f" ({B - shown_B} more chain{'s' * (B - shown_B > 1)} there)." if B > shown_B else ".")
    + "\n"
  )
  for b in range(shown_B):
    out.append(f"\n## Chain {b}\n")
    out.append(
      markdown_table(
        ["step", "text"], [[int(steps_R[r]), texts_RB[r, b].replace("|", "\\|")] for r in shown]
      )
    )
  if "final_mean_drift" in results:
    out.append("\n![semantic drift](drift.png)\n")
  return "\n".join(out)
