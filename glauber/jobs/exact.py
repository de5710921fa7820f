"""`python sample.py --config configs/glauber_exact.py --workdir DIR`: paper A's protocols 5-6.

Protocol 5 (`glauber.measures.exact`): the MLM restricted to config.candidates (each one token) at
config.num_sites free sites after config.prefix, enumerated exactly; per temperature the exact
absolute spectral gap and t_mix(1/4) beside Theorem 5's upper and Theorem 8's lower bound, the
rectangle ΔR and TV(π_T, pseudo-likelihood law).

Protocol 6 (`glauber.metropolis`): (a) on the full MLM (every candidate token), MH chains from
config.init_text over config.mh_temperatures, per energy: acceptance rate and the rate of
accepted moves; (b) on the restricted model of protocol 5, MH chains at config.check_temperature
against the exact law of their last record (the start's law through the exact MH kernel; the
chains are independent, so the TV sits beside the 99% quantile that as many i.i.d. draws show)
and the energy's Gibbs law, with the exact MH t_mix.

Every stage is a resumable cell of the run directory (a killed run redoes only unfinished
cells); report.md and results.json are written last. A rerun of a finished run returns its
stored results.
"""

from __future__ import annotations

import jax
import numpy as np

from glauber import chains, init_states, metropolis, oracle, recording
from glauber.init_states import candidate_tokens
from glauber.jobs import finished
from glauber.layout import Layout, max_sequence_length
from glauber.measures import exact
from glauber.oracle import load_mlm, model_name, validate_model
from gmlm import checks
from gmlm.checks import UserError
from gmlm.core.mesh import data_mesh
from gmlm.runs import RunDir, markdown_table

ENTRY_POINT = "sample.py"


def validate(config) -> None:
  """Checks every key the job reads; loads nothing and writes nothing."""
  validate_model(config)
  for key in ("exclude_pattern", "prefix"):
    checks.check(isinstance(checks.get(config, key), str), key, config[key], "must be a string")
  words = init_states.check_candidate_words(config)
  n = checks.check_int(config, "num_sites", lo=1)
  limit = checks.check_int(config, "max_states", lo=4)
  checks.check(
    len(words) ** n <= limit,
    "num_sites",
    n,
    f"c^n = {len(words)}^{n} = {len(words) ** n} states, over max_states = {limit}; "
    "use fewer candidates or free sites (or raise max_states)",
  )
  checks.check_int(config, "max_dense_states", lo=4)
  checks.check_int(config, "refine_bits", lo=1, hi=20)
  checks.check_floats(config, "temperatures", lo=0, lo_open=True)
  text = checks.get(config, "init_text")
  checks.check(isinstance(text, str) and bool(text.strip()), "init_text", text, "a starting text")
  checks.check_int(config, "mh_num_sites", lo=1)
  oracle.check_sites(config, "num_sites", "mh_num_sites")
  checks.check_floats(config, "mh_temperatures", lo=0, lo_open=True)
  checks.check_int(config, "mh_num_chains", lo=1)
  oracle.check_chain_memory(config, "mh_num_chains")
  checks.check_int(config, "mh_num_steps", lo=1)
  checks.check_float(config, "check_temperature", lo=0, lo_open=True)
  checks.check_int(config, "check_num_chains", lo=1)
  oracle.check_chain_memory(config, "check_num_chains")
  checks.check_int(config, "check_burn_in", lo=1)
  checks.check_int(config, "check_records", lo=1)
  checks.check_int(config, "check_record_every", lo=1)
  checks.check_int(config, "seed", lo=0)


def run(config, workdir: str) -> dict:
  """Protocols 5 and 6 (module docstring); a finished run's stored results."""
  validate(config)
  if (stored := finished(config, workdir)) is not None:
    return stored
  model, tokenizer = load_mlm(config.model, config.dtype, config.allow_pickle)
  ids, max_length = candidate_tokens(tokenizer, config.candidates), max_sequence_length(model)
  lay = Layout.from_tokenizer(tokenizer, config.num_sites, config.prefix, max_length)
  rd = RunDir(workdir, config)  # after every check that can refuse the config
  results = {"model": config.model, "candidates": list(config.candidates)}
  results["exact"], scores = protocol5(config, rd, model, lay, ids)
  results["mh"] = mh_default(config, rd, model, tokenizer, max_length)
  results["mh_check"] = mh_check(config, rd, model, lay, ids, scores)
  rd.savefig(acceptance_figure(results["mh"]), "mh_acceptance.png")
  rd.write_report(report(config, results, rd))
  rd.write_results(results)  # last: a run with results.json is finished
  return results


def protocol5(config, rd: RunDir, model, lay: Layout, ids: np.ndarray) -> tuple[dict, np.ndarray]:
  """(exact.measure's results, the enumerated scores_ZNC)."""
  from tqdm import tqdm

  scores = np.asarray(
    rd.cell("scores", lambda: exact.enumerate_scores(model, lay, ids, config.max_states).tolist())
  )
  rows = []
  for T in tqdm(config.temperatures, desc="exact chain per T"):
    row = rd.cell(
      f"exact_T{T:g}",
      lambda: exact.measure_temperature(
        scores, T, max_dense=config.max_dense_states, refine_bits=config.refine_bits
      ),
    )
    rd.log_metrics(0, {"stage": "exact", "T": T, "gap": row["gap"], "tmix_lo": row["tmix_lo"]})
    rows.append(row)
  summary = rd.cell("exact_summary", lambda: exact.summary(scores))
  return {"summary": summary, "rows": rows}, scores


def _chains(key, model, spec, energy, x0_BL, steps, records=1, mesh=None):
  """MH chains from x0_BL: `records` records `steps // records` steps apart."""
  state = metropolis.init_state(model, spec, x0_BL, energy)
  return metropolis.run(key, model, spec, energy, state, records, steps // records, mesh)


def mh_default(config, rd: RunDir, model, tokenizer, max_length: int) -> list[dict]:
  """Acceptance and move rates of MH on the full MLM, per temperature and energy."""
  vocab = model.config.vocab_size
  cand = chains.candidate_ids(tokenizer, vocab, exclude_pattern=config.exclude_pattern or None)
  lay = Layout.from_tokenizer(tokenizer, config.mh_num_sites, config.prefix, max_length)
  try:
    x0_BL = init_states.from_text(tokenizer, lay, [config.init_text], config.mh_num_chains)
  except ValueError as e:
    raise UserError(f"config.init_text: {e}") from None
  from tqdm import tqdm

  mesh = data_mesh(config.mh_num_chains)
  out = []
  cells = [(T, energy) for T in config.mh_temperatures for energy in metropolis.ENERGIES]
  for T, energy in tqdm(cells, desc="MH chains per T and energy", unit="cell"):
    spec = chains.make_spec(cand, vocab, lay, T)

    def compute():
      key = jax.random.key(config.seed)
      state, rec = _chains(key, model, spec, energy, x0_BL, config.mh_num_steps, mesh=mesh)
      return {
        "T": T,
        "energy": energy,
        "acceptance_rate": metropolis.acceptance_rate(state),
        "move_rate": metropolis.move_rate(state),
        "final_text": recording.decode(tokenizer, np.asarray(rec.tokens_RBN[-1, :1]))[0],
      }

    row = rd.cell(f"mh_default_T{T:g}_{energy}", compute)
    rd.log_metrics(0, {"stage": "mh", **{k: v for k, v in row.items() if k != "final_text"}})
    out.append(row)
  return out


def mh_check(config, rd: RunDir, model, lay, ids, scores) -> list[dict]:
  """MH on the restricted model against exact laws: the Gibbs law of each energy, and the
  exact law of the chains at the record times (the start's law pushed through the exact MH
  kernel), which the empirical law matches whatever the burn-in."""
  T = config.check_temperature
  spec = chains.make_spec(ids, model.config.vocab_size, lay, T)
  S, n, c = scores.shape
  rng = np.random.default_rng(config.seed)
  x0_BN = rng.integers(0, c, (config.check_num_chains, n))
  weights_N = c ** np.arange(n - 1, -1, -1)
  every, burn_in = config.check_record_every, config.check_burn_in
  times = burn_in + every * (1 + np.arange(config.check_records))
  from tqdm import tqdm

  out = []
  for energy in tqdm(metropolis.ENERGIES, desc="MH against the exact law", unit="energy"):

    def compute():
      gibbs = exact.gibbs_law(exact.energy(scores, energy), T)
      K = exact.mh_matrix(scores, T, energy)
      mu, pooled = np.bincount(x0_BN @ weights_N, minlength=S) / len(x0_BN), np.zeros(S)
      for t in range(1, times[-1] + 1):
        mu = K.T @ mu  # ends as the exact law of the last record
        pooled += mu * (t in times) / len(times)
      key = jax.random.key(config.seed)
      state = metropolis.init_state(model, spec, lay.sequences(ids[x0_BN]), energy)
      state, _ = metropolis.run(key, model, spec, energy, state, 1, burn_in)
      key = jax.random.fold_in(key, 1)
      state, rec = metropolis.run(key, model, spec, energy, state, config.check_records, every)
      position = np.full(model.config.vocab_size, -1)
      position[ids] = np.arange(c)
      idx_RB = position[np.asarray(rec.tokens_RBN)] @ weights_N
      emp = np.bincount(idx_RB.reshape(-1), minlength=S) / idx_RB.size
      last = np.bincount(idx_RB[-1], minlength=S) / idx_RB.shape[1]  # i.i.d. (chains independent)
      draws = np.random.default_rng(0).multinomial(idx_RB.shape[1], mu, 200) / idx_RB.shape[1]
      mix = (
        exact.mixing_time(K, gibbs, refine_bits=config.refine_bits)
        if S <= config.max_dense_states
        else {"lo": None, "hi": None}
      )
      return {
        "T": T,
        "energy": energy,
        "draws": int(idx_RB.size),
        "tv_last_exact": exact.tv(last, mu),
        "tv_iid_q99": float(np.quantile(0.5 * np.abs(draws - mu).sum(1), 0.99)),
        "tv_exact_gibbs": exact.tv(pooled, gibbs),
        "tv_empirical_gibbs": exact.tv(emp, gibbs),
        "acceptance_rate": metropolis.acceptance_rate(state),
        "exact_mh_tmix_lo": mix["lo"],
        "exact_mh_tmix_hi": mix["hi"],
      }

    out.append(rd.cell(f"mh_check_{energy}", compute))
  return out


def acceptance_figure(rows: list[dict]):
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6, 3.5))
  for energy in metropolis.ENERGIES:
    pts = [(r["T"], r["acceptance_rate"], r["move_rate"]) for r in rows if r["energy"] == energy]
    T, acc, move = zip(*pts)
    ax.plot(T, acc, "o-", label=f"{energy}: accepted")
    ax.plot(T, move, "s--", label=f"{energy}: accepted and moved")
  ax.set(xscale="log", xlabel="temperature T", ylabel="fraction of proposals", ylim=(0, 1.02))
  ax.set_xticks(T, [f"{t:g}" for t in T])
  ax.minorticks_off()
  ax.set_title("Metropolis-Hastings on the MLM", fontsize=10)
  ax.legend(fontsize=8)
  return fig


def report(config, results: dict, rd: RunDir) -> str:
  mh_rows = [
    [r["T"], r["energy"], r["acceptance_rate"], r["move_rate"], r["final_text"].replace("|", "/")]
    for r in results["mh"]
  ]
  check_rows = [
    [
      r["energy"],
      r["T"],
      r["draws"],
      r["tv_last_exact"],
      r["tv_iid_q99"],
      r["tv_exact_gibbs"],
      r["tv_empirical_gibbs"],
      r["acceptance_rate"],
      "n/a"
      if r["exact_mh_tmix_lo"] is None
      else f"{r['exact_mh_tmix_lo']}..{r['exact_mh_tmix_hi']}",
    ]
    for r in results["mh_check"]
  ]
  return "\n".join(
    [
      f"# Exact validation and Metropolis-Hastings: {model_name(config.model)}\n",
      f"Candidates {tuple(config.candidates)} at n = {config.num_sites} free sites after the "
      f"prefix {config.prefix!r}.\n",
      exact.section(results["exact"], rd),
      "\n## Metropolis-Hastings on the full MLM\n",
      f"{config.mh_num_chains} chains x {config.mh_num_steps} steps from {config.init_text!r} "
      f"(n = {config.mh_num_sites}); proposals from p_i^T, energies 'pll' (negative "
      "pseudo-log-likelihood) and 'raw' (negative sum of raw logits); stationary law "
      "∝ exp(-E/T).\n",
      markdown_table(
        ["T", "energy", "acceptance", "accepted moves", "chain 0 at the end"], mh_rows
      ),
      "\n![MH acceptance](mh_acceptance.png)\n",
      "## Metropolis-Hastings on the restricted model against the exact Gibbs law\n",
      f"{config.check_num_chains} chains from random states, {config.check_burn_in} steps of "
      f"burn-in, then {config.check_records} records {config.check_record_every} steps apart "
      "(pooled). The chains are independent, so the last record is as many i.i.d. draws from "
      "its exact law (the start's law through the exact MH kernel): 'i.i.d. q99' is the 99% "
      "quantile of TV(empirical, exact law) for that many draws, what an exact sampler stays "
      "under whatever the burn-in. TV(exact law, Gibbs) is what the burn-in leaves (the pooled "
      "records' exact law; small once the burn-in exceeds the exact MH t_mix).\n",
      markdown_table(
        [
          "energy",
          "T",
          "draws",
          "last record: TV(empirical, exact law)",
          "i.i.d. q99",
          "TV(exact law, Gibbs)",
          "TV(empirical, Gibbs)",
          "acceptance",
          "exact MH t_mix(1/4)",
        ],
        check_rows,
      ),
    ]
  )
