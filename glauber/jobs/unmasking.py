"""`python sample.py --config configs/glauber_unmasking.py --workdir DIR`: every way to generate
from a masked LM, compared on one engine (`glauber.unmasking`).

Part 1, the full MLM at matched compute: every sampler of config.samplers generates
config.num_chains sequences of config.num_sites free sites after config.prompt, each with
config.forward_rows MLM forward rows per sequence (what the sampler leaves of the budget goes to
remasking rounds, when it has them, then to plain Glauber steps: "unmask, then mix"; "glauber"
is Glauber alone from uniformly random tokens). Per sampler (`glauber.measures.generation`): the
pseudo-log-likelihood per site, the share of perfect traps, repetition, distinct-1/2, the drift
from the prompt and the trap rate of the traps stage's rule.

Part 2, exact laws (`glauber.measures.unmasking_laws`): the MLM restricted to config.candidates
at config.exact_sites sites with masks, enumerated once; per temperature and sampler (ancestral
by order rule, parallel with config.exact_steps steps by schedule and order, remasking) the exact
TV to π_T and to PL_T and the Glauber steps from the output's law to TV <= 1/4; the figure
unmasking_tv.png plots TV to π_T against forward rows (each sampler's output, then Glauber from
it).

Sampler strings: "ancestral ORDER", "parallel S SCHEDULE ORDER", each optionally followed by
"remask FRACTION ORDER", or "glauber". Every sampler and every temperature is a resumable cell;
report.md and results.json are written last. A rerun of a finished run returns its results.
"""

from __future__ import annotations

import math
import time

import jax
import numpy as np

from glauber import chains, init_states, oracle, unmasking
from glauber.jobs import finished
from glauber.layout import Layout, max_sequence_length
from glauber.measures import exact, generation, semantic_drift
from glauber.measures import unmasking_laws as laws_lib
from glauber.oracle import load_mlm, model_name, validate_model
from glauber.unmasking import Sampler
from gmlm import checks
from gmlm.runs import RunDir, markdown_table

ENTRY_POINT = "sample.py"
GRAMMAR = (
  "'ancestral ORDER' or 'parallel S SCHEDULE ORDER', optionally + ' remask FRACTION ORDER', "
  f"or 'glauber'; ORDER in {unmasking.ORDERS} (remask: {unmasking.REMASK_ORDERS}), SCHEDULE "
  f"in {unmasking.SCHEDULES}"
)


def parse(text: str, num_sites: int, budget: int) -> Sampler | None:
  """The sampler a string names, filled up to `budget` forward rows per sequence (remasking
  rounds, then Glauber steps); None for 'glauber' (Glauber from random tokens). ValueError: why
  not."""
  words = text.split() if isinstance(text, str) else []
  if words == ["glauber"]:
    return None
  head, _, tail = " ".join(words).partition(" remask ")
  head = head.split()
  if len(head) == 2 and head[0] == "ancestral":
    s = Sampler(order=head[1])
  elif len(head) == 4 and head[0] == "parallel" and head[1].isdigit():
    s = Sampler(steps=int(head[1]), schedule=head[2], order=head[3])
  else:
    raise ValueError(f"not a sampler: use {GRAMMAR}")
  rows = s.steps or num_sites
  if tail:
    fraction, _, order = tail.partition(" ")
    try:
      f = float(fraction)
    except ValueError:
      f = math.nan
    if not 0 < f <= 1:
      raise ValueError(f"remask FRACTION={fraction!r}: must be a number in (0, 1]")
    s = Sampler(s.steps, s.schedule, s.order, 1, max(1, round(f * num_sites)), order.strip() or "?")
    s.check(num_sites, num_sites)
    per = s.round_rows(num_sites)
    rounds = (budget - rows) // per
    if rounds < 1:
      raise ValueError(
        f"one remasking round costs {per} forward rows: needs {rows + per} per sequence, over "
        f"forward_rows={budget}"
      )
    s = Sampler(s.steps, s.schedule, s.order, rounds, s.remask_sites, s.remask_order)
    rows += rounds * per
  s.check(num_sites, num_sites)
  if rows > budget:
    raise ValueError(f"needs {rows} forward rows per sequence, over forward_rows={budget}")
  return Sampler(
    s.steps, s.schedule, s.order, s.remask_rounds, s.remask_sites, s.remask_order, budget - rows
  )


def exact_samplers(num_sites: int, steps) -> list[Sampler]:
  """The samplers of the exact tables: ancestral by order; parallel with S steps by schedule
  and order (S = 1: the product of the all-mask conditionals); remasking after the fewest steps: n rounds of one random site
  (= Glauber), of one lowest-confidence site, and of n/2 random sites."""
  out = [Sampler(order=o) for o in unmasking.ORDERS]
  for S in sorted(set(steps)):
    if S >= num_sites:
      continue
    if S == 1:  # one step reveals every site: schedule and order do not matter
      out.append(Sampler(steps=1))
      continue
    for schedule in unmasking.SCHEDULES:
      out += [Sampler(steps=S, schedule=schedule, order=o) for o in ("random", "confidence")]
  S = min(steps)
  order = "confidence" if 1 < S < num_sites else "random"  # S = 1: the order is moot
  base = dict(steps=S if S < num_sites else 0, order=order, remask_rounds=num_sites)
  out += [
    Sampler(**base),
    Sampler(**base, remask_order="confidence"),
    Sampler(**base, remask_sites=max(1, num_sites // 2)),
  ]
  return out


def validate(config) -> None:
  """Checks every key the job reads; loads nothing and writes nothing."""
  validate_model(config)
  for key in ("exclude_pattern", "prompt"):
    checks.check(isinstance(checks.get(config, key), str), key, config[key], "must be a string")
  checks.check_model_path(config, "embedding_model", presets=("minilm",))
  checks.check(bool(config.prompt.strip()), "prompt", config.prompt, "must be a non-empty text")
  n = checks.check_int(config, "num_sites", lo=1)
  checks.check_int(config, "num_chains", lo=1)
  oracle.check_chain_memory(config, "num_chains")
  init_states.check_temperature(config)
  checks.check_int(config, "top_k", lo=0)
  checks.check_float(config, "top_p", lo=0, hi=1, lo_open=True)
  budget = checks.check_int(config, "forward_rows", lo=n)
  samplers = checks.get(config, "samplers")
  checks.check(
    isinstance(samplers, (list, tuple)) and len(samplers) > 0,
    "samplers",
    samplers,
    f"a non-empty tuple of samplers: {GRAMMAR}",
  )
  for text in samplers:
    try:
      parse(text, n, budget)
    except ValueError as e:
      raise checks.ConfigError("samplers", samplers, f"{text!r}: {e}") from None
  checks.check_float(config, "trap_temperature", lo=0, lo_open=True)
  window = checks.check_int(config, "trap_window", lo=1)
  checks.check_int(config, "trap_record_every", lo=1, hi=window)
  checks.check_multiple(config, "trap_window", of="trap_record_every")
  checks.check_float(config, "trap_threshold", lo=0, lo_open=True)
  words = init_states.check_candidate_words(config)
  m = checks.check_int(config, "exact_sites", lo=1)
  limit = exact.MAX_STATES
  checks.check(
    (len(words) + 1) ** m <= limit,
    "exact_sites",
    m,
    f"(c+1)^n = {len(words) + 1}^{m} = {(len(words) + 1) ** m} states with masks, over "
    f"{limit}; use fewer candidates or sites",
  )
  checks.check_floats(config, "exact_temperatures", lo=0, lo_open=True)
  checks.check(
    all(math.isfinite(t) for t in config.exact_temperatures),
    "exact_temperatures",
    config.exact_temperatures,
    "must be finite (π_T needs 0 < T < inf)",
  )
  steps = checks.check_ints(config, "exact_steps", lo=1, hi=m)
  checks.check(bool(steps), "exact_steps", steps, f"step counts S in [1, exact_sites={m}]")
  checks.check_int(config, "seed", lo=0)


def run(config, workdir: str) -> dict:
  validate(config)
  if (stored := finished(config, workdir)) is not None:
    return stored
  model, tokenizer = load_mlm(config.model, config.dtype, config.allow_pickle)
  ids = init_states.candidate_tokens(tokenizer, config.candidates)
  max_length = max_sequence_length(model)
  lay = Layout.from_tokenizer(tokenizer, config.num_sites, config.prompt, max_length)
  exact_lay = Layout.from_tokenizer(tokenizer, config.exact_sites, "", max_length)
  rd = RunDir(workdir, config)  # after every check that can refuse the config
  results = {"model": config.model, "prompt": config.prompt}
  results["full"] = full_mlm(config, rd, model, tokenizer, lay)
  results["exact"] = exact_part(config, rd, model, exact_lay, ids)
  log_metrics(rd, results)
  # Wall-clock times stay out of the rows (a resumed run's are its own): one top-level entry.
  results["seconds"] = [row.pop("seconds") for row in results["full"]]
  rd.savefig(tv_figure(results["exact"]), "unmasking_tv.png")
  rd.write_report(report(config, results))
  rd.write_results(results)  # last: a run with results.json is finished
  return results


def full_mlm(config, rd: RunDir, model, tokenizer, lay: Layout) -> list[dict]:
  vocab = model.config.vocab_size
  cand = chains.candidate_ids(tokenizer, vocab, exclude_pattern=config.exclude_pattern or None)
  spec = chains.make_spec(cand, vocab, lay, config.temperature, config.top_k, config.top_p)
  trap_spec = chains.make_spec(cand, vocab, lay, config.trap_temperature)
  decode = lambda tokens_XN: tokenizer.batch_decode(np.asarray(tokens_XN))
  from tqdm import tqdm

  embedder = []
  rows = []
  for i, text in enumerate(tqdm(config.samplers, desc="samplers (full MLM)", unit="sampler")):

    def compute(i=i, text=text):
      if not embedder:
        embedder.append(semantic_drift.load_embedder(config.embedding_model, config.allow_pickle))
      key = jax.random.fold_in(jax.random.key(config.seed), i)
      sampler = parse(text, config.num_sites, config.forward_rows)
      t0 = time.perf_counter()
      if sampler is None:
        x0 = init_states.random_tokens(
          np.random.default_rng([config.seed, i]), lay, cand, config.num_chains
        )
        sampler = Sampler(glauber_steps=config.forward_rows)
        state, state_masked = chains.init_state(x0), False
      else:
        state, state_masked = unmasking.all_masked(spec, config.num_chains), True
      out, _ = unmasking.run(key, model, spec, state, sampler)
      tokens_BL = np.asarray(out.tokens_BL)
      seconds = time.perf_counter() - t0
      free_BN = tokens_BL[:, lay.offset : lay.offset + lay.num_sites]
      texts = decode(free_BN)
      plan = sampler.name if state_masked else f"glauber {sampler.glauber_steps} from random tokens"
      row = {
        "sampler": text,
        "plan": plan,
        "forward_rows": sampler.forward_rows(lay.num_sites, lay.num_sites * state_masked),
      }
      row.update(
        generation.summary(spec, tokens_BL, generation.site_logprobs(model, spec, tokens_BL))
      )
      row["prompt_drift"] = float(generation.prompt_drift(texts, config.prompt, embedder[0]).mean())
      row["trap_rate"] = float(
        generation.trapped(
          jax.random.fold_in(key, 1 << 20),
          model,
          trap_spec,
          tokens_BL,
          decode,
          embedder[0],
          config.trap_window,
          config.trap_record_every,
          config.trap_threshold,
        ).mean()
      )
      row["seconds"] = seconds
      row["examples"] = texts[:3]
      return row

    rows.append(rd.cell(f"full_{i}", compute))
  return rows


def log_metrics(rd: RunDir, results: dict) -> None:
  """metrics.jsonl from the cells, written whole at the end (a resumed run writes the same
  lines): a line per sampler of part 1 (step = its index), then per T and exact sampler."""
  rd.truncate_metrics(-1)
  for i, row in enumerate(results["full"]):
    rd.log_metrics(i, {"stage": "full", **{k: v for k, v in row.items() if k != "examples"}})
  for table in results["exact"]["tables"]:
    for j, r in enumerate(table["rows"]):
      keep = ("sampler", "forward_rows", "tv_pi", "tv_pl", "glauber_to_eps")
      rd.log_metrics(j, {"stage": "exact", "T": table["T"], **{k: r[k] for k in keep}})


def exact_part(config, rd: RunDir, model, lay: Layout, ids) -> dict:
  scores = np.asarray(
    rd.cell("masked_scores", lambda: laws_lib.enumerate_masked_scores(model, lay, ids).tolist()),
    np.float64,
  )
  samplers = exact_samplers(config.exact_sites, config.exact_steps)
  from tqdm import tqdm

  tables = []
  for T in tqdm(config.exact_temperatures, desc="exact laws per T", unit="T"):
    tables.append(
      rd.cell(f"exact_T{T:g}", lambda T=T: laws_lib.measure_temperature(scores, T, samplers))
    )
  c, n = len(ids), config.exact_sites
  return {"num_candidates": c, "num_sites": n, "num_states": (c + 1) ** n, "tables": tables}


FULL_HEADER = [
  "sampler",
  "as run",
  "PLL / site",
  "perfect traps",
  "repetition",
  "distinct-1",
  "distinct-2",
  "prompt drift",
  "trap rate",
]


def _steps(v) -> str | int:
  return f"> {laws_lib.MAX_GLAUBER}" if v is None else v


def report(config, results: dict) -> str:
  full, ex = results["full"], results["exact"]
  rows = [
    [
      r["sampler"],
      r["plan"],
      r["pll_per_site"],
      r["perfect_traps"],
      r["repetition"],
      r["distinct_1"],
      r["distinct_2"],
      r["prompt_drift"],
      r["trap_rate"],
    ]
    for r in full
  ]
  examples = "\n".join(
    f"- **{r['sampler']}**: " + " / ".join(f"`{t}`" for t in r["examples"]) for r in full
  )
  out = [
    f"# Unmasking, remasking and Glauber on one engine: {model_name(config.model)}\n",
    f"## Full MLM at matched compute: {config.forward_rows} forward rows per sequence\n",
    f"{config.num_chains} sequences of n = {config.num_sites} free sites after the prompt "
    f"{config.prompt!r} per sampler, T = {config.temperature:g} (top-k {config.top_k}, top-p "
    f"{config.top_p:g}); what a sampler leaves of the budget goes to remasking rounds, then plain "
    "Glauber. PLL: mean log p_i(x_i | x_-i) per site (untempered); perfect traps: every token its "
    "site's argmax; repetition: 1 - distinct tokens / n; distinct-n over all sequences; prompt "
    "drift: 1 - cos(E(output), E(prompt)); trap rate: the traps stage's drift rule (Glauber at "
    f"T = {config.trap_temperature:g} for {config.trap_window} steps from the output, mean cosine "
    f"drift < {config.trap_threshold}).\n",
    markdown_table(FULL_HEADER, rows, digits=3),
    "\nExamples:\n\n" + examples + "\n",
    f"## Exact output laws: c = {ex['num_candidates']} candidates "
    f"({', '.join(config.candidates)}), n = {ex['num_sites']} sites, {ex['num_states']} states "
    "with masks\n",
    "q is the exact law of the sampler's output; Glauber→1/4 counts the Glauber steps from q "
    "until TV(q P_T^t, π_T) <= 1/4 (the uniform random start for comparison).\n",
  ]
  for table in ex["tables"]:
    out.append(f"### T = {table['T']:g} (TV(π_T, PL_T) = {table['tv_pi_pl']:.3f})\n")
    out.append(
      markdown_table(
        ["sampler", "forward rows", "TV(q, π_T)", "TV(q, PL_T)", "Glauber→1/4"],
        [
          [r["sampler"], r["forward_rows"], r["tv_pi"], r["tv_pl"], _steps(r["glauber_to_eps"])]
          for r in table["rows"]
        ],
        digits=3,
      )
    )
    out.append("")
  out.append("![TV to π_T against forward rows](unmasking_tv.png)\n")
  return "\n".join(out)


def tv_figure(ex: dict):
  """TV(q, π_T) against forward rows per sequence, a panel per T: each sampler's output (a
  marker) and Glauber from it (its line)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  tables = ex["tables"]
  fig, axes = plt.subplots(1, len(tables), figsize=(4.2 * len(tables) + 2.2, 3.8), squeeze=False)
  cmap = plt.get_cmap("tab20")
  for ax, table in zip(axes[0], tables):
    for j, r in enumerate(table["rows"]):
      x = [1 + r["forward_rows"] + t for t, _ in r["curve"]]
      y = [d for _, d in r["curve"]]
      style = dict(color="k", ls=":") if j == 0 else dict(color=cmap(j % 20))
      ax.plot(x, y, lw=1, **style)
      ax.plot(x[:1], y[:1], "o", ms=4, label=r["sampler"], **{"color": style["color"]})
    ax.axhline(laws_lib.EPS, color="gray", lw=0.5)
    ax.set(xscale="log", xlabel="1 + forward rows per sequence", title=f"T = {table['T']:g}")
  axes[0][0].set_ylabel("TV(law, π_T)")
  axes[0][-1].legend(fontsize=6, bbox_to_anchor=(1.02, 1), loc="upper left")
  fig.tight_layout()
  return fig
