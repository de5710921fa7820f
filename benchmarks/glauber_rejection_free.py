"""Rejection-free vs plain batched Glauber on the embedded default English MLM.

Chains start from English sentences (n free sites after [CLS]) and first descend to a local mode
with T = 0 Glauber steps (a trap: every site holds its argmax). The temperature is the largest
on a grid whose median stay probability (1/n) Σ_i p_i^T(x_i | x_-i) there is >= 0.99; after an
exact burn-in at that T both modes run from the same states in this one process: plain Glauber
for --plain_steps steps, rejection-free for --steps steps per chain (exact in law; the long
runs where it pays). Simulated steps/s = chains x steps / seconds (compilation excluded).
(At T = 1 this MLM's median stay is ~0.14, and even T = 0.1 mixes between near-tied words,
median ~0.97 after 500 steps: the slow regime is low T near a mode.)

  python benchmarks/glauber_rejection_free.py [--model default] [--chains 8] [--n 16]

Measured 2026-11-21 (2 CPU cores, ~6 minutes): T = 0.07 (median stay 0.9909 at the T = 0 mode,
0.9963 after burn-in). Plain batched 154 steps/s (8 chains; 171-187 in other runs), 33 (1
chain). Rejection-free, 20,000 steps per chain, finished chains retiring down to one:
  - without the memo: 1,717 steps/s = 11.1x plain batched (972 iterations: one chain jumps 971
    times between near-tied words, another 4 times; the population's speed-up without a memo is
    bounded by 1 / (n * mean_b(1 - s_b)): the mean, not the median, stay probability sets it);
  - with the default memo (the conditionals of each chain's 8 most recently used states):
    3,806 steps/s = 24.7x plain batched, 1,631 iterations served from the memo. Peak RSS 1.58 GB.
Chain by chain (memo on): 1,417-214,303 steps/s, median chain 48,240 = 313x plain batched. The
chains sit in repetition traps ("the temple belongs to the temple of the temple the temple, and
the temple."). Before the memo (same day): 8.8x batched, 3.0x without retiring finished chains.
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
  "the government announced new laws on tuesday after a long and bitter debate in the parliament .",
  "he studied music at the university in berlin and later became a famous composer in vienna .",
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
  p.add_argument(
    "--granule",
    type=int,
    default=1,
    help="smallest batch finished chains retire down to (rejection_free.run)",
  )
  p.add_argument("--descent_steps", type=int, default=400, help="T = 0 steps to a local mode")
  p.add_argument("--temperatures", default="0.3,0.2,0.15,0.1,0.07,0.05,0.03")
  a = p.parse_args()

  from glauber import chains, init_states, rejection_free
  from glauber.layout import Layout, max_sequence_length
  from glauber.oracle import load_mlm

  model, tok = load_mlm(a.model)
  cands = chains.candidate_ids(tok, model.config.vocab_size)
  lay = Layout.from_tokenizer(tok, a.n, "", max_sequence_length(model))
  x0 = init_states.from_text(tok, lay, TEXTS, a.chains)
  spec = lambda T: chains.make_spec(cands, model.config.vocab_size, lay, T)
  print(
    f"model {a.model}, {a.chains} chains, n = {a.n} free sites, float32, "
    f"{jax.device_count()} {jax.default_backend()} device(s)",
    flush=True,
  )

  mode_state, _ = chains.run(
    jax.random.key(0), model, spec(0.0), chains.init_state(x0), 1, a.descent_steps
  )
  chosen = None
  for T in (float(t) for t in a.temperatures.split(",")):
    _, median = rejection_free.choose_mode(model, spec(T), mode_state.tokens_BL)
    print(f"T = {T}: median stay probability at the T = 0 mode {median:.4f}", flush=True)
    if median >= 0.99:
      chosen = T
      break
  if chosen is None:
    raise SystemExit("no temperature on the grid reaches a median stay probability of 0.99")
  state, _ = rejection_free.run(
    jax.random.key(1), model, spec(chosen), chains.init_state(mode_state.tokens_BL), 1, a.burn_in
  )  # exact burn-in at the chosen T
  _, median = rejection_free.choose_mode(model, spec(chosen), state.tokens_BL)
  print(f"T = {chosen}: median stay probability after a {a.burn_in}-step burn-in {median:.4f}")
  T, s = chosen, spec(chosen)
  start = chains.init_state(state.tokens_BL)
  for i in range(a.chains):
    print("  start:", tok.decode(state.tokens_BL[i, lay.offset : lay.offset + a.n]))

  out, _ = chains.run(jax.random.key(2), model, s, start, 1, 2)  # compile
  jax.block_until_ready(out.tokens_BL)
  t0 = time.perf_counter()
  out, _ = chains.run(jax.random.key(3), model, s, start, 1, a.plain_steps)
  jax.block_until_ready(out.tokens_BL)
  plain = a.chains * a.plain_steps / (time.perf_counter() - t0)

  out, _ = rejection_free.run(jax.random.key(4), model, s, start, 1, 1)  # compile
  jax.block_until_ready(out.tokens_BL)
  size = a.chains  # compile the batch sizes finished chains retire down to, outside the timing
  while size >= a.granule:
    out, _ = rejection_free.run(
      jax.random.key(4), model, s, chains.init_state(start.tokens_BL[:size]), 1, 1
    )
    jax.block_until_ready(out.tokens_BL)
    size //= 2
  for memo in (0, None):  # without the memo of recent states, then with the default one
    t0 = time.perf_counter()
    out, rec = rejection_free.run(
      jax.random.key(5), model, s, start, 1, a.steps, granule=a.granule, memo=memo
    )
    jax.block_until_ready(out.tokens_BL)
    sec = time.perf_counter() - t0
    fast = a.chains * a.steps / sec
    jumps, hits = np.asarray(rec.changes_B), np.asarray(rec.memo_hits_B)
    label = "no memo" if memo == 0 else f"memo of {rejection_free.memo_slots(s, a.chains)} states"
    print(
      f"T = {T}: plain {plain:.1f} steps/s ({a.plain_steps} steps x {a.chains} chains); "
      f"rejection-free, {label}: {fast:.1f} steps/s ({a.steps} steps x {a.chains} chains in "
      f"{sec:.1f} s, {int(rec.iterations)} iterations, jumps per chain "
      f"{jumps.min()}-{jumps.max()}, memo hits {hits.sum()}) = {fast / plain:.1f}x plain; "
      f"peak RSS {peak_rss_mb():.0f} MB",
      flush=True,
    )
  for i in range(min(a.chains, 4)):
    print("  end:", tok.decode(out.tokens_BL[i, lay.offset : lay.offset + a.n]))

  # Batched, every chain iterates until the chain with the most jumps is done: one chain that
  # flips between two near-tied words sets the pace. Chain by chain, each pays for its own jumps.
  one = lambda i: chains.init_state(start.tokens_BL[i : i + 1])
  out, _ = chains.run(jax.random.key(2), model, s, one(0), 1, 2)  # compile
  jax.block_until_ready(out.tokens_BL)
  t0 = time.perf_counter()
  out, _ = chains.run(jax.random.key(3), model, s, one(0), 1, a.plain_steps)
  jax.block_until_ready(out.tokens_BL)
  plain_one = a.plain_steps / (time.perf_counter() - t0)
  out, _ = rejection_free.run(jax.random.key(4), model, s, one(0), 1, 1)  # compile
  jax.block_until_ready(out.tokens_BL)
  total, per_chain = 0.0, []
  for i in range(a.chains):
    t0 = time.perf_counter()
    out, rec = rejection_free.run(jax.random.key(6 + i), model, s, one(i), 1, a.steps)
    jax.block_until_ready(out.tokens_BL)
    sec = time.perf_counter() - t0
    total += sec
    per_chain.append((a.steps / sec, int(rec.iterations)))
  rates = np.array([r for r, _ in per_chain])
  print(
    f"chain by chain: plain {plain_one:.1f} steps/s (1 chain); rejection-free per chain "
    f"{rates.min():.0f}-{rates.max():.0f} steps/s (median {np.median(rates):.0f}, jumps "
    f"{min(j for _, j in per_chain)}-{max(j for _, j in per_chain)}); all {a.chains} chains "
    f"one after another {a.chains * a.steps / total:.1f} steps/s = "
    f"{a.chains * a.steps / total / plain:.1f}x plain batched ({a.chains} chains), "
    f"{a.chains * a.steps / total / plain_one:.1f}x plain on one chain; median chain "
    f"{np.median(rates) / plain:.1f}x plain batched; peak RSS {peak_rss_mb():.0f} MB"
  )


if __name__ == "__main__":
  main()
