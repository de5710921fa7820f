"""benchmarks/padir_family.py's comparison: the AR's validation BLEU at a model's CPU seconds is
the AR's last evaluation reached by then (its CPU per step constant), and the interval against
AR greedy is the paired bootstrap's."""

from padir_util import benchmark_module

from padir.evaluation import metrics

family = benchmark_module("padir_family")


def _row(model, hyps, cpu, steps=100, evals=()):
  return family.Row("t", model, 0.0, hyps, steps, 0.0, cpu, list(evals))


def test_ar_at_equal_cpu_is_its_last_evaluation_reached_by_then():
  refs = ["a b c d", "e f g h", "a c e g"]
  ar = _row(
    "ar", ["a b c d", "e f x h", "a c e g"], 100.0, evals=[(20, 10.0), (40, 30.0), (60, 50.0)]
  )
  ctc = _row("ctc", ["a b c d", "e f g h", "a x e g"], 45.0)  # AR at 1 CPU s a step: step 40
  dag = _row("dag", refs, 10.0)  # before the AR's first evaluation
  family.compare([ar, ctc, dag], refs, "cx", resamples=50)
  assert (ar.ar_at_cpu, ctc.ar_at_cpu, dag.ar_at_cpu) == ("50.00", "30.00", "-")
  p = metrics.paired_bootstrap(ctc.hypotheses, ar.hypotheses, refs, "cx", 50)
  assert ctc.delta == f"{p.delta:+.2f} [{p.low:+.2f}, {p.high:+.2f}]" and ar.delta == "reference"
  assert "| t | ctc | 0.00 | " + ctc.delta in family.table([ar, ctc])


def _args(**over):
  """The benchmark's arguments for a tiny task of 300 pairs."""
  import argparse

  base = dict(dag_upsample=2, ctc_upsample=2.0, pairs=300, tiny=True, grammar_seed=0)
  base.update(steps=10, eval_every=5, patience=2, valid_sentences=8, vocab_size=120)
  return argparse.Namespace(**{**base, **over})


def test_length_limits_keep_every_pair_and_a_held_aside_seed_is_another_task(tmp_path):
  """The limits are the corpus's longest sentence in pieces (EOS included), over every split,
  so no pair is dropped or cut; a grammar seed other than 0 writes a different corpus beside."""
  args = _args(vocab_size=120)
  root = str(tmp_path)
  config = family.run_config("ctc", "sov_long", root, args)
  tok = family.vocab.prepare_vocabulary(config)
  longest = 0
  for split in ("train", "valid", "test"):
    pairs = family.data.read_split(config.data.corpus_dir, split, "en", "cx")
    longest = max(longest, *(len(tok.encode(s)) + 1 for pair in pairs for s in pair))
  assert config.data.max_source_length == config.data.max_target_length
  assert longest <= config.data.max_target_length < longest + 8
  assert config.data.max_target_length % 8 == 0
  args.grammar_seed = 3
  other = family.run_config("ctc", "sov_long", root, args)
  assert other.data.corpus_dir.endswith("sov_long_seed3")
  read = lambda c: open(f"{c.data.corpus_dir}/train.tsv", encoding="utf-8").read()
  assert read(other) != read(config)


def test_a_vocabulary_the_corpus_cannot_fill_is_lowered_to_what_it_allows(tmp_path):
  """run_config asks SentencePiece for --vocab-size pieces; on a corpus that cannot fill them it
  trains the largest size the refusal names (padir.data.vocab's one-line error) instead."""
  args = _args(vocab_size=5000)
  config = family.run_config("ar", "sov", str(tmp_path), args)
  tok = family.vocab.prepare_vocabulary(config)
  assert 16 < config.data.vocab_size < 5000
  assert tok.vocab_size == config.data.vocab_size
