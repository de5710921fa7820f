"""`python train.py --config configs/padir_bible_en_es_distill.py --workdir DIR`: distillation.

Distills the corpus once with the AR teacher (padir.training.distill; reused while its distill.json
matches the settings), with distill.mix_references the references mixed in beside it (once, in
corpus_dir + "_refs"), then trains the student there (padir.training.loop.fit, which resumes if
workdir has checkpoints). config.json records this config; the student's training config (the
distilled corpus and the teacher's vocabulary as its data) goes to padir.model.restore.TRAINED_CONFIG.
"""

from __future__ import annotations

from typing import Any

import ml_collections

from padir.data import bible, corpus, vocab
from padir.model import restore
from padir.training import distill
from padir.training import loop as training

ENTRY_POINT = "train.py"
RESUMABLE_KEYS = training.RESUMABLE_KEYS
ADDED_KEYS = training.ADDED_KEYS


def validate(config: ml_collections.ConfigDict) -> None:
  training.validate(config)
  distill.validate(config)


def run(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
  """Distills (once), then trains the student in workdir; returns its last logged metrics."""
  dc, d = config.distill, config.data
  out_dir = distill.corpus_dir(config, workdir)
  reuse = distill.reusable_corpus(config, out_dir)  # a corpus of other settings is refused
  if not reuse:  # the teacher and the corpus it distills (train) and copies (valid, test)
    teacher_config = dc.get("teacher_config") or distill.TEACHER_CONFIG  # (named by the fix)
    distill.check_teacher(dc.teacher_workdir, dc.teacher_step or None, teacher_config)
    corpus.check_corpus(d, ("train", "valid", "test"))
  if config.get("init_from"):  # the warm start must fit the teacher's vocabulary (the student's)
    teacher_vocab = vocab.vocabulary_path(restore.trained_config(dc.teacher_workdir))
    training.check_warm_start(config, teacher_vocab)
  rd = training.open_run(config, workdir)
  try:
    if not reuse:
      if d.get("prepare_bible"):
        bible.prepare_if_missing(d.corpus_dir, d.source_lang, d.target_lang)
      distill.distill_corpus(
        dc.teacher_workdir,
        d.corpus_dir,
        out_dir,
        source_lang=d.source_lang,
        target_lang=d.target_lang,
        teacher_step=dc.teacher_step or None,
        beam_size=dc.beam_size,
        length_penalty=dc.length_penalty,
        batch_size=dc.batch_size,
      )
    if dc.get("mix_references"):  # the references beside the teacher's translations
      out_dir = distill.with_references(
        out_dir, d.corpus_dir, source_lang=d.source_lang, target_lang=d.target_lang
      )
    student = distill.student_config(config, out_dir)
    rd.write_json(restore.TRAINED_CONFIG, student)
    return training.fit(student, rd)
  finally:
    rd.close()
