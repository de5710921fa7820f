"""Rejection-free (n-fold way) vs plain batched Glauber on the embedded default English MLM.

Chains start from English sentences (n free sites after [CLS]). The temperature is the largest
on a grid whose median stay probability (1/n) Σ_i p_i^T(x_i | x_-i) is >= 0.99 after a burn-in;
then both modes run from the same burnt-in states in this one process: plain Glauber for
--plain_steps steps, rejection-free for --steps steps per chain (exact in law, the long runs
where it pays). Simulated steps/s = chains x steps / seconds (compilation excluded).

  python benchmarks/glauber_rejection_free.py [--model default] [--chains 8] [--n 16]
"""

from __future__ import annotations

import argparse
import resource
import time

import jax
import numpy as np

TEXTS = [
  "the river flows through the old town and past the church before it reaches the sea .",
  "in the summer the children play in the park near the school until it gets dark .",
  "the government announced new laws on tuesday after a long debate in parliament .",
  "he studied music at the university and later became a famous composer in vienna .",
]


def peak_rss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
  p = argparse.ArgumentParser()
  p.add_argument("--model", default="default")
  p.add_argument("--chains", type=int, default=8)
  p.add_argument("--n", type=int, default=16, help="free sites")
  p.add_argument("--plain_steps", type=int, default=64)
  p.add_argument("--steps", type=int, default=20000, help="rejection-free steps per chain")
  p.add_argument("--burn_in", type=int, default=2000)
  p.add_argument("--temperatures", default="1.0,0.7,0.5,0.4,0.3,0.2,0.1")
  a = p.parse_args()

  import glauber.models as gm
  from glauber import chains, init_states, nfold
  model, tok = gm.load(a.model)
  cands = chains.candidate_ids(tok, model.config.vocab_size)
  lay = init_states.layout(tok, a.n, "", init_states.max_sequence_length(model))
  x0 = init_states.from_text(tok, lay, TEXTS, a.chains)
  spec = lambda T: chains.make_spec(cands, model.config.vocab_size, lay.mask_id, lay.offset,
                                    a.n, T)
  print(f"model {a.model}, {a.chains} chains, n = {a.n} free sites, float32, "
        f"{jax.device_count()} {jax.default_backend()} device(s)", flush=True)

  chosen = None
  for T in (float(t) for t in a.temperatures.split(",")):
    state = chains.init_state(x0)
    state, _ = nfold.run(jax.random.key(1), model, spec(T), state, 1, a.burn_in)  # exact burn-in
    _, median = nfold.choose_mode(model, spec(T), state.tokens_BL)
    print(f"T = {T}: median stay probability after {a.burn_in} steps {median:.4f}", flush=True)
    if median >= 0.99:
      chosen = T
      break
  if chosen is None:
    raise SystemExit("no temperature on the grid reaches a median stay probability of 0.99")
  T, s = chosen, spec(chosen)
  start = chains.init_state(state.tokens_BL)
  for i in range(a.chains):
    print("  start:", tok.decode(state.tokens_BL[i, lay.offset:lay.offset + a.n]))

  out, _ = chains.run(jax.random.key(2), model, s, start, 1, 2)  # compile
  jax.block_until_ready(out.tokens_BL)
  t0 = time.perf_counter()
  out, _ = chains.run(jax.random.key(3), model, s, start, 1, a.plain_steps)
  jax.block_until_ready(out.tokens_BL)
  plain = a.chains * a.plain_steps / (time.perf_counter() - t0)

  out, _ = nfold.run(jax.random.key(4), model, s, start, 1, 1)  # compile
  jax.block_until_ready(out.tokens_BL)
  t0 = time.perf_counter()
  out, rec = nfold.run(jax.random.key(5), model, s, start, 1, a.steps)
  jax.block_until_ready(out.tokens_BL)
  sec = time.perf_counter() - t0
  fast = a.chains * a.steps / sec
  jumps = np.asarray(rec["changes_B"])
  print(f"T = {T}: plain {plain:.1f} steps/s ({a.plain_steps} steps x {a.chains} chains); "
        f"rejection-free {fast:.1f} steps/s ({a.steps} steps x {a.chains} chains in {sec:.1f} s, "
        f"{int(rec['iterations'])} iterations, jumps per chain {jumps.min()}-{jumps.max()}) "
        f"= {fast / plain:.1f}x plain; peak RSS {peak_rss_mb():.0f} MB")
  for i in range(min(a.chains, 4)):
    print("  end:", tok.decode(out.tokens_BL[i, lay.offset:lay.offset + a.n]))


if __name__ == "__main__":
  main()
