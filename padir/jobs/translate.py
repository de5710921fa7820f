"""`python sample.py --config configs/padir_translate.py --config.checkpoint=DIR --workdir W`:
translates stdin (or --config.input=PATH) line by line, in batches, to stdout (or
--config.output=PATH), one output line per input line, with a progress bar on stderr.

config.decoder chooses how (padir.decoding.decoders.choose): "auto", the run's recommended
decoder, is CTC decoding for a CTC model (padir.decoding.ctc, at most ctc_passes passes, the
blank's logit lowered by ctc_blank_penalty), refinement for a PaDIR model
(padir.decoding.refinement, the config's options; defaults the paper's) and, for an AR model,
greedy search (beam search with beam_size beams when beam_size > 1); "ctc", "padir", "greedy"
or "beam" names one, and a decoder the run's model cannot use is refused in one line before
anything is loaded or written. An empty line, or one longer than the model's maximum source
length, gets a message on stderr naming its line number and an empty output line; the others
still translate; a line most of whose words hold characters the vocabulary lacks gets a
warning there. A missing checkpoint (the message names the quickest run to train, data step
included), a run directory that is not a PaDIR / AR training run, or an input (file or stdin)
that is not UTF-8 is refused in one line, naming the line, before anything is loaded or
written. Line i decodes with the key fold_in(key(seed), i): its translation does not depend on
the batching. The decoder is padir.decoding.decoders.decode_fn's, jitted once with the model
split once; PaDIR batches decode at their longest candidate's length rounded up to a multiple
of `trim` (padir.decoding.decoders.Trimmed), CTC batches on sources cut to their width rounded
up to it (SourceTrimmed): the same tokens, less work; 0: always the maximum lengths.
W/results.json counts the lines and lists the skipped ones.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from typing import Any, Callable, TextIO

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from gmlm import checks
from gmlm.runs import RunDir
from padir.data import corpus, vocab
from padir.data import tokenizer as tokenizer_lib
from padir.decoding import dag as dag_decoding
from padir.decoding import decoders, ngram, refinement
from padir.evaluation import translation
from padir.model import restore
from padir.model import transformer as model_lib

ENTRY_POINT = "sample.py"
TRAINING_JOBS = ("padir.jobs.train", "padir.jobs.distill")
OPTION_KEYS = tuple(f.name for f in dataclasses.fields(refinement.RefineOptions))
# The Decoder fields other kinds' results record (config keys beam_size, length_penalty,
# ctc_passes, ctc_blank_penalty, trim).
OTHER_OPTIONS = {
  "greedy": (),
  "beam": ("beam_size", "length_penalty"),
  "ctc": ("passes", "blank_penalty", "trim"),
  "dag": ("dag_strategy", "dag_lm_weight", "dag_length_norm", "trim"),
}
QUICKEST = (
  "point it at a training run (train.py's --workdir); the quickest to train, from a fresh "
  "clone, is `python -m padir.data.synthetic --out data/synthetic && python train.py "
  "--config configs/padir_synthetic_ctc_2x1.py --workdir runs/padir_synthetic_ctc_2x1`"
)


def check_run(config: Any, key: str, decoder: str | None = None) -> ml_collections.ConfigDict:
  """The training config of the run directory at config[key] (read from its JSON, nothing
  loaded): a PaDIR / AR training run with at least one checkpoint (of `decoder` if given)."""
  path = checks.get(config, key)
  checks.check(isinstance(path, str) and bool(path), key, path, f"is required: {QUICKEST}")
  checks.check(os.path.exists(path), key, path, f"does not exist; {QUICKEST}")
  checks.check(
    os.path.isfile(os.path.join(path, "config.json")),
    key,
    path,
    "must be a training run directory (train.py writes config.json and checkpoints/ there)",
  )
  try:
    trained = restore.trained_config(path)
  except ValueError:
    checks.check(False, key, path, "its config.json is not valid JSON; point to a training run")
  job = trained.get("job")
  checks.check(
    job in TRAINING_JOBS,
    key,
    path,
    f"is a run of {job!r}, not a PaDIR / AR training run ({' or '.join(TRAINING_JOBS)})",
  )
  ckpt_dir = os.path.join(path, restore.CHECKPOINTS)
  steps = [d for d in os.listdir(ckpt_dir) if d.isdigit()] if os.path.isdir(ckpt_dir) else []
  checks.check(bool(steps), key, path, f"has no checkpoint in {ckpt_dir}: train it first")
  spm = vocab.vocabulary_path(trained)
  checks.check(
    os.path.isfile(spm),
    key,
    path,
    f"was trained with the vocabulary {spm}, which does not exist here (a run's data paths are "
    "relative to the directory it was trained in: run from there, or copy the file there)",
  )
  kind = trained.get("model", {}).get("decoder")
  if decoder is not None:
    checks.check(kind == decoder, key, path, f"is a {kind!r} model; this key needs {decoder!r}")
  return trained


def check_decoder(config: Any, model: Any) -> str:
  """The kind config.decoder decodes config.checkpoint's model (its config.model, or a
  ModelConfig) with: decoders.choose, "auto" for an AR model beam search when beam_size > 1; a
  kind the model cannot use is refused."""
  choice = checks.get(config, "decoder")
  if dataclasses.is_dataclass(model):
    model = {
      "decoder": model.decoder,
      "ctc_upsample": model.ctc_upsample,
      "dag_upsample": model.dag_upsample,
    }
  try:
    kind = decoders.choose(choice, model)
  except ValueError as e:
    checks.check(
      False, "decoder", choice, f"{e}; {config.checkpoint} is {decoders.model_name(model)}"
    )
  if choice == decoders.AUTO and kind == "greedy" and config.beam_size > 1:
    kind = "beam"
  checks.check(
    kind != "beam" or config.beam_size > 1,
    "decoder",
    choice,
    "'beam' with beam_size=1 is greedy search: set --config.beam_size (the paper's AR "
    "baselines use 5) or --config.decoder=greedy",
  )
  return kind


def check_split(trained: ml_collections.ConfigDict, split: str, key: str, value, why: str) -> None:
  """One ConfigError line when the trained run's corpus lacks `split` here, which `key` needs."""
  d = trained.data
  try:
    corpus.split_files(d.corpus_dir, split, d.source_lang, d.target_lang)
  except corpus.CorpusError as e:
    checks.check(
      False,
      key,
      value,
      f"{why}, which is not here ({e}): run from the directory the run was trained in, or "
      f"unset --config.{key}",
    )


def validate(config: ml_collections.ConfigDict) -> None:
  trained = check_run(config, "checkpoint")
  checks.check_int(config, "beam_size", lo=1)
  kind = check_decoder(config, trained.get("model", {}))
  checks.check_int(config, "step", lo=0)
  source = checks.get(config, "input")
  checks.check(isinstance(source, str), "input", source, "must be '' (stdin) or a file path")
  checks.check_file(config, "input", optional=True)
  output = checks.get(config, "output")
  checks.check(
    isinstance(output, str) and (not output or os.path.isdir(os.path.dirname(output) or ".")),
    "output",
    output,
    "must be '' (stdout) or a file path in an existing directory",
  )
  checks.check_int(config, "batch_size", lo=1)
  checks.check_int(config, "seed", lo=0)
  checks.check_int(config, "trim", lo=0)
  checks.check_bool(config, "progress_bar")
  checks.check_float(config, "length_penalty")
  checks.check_int(config, "ctc_passes", lo=1)
  checks.check_float(config, "ctc_blank_penalty", lo=0)
  strategy = checks.check_choice(config, "dag_strategy", dag_decoding.STRATEGIES)
  order = checks.check_int(config, "dag_lm_order", lo=0)
  checks.check_float(config, "dag_lm_weight", lo=0)
  norm = checks.check_float(config, "dag_length_norm", lo=0)
  checks.check_bool(config, "dag_beam_from_run")
  grid = translation.check_beam_grid(config)
  if kind == "dag" and grid:
    checks.check(
      strategy == "beam" and order > 0,
      "dag_beam_grid",
      grid,
      "weighs the n-gram model of the DAG's beam: needs --config.dag_strategy=beam and "
      "--config.dag_lm_order > 0 (or '' for no choice on valid)",
    )
    check_split(trained, "valid", "dag_beam_grid", grid, "the choice decodes the run's valid split")
  if kind == "dag" and norm:
    checks.check(
      strategy == "beam",
      "dag_length_norm",
      norm,
      f"length normalisation ranks the DAG's beam search only (dag_strategy is {strategy!r}): "
      "set --config.dag_strategy=beam, or --config.dag_length_norm=0",
    )
  if kind == "dag" and order:
    checks.check(
      strategy == "beam",
      "dag_lm_order",
      order,
      f"an n-gram model joins the DAG's beam search only (dag_strategy is {strategy!r}): set "
      "--config.dag_strategy=beam, or --config.dag_lm_order=0",
    )
    why = "the n-gram model is counted on the run's training targets"
    check_split(trained, "train", "dag_lm_order", order, why)
  max_len = trained.data.max_target_length
  checks.check_int(config, "num_steps", lo=1)
  checks.check_int(config, "num_lengths", lo=1, hi=max_len)
  offsets = checks.check_int(config, "length_offsets", lo=1, hi=2 * max_len + 1)
  checks.check(offsets % 2 == 1, "length_offsets", offsets, "must be odd (centred on n)")
  checks.check_int(config, "num_starts", lo=1)
  checks.check_choice(config, "init", refinement.INITS)
  checks.check_choice(config, "stutter", refinement.STUTTERS)
  checks.check_choice(config, "drop", refinement.DROPS)
  checks.check_choice(config, "score", refinement.SCORES)
  checks.check_float(config, "brevity_alpha", lo=0)
  checks.check_bool(config, "early_stop")
  checks.check_bool(config, "cache_cross")
  checks.check_bool(config, "length_prior")
  checks.check_choice(config, "remask", refinement.REMASKS)
  checks.check_choice(config, "row_stop", refinement.ROW_STOPS)
  checks.check_float(config, "temperature", lo=0, inf_ok=True)
  checks.check_int(config, "top_k", lo=0)
  checks.check_float(config, "top_p", lo=0, hi=1, lo_open=True)
  rerank = checks.check_choice(config, "rerank", refinement.RERANKS)
  rerank_checkpoint = checks.get(config, "rerank_checkpoint")
  if rerank_checkpoint != "":
    check_run(config, "rerank_checkpoint", decoder="ar")
  checks.check(
    rerank == "none" or bool(rerank_checkpoint),
    "rerank",
    rerank,
    "'ar' needs config.rerank_checkpoint (an AR run with the same vocabulary)",
  )
  checks.check(
    rerank == "none" or kind == "padir",
    "rerank",
    rerank,
    f"reranks refinement's candidates; the {kind!r} decoder has none: set it to 'none'",
  )


def options(config: ml_collections.ConfigDict) -> refinement.RefineOptions:
  """The RefineOptions the config sets (one key per field)."""
  return refinement.RefineOptions(**{k: config[k] for k in OPTION_KEYS})


def decoder(
  config: ml_collections.ConfigDict, kind: str, lm: ngram.NgramLM | None = None
) -> decoders.Decoder:
  """The config's decoder of `kind` (check_decoder's choice for the run); lm: a DAG beam's
  n-gram model (`dag_lm`)."""
  if kind in ("greedy", "beam"):
    return decoders.Decoder(
      "translate", kind, beam_size=config.beam_size, length_penalty=config.length_penalty
    )
  if kind == "ctc":
    return decoders.Decoder(
      "translate",
      "ctc",
      passes=config.ctc_passes,
      blank_penalty=config.ctc_blank_penalty,
      trim=config.trim,
    )
  if kind == "dag":  # padir.decoding.dag's strategy, its beam with the n-gram model
    return decoders.Decoder(
      "translate",
      "dag",
      trim=config.trim,
      dag_strategy=config.dag_strategy,
      dag_lm=lm,
      dag_lm_weight=config.dag_lm_weight if lm is not None else 0.0,
      dag_length_norm=config.dag_length_norm if config.dag_strategy == "beam" else 0.0,
    )
  return decoders.Decoder("translate", "padir", options(config), trim=config.trim)


def run_beam_setting(
  config: ml_collections.ConfigDict, kind: str, lm: ngram.NgramLM | None
) -> tuple[ml_collections.ConfigDict, int | None]:
  """With config.dag_beam_from_run, a DAG beam with an n-gram model decodes at the (weight,
  length normalisation) the run's validation chose at the decoded checkpoint's step
  (translation.chosen_beam_setting): (the config with them, that step); else (config, None)."""
  if kind != "dag" or config.dag_strategy != "beam" or lm is None or not config.dag_beam_from_run:
    return config, None
  return translation.with_chosen_beam(config, config.checkpoint, config.step or None)


def dag_lm(
  config: ml_collections.ConfigDict, trained: ml_collections.ConfigDict, tok, kind: str
) -> ngram.NgramLM | None:
  """A DAG model's n-gram model (order config.dag_lm_order over the run's training targets,
  padir.decoding.ngram), or None (another kind, or order 0)."""
  if kind != "dag" or not config.dag_lm_order:
    return None
  return ngram.from_corpus(trained.data, tok, config.dag_lm_order)


def decoder_fn(
  model: model_lib.Transformer,
  config: ml_collections.ConfigDict,
  ar_model: model_lib.Transformer | None = None,
  lm: ngram.NgramLM | None = None,
) -> Callable[[Any, jax.Array], Any]:
  """(inputs [B, S], one key per row) -> tokens [B, T]: the config's decoder for this model,
  jitted once with the model split once (decoders.decode_fn; trimmed when trim > 0)."""
  kind = check_decoder(config, model.cfg)
  fn = decoders.decode_fn(model, decoder(config, kind, lm), ar_model)
  return lambda x_BS, keys_B: fn(x_BS, keys_B)[0]


def check_line(tok: tokenizer_lib.Tokenizer, text: str, max_len: int) -> tuple[list[int], str]:
  """(EOS-terminated ids, "") for a translatable line, or ([], why it is not)."""
  if not text.strip():
    return [], "empty line; nothing to translate"
  ids = tok.encode(text) + [tokenizer_lib.EOS_ID]
  if len(ids) > max_len:
    return [], (
      f"{len(ids)} tokens (EOS included) exceed the model's maximum source length {max_len}; "
      "split the line"
    )
  return ids, ""


def unknown_words(tok: tokenizer_lib.Tokenizer, text: str) -> list[str]:
  """The words of text holding a character the vocabulary lacks (encoded as <unk>)."""
  if tokenizer_lib.UNK_ID not in tok.encode(text):
    return []
  return [w for w in text.split() if tokenizer_lib.UNK_ID in tok.encode(w)]


def translate_lines(
  model: model_lib.Transformer,
  tok: tokenizer_lib.Tokenizer,
  lines: list[str],
  config: ml_collections.ConfigDict,
  out: TextIO,
  ar_model: model_lib.Transformer | None = None,
  lm: ngram.NgramLM | None = None,
) -> list[dict[str, Any]]:
  """Writes one line per input line to out (empty for a skipped one); returns the skipped
  lines ({"line": 1-based number, "reason"}), each also reported on stderr. lm: a DAG beam's
  n-gram model (`dag_lm`)."""
  from tqdm import tqdm

  L, Bt = model.cfg.max_source_length, config.batch_size
  decode_batch = decoder_fn(model, config, ar_model, lm)
  key = jax.random.key(config.seed)
  skipped: list[dict[str, Any]] = []
  bar = tqdm(
    total=len(lines), file=sys.stderr, unit="line", disable=not config.progress_bar, leave=False
  )
  for start in range(0, len(lines), Bt):
    chunk = lines[start : start + Bt]
    ids, rows = [], []
    for i, text in enumerate(chunk, start=start):
      line_ids, why = check_line(tok, text, L)
      if why:
        skipped.append({"line": i + 1, "reason": why})
        bar.write(f"line {i + 1}: {why} (its output line is left empty)", file=sys.stderr)
      else:
        ids.append(line_ids)
        rows.append(i)
        unknown = unknown_words(tok, text)
        if 2 * len(unknown) > len(text.split()):
          bar.write(
            f"line {i + 1}: warning: {len(unknown)} of {len(text.split())} words hold "
            f"characters the model's vocabulary lacks ({' '.join(unknown)}); they become <unk> "
            "and cannot be translated",
            file=sys.stderr,
          )
    outputs = {}
    if rows:
      inputs_BS = np.full((Bt, L), tokenizer_lib.PAD_ID, np.int32)
      numbers = np.full((Bt,), rows[-1], np.int32)  # a short batch repeats its last line
      for b, (i, line_ids) in enumerate(zip(rows, ids)):
        inputs_BS[b, : len(line_ids)], numbers[b] = line_ids, i
      for b in range(len(rows), Bt):
        inputs_BS[b] = inputs_BS[len(rows) - 1]
      keys_B = jax.vmap(lambda n: jax.random.fold_in(key, n))(jnp.asarray(numbers))
      tokens_BT = np.asarray(decode_batch(jnp.asarray(inputs_BS), keys_B))
      outputs = {i: tok.decode(tokens_BT[b]) for b, i in enumerate(rows)}
    for i in range(start, start + len(chunk)):
      out.write(outputs.get(i, "") + "\n")
    out.flush()
    bar.update(len(chunk))
  bar.close()
  return skipped


def read_stdin() -> str:
  """stdin's bytes as UTF-8 text, universal newlines; invalid UTF-8 raises UserError naming the
  line, as an input file's does (checks.read_text)."""
  raw = sys.stdin.buffer.read()
  try:
    text = raw.decode("utf-8")
  except UnicodeDecodeError as e:
    line = raw.count(b"\n", 0, e.start) + 1
    column = e.start - raw.rfind(b"\n", 0, e.start)
    raise checks.UserError(
      f"stdin, line {line}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {column}); "
      "nothing was translated: convert the input to UTF-8 (e.g. `iconv -f latin1 -t utf-8`) "
      "and rerun"
    ) from None
  return text.replace("\r\n", "\n").replace("\r", "\n")


def read_input(config: ml_collections.ConfigDict) -> list[str]:
  """The source lines (the file's, or stdin's), read whole before the run directory is made,
  so a refused input (invalid UTF-8 names its line) leaves it untouched and translates none."""
  text = checks.read_text(config.input) if config.input else read_stdin()
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()  # the final newline
  return lines


def run(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  lines = read_input(config)
  rd = RunDir(workdir, config)
  try:
    model, tok, trained = restore.load_model(config.checkpoint, config.step or None)
    kind = check_decoder(config, model.cfg)
    lm = dag_lm(config, trained, tok, kind)
    on_valid = from_run = None
    if kind == "dag" and lm is not None and config.dag_beam_grid.strip():  # chosen here, on valid
      config, on_valid = translation.with_valid_beam(config, model, tok, trained.data, lm)
    else:  # the run's validation's pick, where it made one
      config, from_run = run_beam_setting(config, kind, lm)
    ar_model = None
    if config.rerank == "ar" and model.cfg.decoder == "nar":
      ar_model, ar_tok, _ = restore.load_model(config.rerank_checkpoint)
      if ar_tok.vocab_size != tok.vocab_size or ar_model.cfg.vocab_size != model.cfg.vocab_size:
        raise checks.ConfigError(
          "rerank_checkpoint",
          config.rerank_checkpoint,
          f"its vocabulary ({ar_tok.vocab_size} pieces) is not the checkpoint's "
          f"({tok.vocab_size}): the reranker must share the PaDIR model's vocabulary",
        )
    start = time.perf_counter()
    if config.output:
      with open(config.output, "w", encoding="utf-8") as out:
        skipped = translate_lines(model, tok, lines, config, out, ar_model, lm)
    else:
      skipped = translate_lines(model, tok, lines, config, sys.stdout, ar_model, lm)
    dec = decoder(config, kind, lm)
    results = {
      "checkpoint": os.path.abspath(config.checkpoint),
      "decoder": dec.kind,
      "lines": len(lines),
      "translated": len(lines) - len(skipped),
      "skipped": skipped,
      "seconds": time.perf_counter() - start,
      "options": (
        dataclasses.asdict(dec.options)
        if dec.kind == "padir"
        else {k: getattr(dec, k) for k in OTHER_OPTIONS[dec.kind]}
      ),
    }
    if from_run is not None:  # the beam's weight and normalisation: the run's validation's
      results["options"]["dag_beam_chosen_at_step"] = from_run
    if on_valid is not None:  # ... or chosen here on the whole valid split
      results["options"]["dag_beam_chosen_on_valid"] = on_valid
    rd.write_results(results)
    rd.write_report(
      "# Translation\n\n"
      f"{results['translated']} of {results['lines']} lines of "
      f"{config.input or 'stdin'} translated with {results['checkpoint']} "
      f"({results['decoder']}) to {config.output or 'stdout'}; skipped: "
      f"{json.dumps(skipped) if skipped else 'none'}.\n"
    )
    return results
  finally:
    rd.close()
