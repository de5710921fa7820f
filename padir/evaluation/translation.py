"""Evaluation during training: translation with a trained model, and the validation loss and
BLEU that training logs (`validation_loss`, `validation_translation`); the metrics themselves
(SacreBLEU, chrF, stutter) are padir.evaluation.metrics."""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

from gmlm import checks
from padir.data import corpus as data
from padir.data import tokenizer as tokenizer_lib
from padir.decoding import autoregressive as decode
from padir.decoding import ctc, ngram, refinement
from padir.decoding import dag as dag_decoding
from padir.evaluation import curves, metrics
from padir.model import restore
from padir.model import transformer as model_lib


@functools.partial(nnx.jit, static_argnames=("options",))
def _refine(model, inputs_BS, key, options: refinement.RefineOptions):
  return refinement.refine(model, inputs_BS, key, options)["tokens"]


@functools.partial(nnx.jit, static_argnames=("num_passes", "blank_penalty"))
def _ctc(model, inputs_BS, num_passes, blank_penalty):
  return ctc.decode(model, inputs_BS, num_passes, blank_penalty)["tokens"]


@functools.partial(nnx.jit, static_argnames=("strategy",))
def _dag(model, inputs_BS, strategy, lm=None, lm_weight=0.0, length_norm=0.0):
  out = dag_decoding.decode(
    model, inputs_BS, strategy, lm=lm, lm_weight=lm_weight, length_norm=length_norm
  )
  return out["tokens"]


@nnx.jit
def _dag_grid(model, inputs_BS, lm, lm_weight_N, length_norm_N):
  return dag_decoding.decode_grid(model, inputs_BS, lm_weight_N, length_norm_N, lm=lm)


def translate_dag_grid(
  model: model_lib.Transformer,
  tok: tokenizer_lib.Tokenizer,
  sources: Sequence[str],
  settings: Sequence[tuple[float, float]],
  *,
  batch_size: int = 32,
  dag_lm: ngram.NgramLM | None = None,
) -> list[list[str]]:
  """A DAG model's beam translations at each setting (n-gram weight, length normalisation) of
  `settings`, one list per setting, each the same as `translate(..., dag_decoder="beam")` at
  it; the model runs once a batch for all of them (padir.decoding.dag.decode_grid)."""
  lm_tables = None if dag_lm is None else dag_lm.tables()
  w_N = jnp.asarray([w for w, _ in settings], jnp.float32)
  b_N = jnp.asarray([b for _, b in settings], jnp.float32)
  out: list[list[str]] = [[] for _ in settings]
  for start in range(0, len(sources), batch_size):
    chunk = sources[start : start + batch_size]
    inputs_BS = encode_batch(tok, chunk, batch_size, model.cfg.max_source_length)
    tokens_NBT = np.asarray(_dag_grid(model, jnp.asarray(inputs_BS), lm_tables, w_N, b_N))
    for hyps, tokens_BT in zip(out, tokens_NBT):
      hyps.extend(tok.decode(row) for row in tokens_BT[: len(chunk)])
  return out


@nnx.jit
def _greedy_ar(model, inputs_BS):
  return decode.greedy_ar(model, inputs_BS)


@functools.partial(nnx.jit, static_argnames=("beam_size", "length_penalty"))
def _beam_search(model, inputs_BS, beam_size, length_penalty):
  return decode.beam_search(model, inputs_BS, beam_size, length_penalty=length_penalty)["tokens"]


def encode_batch(
  tok: tokenizer_lib.Tokenizer, texts: Sequence[str], batch_size: int, max_len: int
) -> np.ndarray:
  """[batch_size, max_len] EOS-terminated ids, PAD-padded; long texts are truncated and a short
  batch is filled with copies of its last text (static shapes: one compilation)."""
  texts = list(texts) + [texts[-1]] * (batch_size - len(texts))
  inputs_BS = np.full((batch_size, max_len), tokenizer_lib.PAD_ID, np.int32)
  for b, text in enumerate(texts):
    ids = (tok.encode(text) + [tokenizer_lib.EOS_ID])[:max_len]
    inputs_BS[b, : len(ids)] = ids
  return inputs_BS


def translate(
  model: model_lib.Transformer,
  tok: tokenizer_lib.Tokenizer,
  sources: Sequence[str],
  key: jax.Array,
  *,
  batch_size: int = 32,
  num_steps: int = 4,
  num_lengths: int = 3,
  remask_stutter: bool = True,
  drop_stutter: bool = True,
  beam_size: int = 1,
  length_penalty: float = 0.6,
  decoder: str = "paper",
  blank_penalty: float = 0.0,
  dag_decoder: str = "lookahead",
  dag_lm: ngram.NgramLM | None = None,
  dag_lm_weight: float = 0.0,
  dag_length_norm: float = 0.0,
) -> list[str]:
  """Detokenized translations; sources longer than the model's maximum are truncated.

  The AR baseline decodes greedily (beam_size=1) or with beam search; PaDIR refines with
  num_steps passes over num_lengths lengths as the paper did (decoder "paper":
  `refinement.RefineOptions` defaults, stutter reset to the initial noise, those positions
  dropped, summed score, early stop), as a named variant of it (`refinement.VARIANTS`), or, with
  decoder "legacy", as our first decoder did (`refinement.legacy_options(remask_stutter)`,
  repeated tokens then collapsed when drop_stutter). A CTC model (model.ctc_upsample) decodes
  with padir.decoding.ctc in at most num_steps passes, the blank's logit lowered by blank_penalty
  (num_lengths and decoder do not apply). A DAG model (model.dag_upsample) decodes with
  padir.decoding.dag's `dag_decoder` strategy ("greedy", "lookahead", "viterbi" or "beam"); its
  beam search ranks by log P(y | x) + dag_lm_weight log P_lm(y) with an n-gram model dag_lm
  (padir.decoding.ngram), finished translations divided by |y|^dag_length_norm.
  """
  lm_tables = None if dag_lm is None else dag_lm.tables()
  legacy = decoder == "legacy"
  if legacy:
    options = refinement.legacy_options(
      remask_stutter, num_steps=num_steps, num_lengths=num_lengths
    )
  else:
    options = refinement.RefineOptions(
      num_steps=num_steps, num_lengths=num_lengths, **refinement.VARIANTS[decoder]
    )
  out = []
  for start in range(0, len(sources), batch_size):
    n = len(sources[start : start + batch_size])
    inputs_BS = encode_batch(
      tok, sources[start : start + batch_size], batch_size, model.cfg.max_source_length
    )
    if model.cfg.decoder == "ar" and beam_size > 1:
      tokens_BT = _beam_search(model, jnp.asarray(inputs_BS), beam_size, length_penalty)
    elif model.cfg.decoder == "ar":
      tokens_BT = _greedy_ar(model, jnp.asarray(inputs_BS))
    elif model.cfg.dag_upsample:
      tokens_BT = _dag(
        model,
        jnp.asarray(inputs_BS),
        dag_decoder,
        lm_tables,
        jnp.float32(dag_lm_weight),
        jnp.float32(dag_length_norm),
      )
    elif model.cfg.ctc_upsample:
      tokens_BT = _ctc(model, jnp.asarray(inputs_BS), num_steps, float(blank_penalty))
    else:
      tokens_BT = _refine(model, jnp.asarray(inputs_BS), jax.random.fold_in(key, start), options)
    for row in np.asarray(tokens_BT)[:n]:
      ids = decode.drop_stutter(row) if drop_stutter and legacy else row
      out.append(tok.decode(ids))
  return out


def choose_blank_penalty(
  model: model_lib.Transformer,
  tok: tokenizer_lib.Tokenizer,
  sources: Sequence[str],
  references: Sequence[str],
  target_lang: str,
  grid: Sequence[float],
  *,
  batch_size: int = 64,
  num_passes: int = 1,
) -> dict[str, Any]:
  """A CTC model's length control chosen on held-out pairs: each penalty of `grid` decodes the
  sources (`translate`, num_passes passes); the chosen one has the highest SacreBLEU (ties: the
  smaller penalty). {"chosen", "sweep": [{"penalty", "bleu", "length_ratio"}, ...],
  "sentences"}; length_ratio = the hypotheses' words over the references' (whitespace words)."""
  if not model.cfg.ctc_upsample:
    raise ValueError("choose_blank_penalty: the model is not a CTC model (model.ctc_upsample 0)")
  ref_words = max(1, sum(len(r.split()) for r in references))
  sweep = []
  for penalty in sorted({float(p) for p in grid}):
    hyps = translate(
      model,
      tok,
      sources,
      jax.random.key(0),
      batch_size=batch_size,
      num_steps=num_passes,
      blank_penalty=penalty,
    )
    sweep.append(
      {
        "penalty": penalty,
        "bleu": metrics.bleu(hyps, references, target_lang).score,
        "length_ratio": sum(len(h.split()) for h in hyps) / ref_words,
      }
    )
  best = max(sweep, key=lambda r: (r["bleu"], -r["penalty"]))
  return {"chosen": best["penalty"], "sweep": sweep, "sentences": len(sources)}


def choose_beam_setting(
  model: model_lib.Transformer,
  tok: tokenizer_lib.Tokenizer,
  sources: Sequence[str],
  references: Sequence[str],
  target_lang: str,
  grid: Sequence[tuple[float, float]],
  *,
  batch_size: int = 64,
  dag_lm: ngram.NgramLM | None = None,
) -> dict[str, Any]:
  """A DAG model's beam settings chosen on held-out pairs: each (n-gram weight, length
  normalisation) of `grid` decodes the sources (`translate_dag_grid`: the model once a batch for
  all); the chosen one has the highest SacreBLEU (ties: the first in the grid's order, as
  training's validation chooses). {"chosen": [w, b], "sweep": [{"lm_weight", "length_norm",
  "bleu", "length_ratio"}, ...] in the grid's order, "sentences"}; length_ratio as
  `choose_blank_penalty`'s."""
  if not model.cfg.dag_upsample:
    raise ValueError("choose_beam_setting: the model is not a DAG model (model.dag_upsample 0)")
  if not grid:
    raise ValueError("choose_beam_setting: an empty grid")
  ref_words = max(1, sum(len(r.split()) for r in references))
  by_setting = translate_dag_grid(model, tok, sources, grid, batch_size=batch_size, dag_lm=dag_lm)
  sweep = [
    {
      "lm_weight": float(w),
      "length_norm": float(b),
      "bleu": metrics.bleu(hyps, references, target_lang).score,
      "length_ratio": sum(len(h.split()) for h in hyps) / ref_words,
    }
    for (w, b), hyps in zip(grid, by_setting)
  ]
  best = max(range(len(sweep)), key=lambda i: (sweep[i]["bleu"], -i))
  chosen = [sweep[best]["lm_weight"], sweep[best]["length_norm"]]
  return {"chosen": chosen, "sweep": sweep, "sentences": len(sources)}


def valid_pairs(
  d: ml_collections.ConfigDict, max_sentences: int = 0
) -> tuple[list[str], list[str]]:
  """The sources and references of the valid split of a run's corpus (its data config d), the
  first max_sentences (0: all): where a decoder's setting is chosen from a grid."""
  pairs = data.read_split(d.corpus_dir, "valid", d.source_lang, d.target_lang)
  pairs = pairs[: max_sentences or None]
  return [s for s, _ in pairs], [t for _, t in pairs]


def with_valid_beam(
  config: ml_collections.ConfigDict,
  model: model_lib.Transformer,
  tok: tokenizer_lib.Tokenizer,
  d: ml_collections.ConfigDict,
  dag_lm: ngram.NgramLM | None,
  *,
  max_sentences: int = 0,
) -> tuple[ml_collections.ConfigDict, dict[str, Any]]:
  """A decoding job's config with its dag_lm_weight and dag_length_norm replaced by the best of
  its dag_beam_grid on the valid split of the run's corpus (its data config d; the first
  max_sentences pairs, 0: all), and the choice (`choose_beam_setting`)."""
  choice = choose_beam_setting(
    model,
    tok,
    *valid_pairs(d, max_sentences),
    d.target_lang,
    parse_beam_grid(config.dag_beam_grid),
    batch_size=config.batch_size,
    dag_lm=dag_lm,
  )
  config = ml_collections.ConfigDict(config.to_dict())
  config.dag_lm_weight, config.dag_length_norm = choice["chosen"]
  return config, choice


@functools.partial(nnx.jit, static_argnames=("num_passes", "blank_penalty"))
def _predicted_lengths(model, inputs_BS, num_passes=1, blank_penalty=0.0):
  if model.cfg.ctc_upsample:
    return ctc.output_lengths(ctc.decode(model, inputs_BS, num_passes, blank_penalty)["tokens"])
  enc_BSD, enc_mask_BS = model.encode(inputs_BS)
  return jnp.argmax(model.length_logits(enc_BSD, enc_mask_BS), -1)


def length_accuracy(
  model: model_lib.Transformer,
  tok: tokenizer_lib.Tokenizer,
  sources: Sequence[str],
  references: Sequence[str],
  batch_size: int = 32,
  num_passes: int = 1,
  blank_penalty: float = 0.0,
) -> dict[str, float]:
  """How often the length predictor's argmax (an absolute length, also with length offsets) is
  the reference's token length (EOS included, at most max_target_length): exact, within 1 and
  within 2 tokens; and the sentences counted. A CTC model has no length predictor: its output's
  length after num_passes passes, decoded with blank_penalty, is compared."""
  T = model.cfg.max_target_length
  want = np.array([min(len(tok.encode(r)) + 1, T) for r in references])
  got = []
  for start in range(0, len(sources), batch_size):
    chunk = sources[start : start + batch_size]
    x_BS = encode_batch(tok, chunk, batch_size, model.cfg.max_source_length)
    lengths_B = _predicted_lengths(model, jnp.asarray(x_BS), num_passes, float(blank_penalty))
    got.append(np.asarray(lengths_B)[: len(chunk)])
  error = np.abs(np.concatenate(got) - want)
  return {
    "exact": float((error == 0).mean()),
    "within1": float((error <= 1).mean()),
    "within2": float((error <= 2).mean()),
    "sentences": len(want),
  }


def validation_loss(
  eval_step: Callable,
  model: model_lib.Transformer,
  source: Any,
  tok: tokenizer_lib.Tokenizer,
  config: ml_collections.ConfigDict,
  place: Callable = lambda batch: batch,
) -> dict[str, float]:
  """The mean of eval_step's metrics over the first config.train.eval_batches batches of the
  valid split (this process's rows of each global batch), as valid_* records."""
  d = config.data
  ds, _ = data.make_dataset(
    source,
    tok,
    batch_size=config.train.batch_size // jax.process_count(),
    max_source_length=d.max_source_length,
    max_target_length=d.max_target_length,
    shuffle=False,
    drop_remainder=True,
    name="valid",
    shard_index=jax.process_index(),
    shard_count=jax.process_count(),
  )
  sums, n = {}, 0
  for i, batch in enumerate(ds):
    if i >= config.train.eval_batches:
      break
    metrics = eval_step(model, place(batch), jax.random.fold_in(jax.random.key(config.seed), i))
    for k, v in metrics.items():
      sums[k] = sums.get(k, 0.0) + float(v)
    n += 1
  if n == 0:
    raise data.CorpusError(
      f"the valid split has fewer than batch_size={config.train.batch_size} "
      f"pairs within the maximum lengths: nothing to evaluate"
    )
  return {f"valid_{k}": v / n for k, v in sums.items()}


def validation_lm(
  config: ml_collections.ConfigDict, tok: tokenizer_lib.Tokenizer
) -> ngram.NgramLM | None:
  """The n-gram model validation's DAG beam joins (decode.dag_lm_order over the training
  targets), None where it joins none. Fitted once a run: fitting sov's 5-gram model and forming
  its tables takes ~16 s, as long as the validation decode itself."""
  c = config.decode
  if c.get("dag_decoder") != "beam" or not c.get("dag_lm_order", 0):
    return None
  return ngram.from_corpus(config.data, tok, c.dag_lm_order)


def parse_beam_grid(text: str) -> tuple[tuple[float, float], ...]:
  """decode.dag_beam_grid's settings of the DAG beam, "w:b,w:b,...": each its n-gram weight w
  and length normalisation b (both >= 0); "" is no grid. ValueError names a bad entry."""
  grid = []
  for entry in (e.strip() for e in text.split(",") if e.strip()):
    parts = entry.split(":")
    try:
      w, b = (float(x) for x in parts)
    except ValueError:
      raise ValueError(f"{entry!r} is not 'w:b' (two numbers, e.g. '1.0:1.5')") from None
    if not (w >= 0 and b >= 0 and np.isfinite(w) and np.isfinite(b)):
      raise ValueError(f"{entry!r}: w and b must be finite and >= 0")
    grid.append((w, b))
  return tuple(grid)


def check_beam_grid(config: ml_collections.ConfigDict, key: str = "dag_beam_grid") -> str:
  """A decoding job's grid of DAG beam settings, "w:b,..." or "" (no choice on valid): one
  ConfigError line naming the key, the value and the bad entry otherwise."""
  grid = checks.get(config, key)
  checks.check(isinstance(grid, str), key, grid, "must be a string 'w:b,w:b,...'")
  try:
    parse_beam_grid(grid)
  except ValueError as e:
    checks.check(False, key, grid, f"{e}: 'w:b,...' or '' (no choice on the valid split)")
  return grid.strip()


def chosen_beam_setting(workdir: str, step: int) -> tuple[float, float] | None:
  """The DAG beam's (n-gram weight, length normalisation) that a run's validation chose from
  decode.dag_beam_grid at its evaluation of `step` (metrics.jsonl), None where it chose none
  there (no grid, no evaluation at that step, or no records at all: a checkpoint copied
  without its metrics.jsonl)."""
  try:
    _, evals = curves.read_metrics(workdir)
  except FileNotFoundError:
    return None
  chosen = [r for r in evals if r["step"] == step and "valid_dag_lm_weight" in r]
  if not chosen:
    return None
  return float(chosen[-1]["valid_dag_lm_weight"]), float(chosen[-1]["valid_dag_length_norm"])


def with_chosen_beam(
  config: ml_collections.ConfigDict, run_dir: str, step: int | None
) -> tuple[ml_collections.ConfigDict, int | None]:
  """A decoding job's config (its dag_lm_weight and dag_length_norm keys) with the DAG beam's
  settings a run's validation chose at checkpoint `step` (None: the latest) in their place,
  and that step; (config, None) where the run chose none there (`chosen_beam_setting`)."""
  at = step if step is not None else max(restore.checkpoint_steps(run_dir), default=None)
  chosen = None if at is None else chosen_beam_setting(run_dir, at)
  if chosen is None:
    return config, None
  config = ml_collections.ConfigDict(config.to_dict())
  config.dag_lm_weight, config.dag_length_norm = chosen
  return config, at


def validation_translation(
  model: model_lib.Transformer,
  source: Any,
  tok: tokenizer_lib.Tokenizer,
  config: ml_collections.ConfigDict,
  dag_lm: ngram.NgramLM | None = None,
) -> dict[str, Any]:
  """BLEU, its signature and the stutter rate of the first config.decode.num_examples valid
  pairs, decoded with config.decode's settings, and the first example. A DAG beam with
  decode.dag_lm_order joins dag_lm (`validation_lm`; None: fitted here). With
  decode.dag_beam_grid (`parse_beam_grid`), the DAG beam decodes at each setting (n-gram
  weight, length normalisation; the model run once for all, `translate_dag_grid`) in place of decode.dag_lm_weight and decode.dag_length_norm,
  and the best BLEU is the validation's (the first setting on a tie), its setting recorded as
  valid_dag_lm_weight and valid_dag_length_norm: the beam's settings chosen on the validation
  split, at every evaluation."""
  c, n = config.decode, config.decode.num_examples
  records = [source[i] for i in range(min(n, len(source)))]
  sources = [r["source"].decode() for r in records]
  references = [r["target"].decode() for r in records]
  grid = parse_beam_grid(c.get("dag_beam_grid", ""))
  settings = grid or ((c.get("dag_lm_weight", 0.0), c.get("dag_length_norm", 0.0)),)
  lm = dag_lm if dag_lm is not None else validation_lm(config, tok)
  if model.cfg.dag_upsample and c.get("dag_decoder") == "beam":  # every setting in one pass
    by_setting = translate_dag_grid(
      model, tok, sources, settings, batch_size=c.batch_size, dag_lm=lm
    )
  else:
    by_setting = [
      translate(
        model,
        tok,
        sources,
        jax.random.key(config.seed),
        batch_size=c.batch_size,
        num_steps=c.num_steps,
        num_lengths=c.num_lengths,
        remask_stutter=c.remask_stutter,
        beam_size=c.get("beam_size", 1),
        length_penalty=c.get("length_penalty", 0.6),
        decoder=c.get("decoder", "paper"),
        blank_penalty=c.get("blank_penalty", 0.0),
        dag_decoder=c.get("dag_decoder", "lookahead"),
        dag_lm=lm,
        dag_lm_weight=w,
        dag_length_norm=b,
      )
      for w, b in settings
    ]
  best = None
  for (w, b), hypotheses in zip(settings, by_setting):
    score = metrics.bleu(hypotheses, references, config.data.target_lang)
    if best is None or score.score > best[0].score:
      best = (score, hypotheses, w, b)
  score, hypotheses, w, b = best
  record = {
    "valid_bleu": score.score,
    "bleu_signature": score.signature,
    "valid_stutter": metrics.stutter_rate(hypotheses, references),
    "example": {"source": sources[0], "reference": references[0], "hypothesis": hypotheses[0]},
  }
  if grid:
    record.update(valid_dag_lm_weight=w, valid_dag_length_norm=b)
  return record
