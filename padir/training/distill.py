"""Sequence-level knowledge distillation (Kim & Rush 2016): PaDIR trains on an AR teacher's output.

Paper App. L.2: "we distill our models by training on the output of an autoregressive model" (the
paper used a translation service; here the teacher is the AR baseline trained by padir.training.loop,
decoded with beam search). `distill_corpus` translates the source side of the training split
with the teacher and writes a local corpus (SPLIT.tsv, the format padir.data.corpus reads) whose
targets are the teacher's translations; the valid and test splits are copied unchanged, so that
evaluation stays against the human references. The job padir.jobs.distill
(configs/padir_bible_en_es_distill.py) distills once, then trains the student on the distilled
corpus with the teacher's vocabulary (`student_config`).

A source the teacher cannot encode (longer than its max_source_length) and a translation that is
empty or that reached max_target_length without EOS are left out; distill.json counts them.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import time
from typing import Any, Sequence

import ml_collections
import numpy as np
import tqdm
from flax import nnx

from gmlm import checks
from padir.data import corpus as data
from padir.data import tokenizer as tokenizer_lib
from padir.decoding import autoregressive as decode
from padir.decoding import decoders
from padir.evaluation import translation as evaluate
from padir.model import restore

MANIFEST = "distill.json"
VOCABULARY = "teacher_spm.model"
TEACHER_CONFIG = "configs/padir_bible_en_es_ar.py"  # the teacher config a refusal names by default


@functools.partial(nnx.jit, static_argnames=("beam_size", "length_penalty"))
def _beam_tokens(model, inputs_BS, beam_size, length_penalty):
  return decode.beam_search(model, inputs_BS, beam_size, length_penalty=length_penalty)["tokens"]


def load_teacher(teacher_workdir: str, step: int | None = None) -> restore.Loaded:
  """The AR teacher of a training run directory; a clear error if there is none."""
  try:
    model, tok, config = restore.load_model(teacher_workdir, step)
  except FileNotFoundError as e:
    raise FileNotFoundError(
      f"no teacher checkpoint: {e}. Train the AR teacher first, e.g. `python train.py --config "
      f"configs/padir_bible_en_es_ar.py --workdir {teacher_workdir}`, or point "
      f"config.distill.teacher_workdir at its run directory."
    ) from None
  if model.cfg.decoder != "ar":
    raise ValueError(
      f"the teacher in {teacher_workdir} has decoder={model.cfg.decoder!r}; "
      f"distillation needs an AR model (decoder='ar')"
    )
  return model, tok, config


def check_teacher(
  teacher_workdir: str, step: int | None = None, teacher_config: str = TEACHER_CONFIG
) -> None:
  """Refuses, in one line naming config.distill.teacher_workdir (UserError), a teacher that is
  not a trained AR run: no config.json, a CTC or PaDIR model (its recommended decoder,
  padir.decoding.decoders.recommended, is not an AR one), or no checkpoint (of `step`); the
  fix it names trains teacher_config there. Reads JSON and lists checkpoints only: the distill
  job calls it before its run directory exists."""
  key = "config.distill.teacher_workdir"
  train = f"python train.py --config {teacher_config} --workdir"
  try:
    model = restore.trained_config(teacher_workdir).get("model", {})
  except (FileNotFoundError, ValueError):
    raise checks.UserError(
      f"{key}={teacher_workdir!r} is not a training run (no readable config.json): train the AR "
      f"teacher first, e.g. `{train} {teacher_workdir}`"
    ) from None
  kind = decoders.recommended(model)
  if kind not in ("greedy", "beam"):
    raise checks.UserError(
      f"{key}={teacher_workdir!r} is {decoders.model_name(model)} (it decodes with {kind!r}); "
      "the teacher decodes by beam search: point it at an AR run (model.decoder='ar')"
    )
  steps = restore.checkpoint_steps(teacher_workdir)
  if not steps or (step and step not in steps):
    raise checks.UserError(
      f"{key}={teacher_workdir!r} has no checkpoint"
      + (f" at step {step} (it has {steps})" if step and steps else "")
      + f": train the AR teacher first, e.g. `{train} {teacher_workdir}`"
    )


def translate_sources(
  model,
  tok: tokenizer_lib.Tokenizer,
  sources: Sequence[str],
  *,
  beam_size: int,
  length_penalty: float,
  batch_size: int,
  partial_path: str | None = None,
  desc: str = "distill",
) -> tuple[list[str | None], dict[str, int]]:
  """Teacher translations (None where left out) and the counts of each reason to leave out.

  Sources are decoded in order of length, so a batch stops when its longest hypothesis does.
  With partial_path, each batch's translations are appended there as JSON lines as soon as they
  exist, and a rerun (after a kill) decodes only the sources that file does not have yet.
  """
  max_len = model.cfg.max_source_length
  lengths = [len(tok.encode(s)) + 1 for s in sources]
  todo = sorted((i for i, n in enumerate(lengths) if n <= max_len), key=lambda i: lengths[i])
  out: list[str | None] = [None] * len(sources)
  counts = {"too_long": len(sources) - len(todo), "empty": 0, "no_eos": 0}
  done: dict[int, dict[str, Any]] = {}
  if partial_path and os.path.exists(partial_path):
    with open(partial_path, encoding="utf-8") as f:
      for line in f:
        try:
          record = json.loads(line)
        except json.JSONDecodeError:  # a line cut short by a kill
          continue
        i = record.get("index", -1)
        if 0 <= i < len(sources) and record.get("source") == sources[i]:
          done[i] = record
    logging.info("%s: %d translations from %s", desc, len(done), partial_path)
  todo_now = [i for i in todo if i not in done]
  cut_short = False  # a last line cut short by a kill: the next record starts on its own line
  if partial_path and os.path.isfile(partial_path) and os.path.getsize(partial_path):
    with open(partial_path, "rb") as f:
      f.seek(-1, os.SEEK_END)
      cut_short = f.read(1) != b"\n"
  log = open(partial_path, "a", encoding="utf-8") if partial_path else None
  if cut_short:
    log.write("\n")
  try:
    with tqdm.tqdm(
      total=len(todo), initial=len(todo) - len(todo_now), desc=desc, unit="sentence"
    ) as bar:
      for start in range(0, len(todo_now), batch_size):
        rows = todo_now[start : start + batch_size]
        inputs_BS = evaluate.encode_batch(tok, [sources[i] for i in rows], batch_size, max_len)
        tokens_BT = np.asarray(_beam_tokens(model, inputs_BS, beam_size, length_penalty))
        for i, ids in zip(rows, tokens_BT):
          done[i] = {
            "index": i,
            "source": sources[i],
            "eos": bool(tokenizer_lib.EOS_ID in ids),
            "text": " ".join(tok.decode(ids).split()),
          }  # one line, no tab
          if log:
            log.write(json.dumps(done[i], ensure_ascii=False) + "\n")
        if log:
          log.flush()
        bar.update(len(rows))
  finally:
    if log:
      log.close()
  for i in todo:
    if not done[i]["eos"]:
      counts["no_eos"] += 1
    elif not done[i]["text"]:
      counts["empty"] += 1
    else:
      out[i] = done[i]["text"]
  return out, counts


def _write_tsv(path: str, pairs: Sequence[tuple[str, str]]) -> None:
  with open(path, "w", encoding="utf-8") as f:
    f.writelines(f"{s}\t{t}\n" for s, t in pairs)


def distill_corpus(
  teacher_workdir: str,
  corpus_dir: str,
  out_dir: str,
  *,
  source_lang: str,
  target_lang: str,
  teacher_step: int | None = None,
  beam_size: int = 5,
  length_penalty: float = 0.6,
  batch_size: int = 64,
  distill_splits: Sequence[str] = ("train",),
  copy_splits: Sequence[str] = ("valid", "test"),
) -> dict[str, Any]:
  """Writes out_dir/{split}.tsv (teacher targets for distill_splits, copies for copy_splits), the
  teacher's vocabulary and distill.json; returns the manifest. The directory appears whole or
  not at all (written beside it, then renamed)."""
  model, tok, _ = load_teacher(teacher_workdir, teacher_step)
  step = teacher_step if teacher_step is not None else _latest_step(teacher_workdir)
  tmp = out_dir.rstrip("/") + f".tmp{os.getpid()}"
  shutil.rmtree(tmp, ignore_errors=True)
  os.makedirs(tmp)
  manifest = {
    "teacher_workdir": os.path.abspath(teacher_workdir),
    "teacher_step": step,
    "beam_size": beam_size,
    "length_penalty": length_penalty,
    "source_corpus": os.path.abspath(corpus_dir),
    "vocabulary": VOCABULARY,
    "splits": {},
  }
  for split in distill_splits:
    t0 = time.time()
    pairs = data.read_split(corpus_dir, split, source_lang, target_lang)
    partial, settings_path = _partial_paths(out_dir, split)
    _check_partial_settings(partial, settings_path, manifest)
    targets, counts = translate_sources(
      model,
      tok,
      [s for s, _ in pairs],
      beam_size=beam_size,
      length_penalty=length_penalty,
      batch_size=batch_size,
      partial_path=partial,
      desc=f"distill {split}",
    )
    kept = [(s, t) for (s, _), t in zip(pairs, targets) if t is not None]
    if not kept:
      raise data.CorpusError(
        f"the teacher produced no usable translation of the {split} split "
        f"({counts}); is it trained?"
      )
    _write_tsv(os.path.join(tmp, f"{split}.tsv"), kept)
    manifest["splits"][split] = {
      "total": len(pairs),
      "kept": len(kept),
      **counts,
      "seconds": round(time.time() - t0, 1),
    }
    logging.info("distilled %s: %s", split, manifest["splits"][split])
  for split in copy_splits:
    _write_tsv(
      os.path.join(tmp, f"{split}.tsv"),
      data.read_split(corpus_dir, split, source_lang, target_lang),
    )
    manifest["splits"][split] = {"copied": True}
  shutil.copyfile(tok.path, os.path.join(tmp, VOCABULARY))
  _publish(tmp, out_dir, manifest)
  for split in distill_splits:
    for path in _partial_paths(out_dir, split):
      if os.path.exists(path):
        os.remove(path)
  return manifest


def mix_references(
  distilled_dir: str,
  corpus_dir: str,
  out_dir: str,
  *,
  source_lang: str,
  target_lang: str,
  split: str = "train",
) -> dict[str, Any]:
  """A distilled corpus with the references mixed in: out_dir/{split}.tsv holds the teacher's
  translations of distilled_dir and then every pair of corpus_dir's own split (each source
  twice, once with each target: the raw-data prior of Ding et al. 2021 beside the teacher's
  outputs), the other splits, the vocabulary and the manifest copied from distilled_dir, the
  manifest gaining "references_mixed" (how many pairs came from each side). The loader
  shuffles every epoch, so the order on disk is no curriculum. Written beside out_dir, then
  renamed: whole or not at all."""
  manifest = _manifest(distilled_dir)
  if manifest is None:
    raise FileNotFoundError(
      f"{distilled_dir} holds no distilled corpus ({MANIFEST} missing): distill it first "
      "(distill_corpus), then mix the references in"
    )
  distilled = data.read_split(distilled_dir, split, source_lang, target_lang)
  references = data.read_split(corpus_dir, split, source_lang, target_lang)
  tmp = out_dir.rstrip("/") + f".tmp{os.getpid()}"
  shutil.rmtree(tmp, ignore_errors=True)
  os.makedirs(tmp)
  _write_tsv(os.path.join(tmp, f"{split}.tsv"), [*distilled, *references])
  for name in os.listdir(distilled_dir):
    if (name.endswith(".tsv") and name != f"{split}.tsv") or name == VOCABULARY:
      shutil.copyfile(os.path.join(distilled_dir, name), os.path.join(tmp, name))
  manifest["references_mixed"] = {
    "split": split,
    "distilled": len(distilled),
    "references": len(references),
    "reference_corpus": os.path.abspath(corpus_dir),
    "distilled_corpus": os.path.abspath(distilled_dir),
  }
  _publish(tmp, out_dir, manifest)
  return manifest


def with_references(
  distilled_dir: str, corpus_dir: str, *, source_lang: str, target_lang: str
) -> str:
  """distilled_dir + "_refs": the distilled corpus with corpus_dir's references mixed in
  (mix_references), made once: reused while its manifest is distilled_dir's own (plus the
  mixing's record), remade after a new distillation there."""
  out = distilled_dir.rstrip("/") + "_refs"
  if not _mixed_from(out, distilled_dir):
    m = mix_references(
      distilled_dir, corpus_dir, out, source_lang=source_lang, target_lang=target_lang
    )["references_mixed"]
    logging.info("%s: %d teacher translations, %d references", out, m["distilled"], m["references"])
  return out


def _mixed_from(out: str, distilled_dir: str) -> bool:
  """Whether out holds the references mixed into distilled_dir's current corpus."""
  mixed, distilled = _manifest(out), _manifest(distilled_dir)
  if mixed is None or distilled is None:
    return False
  mixed.pop("references_mixed", None)
  return mixed == distilled


def _manifest(directory: str) -> dict[str, Any] | None:
  """The corpus manifest in directory, None where there is none."""
  path = os.path.join(directory, MANIFEST)
  if not os.path.isfile(path):
    return None
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _publish(tmp: str, out_dir: str, manifest: dict[str, Any]) -> None:
  """The manifest written into the scratch directory tmp, then tmp renamed to out_dir (one
  already there replaced): the corpus appears whole or not at all."""
  with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:
    json.dump(manifest, f, indent=2)
  if os.path.exists(out_dir):
    shutil.rmtree(out_dir)
  os.makedirs(os.path.dirname(os.path.abspath(out_dir)), exist_ok=True)
  os.replace(tmp, out_dir)


def _partial_paths(out_dir: str, split: str) -> tuple[str, str]:
  """A split's translations so far (JSON lines) and the settings they were made with."""
  stem = f"{out_dir.rstrip('/')}.{split}.partial"
  return stem + ".jsonl", stem + ".json"


def _check_partial_settings(partial: str, settings_path: str, manifest: dict[str, Any]) -> None:
  """Translations left by a killed run are reused only if they came from the same teacher and
  decoding settings (recorded beside them); otherwise they are an error, not silently mixed."""
  keys = ("teacher_workdir", "teacher_step", "beam_size", "length_penalty", "source_corpus")
  settings = {k: manifest[k] for k in keys}
  if os.path.exists(partial) and os.path.exists(settings_path):
    with open(settings_path, encoding="utf-8") as f:
      found = json.load(f)
    if found != settings:
      raise ValueError(
        f"{partial} holds translations made with {found}, not {settings}: delete "
        f"it (and {settings_path}) to start the distillation afresh"
      )
  else:
    with open(settings_path, "w", encoding="utf-8") as f:
      json.dump(settings, f)


def _latest_step(workdir: str) -> int:
  return restore.checkpoint_steps(workdir)[-1]


def student_config(config: ml_collections.ConfigDict, out_dir: str) -> ml_collections.ConfigDict:
  """The training config with the distilled corpus and the teacher's vocabulary as its data."""
  student = ml_collections.ConfigDict(config.to_dict())
  student.data.update(
    corpus_dir=out_dir,
    prepare_bible=False,
    train_vocab=False,
    vocab_path=os.path.join(out_dir, VOCABULARY),
    tfds_data_dir="",
  )
  return student


def validate(config: ml_collections.ConfigDict) -> None:
  """Checks the config.distill keys (the rest is a training config: padir.training.loop.validate)."""
  v = checks.get(config, "distill.teacher_workdir")
  checks.check(
    isinstance(v, str) and bool(v),
    "distill.teacher_workdir",
    v,
    "must name the AR teacher's run directory",
  )
  v = checks.get(config, "distill.corpus_dir")
  checks.check(
    isinstance(v, str), "distill.corpus_dir", v, "must be a path, or '' for WORKDIR/distilled"
  )
  checks.check_int(config, "distill.teacher_step", lo=0)
  checks.check_int(config, "distill.beam_size", lo=1)
  checks.check_int(config, "distill.batch_size", lo=1)
  checks.check_float(config, "distill.length_penalty")
  v = config.distill.get("mix_references", False)
  checks.check(isinstance(v, bool), "distill.mix_references", v, "must be True or False")


def corpus_dir(config: ml_collections.ConfigDict, workdir: str) -> str:
  """Where the distilled corpus goes: config.distill.corpus_dir, default WORKDIR/distilled."""
  return config.distill.corpus_dir or os.path.join(workdir, "distilled")


def reusable_corpus(config: ml_collections.ConfigDict, out_dir: str) -> bool:
  """Whether out_dir already holds the corpus distilled with config's settings (False: there is
  none yet); a corpus distilled with other settings is an error, not silently reused."""
  dc, d = config.distill, config.data
  manifest = _manifest(out_dir)
  if manifest is None:
    return False
  wanted = {
    "teacher_workdir": os.path.abspath(dc.teacher_workdir),
    "beam_size": dc.beam_size,
    "length_penalty": dc.length_penalty,
    "source_corpus": os.path.abspath(d.corpus_dir),
  }
  if dc.teacher_step:
    wanted["teacher_step"] = dc.teacher_step
  found = {k: manifest.get(k) for k in wanted}
  if found != wanted:
    raise ValueError(
      f"{out_dir} holds a corpus distilled with {found}, not {wanted}: delete it "
      f"or set config.distill.corpus_dir to another directory"
    )
  logging.info("reusing the distilled corpus in %s", out_dir)
  return True
