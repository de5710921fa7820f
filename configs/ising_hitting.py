"""PaDIR Figure L.3 (Appendix L.7): k-Gibbs reaches the large mode, the parallel sampler does not.

  python sample.py --config configs/ising_hitting.py --workdir runs/ising_hitting

Clique model of eq. (5) with N = 10, |C| = 4, h_i = 5.0 (and the Assumption-5 variant with
fields only inside C); chains start in R_-1 (eq. 7) and we count the steps to first reach R_1
(eq. 6) within a budget of 1000, for k-Gibbs with every k = 1..10 and for the independent
parallel sampler, over a grid of couplings J. Expected: larger k reaches R_1 faster and larger
J is slower for k < |C|; the parallel sampler never reaches R_1 for large J (Proposition 5).
Simulated means agree with the exact law of the hitting time (dashed). Time: docs/timings.md.
"""

from ml_collections import ConfigDict


def get_config() -> ConfigDict:
  c = ConfigDict()
  c.job = "ising.jobs.hitting"  # the job sample.py runs
  c.seed = 0  # integer >= 0: the same seed gives the same chains
  c.n = 10  # N sites
  c.clique_size = 4  # |C|: the clique's sites
  c.field = 5.0  # h of eq. (5)
  # fields at every site (the paper's figure) and only inside C (Assumption 5)
  c.variants = ("all_fields", "clique_fields")
  c.couplings = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0)  # J grid: larger J is slower for k < |C|
  c.ks = tuple(range(1, 11))  # k-Gibbs block sizes k = 1..10 (k = 1 is Glauber)
  c.include_parallel = True  # also the independent parallel sampler (eq. 4)
  c.num_chains = 200  # repetitions per (J, sampler); the paper used 10
  c.budget = 1000  # step budget: a chain that has not reached R_1 by then counts as not hit
  c.exact = True  # exact hitting-time law from the transition matrix (N <= 12)
  return c
