"""AR and the PaDIR models on a family of reordering tasks (issue 43): one table of test BLEU,
paired-bootstrap intervals against AR greedy, and training time.

  python benchmarks/padir_family.py --workdir runs/padir_family [--tasks sov,vso,...] [--bible]
      [--pairs 60000] [--steps 20000] [--patience 5] [--models ar,padir,ctc,dag] [--json OUT]
  python benchmarks/padir_family.py --tiny       # tiny tasks and models, a few steps: a smoke run

For each task of padir.data.grammar.FAMILY (--tasks; the six: SOV, VSO, the mirror language,
OSV with clause fronting, VOS with fertility, and SOV with 30-40-word sentences) the corpus is
written once to WORKDIR/data/TASK (--pairs training pairs, 512 validation, 1,024 test), and
with --bible the offline Bible pair is two tasks more, bible_en_es and bible_es_en (KJV /
Reina-Valera, written once to WORKDIR/data/TASK by padir.data.bible; also by name in --tasks):
every model on the Bible configs' backbone, data, batch and optimizer (configs/padir_bible_en_es
_ar.py: d = 256, an 8k vocabulary, pairs of at most 64 pieces, batches by length), and the
PaDIR models distilled, as on real text they must be: trained on the task's AR run's
translations of the training sources (its 2-beam search, made once to
WORKDIR/data/TASK_distilled, after the AR has stopped: --models lists ar first) and
warm-started from it (padir.training.warm_start); --distill-beams N (not 2) translates with N
beams instead, to WORKDIR/data/TASK_distilled_bN, the students then in WORKDIR/TASK/MODEL_bN;
--distill-refs mixes the references in (distill.mix_references: TASK_distilled[_bN]_refs,
MODEL[_bN]_refs).
Every model trains from the synthetic configs' backbone (configs/padir_synthetic.py: 3+3 layers,
d = 128) in WORKDIR/TASK/MODEL, with early stopping on validation BLEU
(train.early_stopping_patience = --patience, evaluations every --eval-every steps, at most --steps
steps), then translates the test split:
- ar: configs/padir_synthetic_ar.py, greedy decoding (the reference);
- padir: configs/padir_synthetic.py, the paper's refinement (its decoder);
- ctc: configs/padir_synthetic_ctc.py with glancing over the best alignment (0.5 -> 0.3) and a
  ratio per batch (--ctc-upsample, default 2, -> at most 3 or that + 1 slots per source token),
  one pass;
- dag: DA-Transformer's directed acyclic decoder (--dag-upsample vertices per source token),
  no glancing by default (--dag-glancing 0.5:0.3: on the best path, annealed), no dropout
  (--dag-dropout 0.1: the AR's rate), the AR's decoder depth (--dag-decoder-layers N: N layers
  over its vertices, the encoder the AR's), validated (so early-stopped) by the beam search over
  translations joined by an n-gram model of the task's training targets (padir.decoding.ngram:
  order --dag-lm-order, default 5), finished translations ranked by their score divided by
  their length to a power; the n-gram weight and that power chosen at every validation from
  --dag-beam-grid (configs/padir_family.py's BEAM_GRID; '' = --dag-lm-weight and
  --dag-length-norm, 1.5 and 1.5). Its test rows: "dag" (lookahead), "dag beam" (the beam
  alone) and "dag beam+lm (w:b)" (the validated decoder, with the weight and power validation
  chose at the checkpoint decoded; --dag-beam-on-valid: the best of --dag-decode-grid's settings
  (configs/padir_family.py's DECODE_GRID) on the whole valid split there instead, "(w:b on
  valid)", validation having decoded decode.num_examples pairs).
Columns: test BLEU (SacreBLEU), the paired bootstrap of BLEU(model) - BLEU(AR greedy) on the
same test pairs (95%, 1,000 resamples), the steps trained (the early stop), training wall-clock
and CPU seconds (user + system of the training process, validation decoding included: the
clock the run keeps in its records over every leg, padir.training.throughput.RunClock), and
"valid BLEU @ AR's CPU": the model's validation BLEU (its validation decoder's) at the last
evaluation it had reached within the AR's CPU seconds (by its clock), the comparison at equal
CPU time. A model that spent more than the AR gets one more
row, "... @ AR's CPU": its last row's decoder on the checkpoint it had saved last within the
AR's CPU seconds (every evaluation's checkpoint is kept), with the steps and the share of the
time up to there.
A second table breaks each row's test errors down (padir.evaluation.errors: exact, reordered
only, lexical; non-words, length, dropped / inserted words, agreement markers; on real text a
row "(the references)" gives the non-word floor, the references' own words the training targets
lack), and each row's translations stay in its run directory (test_hypotheses[_beam|_beam_lm]
.txt).
A killed benchmark rerun with the same arguments resumes each unfinished training (padir's
checkpoints) and retrains nothing finished; the time columns then add up every leg, a leg's
time past its last checkpoint once (the steps its successor redoes). A run begun before the
clock (2026-11-30) is timed by the sum of its legs in WORKDIR/TASK/MODEL/family_timing.json,
which a leg killed outright (SIGKILL) does not reach, and its CPU seconds per step taken as
constant.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import signal
import sys
import tempfile
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import ml_collections  # noqa: E402

from configs import padir_bible_en_es_distill, padir_family  # noqa: E402
from gmlm.runs import markdown_table  # noqa: E402
from padir.data import bible, grammar, vocab  # noqa: E402
from padir.data import corpus as data  # noqa: E402
from padir.decoding import ngram  # noqa: E402
from padir.evaluation import curves, dag_search, errors, metrics  # noqa: E402
from padir.evaluation import translation as evaluate  # noqa: E402
from padir.model import restore  # noqa: E402
from padir.training import distill, throughput  # noqa: E402
from padir.training import loop as training  # noqa: E402

MODELS = padir_family.MODELS
# The Bible pair, a task each way (--bible): the AR teacher's config of each direction gives the
# backbone, data and optimizer of every model on it (configs/padir_family.py).
BIBLE = padir_family.BIBLE
BIBLE_BUCKETS = padir_family.BIBLE_BUCKETS
TIMING = "family_timing.json"
HEADER = [
  "task",
  "model",
  "test BLEU",
  "vs AR greedy [95%]",
  "steps",
  "wall s",
  "CPU s",
  "valid BLEU @ AR's CPU",
]


def model_config(
  name: str,
  dag_upsample: float,
  ctc_upsample: float = 2.0,
  dag_glancing: tuple[float, float] = (0.0, 0.0),
  dag_dropout: float = 0.0,
) -> ml_collections.ConfigDict:
  """The training config of a model (module docstring), before the task's data: the one
  configs/padir_family.py gives users."""
  return padir_family.model_config(name, dag_upsample, ctc_upsample, dag_glancing, dag_dropout)


def glancing_arg(text: str) -> tuple[float, float]:
  """--dag-glancing: 'START:END' (the ratio annealed from START to END) or '0' (off)."""
  try:
    parts = [float(x) for x in text.split(":")]
  except ValueError:
    parts = []
  if len(parts) == 1 and parts[0] == 0:
    return 0.0, 0.0
  if len(parts) != 2 or not all(0 <= x <= 1 for x in parts) or not parts[0]:
    raise argparse.ArgumentTypeError(
      f"--dag-glancing {text!r}: START:END with ratios in [0, 1] (e.g. 0.5:0.3), or 0 for none"
    )
  return parts[0], parts[1]


def task_dir(task: str, seed: int) -> str:
  """A task's directory name: the task, and the grammar seed when it is not 0 (a held-aside
  draw of the same knobs with a fresh lexicon, cipher and sentences)."""
  return task if seed == 0 else f"{task}_seed{seed}"


def task_data(task: str, root: str, pairs: int, tiny: bool, seed: int = 0) -> dict:
  """The data keys of a family task (writing its corpus once)."""
  out = os.path.join(root, "data", task_dir(task, seed))
  sizes = {"train": pairs, "valid": 64 if tiny else 512, "test": 32 if tiny else 1024}
  if not os.path.isfile(os.path.join(out, "manifest.json")):
    grammar.write_corpus(out, sizes, grammar.FAMILY[task], seed=seed)
  with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
    manifest = json.load(f)
  del manifest
  return {"corpus_dir": out, "prepare_bible": False, "source_lang": "en", "target_lang": "cx"}


def fit_lengths(config: ml_collections.ConfigDict, tok) -> None:
  """Sets the config's length limits to the corpus's longest sentence in pieces (EOS included),
  over every split, rounded up to a multiple of 8: no pair is dropped and no test source cut."""
  longest = 1
  for split in ("train", "valid", "test"):
    pairs = data.read_split(
      config.data.corpus_dir, split, config.data.source_lang, config.data.target_lang
    )
    for pair in pairs:
      longest = max(longest, *(len(tok.encode(s)) + 1 for s in pair))
  longest = -(-longest // 8) * 8
  config.data.update(max_source_length=longest, max_target_length=longest)


def fit_vocabulary(config: ml_collections.ConfigDict):
  """Trains the config's vocabulary once, lowered to the largest size SentencePiece allows on
  the corpus when the asked size is too large (the size read from its error); the config then
  names the size it has."""
  while True:
    try:
      tok = vocab.prepare_vocabulary(config)
      config.data.vocab_size = tok.vocab_size
      return tok
    except Exception as e:  # pylint: disable=broad-except (SentencePiece's RuntimeError)
      # SentencePiece's own error ("<= N") or padir.data.vocab's line naming the key ("at most N")
      allowed = re.search(r"(?:<=|at most) (\d+)", str(e))
      if not allowed or int(allowed.group(1)) >= config.data.vocab_size:
        raise
      config.data.vocab_size = int(allowed.group(1))


def run_config(
  name: str, task: str, root: str, args: argparse.Namespace
) -> ml_collections.ConfigDict:
  c = model_config(name, args.dag_upsample, args.ctc_upsample, args.dag_glancing, args.dag_dropout)
  if task in BIBLE:
    on_bible(c, name, task, root)
  else:
    c.data.update(task_data(task, root, args.pairs, args.tiny, args.grammar_seed))
    c.data.bucket_boundaries = ()
    c.data.update(
      vocab_size=args.vocab_size,
      vocab_path=os.path.join(root, "data", task_dir(task, args.grammar_seed), "spm.model"),
    )
  if name == "dag" and args.dag_decoder_layers:  # (after the Bible's backbone)
    c.model.num_decoder_layers = args.dag_decoder_layers
  c.train.update(
    num_train_steps=args.steps,
    stop_at_step=0,
    eval_every=args.eval_every,
    checkpoint_every=args.eval_every,
    early_stopping_patience=args.patience,
    progress_bar=False,
  )
  if name != "ar":  # every evaluation's checkpoint kept: the "@ AR's CPU" row decodes one
    c.train.keep_checkpoints = args.steps // args.eval_every + 1
  c.train.warmup_steps = min(c.train.warmup_steps, max(1, args.steps // 10))
  c.train.log_every = min(c.train.log_every, args.eval_every)
  c.loss.glancing_anneal_steps = min(c.loss.get("glancing_anneal_steps", 0), args.steps)
  c.decode.update(num_examples=args.valid_sentences, batch_size=min(64, args.valid_sentences))
  if name == "dag" and args.dag_lm_order:  # validated with the "dag beam+lm" row's decoder
    c.decode.update(
      dag_lm_order=args.dag_lm_order,
      dag_lm_weight=args.dag_lm_weight,
      dag_length_norm=args.dag_length_norm,
      dag_beam_grid=args.dag_beam_grid,
    )
  elif name == "dag":  # no n-gram model: validated by lookahead
    c.decode.update(
      dag_decoder="lookahead",
      dag_lm_order=0,
      dag_lm_weight=0.0,
      dag_length_norm=0.0,
      dag_beam_grid="",
    )
  if args.tiny:
    c.model.update(num_encoder_layers=1, num_decoder_layers=1, d_model=32, d_ff=64, num_heads=2)
    # 30 steps are compile-bound: one program for every batch (no slot widths; docs/padir.md)
    c.train.update(batch_size=16, eval_batches=1, slot_bucket=0)
    c.data.bucket_boundaries = ()  # (a tiny Bible student's few distilled pairs fill no bucket)
    c.decode.num_lengths = 2
  tok = fit_vocabulary(c)
  if task not in BIBLE:
    fit_lengths(c, tok)
  elif name != "ar":  # the PaDIR models learn from the AR teacher's translations, from its weights
    corpus = distilled(c, task, root, args.distill_beams)
    if args.distill_refs:  # (distill.mix_references: the references beside the translations)
      d = c.data
      corpus = distill.with_references(
        corpus, d.corpus_dir, source_lang=d.source_lang, target_lang=d.target_lang
      )
    c = distill.student_config(c, corpus)
    c.init_from = teacher_dir(task, root)
  return c


def on_bible(c: ml_collections.ConfigDict, name: str, task: str, root: str) -> None:
  """A family model's config (in place) on a Bible task: configs/padir_family.py's (the Bible
  AR config's data, backbone, batch and optimizer, batches by length; the DAG keeps
  --dag-dropout's rate), the corpus under root/data/TASK, written there once."""
  del name  # (every model the same)
  padir_family.on_bible(c, task, os.path.join(root, "data", task))
  bible.prepare_if_missing(c.data.corpus_dir, c.data.source_lang, c.data.target_lang)


def teacher_dir(task: str, root: str) -> str:
  return os.path.join(root, task, "ar")


DISTILL_BEAMS = padir_bible_en_es_distill.get_config().distill.beam_size  # the Bible students' 2


def distill_suffix(beams: int) -> str:
  """What names a Bible student's corpus and run directory after its teacher's beams: nothing
  for the Bible students' DISTILL_BEAMS (configs/padir_bible_en_es_distill.py), else "_bN"."""
  return "" if beams == DISTILL_BEAMS else f"_b{beams}"


def model_dir(name: str, task: str, root: str, args: argparse.Namespace) -> str:
  """WORKDIR/TASK/MODEL, a Bible student's directory named after its teacher's beams too."""
  if task in BIBLE and name != "ar":
    name += distill_suffix(args.distill_beams) + ("_refs" if args.distill_refs else "")
  return os.path.join(root, task_dir(task, args.grammar_seed), name)


def distilled(c: ml_collections.ConfigDict, task: str, root: str, beams: int) -> str:
  """The Bible task's corpus with the AR run's translations (`beams`-beam search) of its training
  sources as targets (valid and test copied), made once to root/data/TASK_distilled[_bN]; the AR
  must have stopped."""
  out = os.path.join(root, "data", f"{task}_distilled{distill_suffix(beams)}")
  if os.path.isfile(os.path.join(out, distill.MANIFEST)):
    return out
  teacher = teacher_dir(task, root)
  if not read_timing(teacher).get("finished"):
    raise SystemExit(
      f"--models: the PaDIR models of {task} learn from its AR run's translations, and "
      f"{teacher} has not finished training: list ar first (--models ar,dag)"
    )
  wall, cpu = time.time(), throughput.process_cpu_seconds()
  d = c.data
  dc = padir_bible_en_es_distill.get_config().distill  # the Bible students' settings
  distill.distill_corpus(
    teacher,
    d.corpus_dir,
    out,
    source_lang=d.source_lang,
    target_lang=d.target_lang,
    beam_size=beams,
    length_penalty=dc.length_penalty,
    batch_size=dc.batch_size,
  )
  print(
    f"{task}: the AR's {beams}-beam translations of the training sources made in "
    f"{time.time() - wall:.0f} s ({throughput.process_cpu_seconds() - cpu:.0f} CPU s) to {out}",
    flush=True,
  )
  return out


def read_timing(workdir: str) -> dict:
  """A run's timing over its legs so far (`train`), {} before its first."""
  path = os.path.join(workdir, TIMING)
  if not os.path.isfile(path):
    return {}
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def train(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Trains (or resumes, or finds finished) one run; its timing over every leg. A run whose
  training has ended (`fit` returned: early-stopped or at its last step) is marked so and not
  opened again, so a rerun of the benchmark adds no time to it, and a config changed since (a
  validation setting) does not stop its rows from being decoded."""
  timing = read_timing(workdir)
  if timing.get("finished"):
    return with_clock(workdir, timing)
  rd = training.open_run(config, workdir)
  wall, cpu, finished = time.time(), throughput.process_cpu_seconds(), False
  try:
    training.fit(config, rd)
    finished = True
  finally:
    # Written however the leg ends (finished, early-stopped, Ctrl-C), so a resumed run adds up
    # every leg; a leg killed outright (SIGKILL) is the only one lost.
    timing = {
      "wall": timing.get("wall", 0.0) + time.time() - wall,
      "cpu": timing.get("cpu", 0.0) + throughput.process_cpu_seconds() - cpu,
      "finished": finished,
    }
    rd.write_json(TIMING, timing)
    rd.close()
  return with_clock(workdir, timing)


def run_clock(workdir: str) -> dict[int, tuple[float, float]]:
  """{step: (wall, CPU seconds)} of the run so far at each step it logged, from the clock its
  training keeps in its records over every leg (padir.training.throughput.RunClock: a killed
  leg's time past its last checkpoint counted once); {} for a run without records, or begun
  before the clock (a record without one): the timing file's sum of legs stands for it."""
  try:
    records = [r for kind in curves.read_metrics(workdir) for r in kind]
  except FileNotFoundError:
    return {}
  if not records or any(throughput.CPU not in r for r in records):
    return {}
  out: dict[int, tuple[float, float]] = {}
  for r in records:  # a step's evaluation record comes after its training record
    wall, cpu = out.get(r["step"], (0.0, 0.0))
    out[r["step"]] = (max(wall, r[throughput.WALL]), max(cpu, r[throughput.CPU]))
  return out


def with_clock(workdir: str, timing: dict) -> dict:
  """The timing of a run, its wall and CPU seconds the run's clock where it kept one."""
  clock = run_clock(workdir)
  if not clock:
    return timing
  wall, cpu = clock[max(clock)]
  return {**timing, "wall": wall, "cpu": cpu}


def target_words(config: ml_collections.ConfigDict) -> tuple[set[str], list[str] | None]:
  """The target language's words (those of the training targets) and, for a family task with
  agreement, its markers (the manifest's)."""
  pairs = data.read_split(
    config.data.corpus_dir, "train", config.data.source_lang, config.data.target_lang
  )
  lexicon = {w for _, t in pairs for w in t.split()}
  path = os.path.join(config.data.corpus_dir, "manifest.json")
  markers = None
  if os.path.isfile(path):
    with open(path, encoding="utf-8") as f:
      manifest = json.load(f)
    if manifest.get("knobs", {}).get("agreement"):
      markers = manifest["agreement"]
  return lexicon, markers


def test_pairs(
  config: ml_collections.ConfigDict, split: str = "test"
) -> tuple[list[str], list[str]]:
  pairs = data.read_split(
    config.data.corpus_dir, split, config.data.source_lang, config.data.target_lang
  )
  return [s for s, _ in pairs], [t for _, t in pairs]


@dataclasses.dataclass
class Row:
  task: str
  model: str
  bleu: float
  hypotheses: list[str]
  steps: int
  wall: float
  cpu: float
  evals: list[tuple[int, float]]  # (step, validation BLEU)
  delta: str = "reference"
  at_ar_cpu: str = "-"
  errors: errors.Breakdown | None = None
  search: dag_search.Attribution | None = None  # the "dag beam+lm" rows': search or model
  clock: dict[int, float] = dataclasses.field(default_factory=dict)  # step: CPU s (run_clock)

  def cpu_at(self, step: int) -> float:
    """The run's CPU seconds at `step`: its clock's, else its CPU seconds per step as constant."""
    if step in self.clock:
      return self.clock[step]
    return step * self.cpu / max(self.steps, 1)


def run_model(name: str, task: str, root: str, args: argparse.Namespace) -> list[Row]:
  """Trains one model on one task (or finds it trained) and translates the test split: one row,
  and for the DAG model a second, "dag beam" (DA-Transformer's beam search over translations,
  padir.decoding.dag, on the same weights), and a third, "dag beam+lm", the beam joined by an
  n-gram model of the training targets (--dag-lm-order, --dag-lm-weight, --dag-length-norm;
  padir.decoding.ngram).
  Each row's translations are kept beside the run (test_hypotheses[_beam|_beam_lm].txt) for the
  error analysis."""
  config = run_config(name, task, root, args)
  workdir = model_dir(name, task, root, args)
  timing = train(config, workdir)
  strategies = ["lookahead", "beam"] if name == "dag" else ["lookahead"]  # (a DAG's only)
  return decode_rows(name, task, workdir, timing, strategies, args)


def decode_rows(
  name: str,
  task: str,
  workdir: str,
  timing: dict,
  strategies: list[str],
  args: argparse.Namespace,
  step: int | None = None,
) -> list[Row]:
  """The test rows of a trained run, decoded with each strategy (a DAG model's: "lookahead",
  "beam", and "beam+lm" added where --dag-lm-order fits) at checkpoint `step` (default: the
  last); an earlier step's rows are named "@ AR's CPU" and their CPU seconds are the run's up
  to that step."""
  model, tok, trained = restore.load_model(workdir, step)
  sources, references = test_pairs(trained)
  c = trained.decode
  _, evals = curves.read_metrics(workdir)
  bleus = [(r["step"], r["valid_bleu"]) for r in evals if "valid_bleu" in r]
  last = max(restore.checkpoint_steps(workdir))
  clock = run_clock(workdir)
  strategies = list(strategies)
  lm = None
  if name == "dag" and args.dag_lm_order:
    try:
      lm = ngram.from_corpus(trained.data, tok, args.dag_lm_order)
      strategies.append("beam+lm")
    except ValueError as e:  # more n-grams than ngram.MAX_ENTRIES: the row is left out
      print(f"{task}: no 'dag beam+lm' row: {e}", file=sys.stderr)
  early = step is not None and step != last
  choose = None
  if lm is not None and args.dag_beam_on_valid:  # the whole valid split, at this checkpoint

    def choose(grid):
      held, held_refs = test_pairs(trained, "valid")
      got = evaluate.choose_beam_setting(
        model,
        tok,
        held,
        held_refs,
        trained.data.target_lang,
        grid,
        batch_size=c.batch_size,
        dag_lm=lm,
      )
      sweep = ", ".join(
        f"{r['lm_weight']:g}:{r['length_norm']:g} {r['bleu']:.2f}" for r in got["sweep"]
      )
      at = f"step {step or last}"
      print(f"{task} {name} {at}: valid BLEU on {got['sentences']} pairs by beam setting: {sweep}")
      return tuple(got["chosen"])

  w, b = beam_setting(workdir, step or last, args, choose)
  if early and step in clock:
    wall, cpu = clock[step]
  else:  # (a run begun before the clock: its time per step taken as constant)
    share = step / last if early else 1.0
    wall, cpu = timing["wall"] * share, timing["cpu"] * share
  rows = []
  for strategy in strategies:
    with_lm = strategy == "beam+lm"
    attribution = None
    if with_lm:  # the same beam, its wrong translations put down to search or model
      attribution = dag_search.attribute(
        model,
        tok,
        sources,
        references,
        lm=lm,
        lm_weight=w,
        length_norm=b,
        batch_size=c.batch_size,
      )
    hyps = (
      attribution.hypotheses
      if with_lm
      else evaluate.translate(
        model,
        tok,
        sources,
        jax.random.key(trained.seed),
        batch_size=c.batch_size,
        num_steps=c.num_steps,
        num_lengths=c.num_lengths,
        beam_size=1,
        decoder=c.get("decoder", "paper"),
        blank_penalty=c.get("blank_penalty", 0.0),
        dag_decoder=strategy,
      )
    )
    suffix = {"beam": "_beam", "beam+lm": "_beam_lm"}.get(strategy, "")
    suffix += f"_step{step}" if early else ""
    with open(os.path.join(workdir, f"test_hypotheses{suffix}.txt"), "w", encoding="utf-8") as f:
      f.writelines(h + "\n" for h in hyps)
    label = f"{name} {strategy}" if name == "dag" and strategy != "lookahead" else name
    on_valid = " on valid" if choose is not None else ""
    chose = args.dag_beam_grid or choose is not None
    label += f" ({w:g}:{b:g}{on_valid})" if with_lm and chose else ""
    rows.append(
      Row(
        task=task_dir(task, args.grammar_seed),
        model=label + (" @ AR's CPU" if early else ""),
        bleu=metrics.bleu(hyps, references, trained.data.target_lang).score,
        hypotheses=hyps,
        steps=step if early else last,
        wall=wall,
        cpu=cpu,
        evals=bleus,
        search=attribution,
        clock={s: c for s, (_, c) in clock.items()},
      )
    )
  return rows


def beam_setting(
  workdir: str,
  step: int,
  args: argparse.Namespace,
  choose: Callable[[tuple[tuple[float, float], ...]], tuple[float, float]] | None = None,
) -> tuple[float, float]:
  """The "dag beam+lm" row's (n-gram weight, length normalisation): with --dag-beam-grid, the
  setting the run's validation chose at its evaluation of `step` (metrics.jsonl), or, given
  `choose` (--dag-beam-on-valid), the one it returns for --dag-decode-grid (decode_rows': the
  best on the whole valid split, where validation decodes decode.num_examples pairs); else (and
  for a run evaluated without the grid) --dag-lm-weight and --dag-length-norm."""
  if choose is not None:
    return choose(evaluate.parse_beam_grid(args.dag_decode_grid))
  chosen = evaluate.chosen_beam_setting(workdir, step) if args.dag_beam_grid else None
  return chosen or (args.dag_lm_weight, args.dag_length_norm)


def at_ar_cpu_rows(
  name: str, task: str, root: str, args: argparse.Namespace, ar: Row, final: Row
) -> list[Row]:
  """A model's last row again, decoded from the last checkpoint it had saved within the AR's
  CPU seconds (by its clock, else its CPU seconds per step taken as constant): what a PaDIR run
  given the AR's training budget would translate with. None where the model finished within
  that budget, or had saved no checkpoint by then."""
  if final.cpu <= ar.cpu:
    return []
  workdir = model_dir(name, task, root, args)
  steps = [s for s in restore.checkpoint_steps(workdir) if final.cpu_at(s) <= ar.cpu]
  if not steps:
    return []
  timing = {"wall": final.wall, "cpu": final.cpu}
  strategies = [] if name == "dag" and args.dag_lm_order else ["lookahead"]
  return decode_rows(name, task, workdir, timing, strategies, args, step=max(steps))[-1:]


def at_cpu(row: Row, budget: float) -> str:
  """The validation BLEU of the last evaluation a run had reached within `budget` CPU seconds
  (Row.cpu_at), "-" before its first."""
  reached = [b for s, b in row.evals if row.cpu_at(s) <= budget]
  return f"{reached[-1]:.2f}" if reached else "-"


def compare(rows: list[Row], references: list[str], target_lang: str, resamples: int) -> None:
  """Fills each row's interval against the task's AR greedy, and each PaDIR row's validation
  BLEU at the AR's CPU seconds (equal CPU time)."""
  ar = next((r for r in rows if r.model == "ar"), None)
  if ar is None:
    return
  for r in rows:
    if r is ar:
      continue
    r.at_ar_cpu = at_cpu(r, ar.cpu)
    p = metrics.paired_bootstrap(r.hypotheses, ar.hypotheses, references, target_lang, resamples)
    r.delta = f"{p.delta:+.2f} [{p.low:+.2f}, {p.high:+.2f}]"


def table(rows: list[Row]) -> str:
  body = [
    [
      r.task,
      r.model,
      f"{r.bleu:.2f}",
      r.delta,
      r.steps,
      f"{r.wall:.0f}",
      f"{r.cpu:.0f}",
      r.at_ar_cpu,
    ]
    for r in rows
  ]
  return markdown_table(HEADER, body)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--workdir", default=None, help="runs and corpora (default: a temporary one)")
  parser.add_argument("--tasks", default=None, help=f"default {','.join(grammar.FAMILY)}")
  parser.add_argument(
    "--bible",
    action="store_true",
    help="the Bible pair as two tasks more (bible_en_es, bible_es_en), the PaDIR models distilled",
  )
  parser.add_argument("--models", default=None, help=f"default {','.join(MODELS)}")
  parser.add_argument("--pairs", type=int, default=60_000)
  parser.add_argument("--steps", type=int, default=20_000, help="at most; early stopping ends it")
  parser.add_argument("--eval-every", type=int, default=250)
  parser.add_argument("--patience", type=int, default=5)
  parser.add_argument("--valid-sentences", type=int, default=256)
  parser.add_argument(
    "--vocab-size", type=int, default=512, help="lowered to what the corpus allows"
  )
  parser.add_argument("--dag-upsample", type=float, default=2)
  parser.add_argument(
    "--dag-glancing",
    type=glancing_arg,
    default=(0.0, 0.0),
    help="the DAG's glancing ratio START:END (annealed), or 0 (the default) for none",
  )
  parser.add_argument(
    "--dag-dropout",
    type=float,
    default=0.0,
    help="the DAG's dropout rate (default 0, the PaDIR configs'; the AR trains with 0.1)",
  )
  parser.add_argument(
    "--dag-decoder-layers",
    type=int,
    default=0,
    help="the DAG's decoder layers (default 0: the backbone's, as the AR's)",
  )
  parser.add_argument(
    "--dag-lm-order",
    type=int,
    default=5,
    help="the 'dag beam+lm' row's n-gram order over the training targets (0: no such row)",
  )
  parser.add_argument(
    "--dag-lm-weight", type=float, default=1.5, help="its weight in the beam's score"
  )
  parser.add_argument(
    "--dag-length-norm",
    type=float,
    default=1.5,
    help="the 'dag beam+lm' row ranks finished translations by score / length^this",
  )
  parser.add_argument(
    "--dag-beam-grid",
    default=padir_family.BEAM_GRID,
    help="'w:b,...': validation picks the best of these (weight, length normalisation) at "
    "every evaluation, and the 'dag beam+lm' row decodes with the pick ('' = the two above)",
  )
  parser.add_argument(
    "--dag-beam-on-valid",
    action="store_true",
    help="the 'dag beam+lm' rows decode with --dag-decode-grid's best setting on the whole "
    "valid split at the checkpoint decoded, not validation's pick on its decode.num_examples pairs",
  )
  parser.add_argument(
    "--dag-decode-grid",
    default=padir_family.DECODE_GRID,
    help="'w:b,...': the settings --dag-beam-on-valid chooses from (configs/padir_family.py)",
  )
  parser.add_argument(
    "--ctc-upsample", type=float, default=2.0, help="CTC's slots per source token (decoding)"
  )
  parser.add_argument(
    "--distill-beams",
    type=int,
    default=DISTILL_BEAMS,
    help="the Bible students learn from their AR teacher's translations with this many beams "
    f"(default {DISTILL_BEAMS}; another makes WORKDIR/data/TASK_distilled_bN and MODEL_bN run directories)",
  )
  parser.add_argument(
    "--distill-refs",
    action="store_true",
    help="the Bible students learn from the teacher's translations and the references both "
    "(WORKDIR/data/TASK_distilled[_bN]_refs, MODEL[_bN]_refs run directories)",
  )
  parser.add_argument("--resamples", type=int, default=1000)
  parser.add_argument(
    "--grammar-seed",
    type=int,
    default=0,
    help="the grammar's seed: 0 for the family's tasks, another for a held-aside draw",
  )
  parser.add_argument("--tiny", action="store_true", help="tiny tasks and models: a smoke run")
  parser.add_argument("--json", default=None)
  args = parser.parse_args(argv)
  # Ctrl-C (SIGINT) ends a leg with its timing written, also when started in the background,
  # where the shell set SIGINT to be ignored.
  signal.signal(signal.SIGINT, signal.default_int_handler)
  if args.tasks is None:  # (given, --tasks and --models choose with --tiny too)
    args.tasks = "sov,mirror" if args.tiny else ",".join(grammar.FAMILY)
  if args.models is None:
    args.models = "ar,ctc,dag" if args.tiny else ",".join(MODELS)
  if args.tiny:
    args.pairs, args.steps, args.eval_every, args.patience = 400, 30, 10, 2
    args.valid_sentences, args.vocab_size, args.dag_upsample, args.resamples = 16, 160, 2, 100
  tasks = [t for t in args.tasks.split(",") if t] + (list(BIBLE) if args.bible else [])
  unknown = [t for t in tasks if t not in grammar.FAMILY and t not in BIBLE]
  if unknown:
    parser.error(
      f"--tasks {unknown[0]!r}: not a task; one of {', '.join([*grammar.FAMILY, *BIBLE])}"
    )
  try:
    on_valid = evaluate.parse_beam_grid(args.dag_decode_grid)
  except ValueError as e:
    parser.error(f"--dag-decode-grid {args.dag_decode_grid!r}: {e}")
  if args.dag_beam_on_valid and not on_valid:
    parser.error("--dag-beam-on-valid chooses from --dag-decode-grid: give a grid ('w:b,...')")
  if args.distill_beams < 1:
    parser.error(f"--distill-beams {args.distill_beams}: the teacher needs at least 1 beam")
  models = [m for m in args.models.split(",") if m]
  with tempfile.TemporaryDirectory() as scratch:
    root = args.workdir or scratch
    rows: list[Row] = []
    floors: dict[str, errors.Breakdown] = {}  # a task's references analysed as a translation
    for task in tasks:
      by_model = {name: run_model(name, task, root, args) for name in models}
      task_rows = [row for name in models for row in by_model[name]]
      if "ar" in by_model:  # each model's last row again at the AR's CPU seconds
        for name in models:
          if name != "ar":
            ar = by_model["ar"][0]
            task_rows += at_ar_cpu_rows(name, task, root, args, ar, by_model[name][-1])
      config = run_config("ar", task, root, args)  # the task's own corpus, not a distilled one
      _, references = test_pairs(config)
      compare(task_rows, references, config.data.target_lang, args.resamples)
      lexicon, markers = target_words(config)
      for r in task_rows:
        r.errors = errors.analyse(r.hypotheses, references, lexicon, markers)
      floor = errors.analyse(references, references, lexicon, markers)
      if floor.nonword:  # real text: the references' own words the training targets lack
        floors[task] = floor
      rows += task_rows
      if len(tasks) > 1:  # each task's rows as soon as they are in: a task takes hours
        print(f"{task} done:\n{table(task_rows)}\n", flush=True)
  if args.tiny:
    print(
      f"tiny: tasks {args.tasks}, models {args.models} of 1+1 layers (d = 32), at most 30 steps"
    )
  print(table(rows))
  print("\nErrors on the test split (padir.evaluation.errors):")
  error_rows = [[r.task, r.model, *r.errors.row()] for r in rows]
  for task, floor in floors.items():  # the non-word floor: rare words, names
    last = max(i for i, row in enumerate(error_rows) if row[0] == task)
    error_rows.insert(last + 1, [task, "(the references)", *floor.row()])
  print(markdown_table(["task", "model", *errors.HEADER], error_rows))
  searched = [r for r in rows if r.search is not None]
  if searched:
    print("\nWhy the DAG beam's translations are wrong (padir.evaluation.dag_search):")
    print(
      markdown_table(
        ["task", "model", *dag_search.HEADER],
        [[r.task, r.model, *r.search.row()] for r in searched],
      )
    )
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump(
        [
          {
            **{
              k: v
              for k, v in dataclasses.asdict(r).items()
              if k not in ("hypotheses", "search", "clock")
            },
            **({"search": r.search.summary()} if r.search else {}),
          }
          for r in rows
        ],
        f,
        indent=2,
      )
  return 0


if __name__ == "__main__":
  sys.exit(main())
