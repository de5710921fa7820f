"""Search or model: why a DAG model's beam translation is not the reference (issue 43's error
analysis, the part `padir.evaluation.errors` cannot see from the strings alone).

The beam (padir.decoding.dag.beam) looks for the translation of largest score
    s(y) = (log P(y | x) + w log P_lm(y)) / |y|^b
(|y| counting EOS; w the n-gram model's weight, b the length normalisation). Each wrong
translation y* (its words not the reference's) is put in the first class that applies, by
scoring the reference y the same way (its canonical pieces, `padir.model.dag.path_logprob` for
the DAG's marginal, the n-gram automaton for P_lm):
- infeasible: the reference has more tokens than the graph has vertices (no path emits it);
- search: s(y) > s(y*): the objective prefers the reference and the beam did not reach it; a
  wider beam can mend it;
- objective: s(y) <= s(y*) but log P(y | x) > log P(y* | x): the DAG itself prefers the
  reference and the n-gram term or the length normalisation turned it;
- model: the DAG prefers y* too: a decoder cannot mend it, training must.
A tie (within TOLERANCE nats) is not a search error. CLI: `python -m padir.evaluation.dag_search
--run DIR [--step N] [--split test|valid|train] [--limit N] [--beam-sizes 5,20]`, one row per
beam width over a split of the run's corpus (train: whether a wrong translation is a failure
to generalise or to learn), with the n-gram model and (w, b) the run's validation chose at that checkpoint, then
the share wrong by how much of its graph the reference fills, M / n_v (`by_fill`). Two
remedies can be tried on the same table: `--oracle-length` (the beam finishes translations of
the reference's length only: what a perfect length model would mend) and `--average K` (the
mean parameters of the last K checkpoints up to the step).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from padir.data import corpus
from padir.data import tokenizer as tokenizer_lib
from padir.decoding import dag as dag_decoding
from padir.decoding import ngram
from padir.evaluation import metrics, translation
from padir.model import dag as dag_lib
from padir.model import restore, slots
from padir.model import transformer as model_lib

Array = jax.Array
TOLERANCE = 1e-3  # nats: a reference scoring within this of the beam's choice is a tie
CLASSES = ("infeasible", "search", "objective", "model")


@dataclasses.dataclass(frozen=True)
class Attribution:
  """Counts over `sentences`: how many translations were wrong, and each class's share of them
  (module docstring), plus the per-sentence class (None where right)."""

  sentences: int
  wrong: int
  counts: dict[str, int]
  classes: list[str | None]
  hypotheses: list[str]
  fills: list[float]  # per sentence, M / n_v: the reference's tokens over the graph's vertices

  def row(self) -> list[str]:
    pct = lambda k: f"{100 * self.counts[k] / self.sentences:.1f}"  # noqa: E731
    return [f"{100 * self.wrong / self.sentences:.1f}", *(pct(k) for k in CLASSES)]

  def summary(self) -> dict:
    """The counts, without the per-sentence lists (for a results file)."""
    return {"sentences": self.sentences, "wrong": self.wrong, **self.counts}


HEADER = ["wrong %", *(f"{k} %" for k in CLASSES)]
FILL_EDGES = (0.6, 0.7, 0.8)  # the bounds of `by_fill`'s rows


def by_fill(a: Attribution, edges: Sequence[float] = FILL_EDGES) -> list[tuple[str, int, float]]:
  """(range of M / n_v, sentences in it, share of them wrong) per range between the edges: how
  the errors grow with the share of its graph a target fills."""
  bounds = [0.0, *edges, float("inf")]
  out = []
  for lo, hi in zip(bounds, bounds[1:]):
    inside = [c for f, c in zip(a.fills, a.classes) if lo <= f < hi]
    label = f"[{lo:g}, {hi:g})" if hi != float("inf") else f">= {lo:g}"
    wrong = sum(c is not None for c in inside) / len(inside) if inside else 0.0
    out.append((label, len(inside), wrong))
  return out


def lm_logprob(t: ngram.Tables | None, tokens_BT: Array) -> Array:
  """[B] log P_lm(tokens) of EOS-terminated, PAD-padded rows, the sum the beam adds up along its
  prefixes and at EOS (0 without a model)."""
  if t is None:
    return jnp.zeros(tokens_BT.shape[0], jnp.float32)

  def step(carry, tok_B):
    state_B, total_B, done_B = carry
    lp_B = jnp.take_along_axis(ngram.rows(t, state_B), tok_B[:, None], axis=1)[:, 0]
    total_B = total_B + jnp.where(done_B, 0.0, lp_B)
    done_B = done_B | (tok_B == tokenizer_lib.EOS_ID)
    return (ngram.advance(t, state_B, tok_B), total_B, done_B), None

  B = tokens_BT.shape[0]
  init = (jnp.full((B,), t.start, jnp.int32), jnp.zeros((B,), jnp.float32), jnp.zeros(B, bool))
  (_, total_B, _), _ = jax.lax.scan(step, init, tokens_BT.T)
  return total_B


def objective(dag_B: Array, lm_B: Array, tokens_BT: Array, lm_weight, length_norm) -> Array:
  """[B] the beam's score s(y) of rows whose log P(y | x) and log P_lm(y) are given."""
  length_B = (tokens_BT != tokenizer_lib.PAD_ID).sum(-1).astype(jnp.float32)
  return (dag_B + lm_weight * lm_B) / jnp.maximum(length_B, 1.0) ** length_norm


def score_graph(
  logp_BAV: Array,
  links_BAZ: Array,
  live_BA: Array,
  refs_BT: Array,
  lm: ngram.Tables | None,
  lm_weight: float | Array,
  length_norm: float | Array,
  beam_size: int,
  oracle_length: bool = False,
) -> dict[str, Array]:
  """One batch's graphs (padir.model.dag's token log-probabilities and links): the beam's
  translation (tokens [B, A], EOS last, PAD after) and, for it and the reference (EOS-terminated,
  PAD after), the DAG's log P(. | x) ("hyp_dag", "ref_dag"), the beam's objective s ("hyp_score",
  "ref_score"; "beam_score" as the beam itself returns it), and whether the reference is
  feasible. oracle_length: the beam finishes translations of the reference's length only (an
  oracle length model: what knowing the length would mend)."""
  length_BL = None
  if oracle_length:
    B, A = live_BA.shape
    M_B = (refs_BT != tokenizer_lib.PAD_ID).sum(-1)
    length_BL = jnp.where(jnp.arange(A + 1)[None] == M_B[:, None], 0.0, dag_lib.NEG)
  hyp_BA, beam_B = dag_decoding.beam(
    logp_BAV,
    links_BAZ,
    live_BA,
    beam_size,
    lm,
    lm_weight,
    length_norm=length_norm,
    length_logp=length_BL,
  )
  out = {"tokens": hyp_BA, "beam_score": beam_B, "feasible": dag_lib.feasible(live_BA, refs_BT)}
  for name, y_BT in (("hyp", hyp_BA), ("ref", refs_BT)):
    dag_B = dag_lib.path_logprob(logp_BAV, links_BAZ, live_BA, y_BT)
    out[f"{name}_dag"] = dag_B
    out[f"{name}_score"] = objective(dag_B, lm_logprob(lm, y_BT), y_BT, lm_weight, length_norm)
  return out


@functools.partial(nnx.jit, static_argnames=("beam_size", "oracle_length"))
def score_batch(
  model: model_lib.Transformer,
  inputs_BS: Array,
  refs_BT: Array,
  lm: ngram.Tables | None,
  lm_weight: Array,
  length_norm: Array,
  beam_size: int,
  oracle_length: bool = False,
) -> dict[str, Array]:
  """`score_graph` on the graphs a DAG model builds for a batch of sources."""
  enc_BSD, enc_mask_BS = model.encode(inputs_BS)
  x_BA = dag_lib.upsample(inputs_BS, model.cfg.dag_upsample)
  live_BA = x_BA != tokenizer_lib.PAD_ID
  logp_BAV, links_BAZ = dag_lib.vertex_outputs(
    model, x_BA, enc_mask_BS, model.project_encoder(enc_BSD)
  )
  return score_graph(
    logp_BAV, links_BAZ, live_BA, refs_BT, lm, lm_weight, length_norm, beam_size, oracle_length
  )


def classify(
  wrong: bool, feasible: bool, hyp_score: float, ref_score: float, hyp_dag: float, ref_dag: float
) -> str | None:
  """The class of one translation (module docstring); None where it is right."""
  if not wrong:
    return None
  if not feasible:
    return "infeasible"
  if ref_score > hyp_score + TOLERANCE:
    return "search"
  if ref_dag > hyp_dag + TOLERANCE:
    return "objective"
  return "model"


def attribute(
  model: model_lib.Transformer,
  tok: tokenizer_lib.Tokenizer,
  sources: Sequence[str],
  references: Sequence[str],
  *,
  beam_size: int = dag_decoding.BEAM_SIZE,
  lm: ngram.NgramLM | None = None,
  lm_weight: float = 0.0,
  length_norm: float = 0.0,
  batch_size: int = 64,
  oracle_length: bool = False,
) -> Attribution:
  """The attribution (module docstring) of the beam's translations of `sources` against
  `references`, one each. A translation is wrong where its text differs from the reference's
  (as padir.evaluation.errors counts "exact")."""
  if not model.cfg.dag_upsample:
    raise ValueError("search-or-model attribution needs a DAG model (model.dag_upsample >= 2)")
  if len(sources) != len(references) or not sources:
    raise ValueError(f"{len(sources)} sources for {len(references)} references")
  tables = None if lm is None else lm.tables()
  S, T = model.cfg.max_source_length, model.cfg.max_target_length
  classes, hyps, fills = [], [], []
  for start in range(0, len(sources), batch_size):
    src = list(sources[start : start + batch_size])
    ref = list(references[start : start + batch_size])
    n = len(src)
    src += [src[-1]] * (batch_size - n)
    ref += [ref[-1]] * (batch_size - n)
    inputs_BS = translation.encode_batch(tok, src, batch_size, S)  # as the translate path
    refs_BT = _encode(tok, ref, max(T, slots.num_slots(S, model.cfg.dag_upsample)))
    out = score_batch(
      model,
      jnp.asarray(inputs_BS),
      jnp.asarray(refs_BT),
      tables,
      jnp.float32(lm_weight),
      jnp.float32(length_norm),
      int(beam_size),
      bool(oracle_length),
    )
    out = jax.tree.map(np.asarray, out)
    live_BS = inputs_BS != tokenizer_lib.PAD_ID
    vertices_B = np.array(
      [slots.num_slots(int(n), model.cfg.dag_upsample) for n in live_BS.sum(-1)]
    )
    fills += list(((refs_BT != tokenizer_lib.PAD_ID).sum(-1) / vertices_B)[:n])
    for b in range(n):
      hyp = tok.decode(out["tokens"][b][:T])  # cut as padir.decoding.dag.decode cuts
      hyps.append(hyp)
      classes.append(
        classify(
          hyp.split() != ref[b].split(),
          bool(out["feasible"][b]),
          float(out["hyp_score"][b]),
          float(out["ref_score"][b]),
          float(out["hyp_dag"][b]),
          float(out["ref_dag"][b]),
        )
      )
  counts = {k: sum(c == k for c in classes) for k in CLASSES}
  wrong = sum(c is not None for c in classes)
  return Attribution(len(sources), wrong, counts, classes, hyps, [float(f) for f in fills])


def _encode(tok: tokenizer_lib.Tokenizer, texts: Sequence[str], width: int) -> np.ndarray:
  """[len(texts), width] EOS-terminated ids, PAD after; a text longer than width is cut (its
  EOS kept last)."""
  out = np.full((len(texts), width), tokenizer_lib.PAD_ID, np.int32)
  for b, text in enumerate(texts):
    ids = tok.encode(text)[: width - 1] + [tokenizer_lib.EOS_ID]
    out[b, : len(ids)] = ids
  return out


def main(argv: Sequence[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--run", required=True, help="a trained DAG model's run directory")
  p.add_argument("--step", type=int, default=None, help="its checkpoint (default: the last)")
  p.add_argument(
    "--split",
    default="test",
    help="the corpus split: test, valid, or train (the sentences it learnt from: is a wrong "
    "translation a failure to generalise?)",
  )
  p.add_argument("--beam-sizes", default=str(dag_decoding.BEAM_SIZE), help="'5,20': a row each")
  p.add_argument("--limit", type=int, default=0, help="the first N pairs only (0: all)")
  p.add_argument(
    "--oracle-length",
    action="store_true",
    help="the beam told each reference's length (what a perfect length model would mend)",
  )
  p.add_argument(
    "--average",
    type=int,
    default=1,
    help="decode the mean parameters of the last K checkpoints up to --step (default 1: none)",
  )
  args = p.parse_args(argv)
  try:
    sizes = [int(s) for s in args.beam_sizes.split(",") if s.strip()]
  except ValueError:
    p.error(f"--beam-sizes {args.beam_sizes!r}: integers joined by commas, e.g. '5,20'")
  if not sizes or min(sizes) < 1:
    p.error(f"--beam-sizes {args.beam_sizes!r}: each width >= 1, e.g. '5,20'")
  if args.average < 1:
    p.error(f"--average {args.average}: a count of checkpoints >= 1, e.g. 3")
  if args.split not in ("test", "valid", "train"):
    p.error(f"--split {args.split!r}: test, valid or train")
  if not restore.checkpoint_steps(args.run):
    p.error(f"--run {args.run!r}: no checkpoint there; give a trained run's directory")
  steps = restore.checkpoint_steps(args.run)
  if args.step is not None and args.step not in steps:
    p.error(f"--step {args.step}: no such checkpoint in {args.run!r}; it has {sorted(steps)}")
  step = args.step if args.step is not None else max(steps)
  averaged = [s for s in sorted(steps) if s <= step][-args.average :]
  if len(averaged) < args.average:
    p.error(
      f"--average {args.average}: {args.run!r} has {len(averaged)} checkpoint(s) up to {step}"
    )
  model, tok, config = restore.load_model(args.run, step)
  if len(averaged) > 1:  # the step's own parameters, and the earlier checkpoints'
    params = [nnx.state(restore.load_model(args.run, s)[0], nnx.Param) for s in averaged[:-1]]
    params.append(nnx.state(model, nnx.Param))
    nnx.update(model, jax.tree.map(lambda *xs: sum(xs) / len(xs), *params))
  d = config.data
  pairs = corpus.read_split(d.corpus_dir, args.split, d.source_lang, d.target_lang)
  if args.limit:
    pairs = pairs[: args.limit]
  sources, references = [s for s, _ in pairs], [t for _, t in pairs]
  order = config.decode.get("dag_lm_order", 0)
  lm = ngram.from_corpus(d, tok, order) if order else None
  chosen = translation.chosen_beam_setting(args.run, step)
  w, b = chosen or (
    config.decode.get("dag_lm_weight", 0.0),
    config.decode.get("dag_length_norm", 0.0),
  )
  print(
    f"{args.run} step {step}, {args.split} ({len(pairs)} pairs), {order}-gram model, w {w:g}, b {b:g}"
    + (f", parameters averaged over steps {averaged}" if len(averaged) > 1 else "")
    + (", the beam told each reference's length" if args.oracle_length else "")
  )
  print("| beam | BLEU | " + " | ".join(HEADER) + " |")
  print("|---" * (len(HEADER) + 2) + "|")
  for k in sizes:
    a = attribute(
      model,
      tok,
      sources,
      references,
      beam_size=k,
      lm=lm,
      lm_weight=w,
      length_norm=b,
      batch_size=config.decode.batch_size,
      oracle_length=args.oracle_length,
    )
    bleu = metrics.bleu(a.hypotheses, references, d.target_lang).score
    print(f"| {k} | {bleu:.2f} | " + " | ".join(a.row()) + " |", flush=True)
    if k == sizes[0]:
      first = a
  print(f"\nWrong translations (beam {sizes[0]}) by the share of its graph the reference fills:")
  print("| M / n_v | sentences | wrong % |\n|---|---|---|")
  for label, n, wrong in by_fill(first):
    print(f"| {label} | {n} | {100 * wrong:.1f} |")
  return 0


if __name__ == "__main__":
  sys.exit(main())
