"""Exact Ising testbeds for the PaDIR paper (Sections 2.2-2.4, 3.1; Appendix L.6-L.7).

Models (`ising.model`), samplers as block dynamics over the exact conditional oracle
(`ising.samplers`: k-Gibbs, Glauber = 1-Gibbs, the independent parallel sampler), exact
transition matrices, stationary laws, spectral gaps and hitting-time laws by enumeration
(`ising.exact`), k-pseudolikelihood fitting (`ising.pseudolikelihood`) and its exact asymptotic
covariances (`ising.asymptotics`), the k-MPLE experiments' measurements (`ising.mple`), and the
jobs run by `sample.py` / `train.py` (`ising.jobs`).

Shape letters (array names end in their axes, `x_BN`; one meaning each inside `ising/`):

  B  the batch: chains, or the samples of a data set
  N  sites of the model
  K  sites of a block (block size k)
  L  a block's sites again, for pairs inside it (JKK_BKL)
  C  configurations of a block, 2^k
  P  pairs of a block's sites, k^2
  M  blocks (all C(N, k) k-subsets)
  R  distinct sample rows (a data set compressed for fitting)
  S  states of the model, 2^N
  T  time steps 0..budget
  D  parameters theta = (h, J_i<j)
  E  parameters, a second axis (covariances [D, E])
  W  random words per chain (gmlm.core.randbits)

Names that follow the paper are math, not shapes: the clique C and |C|, the Poincare constant
C_k, the transition matrix P, the mask law p_K, x_K and x_-K (x on and off the block K).
"""

from ising.asymptotics import (
  fisher_information,
  kmple_asymptotics,
  theorem2_check,
  weighted_asymptotics,
)
from ising.exact import (
  detailed_balance_residual,
  hitting_time_survival,
  kgibbs_transition_matrix,
  parallel_transition_matrix,
  poincare_constant,
  spectral_gap,
  stationary_distribution,
  transition_matrix,
)
from ising.model import (
  Ising,
  all_states,
  clique_model,
  exact_distribution,
  in_clique_mode,
  ising,
  local_fields,
  log_potential,
  state_index,
)
from ising.pseudolikelihood import (
  MASK_MODES,
  FitResult,
  exact_samples,
  fit_kmple,
  fit_weighted_mple,
  from_theta,
  kpl_loss,
  sampled_kpl_loss,
  to_theta,
  weighted_pl_loss,
)
from ising.samplers import hitting_times_to_mode, mode_states, random_states, sample

__all__ = [
  "Ising",
  "ising",
  "clique_model",
  "log_potential",
  "local_fields",
  "in_clique_mode",
  "all_states",
  "state_index",
  "exact_distribution",
  "sample",
  "hitting_times_to_mode",
  "random_states",
  "mode_states",
  "kgibbs_transition_matrix",
  "parallel_transition_matrix",
  "transition_matrix",
  "stationary_distribution",
  "spectral_gap",
  "poincare_constant",
  "detailed_balance_residual",
  "hitting_time_survival",
  "to_theta",
  "from_theta",
  "kpl_loss",
  "weighted_pl_loss",
  "sampled_kpl_loss",
  "fit_kmple",
  "fit_weighted_mple",
  "FitResult",
  "exact_samples",
  "MASK_MODES",
  "kmple_asymptotics",
  "weighted_asymptotics",
  "fisher_information",
  "theorem2_check",
]
