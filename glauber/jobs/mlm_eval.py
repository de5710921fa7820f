"""`python sample.py --config configs/mlm_eval.py --workdir DIR`: fill-mask accuracy of an MLM.

Scores config.model on the held-out English sentences (`glauber.mlm.evaluation.fill_mask`, one
random non-special token masked per sentence) per source and overall. Writes results.json and
report.md (with probe sentences); a rerun of a finished run returns its stored results.
"""

from __future__ import annotations

import time

from glauber.jobs import finished
from glauber.mlm import english, evaluation
from glauber.oracle import load_mlm, validate_model
from glauber.stages import Need, require
from gmlm import checks
from gmlm.runs import RunDir, markdown_table

ENTRY_POINT = "sample.py"

SOURCES = ("wiki", "news")


def validate(config) -> None:
  """Checks every key the job reads; loads nothing and writes nothing."""
  validate_model(config)
  sources = checks.get(config, "sources")
  checks.check(
    isinstance(sources, (list, tuple))
    and len(sources) > 0
    and all(s in SOURCES for s in sources)
    and len(set(sources)) == len(sources),
    "sources",
    sources,
    f"must be a non-empty list of distinct sources among {SOURCES}",
  )
  checks.check_int(config, "max_sentences", lo=0)
  checks.check_int(config, "batch_size", lo=1)
  checks.check_int(config, "seed", lo=0)
  require(offline_needs(config))


def offline_needs(config) -> list[Need]:
  """The offline data the run reads (.whl/): the held-out English text, and the default MLM."""
  from gmlm.nn import presets

  out = [Need(english.GENSIM_WHEEL, english.data_dir, "the held-out English text")]
  if config.model in ("", "default"):
    out.append(
      Need(presets.MINILM_WHEEL, presets.minilm_dir, "the default MLM", "--config.model=DIR")
    )
  return out


def run(config, workdir: str) -> dict:
  validate(config)
  if (stored := finished(config, workdir)) is not None:
    return stored
  t0 = time.time()
  model, tokenizer = load_mlm(config.model, config.dtype, config.allow_pickle)
  rd = RunDir(workdir, config)
  results = {"model": config.model or "default", "seed": config.seed}
  rows = []
  for source in config.sources:
    docs = english.corpus("held_out", sources=(source,))
    sents = [s for d in docs for s in d][: config.max_sentences or None]
    r = evaluation.fill_mask(
      model, tokenizer, sents, seed=config.seed, batch_size=config.batch_size
    )
    results[source] = r
    rows.append(
      [
        source,
        r["count"],
        f"{100 * r['top1']:.1f}%",
        f"{100 * r['top5']:.1f}%",
        f"{r['mean_logp']:.2f}",
      ]
    )
  total = sum(results[s]["count"] for s in config.sources)
  results["all"] = {
    key: sum(results[s][key] * results[s]["count"] for s in config.sources) / total
    for key in ("top1", "top5", "mean_logp")
  }
  results["all"]["count"] = total
  a = results["all"]
  rows.append(
    ["all", total, f"{100 * a['top1']:.1f}%", f"{100 * a['top5']:.1f}%", f"{a['mean_logp']:.2f}"]
  )
  results["seconds"] = time.time() - t0
  probe_rows = [[text, ", ".join(best)] for text, best in evaluation.probes(model, tokenizer)]
  rd.write_report(
    f"# Fill-mask accuracy of `{results['model']}` on held-out English\n\n"
    "One random non-special token masked per sentence (last 10% of the offline Wikipedia pages "
    "and news articles; never trained on). Top-k over the candidate vocabulary.\n\n"
    + markdown_table(["source", "sentences", "top-1", "top-5", "mean log p"], rows)
    + "\n\n## Probes\n\n"
    + markdown_table(["input", "top-3"], probe_rows)
    + "\n"
  )
  rd.write_results(results)  # last: a run with results.json is finished
  print(
    f"held-out fill-mask top-1 {100 * a['top1']:.1f}%  top-5 {100 * a['top5']:.1f}%  "
    f"mean log p {a['mean_logp']:.2f}  ({total} sentences)"
  )
  return results
