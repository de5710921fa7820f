"""Semantic basins of long chains and prefix attractors (paper A, 6.2, B.5-B.6, C.4).

Chains seeded from topics (5 topics x 10 seeds in the paper) are scored every s steps by a
zero-shot topic scorer (`glauber.measures.topics`) over the eleven labels; with scores_RBY the score of
label l for chain b at record r and baseline 1/L:
  table (a): per seed topic, the mean `target` (politics) score over its chains at the first
    and the last record;
  table (b): the same beside the mean score of the seed topic itself (loss of topic identity);
  crossings: the chains whose target score exceeds the baseline at least once (and the peak);
  PCA: the 2-D principal components of all recorded sentence embeddings, each chain a path
    in its seed topic's colour, faint early and solid late (Figs. 1, 4).
Prefix attractors: chains with a frozen prefix ("donald trump said that", ...); per prefix the
mean topic scores of the endpoints, how often each label wins, and example endpoint texts.

Recorded states repeat, so each distinct state is decoded, embedded and scored once (the
embedding scorer reuses the sentence embeddings the PCA needs: one forward per state).

Shape letters: glauber's legend (Y topic labels, U distinct recorded states).
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import numpy as np

from glauber.measures.common import pyplot
from glauber.measures.topics import TopicScorer
from gmlm.runs import RunDir, markdown_table

Decode = Callable[[np.ndarray], list[str]]

SEED_TEXTS = {
  "health": [
    "regular exercise and a balanced diet lower the risk of heart disease , and doctors "
    "recommend a yearly checkup for adults over forty .",
    "the vaccine protects children against measles , a contagious disease that spreads "
    "quickly in schools and hospitals .",
  ],
  "sport": [
    "the striker scored twice in the second half as the home team won the championship "
    "final in front of a sold out stadium .",
    "the tennis player served three aces in the last set and lifted the trophy after a "
    "long match against the defending champion .",
  ],
  "science": [
    "the astronomers measured the light of a distant galaxy and found that the universe "
    "is expanding faster than physicists expected .",
    "in the laboratory the chemists heated the sample until the crystals formed , and the "
    "experiment confirmed the theory .",
  ],
  "food": [
    "slice the onions , fry them in butter until golden , then add the tomatoes and let the "
    "sauce simmer before serving it with pasta .",
    "the bakery sells fresh bread every morning , and its chocolate cake is the most popular "
    "dessert in the whole town .",
  ],
  "technology": [
    "the new smartphone has a faster processor , a better camera and software that lets "
    "users back up their files to the cloud .",
    "engineers wrote a program that lets the computer recognise speech and translate it "
    "into text on the screen in real time .",
  ],
}

PREFIXES = ("donald trump said that", "the little kid said that", "albert einstein said that")


def score_states(
  scorer: TopicScorer,
  tokens___N,
  decode: Decode,
  embedder: tuple | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
  """(scores___Y, e___D): each distinct state decoded and scored once; with an embedder
  (model, tokenizer) also its sentence embeddings, which an embedding scorer reuses."""
  from glauber.measures.semantic_drift import embed_texts

  tokens___N = np.asarray(tokens___N)
  rows_XN = tokens___N.reshape(-1, tokens___N.shape[-1])
  unique_UN, inverse_X = np.unique(rows_XN, axis=0, return_inverse=True)
  texts = decode(unique_UN)
  e_UD = embed_texts(*embedder, texts) if embedder is not None else None
  if e_UD is not None and getattr(scorer, "e_TD", None) is not None:
    s_UT = scorer.scores(texts, e_UD)
  else:
    s_UT = scorer.scores(texts)
  lead = tokens___N.shape[:-1]
  s = s_UT[inverse_X.reshape(-1)].reshape(*lead, -1)
  e = None if e_UD is None else e_UD[inverse_X.reshape(-1)].reshape(*lead, -1)
  return s, e


def tables(
  scores_RBY, seed_topic_B: Sequence[str], labels: Sequence[str], target: str = "politics"
) -> dict:
  """Tables (a) and (b) and the crossing count (module docstring), JSON-able."""
  scores_RBY = np.asarray(scores_RBY, np.float64)
  labels, seeds = list(labels), np.asarray(seed_topic_B)
  baseline, t = 1.0 / len(labels), labels.index(target)
  rows = []
  for topic in dict.fromkeys(seeds.tolist()):  # topics in order of first appearance
    chains = seeds == topic
    s = labels.index(topic) if topic in labels else None
    rows.append(
      {
        "topic": topic,
        "chains": int(chains.sum()),
        "target_start": float(scores_RBY[0, chains, t].mean()),
        "target_end": float(scores_RBY[-1, chains, t].mean()),
        "seed_start": None if s is None else float(scores_RBY[0, chains, s].mean()),
        "seed_end": None if s is None else float(scores_RBY[-1, chains, s].mean()),
      }
    )
  above_B = (scores_RBY[:, :, t] > baseline).any(0)
  return {
    "target": target,
    "baseline": baseline,
    "rows": rows,
    "crossed": int(above_B.sum()),
    "num_chains": int(scores_RBY.shape[1]),
    "peak": float(scores_RBY[:, :, t].max()),
    "ended_above": int((scores_RBY[-1, :, t] > baseline).sum()),
  }


def pca(e_XD, k: int = 2) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(p_X2 projections, components_2D, explained variance ratio_2) of the centred rows."""
  e_XD = np.asarray(e_XD, np.float64)
  c_XD = e_XD - e_XD.mean(0)
  _, sv, vt_DD = np.linalg.svd(c_XD, full_matrices=False)
  ratio = sv**2 / max(float((sv**2).sum()), 1e-300)
  return c_XD @ vt_DD[:k].T, vt_DD[:k], ratio[:k]


def measure(
  steps_R,
  tokens_RBN,
  seed_topic_B: Sequence[str],
  scorer: TopicScorer,
  decode: Decode,
  embedder: tuple | None = None,
  target: str = "politics",
) -> dict:
  """Topic scores of every record, tables (a)/(b), crossings, and (with an embedder) the 2-D
  PCA path of each chain."""
  scores_RBY, e_RBD = score_states(scorer, tokens_RBN, decode, embedder)
  out = {
    "steps": np.asarray(steps_R).tolist(),
    "labels": list(scorer.labels),
    "seed_topics": list(seed_topic_B),
    "scores": scores_RBY.tolist(),
    **tables(scores_RBY, seed_topic_B, scorer.labels, target),
  }
  if e_RBD is not None:
    R, B, D = e_RBD.shape
    p_X2, _, ratio = pca(e_RBD.reshape(R * B, D))
    out["pca"] = p_X2.reshape(R, B, 2).tolist()
    out["pca_explained"] = ratio.tolist()
  return out


def _chains(
  key, model, tokenizer, lay, x0_BL, temperature: float, num_steps: int, every: int, candidates=None
):
  """tokens_RBN of Glauber chains from x0_BL, record 0 the start, then every `every` steps
  (candidates: the tokens a site may take; default every non-special token)."""
  from glauber import chains

  vocab_size = model.config.vocab_size
  if candidates is None:
    candidates = chains.candidate_ids(tokenizer, vocab_size)
  spec = chains.make_spec(candidates, vocab_size, lay, temperature)
  _, rec = chains.run(key, model, spec, chains.init_state(x0_BL), num_steps // every, every)
  free_BN = np.asarray(x0_BL)[:, lay.offset : lay.offset + lay.num_sites]
  return np.concatenate([free_BN[None], np.asarray(rec.tokens_RBN)])


def seed_states(
  tokenizer, lay, seeds: dict[str, Sequence[str]] = SEED_TEXTS, seeds_per_topic: int = 10
) -> tuple[np.ndarray, list[str]]:
  """(x0_BL, seed_topic_B): seeds_per_topic chains per topic, chain j of a topic starting from
  its texts[j % len(texts)]."""
  from glauber import init_states

  x0_BL = np.concatenate(
    [
      init_states.from_text(tokenizer, lay, list(texts), seeds_per_topic)
      for texts in seeds.values()
    ]
  )
  return x0_BL, [topic for topic in seeds for _ in range(seeds_per_topic)]


def simulate(
  key: jax.Array,
  model,
  tokenizer,
  *,
  seeds: dict[str, Sequence[str]] = SEED_TEXTS,
  seeds_per_topic: int = 10,
  temperature: float = 1.0,
  num_sites: int = 20,
  num_steps: int = 10_000,
  record_every: int = 200,
  prefix: str = "",
) -> tuple[np.ndarray, np.ndarray, list[str]]:
  """(steps_R, tokens_RBN, seed_topic_B) of the `seed_states` chains; record 0 is the start."""
  from glauber.layout import Layout, max_sequence_length

  lay = Layout.from_tokenizer(tokenizer, num_sites, prefix, max_sequence_length(model))
  x0_BL, topics = seed_states(tokenizer, lay, seeds, seeds_per_topic)
  tokens_RBN = _chains(key, model, tokenizer, lay, x0_BL, temperature, num_steps, record_every)
  return record_every * np.arange(tokens_RBN.shape[0]), tokens_RBN, topics


def prefix_endpoints(
  key: jax.Array,
  model,
  tokenizer,
  *,
  prefixes: Sequence[str] = PREFIXES,
  num_chains: int = 10,
  temperature: float = 1.0,
  num_sites: int = 20,
  num_steps: int = 2_000,
  candidates=None,
) -> dict[str, np.ndarray]:
  """{prefix: final free tokens_BN} of num_chains chains behind each frozen prefix, every free
  site starting as [MASK]."""
  from glauber import init_states
  from glauber.layout import Layout, max_sequence_length

  out = {}
  for prefix in prefixes:
    lay = Layout.from_tokenizer(tokenizer, num_sites, prefix, max_sequence_length(model))
    x0_BL = init_states.all_mask(lay, num_chains)
    out[prefix] = _chains(
      key, model, tokenizer, lay, x0_BL, temperature, num_steps, num_steps, candidates
    )[-1]
  return out


def attractors(
  endpoints: dict[str, np.ndarray], scorer: TopicScorer, decode: Decode, examples: int = 3
) -> dict:
  """Per prefix, from its chains' final free tokens (endpoints[prefix] = tokens_BN): the mean
  topic scores, how often each label wins, and example endpoint texts (the prefix in front)."""
  out = {"labels": list(scorer.labels), "prefixes": []}
  for prefix, tokens_BN in endpoints.items():
    texts = [f"{prefix} {t}" for t in decode(np.asarray(tokens_BN))]
    s_BY = scorer.scores(texts)
    wins = np.bincount(s_BY.argmax(-1), minlength=len(scorer.labels))
    out["prefixes"].append(
      {
        "prefix": prefix,
        "mean_scores": s_BY.mean(0).tolist(),
        "wins": {label: int(k) for label, k in zip(scorer.labels, wins) if k},
        "examples": texts[:examples],
      }
    )
  return out


def _count(k: int, noun: str) -> str:
  return f"{k} {noun}" + ("" if k == 1 else "s")


def figure_pca(results: dict):
  """Each chain's path in the 2-D PCA plane, one colour per seed topic (the legend), time by
  opacity (faint early, solid late) with an arrow on each move, an open circle at the start
  and a filled square at the end."""
  plt = pyplot()
  from matplotlib.lines import Line2D

  p_RBK = np.asarray(results["pca"])
  R, B, _ = p_RBK.shape
  seeds = results.get("seed_topics") or ["chain"] * B
  topics = list(dict.fromkeys(seeds))
  colour = {t: plt.get_cmap("tab10")(i % 10) for i, t in enumerate(topics)}
  alpha_R = np.linspace(0.25, 1.0, R)
  fig, ax = plt.subplots(figsize=(6.5, 5))
  for b in range(B):
    c, x, y = colour[seeds[b]], p_RBK[:, b, 0], p_RBK[:, b, 1]
    for r in range(R - 1):
      ax.annotate(
        "",
        (x[r + 1], y[r + 1]),
        (x[r], y[r]),
        arrowprops=dict(arrowstyle="->", color=c, alpha=float(alpha_R[r + 1]), lw=1),
      )
    ax.scatter(x, y, color=c, alpha=alpha_R, s=10)
    ax.scatter(x[0], y[0], s=45, facecolors="none", edgecolors=[c], linewidths=1.2)
    ax.scatter(x[-1], y[-1], s=40, marker="s", color=c, edgecolors="k", linewidths=0.5)
  handles = [
    Line2D(
      [], [], color=colour[t], marker="o", lw=1, label=f"{t} ({_count(seeds.count(t), 'chain')})"
    )
    for t in topics
  ]
  handles += [
    Line2D([], [], ls="", marker="o", mfc="none", mec="0.3", label="start"),
    Line2D([], [], ls="", marker="s", color="0.3", mec="k", label="end"),
  ]
  ax.legend(handles=handles, fontsize=7, loc="best", title="seed topic", title_fontsize=7)
  ratio = results["pca_explained"]
  ax.set(xlabel=f"PC1 ({ratio[0]:.0%} of variance)", ylabel=f"PC2 ({ratio[1]:.0%})")
  steps = results.get("steps") or [0, R - 1]
  ax.set_title(
    f"{B} chains in sentence-embedding PCA space, steps {steps[0]}-{steps[-1]} "
    "(faint early, solid late)",
    fontsize=9,
  )
  return fig


def section(results: dict, run: RunDir, attractor_results: dict | None = None) -> str:
  """Tables (a), (b), the crossing count, basins_pca.png, and the prefix attractors."""
  tgt = results["target"]
  a = [[r["topic"], r["target_start"], r["target_end"]] for r in results["rows"]]
  b = [
    [r["topic"], r["target_start"], r["target_end"], r["seed_start"], r["seed_end"]]
    for r in results["rows"]
  ]
  end = results["steps"][-1]
  out = [
    "## Semantic basins\n",
    f"Topic scores over {len(results['labels'])} labels every {results['steps'][1]} steps; "
    f"uniform baseline {results['baseline']:.3f}.\n",
    f"(a) {tgt} score\n",
    markdown_table(["Topic", "@0", f"@{end}"], a, digits=3),
    f"(b) {tgt} vs. seed topic\n",
    markdown_table(["Topic", "Pol@0", f"Pol@{end}", "Seed@0", f"Seed@{end}"], b, digits=3),
    f"{results['crossed']} of {results['num_chains']} chains cross the {tgt} baseline at least "
    f"once (peak {results['peak']:.3f}); {results['ended_above']} end above it.\n",
  ]
  if "pca" in results:
    run.savefig(figure_pca(results), "basins_pca.png")
    out.append("![PCA trajectories](basins_pca.png)\n")
  if attractor_results is not None:
    out.append(section_attractors(attractor_results))
  return "\n".join(out)


def section_attractors(results: dict, run: RunDir | None = None) -> str:
  """The prefix attractors: per prefix the three labels of highest mean score and an example."""
  labels = results["labels"]
  rows = []
  for p in results["prefixes"]:
    top = np.argsort(p["mean_scores"])[::-1][:3]
    mix = ", ".join(f"{labels[i]} {p['mean_scores'][i]:.2f}" for i in top)
    wins = ", ".join(
      f"{label} {k}" for label, k in sorted(p["wins"].items(), key=lambda kv: -kv[1])
    )
    example = p["examples"][0].replace("|", "\\|") if p["examples"] else ""
    rows.append([f"`{p['prefix']}`", mix, wins, example])
  return "\n".join(
    [
      "### Prefix attractors (Appendix C.4)\n",
      "Chains behind each frozen prefix, every free site starting as [MASK]; the topic mix of "
      "their endpoints (mean scores, and how many endpoints each label wins).\n",
      markdown_table(["prefix", "top mean scores", "wins", "example endpoint"], rows),
    ]
  )
