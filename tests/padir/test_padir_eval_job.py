"""The evaluation job (configs/padir_eval.py): on tiny PaDIR and AR checkpoints it writes
report.md (the Table L.1 row per decoder, the attention tables) and results.json whose numbers
match an independent recomputation; a missing checkpoint is refused before anything is written;
a rerun reuses the finished cells."""

import json
import os

import pytest
from flax import nnx
from test_padir_train import _config

from configs import padir_eval
from gmlm.checkpoints import Checkpoints
from gmlm.checks import ConfigError, UserError
from gmlm.runs import RunDir
from padir import metrics, restore, vocab
from padir import model as model_lib
from padir.jobs import evaluate as eval_job


@pytest.fixture(scope="module")
def runs(toy_corpus, tmp_path_factory):
  """A PaDIR and an AR run directory as training leaves them (config.json, the vocabulary,
  checkpoints/1 with the parameters), of randomly initialized models: training them (~1 CPU-min
  of compilation) would change nothing this test checks."""
  out = []
  for decoder in ("nar", "ar"):
    workdir = str(tmp_path_factory.mktemp(f"run_{decoder}"))
    c = _config(toy_corpus, steps=2)
    c.model.decoder = decoder
    tok = vocab.prepare_vocabulary(c)
    model = model_lib.Transformer(
      model_lib.ModelConfig.from_run_config(c, tok.vocab_size), rngs=nnx.Rngs(0)
    )
    RunDir(workdir, c).close()  # writes config.json
    ckpt = Checkpoints(os.path.join(workdir, restore.CHECKPOINTS))
    ckpt.save(1, {"params": nnx.state(model, nnx.Param)})
    ckpt.close()
    out.append(workdir)
  return out


def _eval_config(runs):
  c = padir_eval.get_config()
  c.update(
    checkpoints=",".join(runs),
    max_sentences=6,
    padir_passes=(2,),
    num_lengths=2,
    beam_size=2,
    batch_size=4,
    latency_sentences=2,
    attention_sentences=5,
  )
  return c


def test_the_job_writes_the_tables_and_resumes(runs, tmp_path, toy_corpus):
  workdir = tmp_path / "eval"
  results = eval_job.run(_eval_config(runs), str(workdir))
  nar, ar = results["models"]
  assert (nar["kind"], ar["kind"]) == ("nar", "ar")
  assert [r["decoder"] for r in nar["rows"]] == ["padir-2", "padir-2-length-prior-reset"]
  assert [r["decoder"] for r in ar["rows"]] == ["ar-greedy", "ar-beam2"]
  assert [r["hypotheses"] for r in nar["rows"] + ar["rows"]] == [2, 2, 1, 2]
  assert 1 <= nar["rows"][0]["passes"] <= 2 and ar["rows"][0]["passes"] == 16
  # Each row holds scores in range with their signatures and its first examples against the
  # split's references (the scores themselves: test_stutter_of_the_job_is_the_metric).
  with open(os.path.join(toy_corpus, "test.tsv"), encoding="utf-8") as f:
    refs = [line.rstrip("\n").split("\t")[1] for line in f][:6]
  for row in nar["rows"] + ar["rows"]:
    assert 0 <= row["bleu"] <= 100 and 0 <= row["chrf"] <= 100 and 0 <= row["stutter"] <= 1
    assert row["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert [e["reference"] for e in row["examples"]] == refs[:3]
    t = row["timing"]
    assert 0 < t["p50_ms"] <= t["p99_ms"] and t["sentences"] == 2 and t["throughput"] > 0
  # Attention: every adjacent content pair of the 5 analysed outputs is counted once.
  stats = nar["attention"]
  pairs = stats["cross"]["stutter"]["pairs"] + stats["cross"]["other"]["pairs"]
  assert stats["self"]["other"]["pairs"] == stats["cross"]["other"]["pairs"] and pairs > 0
  report = (workdir / "report.md").read_text()
  assert "| model | decoder | # hyp. | passes | BLEU | chrF | stutter | p50 ms | p99 ms |" in report
  assert "(Table 4)" in report and "(Table 5)" in report
  assert (workdir / "quality_speed.png").is_file() and (workdir / "attention.png").is_file()
  assert json.loads((workdir / "results.json").read_text()) == results
  # A rerun reads the cells back instead of decoding again.
  cell = workdir / "cells" / "checkpoint_0.json"
  stored = json.loads(cell.read_text())
  stored["rows"][0]["bleu"] = -1.0
  cell.write_text(json.dumps(stored))
  again = eval_job.run(_eval_config(runs), str(workdir))
  assert again["models"][0]["rows"][0]["bleu"] == -1.0
  assert again["models"][1] == ar


def test_stutter_of_the_job_is_the_metric(runs, tmp_path):
  """The stored stutter equals padir.metrics' on the examples when all sentences are examples."""
  c = _eval_config(runs[1:])
  c.max_sentences = 3
  c.padir_passes = (1,)
  results = eval_job.run(c, str(tmp_path / "eval"))
  for row in results["models"][0]["rows"]:
    hyps = [e["hypothesis"] for e in row["examples"]]
    refs = [e["reference"] for e in row["examples"]]
    assert row["stutter"] == metrics.stutter_rate(hyps, refs)
    assert row["bleu"] == metrics.bleu(hyps, refs, "es").score


def test_missing_or_malformed_checkpoints_are_refused_before_writing(tmp_path, runs):
  c = _eval_config([runs[0], str(tmp_path / "nothing")])
  with pytest.raises(UserError, match="nothing'\\] hold no trained run"):
    eval_job.run(c, str(tmp_path / "eval"))
  c.checkpoints = f"{runs[0]},,{runs[1]}"
  with pytest.raises(ConfigError, match="config.checkpoints="):
    eval_job.run(c, str(tmp_path / "eval"))
  assert not (tmp_path / "eval").exists()
