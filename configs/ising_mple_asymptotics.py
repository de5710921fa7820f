# Checks PaDIR paper Lemma 1, Theorem 1 and Theorem 2 on the clique Ising model N = |C| = 4,
# h = 0, J in {0.05, 0.3}: (a) the exact asymptotic covariance Tr Sigma_k (sandwich
# H_k^-1 Cov(grad) H_k^-1 by enumeration) against the empirical n E||theta_hat - theta*||^2
# of the k-MPLE at n = 20000 over 100 exact data sets; (b) Sigma_{k+1} <= Sigma_k and
# Sigma_k <= C_k I^-1 with C_k the Poincare constant of k-Gibbs (eigenvalues and traces), also
# on 20 random models. Expected: empirical within ~2 standard errors of Tr Sigma_k; Theorem 1
# and 2 hold to round-off for one random mask per sample (the bound is attained, or nearly, on
# the clique model); with all blocks per sample Theorem 1 can fail slightly on random models.
#
#   python train.py --config configs/ising_mple_asymptotics.py --workdir runs/ising_mple_asymptotics
#
# Smaller / faster: --config.quick=True (n = 2000, 4 repetitions). Time: docs/timings.md. Writes config.json, results.json, report.md,
# asymptotic_traces.png and theorem2_eigenvalues.png.

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.job = "ising.jobs.mple_asymptotics"  # the job train.py runs
  c.n_sites = 4  # N = |C|: the whole model is one clique
  c.field = 0.0  # h_i
  c.couplings = (0.05, 0.3)  # J of eq. (5)
  c.ks = (1, 2, 3, 4)  # k = N is maximum likelihood
  c.n_large = 20000  # n: samples per data set for the empirical n E||theta_hat - theta*||^2
  c.repetitions = 100  # exact data sets per (J, k)
  c.masks = "sampled,all"  # comma-separated subset of sampled (one random block per sample), all
  c.random_models = 20  # also check Theorems 1-2 on this many random models (N = 3..5)
  c.seed = 0  # integer >= 0
  c.quick = False  # True: n = 2000, 4 repetitions (the job's QUICK sizes)
  return c
