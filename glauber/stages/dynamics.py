"""Paper A, part 2 as stages (`glauber.stages`): trap states (Appendix A.1, Table 5), semantic
drift diagnostics (Section 6.1, Appendix B.4), the coupling phase diagram (Section 6.1),
semantic basins (Section 6.2, Appendices B.5-B.6) and prefix attractors (Appendix C.4).

Each stage runs its chains, then hands the records to its protocol module (`glauber.measures.traps`,
`semantic_drift`, `phase_diagram`, `basins`). The long chains of the trap and basin stages are
written chunk by chunk under the run directory (`recording.run_recorded`: `traps/`, `basins/`),
so a killed study resumes inside them. Sentence embeddings (`embedding_model`, all-MiniLM-L6-v2
by default) and the topic scorer (`topic_scorer`: "embedding", zero-shot by similarity to label
descriptions, or a Hugging Face NLI model id or directory) are loaded once and shared.

Config keys: `embedding_model`, `topic_scorer` and one group per stage (`traps.`,
`semantic_drift.`, `coupling.`, `basins.`, `attractors.`): see configs/glauber_study.py.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from glauber import chains, init_states, metropolis, recording, stages
from glauber.layout import Layout, max_sequence_length
from glauber.measures import basins, phase_diagram, semantic_drift, topics
from glauber.measures import margins as margins_lib
from glauber.measures import traps as traps_lib
from glauber.stages import Context, Need, Stage, stage_names
from gmlm import checks
from gmlm.checks import UserError
from gmlm.runs import RunDir, markdown_table

MODES = ("plain", "rejection_free")


# --------------------------------------------------------------------------------------------
# Shared by the stages


def embedder(ctx: Context) -> tuple:
  """(model, tokenizer) of the sentence encoder, loaded once."""
  return ctx.load(
    "embedder",
    lambda: semantic_drift.load_embedder(ctx.config.embedding_model, ctx.config.allow_pickle),
  )


def embedder_needs(config) -> list[Need]:
  """The offline all-MiniLM-L6-v2 when it is the sentence encoder."""
  from gmlm.nn import presets

  if config.embedding_model != "minilm":
    return []
  return [
    Need(
      presets.MINILM_WHEEL,
      presets.minilm_dir,
      "the sentence encoder",
      "--config.embedding_model=DIR",
    )
  ]


def scorer_needs(config) -> list[Need]:
  return embedder_needs(config) if config.topic_scorer == "embedding" else []


def scorer(ctx: Context):
  """The topic scorer, loaded once (the embedding scorer shares the sentence encoder)."""

  def make():
    name = ctx.config.topic_scorer
    if name == "embedding":
      return topics.EmbeddingScorer(*embedder(ctx))
    return topics.NLIScorer.from_pretrained(name)

  return ctx.load("scorer", make)


def decoder(ctx: Context):
  return lambda tokens_XN: recording.decode(ctx.tokenizer, tokens_XN)


def layout(ctx: Context, num_sites: int, prefix: str = "") -> Layout:
  return Layout.from_tokenizer(ctx.tokenizer, num_sites, prefix, max_sequence_length(ctx.model))


def passages(ctx: Context, num_sites: int, count: int) -> list[str]:
  """The first `count` passages with at least num_sites tokens."""
  long = [
    t
    for t in ctx.texts
    if len(ctx.tokenizer(t, add_special_tokens=False)["input_ids"]) >= num_sites
  ]
  if not long:
    raise UserError(
      f"text {ctx.config.text!r}: no passage has >= {num_sites} tokens; give a text with longer "
      "passages or fewer sites"
    )
  return long[:count]


def long_chains(ctx: Context, name: str, c, lay: Layout, x0_BL, mode: str = "plain"):
  """(trajectory, spec, seconds) of the stage's chains at c.temperature from x0_BL, recorded
  under the run directory's `name/` chunk by chunk (resumable) with a progress bar."""
  spec = chains.make_spec(ctx.candidates(), ctx.model.config.vocab_size, lay, c.temperature)
  num_records = c.num_steps // c.record_every
  progress = stages.bar(num_records * c.record_every, f"{name} chains ({mode})")
  t0 = time.perf_counter()
  data = recording.run_recorded(
    ctx.run.path / name,
    jax.random.key(c.seed),
    ctx.model,
    spec,
    x0_BL,
    num_records,
    c.record_every,
    c.chunk_records,
    mode=mode,
    record_logprobs=mode == "rejection_free",
    progress=progress.update,
  )
  progress.close()
  return data, spec, time.perf_counter() - t0


def check_temperature(config, key: str) -> None:
  checks.check_float(config, key, lo=0, lo_open=True)


# --------------------------------------------------------------------------------------------
# Traps


def validate_traps(config) -> None:
  for k in ("num_chains", "num_sites", "num_steps", "record_every", "chunk_records", "window"):
    checks.check_int(config, f"traps.{k}", lo=1)
  check_temperature(config, "traps.temperature")
  checks.check_multiple(config, "traps.num_steps", of="traps.record_every")
  checks.check_multiple(config, "traps.window", of="traps.record_every")
  checks.check_float(config, "traps.threshold", lo=0, lo_open=True)
  checks.check_float(config, "traps.similarity", lo=0, hi=1, lo_open=True)
  mode = checks.check_choice(config, "traps.mode", MODES)
  checks.check(
    mode == "plain" or config.traps.record_every == 1,
    "traps.record_every",
    config.traps.record_every,
    "must be 1 with traps.mode='rejection_free' (the holding-time detector reads every step)",
  )
  checks.check_int(config, "traps.min_hold", lo=0)
  checks.check_int(config, "traps.max_gap", lo=0)
  checks.check_int(config, "traps.max_sites", lo=0)
  checks.check_int(config, "traps.seed", lo=0)


def trap_margins(ctx: Context, spec, lay: Layout, temperature: float):
  """The catalogue's margin slots: Δ_mean, Δ_min and Theorem 8's predicted escape time of each
  trap's representative state."""

  def margins(tokens_XN: np.ndarray) -> dict:
    m = margins_lib.margins(ctx.model, spec, lay.sequences(tokens_XN))
    bound_X = margins_lib.exit_bound(
      np.asarray(m.delta_min_B), temperature, lay.num_sites, m.num_candidates
    )
    return {
      "delta_mean": np.asarray(m.delta_mean_B),
      "delta_min": np.asarray(m.delta_min_B),
      "predicted_escape": margins_lib.escape_time(bound_X),
    }

  return margins


def compute_traps(ctx: Context) -> dict:
  c = ctx.config.traps
  lay = layout(ctx, c.num_sites)
  x0_BL = init_states.from_text(
    ctx.tokenizer, lay, passages(ctx, c.num_sites, c.num_chains), c.num_chains
  )
  data, spec, chain_seconds = long_chains(ctx, "traps", c, lay, x0_BL, c.mode)
  decode = decoder(ctx)
  e_RBD = semantic_drift.embed_states(data["tokens_RBN"], decode, *embedder(ctx))
  results = traps_lib.measure(
    data["steps_R"],
    data["tokens_RBN"],
    e_RBD,
    decode=decode,
    logp_RBN=data.get("logp_RBN"),
    margins=trap_margins(ctx, spec, lay, c.temperature),
    window=c.window,
    threshold=c.threshold,
    similarity=c.similarity,
    holding=c.mode == "rejection_free",
    min_hold=c.min_hold or None,
    max_gap=c.max_gap,
    max_sites=c.max_sites,
  )
  results["temperature"], results["num_sites"] = float(c.temperature), int(c.num_sites)
  results["seconds_chains"] = chain_seconds  # the rest of the stage's time: embedding, margins
  return results


def section_traps(results: dict, run: RunDir) -> str:
  head = (
    f"Chains at T = {results['temperature']:g}, n = {results['num_sites']} free sites, started "
    "from passages of the text; Thm 8's predicted escape time is 1 / ((|V| - 1) e^{-Δ_min/T}), a "
    "lower bound on the mean escape time where it exceeds 1.\n\n"
  )
  text = traps_lib.section(results, run)
  first, _, rest = text.partition("\n")
  return f"{first}\n\n{head}{rest}"


# --------------------------------------------------------------------------------------------
# Semantic drift


def validate_semantic_drift(config) -> None:
  checks.check_floats(config, "semantic_drift.temperatures", lo=0, lo_open=True)
  checks.check_ints(config, "semantic_drift.num_sites", lo=1)
  for k in ("num_chains", "num_steps", "record_every", "t_fixed"):
    checks.check_int(config, f"semantic_drift.{k}", lo=1)
  checks.check_multiple(config, "semantic_drift.num_steps", of="semantic_drift.record_every")
  checks.check_float(config, "semantic_drift.threshold", lo=0, hi=2, lo_open=True)
  checks.check_int(config, "semantic_drift.seed", lo=0)


def compute_semantic_drift(ctx: Context) -> dict:
  c = ctx.config.semantic_drift
  cells = semantic_drift.simulate(
    jax.random.key(c.seed),
    ctx.model,
    ctx.tokenizer,
    embedder(ctx),
    temperatures=c.temperatures,
    num_sites=c.num_sites,
    texts=passages(ctx, max(c.num_sites), c.num_chains),
    num_chains=c.num_chains,
    num_steps=c.num_steps,
    record_every=c.record_every,
    candidates=ctx.candidates(),
  )
  return {**semantic_drift.measure(cells, c.t_fixed, c.threshold), "chains": cells}


def section_semantic_drift(results: dict, run: RunDir) -> str:
  return semantic_drift.section(results, run, results.get("chains"))


# --------------------------------------------------------------------------------------------
# Coupling phase diagram


def validate_coupling(config) -> None:
  checks.check_floats(config, "coupling.temperatures", lo=0, lo_open=True)
  checks.check_ints(config, "coupling.num_sites", lo=1)
  for k in ("num_pairs", "num_steps", "record_every"):
    checks.check_int(config, f"coupling.{k}", lo=1)
  checks.check_multiple(config, "coupling.num_steps", of="coupling.record_every")
  checks.check_int(config, "coupling.seed", lo=0)


def compute_coupling(ctx: Context) -> dict:
  c = ctx.config.coupling
  n = max(c.num_sites)
  texts = passages(ctx, n, 2 * c.num_pairs)
  half = max(1, len(texts) // 2)  # the two populations start from disjoint passages
  return phase_diagram.measure(
    ctx.model,
    ctx.tokenizer,
    temperatures=c.temperatures,
    num_sites=c.num_sites,
    texts_x=texts[:half],
    texts_y=texts[half:] or texts[:half],
    num_pairs=c.num_pairs,
    num_steps=c.num_steps,
    record_every=c.record_every,
    seed=c.seed,
    exclude_pattern=ctx.config.exclude_pattern or None,
  )


# --------------------------------------------------------------------------------------------
# Semantic basins and prefix attractors


def validate_scorer(config) -> None:
  name = checks.get(config, "topic_scorer")
  checks.check(
    isinstance(name, str) and bool(name.strip()),
    "topic_scorer",
    name,
    "'embedding' (zero-shot by embedding similarity) or an NLI model id / directory "
    "(e.g. facebook/bart-large-mnli)",
  )
  checks.check_model_path(config, "topic_scorer", presets=("embedding",))
  emb = checks.get(config, "embedding_model")
  checks.check(
    isinstance(emb, str) and bool(emb.strip()),
    "embedding_model",
    emb,
    "'minilm' (the offline all-MiniLM-L6-v2) or a sentence-encoder directory / id",
  )
  checks.check_model_path(config, "embedding_model", presets=("minilm",))


def validate_basins(config) -> None:
  validate_scorer(config)
  for k in ("seeds_per_topic", "num_sites", "num_steps", "record_every", "chunk_records"):
    checks.check_int(config, f"basins.{k}", lo=1)
  check_temperature(config, "basins.temperature")
  checks.check_multiple(config, "basins.num_steps", of="basins.record_every")
  target = checks.get(config, "basins.target")
  checks.check(target in topics.LABELS, "basins.target", target, f"one of {topics.LABELS}")
  checks.check(
    isinstance(checks.get(config, "basins.scorer_check"), bool),
    "basins.scorer_check",
    config.basins.scorer_check,
    "must be True/False",
  )
  checks.check_int(config, "basins.seed", lo=0)


def compute_basins(ctx: Context) -> dict:
  c = ctx.config.basins
  lay = layout(ctx, c.num_sites)
  x0_BL, topic_B = basins.seed_states(ctx.tokenizer, lay, basins.SEED_TEXTS, c.seeds_per_topic)
  data, _, chain_seconds = long_chains(ctx, "basins", c, lay, x0_BL)
  free_BN = x0_BL[:, lay.offset : lay.offset + lay.num_sites]
  steps_R = np.concatenate([[0], data["steps_R"]])
  tokens_RBN = np.concatenate([free_BN[None], data["tokens_RBN"]])
  results = basins.measure(
    steps_R, tokens_RBN, topic_B, scorer(ctx), decoder(ctx), embedder(ctx), c.target
  )
  results["temperature"], results["num_sites"] = float(c.temperature), int(c.num_sites)
  results["scorer"] = ctx.config.topic_scorer
  results["seconds_chains"] = chain_seconds  # the rest: decoding, embedding, topic scoring
  if c.scorer_check:
    try:
      results["scorer_check"] = topics.newsgroups_accuracy(scorer(ctx))
    except FileNotFoundError as e:
      results["scorer_check"] = {"missing": str(e)}
  return results


def section_basins(results: dict, run: RunDir) -> str:
  text = basins.section(results, run)
  first, _, rest = text.partition("\n")
  head = (
    f"{results['num_chains']} chains (5 seed topics) at T = {results['temperature']:g}, "
    f"n = {results['num_sites']}; topic scorer: {results['scorer']}.\n\n"
  )
  out = f"{first}\n\n{head}{rest}"
  check = results.get("scorer_check")
  if check is not None:
    if "missing" in check:
      out += f"\nTopic scorer check skipped: {check['missing']}\n"
    else:
      out += "\n" + topics.section(check).replace("## ", "### ", 1)
  return out


def validate_attractors(config) -> None:
  validate_scorer(config)
  prefixes = checks.get(config, "attractors.prefixes")
  checks.check(
    isinstance(prefixes, (list, tuple))
    and bool(prefixes)
    and all(isinstance(p, str) and p.strip() for p in prefixes),
    "attractors.prefixes",
    prefixes,
    "a non-empty tuple of prefix texts",
  )
  for k in ("num_chains", "num_sites", "num_steps"):
    checks.check_int(config, f"attractors.{k}", lo=1)
  check_temperature(config, "attractors.temperature")
  checks.check_int(config, "attractors.seed", lo=0)


def compute_attractors(ctx: Context) -> dict:
  c = ctx.config.attractors
  endpoints = basins.prefix_endpoints(
    jax.random.key(c.seed),
    ctx.model,
    ctx.tokenizer,
    prefixes=tuple(c.prefixes),
    num_chains=c.num_chains,
    temperature=c.temperature,
    num_sites=c.num_sites,
    num_steps=c.num_steps,
    candidates=ctx.candidates(),
  )
  results = basins.attractors(endpoints, scorer(ctx), decoder(ctx))
  results.update(temperature=float(c.temperature), num_steps=int(c.num_steps))
  return results


def section_attractors(results: dict, run: RunDir) -> str:
  return "## Prefix attractors\n\n" + basins.section_attractors(results, run).partition("\n")[2]


# --------------------------------------------------------------------------------------------
# Metropolis-Hastings against the traps (issue 12's "how MH changes the traps")


def validate_mh_traps(config) -> None:
  checks.check(
    "traps" in stage_names(config)
    and stage_names(config).index("traps") < stage_names(config).index("mh_traps"),
    "stages",
    config.stages,
    "mh_traps starts from the traps stage's catalogue: list traps before it",
  )
  for k in ("num_traps", "chains_per_trap", "num_steps", "record_every"):
    checks.check_int(config, f"mh_traps.{k}", lo=1)
  checks.check_multiple(config, "mh_traps.num_steps", of="mh_traps.record_every")
  checks.check_choice(config, "mh_traps.energy", metropolis.ENERGIES)
  checks.check_float(config, "mh_traps.escape_fraction", lo=0, hi=1, lo_open=True)
  checks.check_int(config, "mh_traps.seed", lo=0)


def _escapes(steps_R, tokens_RBN, home_BN, fraction: float, per: int) -> list[dict]:
  """Per trap (chains grouped `per` at a time): how many escaped and the median escape step."""
  esc_B = traps_lib.escape_steps(steps_R, tokens_RBN, home_BN, fraction)
  out = []
  for x in range(0, len(esc_B), per):
    e = esc_B[x : x + per]
    median = float(np.median(e))
    out.append(
      {"escaped": int(np.isfinite(e).sum()), "median": median if np.isfinite(median) else None}
    )
  return out


def compute_mh_traps(ctx: Context) -> dict:
  """Glauber and Metropolis-Hastings (same T, proposals from the same tempered conditional)
  started inside the longest traps of the traps stage: how many chains escape (rewrite
  escape_fraction of the sites) within num_steps, and when."""
  c, t = ctx.config.mh_traps, ctx.config.traps
  found = sorted(ctx.results["traps"]["traps"], key=lambda x: -x["duration"])
  homes, seen = [], set()
  for trap in found:
    if tuple(trap["tokens"]) not in seen and len(homes) < c.num_traps:
      seen.add(tuple(trap["tokens"]))
      homes.append(trap)
  out = {
    "temperature": float(t.temperature),
    "energy": c.energy,
    "num_steps": int(c.num_steps),
    "chains_per_trap": int(c.chains_per_trap),
    "escape_fraction": float(c.escape_fraction),
    "traps": [],
  }
  if not homes:
    return out
  lay = layout(ctx, t.num_sites)
  home_BN = np.repeat(np.asarray([h["tokens"] for h in homes]), c.chains_per_trap, axis=0)
  x0_BL = lay.sequences(home_BN)
  spec = chains.make_spec(ctx.candidates(), ctx.model.config.vocab_size, lay, t.temperature)
  R, key = c.num_steps // c.record_every, jax.random.key(c.seed)
  steps_R = c.record_every * (1 + np.arange(R))
  t0 = time.perf_counter()
  _, rec = chains.run(key, ctx.model, spec, chains.init_state(x0_BL), R, c.record_every)
  glauber_seconds = time.perf_counter() - t0
  mh_state = metropolis.init_state(ctx.model, spec, x0_BL, c.energy)
  mh_state, mh_rec = metropolis.run(key, ctx.model, spec, c.energy, mh_state, R, c.record_every)
  accepted_B = np.asarray(mh_state.accepted_B) / np.maximum(np.asarray(mh_state.steps_B), 1)
  moved_B = np.asarray(mh_state.moved_B) / np.maximum(np.asarray(mh_state.steps_B), 1)
  per = c.chains_per_trap
  g = _escapes(steps_R, rec.tokens_RBN, home_BN, c.escape_fraction, per)
  m = _escapes(steps_R, mh_rec.tokens_RBN, home_BN, c.escape_fraction, per)
  for x, home in enumerate(homes):
    sl = slice(x * per, (x + 1) * per)
    out["traps"].append(
      {
        "text": home["text"],
        "duration": home["duration"],
        "censored": home["censored"],
        "delta_min": home["delta_min"],
        "predicted_escape": home["predicted_escape"],
        "glauber": g[x],
        "mh": {
          **m[x],
          "acceptance": float(accepted_B[sl].mean()),
          "moves": float(moved_B[sl].mean()),
        },
      }
    )
  out["mh_acceptance"] = float(accepted_B.mean())
  out["seconds_glauber"] = glauber_seconds
  out["seconds_mh"] = time.perf_counter() - t0 - glauber_seconds
  return out


def section_mh_traps(results: dict, run: RunDir) -> str:
  head = [
    "## Metropolis-Hastings in the traps\n",
    f"Glauber and MH (energy `{results['energy']}`, proposals from the same tempered "
    f"conditional) at T = {results['temperature']:g}, {results['chains_per_trap']} chains each "
    f"started at each of the longest traps' states, {results['num_steps']} steps; a chain has "
    f"escaped once it differs from the trap's state at >= {results['escape_fraction']:.0%} of "
    "the sites. MH's stationary law is the energy's Gibbs law, Glauber's is unknown; a trap that "
    "holds under both is a property of the model's scores, one that only Glauber keeps is an "
    "artefact of incompatible conditionals.\n",
  ]
  if not results["traps"]:
    return "\n".join(head + ["No traps were found by the traps stage: nothing to compare.\n"])

  def med(v):
    return "—" if v is None else f"{v:.0f}"

  k = results["chains_per_trap"]
  rows = [
    [
      "`" + (r["text"][:50] + ("..." if len(r["text"]) > 50 else "")).replace("|", "\\|") + "`",
      (">" if r["censored"] else "") + str(r["duration"]),
      "—" if r["predicted_escape"] is None else f"{r['predicted_escape']:.3g}",
      f"{r['glauber']['escaped']}/{k}",
      med(r["glauber"]["median"]),
      f"{r['mh']['escaped']}/{k}",
      med(r["mh"]["median"]),
      f"{r['mh']['acceptance']:.3f}",
    ]
    for r in results["traps"]
  ]
  header = [
    "trap state",
    "Glauber trap (steps)",
    "Thm 8 predicted escape",
    "Glauber escaped",
    "median escape",
    "MH escaped",
    "MH median escape",
    "MH acceptance",
  ]
  g = sum(r["glauber"]["escaped"] for r in results["traps"])
  m = sum(r["mh"]["escaped"] for r in results["traps"])
  total = k * len(results["traps"])
  return "\n".join(
    head
    + [
      markdown_table(header, rows),
      f"\nEscaped within {results['num_steps']} steps: Glauber {g}/{total}, MH {m}/{total}; MH "
      f"acceptance {results['mh_acceptance']:.3f} overall.\n",
    ]
  )


STAGES: tuple[Stage, ...] = (
  Stage("traps", compute_traps, section_traps, validate_traps, needs=embedder_needs),
  Stage(
    "semantic_drift",
    compute_semantic_drift,
    section_semantic_drift,
    validate_semantic_drift,
    needs=embedder_needs,
  ),
  Stage("coupling", compute_coupling, phase_diagram.section, validate_coupling),
  Stage("basins", compute_basins, section_basins, validate_basins, needs=embedder_needs),
  Stage(
    "attractors", compute_attractors, section_attractors, validate_attractors, needs=scorer_needs
  ),
  Stage("mh_traps", compute_mh_traps, section_mh_traps, validate_mh_traps),
)
