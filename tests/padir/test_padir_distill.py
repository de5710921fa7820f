"""padir.training.distill and its job: the distilled corpus holds the teacher's beam-search translations,
in the format padir.data.corpus reads; a missing teacher is a clear error."""

import json
import os

import jax.numpy as jnp
import numpy as np
import padir_util
import pytest
from flax import nnx

from configs import padir_bible_en_es_ar, padir_bible_en_es_distill
from padir.data import corpus as data
from padir.data import tfds_corpus
from padir.data import tokenizer as tok_lib
from padir.decoding import autoregressive as decode
from padir.jobs import distill as distill_job
from padir.jobs import train as train_job
from padir.model import restore
from padir.training import distill

L = 16  # maximum source and target length (a 40-piece vocabulary spells words out)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
  return padir_util.write_corpus(
    tmp_path_factory.mktemp("corpus"), {"train": 41, "valid": 24, "test": 8}, max_words=4
  )


def _shrink(c, corpus_dir):
  c.data.update(
    corpus_dir=corpus_dir,
    prepare_bible=False,
    vocab_size=40,
    max_source_length=L,
    max_target_length=L,
  )
  c.model.update(num_encoder_layers=1, num_decoder_layers=1, num_heads=2, d_model=16, d_ff=32)
  c.train.update(
    batch_size=8,
    num_train_steps=40,
    warmup_steps=5,
    log_every=20,
    eval_every=1000,
    eval_batches=1,
    checkpoint_every=1000,
    progress_bar=False,
  )
  c.decode.num_examples = 0
  return c


@pytest.fixture(scope="module")
def teacher(corpus_dir, tmp_path_factory):
  """A tiny AR model trained for 60 steps: most beam outputs are short non-empty strings (a
  less trained one answers EOS to everything), a few are empty or lack EOS."""
  workdir = str(tmp_path_factory.mktemp("teacher"))
  c = _shrink(padir_bible_en_es_ar.get_config(), corpus_dir)
  c.model.dropout_rate = 0.0
  c.train.update(num_train_steps=60, peak_lr=0.02)
  c.decode.update(num_examples=4, batch_size=4)  # the final evaluation decodes with 5 beams
  assert c.decode.beam_size == 5
  last = train_job.run(c, workdir)
  assert 0 <= last["valid_bleu"] <= 100
  return workdir


@pytest.mark.slow  # trains the teacher (60 tiny steps)
def test_distilled_targets_are_the_teachers_beam_search_outputs(corpus_dir, teacher, tmp_path):
  out = str(tmp_path / "distilled")
  manifest = distill.distill_corpus(
    teacher, corpus_dir, out, source_lang="en", target_lang="es", beam_size=3, batch_size=4
  )  # 41 sources: a short last batch
  # The files parse with the existing reader, and through tfds + grain.
  pairs = data.read_split(out, "train", "en", "es")
  for split in ("valid", "test"):
    assert data.read_split(out, split, "en", "es") == data.read_split(corpus_dir, split, "en", "es")
  tok = tok_lib.Tokenizer(os.path.join(out, distill.VOCABULARY))
  sources = tfds_corpus.local_data_sources(out, "en", "es", data_dir=str(tmp_path / "tfds"))
  assert len(sources["train"]) == len(pairs)
  data.make_dataset(sources["train"], tok, batch_size=2, max_source_length=L, max_target_length=L)
  # Independent recomputation: the restored teacher decodes each source alone.
  model, _, _ = restore.load_model(teacher)
  beam = nnx.jit(lambda m, x: decode.beam_search(m, x, 3, length_penalty=0.6)["tokens"])
  original = data.read_split(corpus_dir, "train", "en", "es")
  expected, reasons = [], {"too_long": 0, "empty": 0, "no_eos": 0}
  for src, _ in original:
    ids = tok.encode(src) + [tok_lib.EOS_ID]
    if len(ids) > L:
      reasons["too_long"] += 1
      continue
    row = np.zeros((1, L), np.int32)
    row[0, : len(ids)] = ids
    out_ids = np.asarray(beam(model, jnp.asarray(row)))[0]
    text = " ".join(tok.decode(out_ids).split())
    if tok_lib.EOS_ID not in out_ids:
      reasons["no_eos"] += 1
    elif not text:
      reasons["empty"] += 1
    else:
      expected.append((src, text))
  assert pairs == expected
  assert len(pairs) >= len(original) // 2  # most sources kept: the test compares real outputs
  assert manifest["splits"]["train"] == {
    "total": len(original),
    "kept": len(pairs),
    **reasons,
    "seconds": manifest["splits"]["train"]["seconds"],
  }
  with open(os.path.join(out, distill.MANIFEST), encoding="utf-8") as f:
    assert json.load(f)["beam_size"] == 3


def test_missing_teacher_checkpoint_is_a_clear_error(corpus_dir, tmp_path):
  with pytest.raises(FileNotFoundError, match="no teacher checkpoint.*Train the AR teacher first"):
    distill.distill_corpus(
      str(tmp_path / "nowhere"),
      corpus_dir,
      str(tmp_path / "out"),
      source_lang="en",
      target_lang="es",
    )
  os.makedirs(tmp_path / "empty_run")
  (tmp_path / "empty_run" / "config.json").write_text("{}")
  with pytest.raises(FileNotFoundError, match="no checkpoint in .*Train the AR teacher first"):
    distill.load_teacher(str(tmp_path / "empty_run"))
  assert not os.path.exists(tmp_path / "out")


def test_mixed_references_hold_each_source_with_the_teachers_target_and_its_reference(
  corpus_dir, tmp_path
):
  """mix_references: the training split is the distilled pairs and then the corpus's own, every
  one once (counted against both files read independently); valid, test and the vocabulary are
  the distilled corpus's byte for byte; the manifest counts both sides."""
  distilled_dir = tmp_path / "distilled"
  os.makedirs(distilled_dir)
  refs = data.read_split(corpus_dir, "train", "en", "es")
  teacher_pairs = [(s, t.upper()) for s, t in refs[:-3]]  # stand-ins for translations, 3 dropped
  with open(distilled_dir / "train.tsv", "w", encoding="utf-8") as f:
    f.writelines(f"{s}\t{t}\n" for s, t in teacher_pairs)
  for split in ("valid", "test"):
    (distilled_dir / f"{split}.tsv").write_bytes(open(f"{corpus_dir}/{split}.tsv", "rb").read())
  (distilled_dir / distill.VOCABULARY).write_bytes(b"not a real model")
  (distilled_dir / distill.MANIFEST).write_text(json.dumps({"beam_size": 5}))
  out = tmp_path / "mixed"
  with pytest.raises(FileNotFoundError, match="holds no distilled corpus.*distill it first"):
    distill.mix_references(
      str(corpus_dir), str(corpus_dir), str(out), source_lang="en", target_lang="es"
    )
  assert not out.exists()
  manifest = distill.mix_references(
    str(distilled_dir), corpus_dir, str(out), source_lang="en", target_lang="es"
  )
  mixed = data.read_split(str(out), "train", "en", "es")
  assert mixed == teacher_pairs + refs
  for name in ("valid.tsv", "test.tsv", distill.VOCABULARY):
    assert (out / name).read_bytes() == (distilled_dir / name).read_bytes()
  with open(out / distill.MANIFEST, encoding="utf-8") as f:
    written = json.load(f)
  assert written == manifest and written["beam_size"] == 5
  assert written["references_mixed"]["distilled"] == len(refs) - 3
  assert written["references_mixed"]["references"] == len(refs)
  assert sorted(os.listdir(tmp_path)) == ["distilled", "mixed"]  # no scratch directory left
  # with_references makes distilled + "_refs" once, and again after a new distillation there
  refs_dir = distill.with_references(
    str(distilled_dir), corpus_dir, source_lang="en", target_lang="es"
  )
  assert (
    refs_dir == f"{distilled_dir}_refs" and data.read_split(refs_dir, "train", "en", "es") == mixed
  )
  (distilled_dir / "train.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in refs[:2]))
  (distilled_dir / distill.MANIFEST).write_text(json.dumps({"beam_size": 3}))
  distill.with_references(str(distilled_dir), corpus_dir, source_lang="en", target_lang="es")
  assert data.read_split(refs_dir, "train", "en", "es") == refs[:2] + refs


@pytest.mark.slow  # trains the teacher, compiles the student's (NAR) training step
def test_distill_job_trains_the_student_on_the_distilled_corpus(corpus_dir, teacher, tmp_path):
  c = _shrink(padir_bible_en_es_distill.get_config(), corpus_dir)
  c.train.update(num_train_steps=2, log_every=1)
  c.distill.update(
    teacher_workdir=teacher, beam_size=2, batch_size=8, corpus_dir=str(tmp_path / "distilled")
  )
  workdir = str(tmp_path / "student")
  last = distill_job.run(c, workdir)
  assert np.isfinite(last["train_loss"]) and np.isfinite(last["valid_loss"])
  with open(os.path.join(workdir, restore.TRAINED_CONFIG), encoding="utf-8") as f:
    recorded = json.load(f)  # the student's config (config.json holds the job's)
  assert recorded["data"]["corpus_dir"] == str(tmp_path / "distilled")
  assert recorded["data"]["vocab_path"].endswith(distill.VOCABULARY)
  # With mix_references the same corpus is reused and the references join it beside.
  c.distill.mix_references = True
  distill_job.run(c, str(tmp_path / "student_refs"))
  with open(tmp_path / "student_refs" / restore.TRAINED_CONFIG, encoding="utf-8") as f:
    recorded = json.load(f)
  mixed = str(tmp_path / "distilled_refs")
  assert recorded["data"]["corpus_dir"] == mixed
  read = lambda d: data.read_split(d, "train", "en", "es")
  assert read(mixed) == read(str(tmp_path / "distilled")) + read(corpus_dir)
  c.distill.mix_references = False
  # A second run reuses the corpus; other settings are refused rather than silently mixed.
  c.distill.beam_size = 4
  with pytest.raises(ValueError, match="holds a corpus distilled with"):
    distill_job.run(c, workdir)


@pytest.mark.slow  # trains the teacher (shared with the tests above)
def test_a_killed_distillation_resumes_from_its_partial_translations(corpus_dir, teacher, tmp_path):
  """Translations already on disk are reused, not recomputed (a planted one survives), a line cut
  short by the kill is ignored, and the rest equal a fresh run's; other settings are an error."""
  kw = dict(source_lang="en", target_lang="es", beam_size=2, batch_size=8)
  fresh = distill.distill_corpus(teacher, corpus_dir, str(tmp_path / "fresh"), **kw)
  fresh_pairs = data.read_split(str(tmp_path / "fresh"), "train", "en", "es")
  assert not os.path.exists(str(tmp_path / "fresh") + ".train.partial.jsonl")  # cleaned up
  # A run killed after two translations, one of them planted, the last line cut short.
  out = str(tmp_path / "resumed")
  sources = [s for s, _ in data.read_split(corpus_dir, "train", "en", "es")]
  settings = {
    k: fresh[k]
    for k in ("teacher_workdir", "teacher_step", "beam_size", "length_penalty", "source_corpus")
  }
  with open(out + ".train.partial.json", "w", encoding="utf-8") as f:
    json.dump(settings, f)
  with open(out + ".train.partial.jsonl", "w", encoding="utf-8") as f:
    f.write(json.dumps({"index": 0, "source": sources[0], "eos": True, "text": "PLANTED"}) + "\n")
    f.write(json.dumps({"index": 1, "source": sources[1], "eos": True, "text": "cut"})[:20])
  distill.distill_corpus(teacher, corpus_dir, out, **kw)
  pairs = data.read_split(out, "train", "en", "es")
  assert pairs[0] == (sources[0], "PLANTED")
  assert pairs[1:] == [p for p in fresh_pairs if p[0] != sources[0]]
  # Partial translations from another beam size are refused.
  with open(out + ".train.partial.json", "w", encoding="utf-8") as f:
    json.dump(dict(settings, beam_size=5), f)
  open(out + ".train.partial.jsonl", "w").close()
  with pytest.raises(ValueError, match="holds translations made with"):
    distill.distill_corpus(teacher, corpus_dir, out, **kw)


@pytest.mark.parametrize("teacher_kind", ["missing", "ctc", "padir", "ar without checkpoint"])
def test_a_teacher_that_is_not_a_trained_ar_run_is_refused_before_the_workdir(
  corpus_dir, tmp_path, teacher_kind
):
  """The job used to open its run directory and then fail in load_teacher with a traceback: a
  missing run, a CTC or PaDIR model (whose decoder is not AR) or an AR run without checkpoints
  is one line naming config.distill.teacher_workdir, and nothing is written."""
  from gmlm import cli
  from gmlm.checks import UserError

  teacher = tmp_path / "teacher"
  if teacher_kind != "missing":
    t = _shrink(padir_bible_en_es_ar.get_config(), corpus_dir)
    if teacher_kind != "ar without checkpoint":
      t.model.decoder = "nar"
      t.model.ctc_upsample = 2 if teacher_kind == "ctc" else 0
    teacher.mkdir()
    (teacher / "config.json").write_text(t.to_json(), encoding="utf-8")
  c = _shrink(padir_bible_en_es_distill.get_config(), corpus_dir)
  c.distill.update(teacher_workdir=str(teacher), corpus_dir=str(tmp_path / "distilled"))
  why = {
    "missing": "is not a training run",
    "ctc": "is a CTC model \\(it decodes with 'ctc'\\)",
    "padir": "is a PaDIR \\(refinement\\) model",
    "ar without checkpoint": "has no checkpoint: train the AR teacher first",
  }[teacher_kind]
  with pytest.raises(UserError, match=f"config.distill.teacher_workdir='{teacher}' {why}") as e:
    cli.run(c, str(tmp_path / "student"), "train.py")
  assert "\n" not in str(e.value)
  assert not (tmp_path / "student").exists() and not (tmp_path / "distilled").exists()
