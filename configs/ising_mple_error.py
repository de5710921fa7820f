# Reproduces PaDIR paper Figures 1 and 2 (Section 3.1, Appendix L.6): squared parameter error
# ||theta_hat - theta*||^2 of the k-pseudolikelihood estimator (k = 1..4) versus sample size,
# on the clique Ising model N = |C| = 4, h = 0, J = 0.05 (Figure 1) and J = 0.3 (Figure 2),
# with exact samples; expected: at each n the error decreases with k (Theorem 1) for one random
# mask per sample; with each sample averaged over all blocks the k-curves nearly coincide.
#
#   python train.py --config configs/ising_mple_error.py --workdir runs/ising_mple_error
#
# Smaller / faster: --config.quick=True (2 sample sizes, 3 repetitions). Time: docs/timings.md.
# Writes config.json, results.json, report.md and
# error_vs_samples_J0.05.png, error_vs_samples_J0.3.png.

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.job = "ising.jobs.mple_error"  # the job train.py runs
  c.n_sites = 4  # N = |C|: the whole model is one clique
  c.field = 0.0  # h_i
  c.couplings = (0.05, 0.3)  # J of eq. (5): Figure 1, Figure 2
  c.ks = (1, 2, 3, 4)  # k = N is maximum likelihood
  c.sample_sizes = (100, 200, 500, 1000, 2000, 5000, 10000)  # n of each point of the curves
  c.repetitions = 20  # error bars: +-0.5 std over repetitions (paper: 10)
  c.masks = "sampled,all"  # comma-separated subset of sampled, all
  c.seed = 0  # integer >= 0
  c.quick = False  # True: 2 sample sizes, 3 repetitions
  return c
