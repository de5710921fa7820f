"""Paper A's measurements, a module per protocol, each built on the engine (`glauber.chains`,
`glauber.scoring`, ...) and never imported by it.

Each has `measure` -> JSON-able results and `section` -> a report section: `rectangle` (the
rectangle test of incompatibility), `influence` (α_ij, ω_ij and the contraction temperature),
`margins` (score margins and Theorem 8's exit bound), `drift` (the drift certificate), `exact`
(the restricted chain enumerated exactly), `traps`, `semantic_drift`, `topics`, `phase_diagram`
(coupling over a (T, n) grid) and `basins`; `common` holds what they share (config reading,
pyplot). Shape letters: `glauber`'s docstring.
"""
