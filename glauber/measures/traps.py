"""Trap states of long Glauber runs: detection, catalogue, basin neighbourhoods (paper A, A.1).

Two detectors over a recorded trajectory (`recording.Trajectory`: the free tokens tokens_RBN of
every chain at the steps steps_R, evenly spaced by record_every):

Embedding drift (the paper's rule). With e_r the unit sentence embedding of a chain's state at
record r and w = window / record_every records, the window drift
  D_r = (1/w) Σ_{s=r+1}^{r+w} (1 - <e_s, e_r>)
is the mean cosine distance of the next `window` steps from the state at r. Every window
[r, r+w] with D_r < threshold is flagged; a trap is a maximal union of overlapping flagged
windows, trimmed at both ends to the records within `threshold` of its mean direction
c = Σ e / |Σ e| (a window whose tail has already left still has a small mean; the trim puts the
trap's end at the last state that belongs to it).

Holding times (where the rejection-free mode ran, record_every = 1: a snapshot every step). A
maximal run of identical snapshots is one holding time of that state. A state held at least
`min_hold` steps is a trap's home; the trap grows over the excursions that return home after
at most `max_gap` steps without leaving the states within `max_sites` sites of home (a chain
flipping between near-tied tokens stays in one trap); overlapping traps merge. With the site
log-probabilities recorded (`record_logprobs`), the expected holding time of a state is
  E[G + 1] = 1 / (1 - s),   s = (1/n) Σ_i p_i^T(x_i | x_-i)   (rejection_free's stay probability)
an exact one-state escape time the catalogue reports beside the observed one.

Catalogue (Table 5 of the paper): per trap its chain, start step, duration (steps from the first
to one past the last record inside it; `censored` when it lasts to the end of the recording, so
the escape was not observed), the text of its most visited state, and the slots Δ_mean, Δ_min,
perfect (Δ_min > 0: every token the argmax) / approximate, and Theorem 8's predicted escape time.
The margins come from a callable `margins(tokens_XN) -> {"delta_mean": [X], "delta_min": [X],
"predicted_escape": [X] (optional)}`: `glauber.measures.margins` (issue 12) provides them; without one
the slots stay None.

Basin neighbourhoods: traps whose mean directions have cosine similarity >= `similarity` are
linked, and the connected components (single linkage) are the neighbourhoods (the paper's
"population density" family of four traps in one chain).
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from glauber.measures.common import pyplot
from gmlm.runs import RunDir, markdown_table

Margins = Callable[[np.ndarray], dict]
Decode = Callable[[np.ndarray], list[str]]


def record_spacing(steps_R) -> int:
  """record_every of a trajectory (1 when it holds a single record); raises if uneven."""
  steps_R = np.asarray(steps_R)
  if steps_R.size < 2:
    return 1
  gaps = np.diff(steps_R)
  if not (gaps == gaps[0]).all() or gaps[0] < 1:
    raise ValueError("records must be evenly spaced in steps (one trajectory, one record_every)")
  return int(gaps[0])


@jax.jit
def _window_drift(e_RBD: jax.Array, w: jax.Array) -> jax.Array:
  # Σ_{s=r+1}^{r+w} <e_s, e_r> = <C_{r+w} - C_r, e_r> with C the cumulative sum over records.
  R = e_RBD.shape[0]
  c_RBD = jnp.cumsum(e_RBD, axis=0)
  end = jnp.minimum(jnp.arange(R) + w, R - 1)
  ahead_RBD = c_RBD[end] - c_RBD
  drift_RB = 1.0 - jnp.einsum("rbd,rbd->rb", ahead_RBD, e_RBD) / w
  return jnp.where((jnp.arange(R) + w <= R - 1)[:, None], drift_RB, jnp.nan)


def window_drift(e_RBD, window_records: int) -> np.ndarray:
  """drift_RB: D_r above (NaN where the window runs past the last record). e_RBD unit norm."""
  e_RBD = jnp.asarray(e_RBD, jnp.float32)
  if window_records < 1:
    raise ValueError(f"the window must hold at least one record, got {window_records}")
  return np.asarray(_window_drift(e_RBD, jnp.int32(window_records)))


def _runs(flag_R: np.ndarray) -> list[tuple[int, int]]:
  """[(first, last)] of the maximal runs of True in flag_R (inclusive)."""
  padded = np.concatenate([[False], flag_R, [False]]).astype(np.int8)
  edges = np.flatnonzero(np.diff(padded))
  return [(int(a), int(b) - 1) for a, b in zip(edges[::2], edges[1::2])]


def _interval(chain: int, first: int, last: int, steps_R, every: int, method: str) -> dict:
  R = len(steps_R)
  return {
    "chain": chain,
    "first_record": first,
    "last_record": last,
    "start": int(steps_R[first]),
    "duration": int(steps_R[last] - steps_R[first]) + every,
    "censored": last == R - 1,
    "method": method,
  }


def drift_traps(
  steps_R, e_RBD, window: int = 300, threshold: float = 0.12, min_duration: int = 0
) -> list[dict]:
  """Traps by the embedding-drift rule (module docstring): a dict per trap with chain,
  first_record, last_record, start, duration, censored, method="drift"."""
  steps_R, e_RBD = np.asarray(steps_R), np.asarray(e_RBD, np.float32)
  every = record_spacing(steps_R)
  w = max(1, int(round(window / every)))
  R, B = e_RBD.shape[:2]
  if R <= w:
    return []
  flagged_RB = window_drift(e_RBD, w) < threshold  # NaN compares False
  traps = []
  for b in range(B):
    cover_R = np.zeros(R, bool)
    for r in np.flatnonzero(flagged_RB[:, b]):
      cover_R[r : r + w + 1] = True
    for first, last in _runs(cover_R):
      c_D = e_RBD[first : last + 1, b].sum(0)
      near_R = 1.0 - e_RBD[first : last + 1, b] @ (c_D / max(np.linalg.norm(c_D), 1e-12))
      inside = np.flatnonzero(near_R < threshold)
      if inside.size == 0:
        continue
      trap = _interval(b, first + int(inside[0]), first + int(inside[-1]), steps_R, every, "drift")
      if trap["duration"] >= min_duration:
        traps.append(trap)
  return traps


def _episodes(tok_RN: np.ndarray, gap: int, max_sites: int) -> list[tuple[int, int]]:
  """[(first, last)] records of each stay at a home state: its visits, linked when at most
  `gap` records lie between two and each of those is within max_sites sites of home."""
  _, ids_R = np.unique(tok_RN, axis=0, return_inverse=True)
  ids_R = ids_R.reshape(-1)
  order = np.argsort(ids_R, kind="stable")
  bounds = np.flatnonzero(np.diff(ids_R[order])) + 1
  out = []
  for pos in np.split(order, bounds):  # the records of one state, in time order
    link = np.diff(pos) == 1
    for k in np.flatnonzero((np.diff(pos) > 1) & (np.diff(pos) <= gap + 1)):
      away = tok_RN[pos[k] + 1 : pos[k + 1]] != tok_RN[pos[k]]
      link[k] = bool((away.sum(-1) <= max_sites).all())
    cuts = np.flatnonzero(~link) + 1
    out += [(int(p[0]), int(p[-1])) for p in np.split(pos, cuts)]
  return out


def holding_traps(
  steps_R, tokens_RBN, min_hold: int = 300, max_gap: int = 0, max_sites: int = 1
) -> list[dict]:
  """Traps from holding times (module docstring); the same dicts as drift_traps with
  method="holding": stays at a home state (its holding times joined over excursions of at most
  max_gap steps within max_sites sites of home) of at least min_hold steps, overlapping stays
  merged. Exact holding times need record_every = 1 (otherwise a run of k identical snapshots
  is a hold of at least (k - 1) * record_every + 1 steps)."""
  steps_R, tokens_RBN = np.asarray(steps_R), np.asarray(tokens_RBN)
  every = record_spacing(steps_R)
  traps = []
  for b in range(tokens_RBN.shape[1]):
    stays = [
      (f, l)
      for f, l in _episodes(tokens_RBN[:, b], max_gap // every, max_sites)
      if (l - f + 1) * every >= min_hold
    ]
    spans: list[list[int]] = []
    for f, l in sorted(stays):
      if spans and f <= spans[-1][1] + 1:
        spans[-1][1] = max(spans[-1][1], l)
      else:
        spans.append([f, l])
    traps += [_interval(b, f, l, steps_R, every, "holding") for f, l in spans]
  return traps


def coverage(traps: Sequence[dict], num_records: int, num_chains: int) -> np.ndarray:
  """inside_RB: whether record r of chain b lies in one of the traps."""
  inside_RB = np.zeros((num_records, num_chains), bool)
  for t in traps:
    inside_RB[t["first_record"] : t["last_record"] + 1, t["chain"]] = True
  return inside_RB


def agreement(a: Sequence[dict], b: Sequence[dict], num_records: int, num_chains: int) -> float:
  """Jaccard index of the (record, chain) cells two trap lists cover (1 when both are empty)."""
  ca, cb = coverage(a, num_records, num_chains), coverage(b, num_records, num_chains)
  union = (ca | cb).sum()
  return float((ca & cb).sum() / union) if union else 1.0


def expected_holding(logp_XN) -> np.ndarray:
  """E[holding time + 1] = 1 / (1 - s) of each state, s = mean_i p_i^T(x_i | x_-i)."""
  leave_X = -np.expm1(np.asarray(logp_XN, np.float64)).mean(-1)
  with np.errstate(divide="ignore"):
    return np.where(leave_X > 0, 1.0 / leave_X, np.inf)


def escape_steps(steps_R, tokens_RBN, home_BN, fraction: float = 0.5) -> np.ndarray:
  """escape_B: the first recorded step at which chain b differs from its home state home_BN
  at >= `fraction` of the sites (+inf: not within the recording). Used to compare how long
  samplers started inside a trap stay near it."""
  steps_R, tokens_RBN = np.asarray(steps_R), np.asarray(tokens_RBN)
  away_RB = (tokens_RBN != np.asarray(home_BN)[None]).mean(-1) >= fraction
  first_B = np.argmax(away_RB, axis=0)
  return np.where(away_RB.any(0), steps_R[first_B].astype(np.float64), np.inf)


def neighbourhoods(c_XD, similarity: float = 0.8) -> np.ndarray:
  """label_X: connected components of the graph linking directions with cosine >= similarity
  (labels numbered in order of first appearance)."""
  c_XD = np.asarray(c_XD, np.float64)
  X = len(c_XD)
  if X == 0:
    return np.zeros(0, int)
  u_XD = c_XD / np.maximum(np.linalg.norm(c_XD, axis=-1, keepdims=True), 1e-12)
  linked = u_XD @ u_XD.T >= similarity
  label = -np.ones(X, int)
  count = 0
  for x in range(X):
    if label[x] >= 0:
      continue
    stack, label[x] = [x], count
    while stack:
      y = stack.pop()
      for z in np.flatnonzero(linked[y] & (label < 0)):
        label[z] = count
        stack.append(z)
    count += 1
  return label


def _mode_row(rows_XN: np.ndarray) -> tuple[np.ndarray, float]:
  """The most frequent row and its share of the rows."""
  counts = Counter(map(tuple, rows_XN.tolist()))
  row, k = counts.most_common(1)[0]
  return np.asarray(row, rows_XN.dtype), k / len(rows_XN)


def catalogue(
  traps: Sequence[dict],
  tokens_RBN,
  e_RBD,
  *,
  decode: Decode | None = None,
  logp_RBN=None,
  margins: Margins | None = None,
  similarity: float = 0.8,
) -> list[dict]:
  """Each trap with its representative state (the most visited inside it; `tokens`, `text`,
  `share`), `neighbourhood`, `expected_holding` (needs logp_RBN), and the margin slots
  delta_mean, delta_min, kind ("perfect" / "approximate"), predicted_escape (None without
  `margins`), observed_escape (= duration; None when censored)."""
  tokens_RBN, e_RBD = np.asarray(tokens_RBN), np.asarray(e_RBD, np.float64)
  out, reps, dirs = [], [], []
  for t in traps:
    sl = slice(t["first_record"], t["last_record"] + 1)
    rep, share = _mode_row(tokens_RBN[sl, t["chain"]])
    entry = dict(t, tokens=rep.tolist(), share=share)
    entry["observed_escape"] = None if t["censored"] else t["duration"]
    if logp_RBN is not None:
      first = t["first_record"] + int(
        np.flatnonzero((tokens_RBN[sl, t["chain"]] == rep).all(-1))[0]
      )
      entry["expected_holding"] = float(expected_holding(np.asarray(logp_RBN)[first, t["chain"]]))
    out.append(entry)
    reps.append(rep)
    dirs.append(e_RBD[sl, t["chain"]].sum(0))
  if not out:
    return out
  reps_XN = np.stack(reps)
  texts = decode(reps_XN) if decode is not None else [" ".join(map(str, r)) for r in reps_XN]
  m = margins(reps_XN) if margins is not None else {}
  labels = neighbourhoods(np.stack(dirs), similarity)
  for x, entry in enumerate(out):
    entry["text"] = texts[x]
    entry["neighbourhood"] = int(labels[x])
    for key in ("delta_mean", "delta_min", "predicted_escape"):
      entry[key] = float(np.asarray(m[key])[x]) if key in m else None
    d = entry["delta_min"]
    entry["kind"] = None if d is None else ("perfect" if d > 0 else "approximate")
  return out


def measure(
  steps_R,
  tokens_RBN,
  e_RBD,
  *,
  decode: Decode | None = None,
  logp_RBN=None,
  margins: Margins | None = None,
  window: int = 300,
  threshold: float = 0.12,
  min_duration: int = 0,
  similarity: float = 0.8,
  holding: bool = False,
  min_hold: int | None = None,
  max_gap: int = 0,
  max_sites: int = 1,
) -> dict:
  """The trap catalogue of a recorded trajectory (JSON-able). e_RBD: unit sentence embeddings
  of the recorded states (`semantic_drift.embed_states`). holding=True (rejection-free runs,
  record_every = 1) adds the holding-time detector's traps and its agreement (Jaccard of the
  covered records) with the drift detector; min_hold defaults to the window."""
  steps_R, tokens_RBN = np.asarray(steps_R), np.asarray(tokens_RBN)
  R, B = tokens_RBN.shape[:2]
  found = drift_traps(steps_R, e_RBD, window, threshold, min_duration)
  keys = dict(decode=decode, logp_RBN=logp_RBN, margins=margins, similarity=similarity)
  describe = functools.partial(catalogue, tokens_RBN=tokens_RBN, e_RBD=e_RBD, **keys)
  results = {
    "window": window,
    "threshold": threshold,
    "similarity": similarity,
    "num_chains": B,
    "last_step": int(steps_R[-1]) if R else 0,
    "traps": describe(found),
  }
  if holding:
    held = holding_traps(
      steps_R, tokens_RBN, window if min_hold is None else min_hold, max_gap, max_sites
    )
    results["holding_traps"] = describe(held)
    results["agreement"] = agreement(found, held, R, B)
  return results


def _rows(traps: Sequence[dict]) -> list[list]:
  def show(v):
    return "—" if v is None else v

  def vacuous(v):  # Theorem 8 bounds the exit probability by 1 / v: vacuous when v < 1
    return "—" if v is None else ("< 1 (vacuous)" if v < 1 else v)

  rows = []
  for i, t in enumerate(traps, 1):
    text = t["text"] if len(t["text"]) <= 70 else t["text"][:67] + "..."
    observed = f"> {t['duration']}" if t["censored"] else t["duration"]
    rows.append(
      [
        i,
        t["chain"],
        "`" + text.replace("|", "\\|").replace("`", "'") + "`",
        t["start"],
        observed,
        t["neighbourhood"],
        show(t["delta_mean"]),
        show(t["delta_min"]),
        show(t["kind"]),
        vacuous(t["predicted_escape"]),
        show(t.get("expected_holding")),
      ]
    )
  return rows


HEADER = [
  "No.",
  "chain",
  "representative text",
  "start",
  "duration (observed escape)",
  "neighbourhood",
  "Δ_mean",
  "Δ_min",
  "type",
  "Thm 8 predicted escape",
  "E[holding] of the state",
]


def figure(results: dict):
  """Each chain's traps on a step axis, coloured by neighbourhood (the legend), the
  holding-time detector's as black lines; with no trap, says so on the axes."""
  plt = pyplot()
  from matplotlib.lines import Line2D
  from matplotlib.patches import Patch

  B, last = results["num_chains"], results["last_step"]
  fig, ax = plt.subplots(figsize=(7, 0.3 * B + 1.6))
  cmap = plt.get_cmap("tab10")
  for t in results["traps"]:
    ax.broken_barh(
      [(t["start"], t["duration"])], (t["chain"] - 0.4, 0.8), color=cmap(t["neighbourhood"] % 10)
    )
  held = results.get("holding_traps", [])
  for t in held:
    ax.plot([t["start"], t["start"] + t["duration"]], [t["chain"]] * 2, color="k", lw=1)
  ax.set(xlim=(0, last), ylim=(-0.6, B - 0.4), xlabel="Glauber step", ylabel="chain")
  either = (
    "\n(neither the drift rule nor the holding-time detector)" if "holding_traps" in results else ""
  )
  if not results["traps"] and not held:
    ax.text(
      0.5,
      0.5,
      f"no traps found ({B} chains × {last} steps){either}",
      transform=ax.transAxes,
      ha="center",
      va="center",
      fontsize=10,
    )
  hoods = sorted({t["neighbourhood"] for t in results["traps"]})
  handles = [Patch(color=cmap(h % 10), label=f"neighbourhood {h}") for h in hoods[:10]]
  if len(hoods) > 10:
    handles.append(Patch(color="w", label=f"(+{len(hoods) - 10} more, colours repeat)"))
  if held:
    handles.append(Line2D([], [], color="k", lw=1, label="holding-time trap"))
  if handles:
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
  ax.set_title(
    f"Traps: windows of {results['window']} steps with mean drift < {results['threshold']}",
    fontsize=9,
  )
  return fig


def section(results: dict, run: RunDir) -> str:
  """Markdown of the trap catalogue, its summary and the timeline figure (traps.png)."""
  traps = results["traps"]
  out = [
    "## Trap states\n",
    f"Embedding-drift rule: windows of {results['window']} steps whose mean cosine distance "
    f"from their first state is below {results['threshold']}; {len(traps)} traps in "
    f"{results['num_chains']} chains x {results['last_step']} steps. Neighbourhoods: traps whose "
    f"mean embeddings have cosine similarity >= {results['similarity']} (single linkage).\n",
  ]
  if traps:
    durations = np.array([t["duration"] for t in traps])
    kinds = Counter(t["kind"] for t in traps if t["kind"] is not None)
    out.append(
      f"Duration: mean {durations.mean():.0f}, range {durations.min()}-{durations.max()} steps "
      f"({sum(t['censored'] for t in traps)} still trapped at the end); "
      f"{len({t['neighbourhood'] for t in traps})} neighbourhoods"
      + (f"; {kinds['perfect']} perfect, {kinds['approximate']} approximate" if kinds else "")
      + ".\n"
    )
    out.append(markdown_table(HEADER, _rows(traps), digits=3))
  if "holding_traps" in results:
    out.append(
      f"\nHolding-time detector: {len(results['holding_traps'])} traps; agreement with the "
      f"drift detector (Jaccard of covered records) {results['agreement']:.3f}.\n"
    )
  run.savefig(figure(results), "traps.png")
  out.append("\n![traps](traps.png)\n")
  return "\n".join(out)
