"""Held-out fill-mask accuracy of a masked LM (default: the embedded English MLM).

  python sample.py --config configs/mlm_eval.py --workdir runs/mlm_eval [--config.model=DIR]

Needs the offline English text (`pip install --no-deps --target .whl gensim==4.3.3`). Masks one
random non-special token in each held-out sentence (the last 10% of the Wikipedia pages and of
the news articles, never trained on) and reports top-1 / top-5 over the candidate vocabulary
and the mean log-probability, per source and overall. Time: docs/timings.md.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.job = "glauber.jobs.mlm_eval"  # the job sample.py runs
  c.model = "default"  # "default", an HF id or a local BertForMaskedLM directory
  c.dtype = "float32"  # compute dtype; float32 for the table's figures
  c.allow_pickle = False  # True: also read a pytorch_model.bin (a pickle can run code)
  c.sources = ("wiki", "news")  # held-out sentences of these sources: "wiki", "news" or both
  c.max_sentences = 0  # per source; 0 = all
  c.batch_size = 64  # sentences per forward call
  c.seed = 0  # integer >= 0: which token of each sentence is masked
  return c
