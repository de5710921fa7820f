"""The unmasking samplers (`glauber.unmasking`) against a batched PyTorch implementation of the same
samplers on the same weights, in one process: sequences/s and their ratio, the sampler's own
overhead over its forward passes, and the matmul ceiling.

  python benchmarks/unmasking.py [--chains 64,1024] [--tiny]

The model has the default MLM's shape (6 x 384, MLP 1536, vocab 30522; random weights, saved once
by transformers and loaded by both sides), n = 12 free sites after a 3-token prefix (L = 17),
every free site masked at the start, T = 1 over every non-special candidate. Contenders per
sampler: ours (one jitted call) and PyTorch (transformers' BertForMaskedLM, the same algorithm
batched: top-k site choice, the encoder, the head at the chosen rows, torch.multinomial draws).
Glauber (chains.run, n steps) and its PyTorch peer (a random site masked per chain, one forward,
a draw) are the Glauber engine's row beside them.

overhead = (sampler seconds - forward-only seconds) / forward-only seconds, the forward-only run
being the same number of masked-logits calls at the same shapes in one jitted scan (the Glauber
engine's standard: <= 10%). The "padding" column splits it: the same forward-only run at the
head rows the sampler really computes (each scan of unmasking._segments pads its steps' rows up
to the largest in it; the scans are the fewest-rows partition within the compile budget), as a
share of the exact-rows run; what is left of the
overhead is the sampler's own work (site choice, confidence, draws, writes). "rule floor" (the
confidence order only): the forward-only run plus the rule's own arithmetic at every row
(-log sum exp(s - max s) over the 30,522 logits), as a share of the forward-only run: what any
implementation of that order pays, PyTorch's included; the part of the overhead above it is
ours to remove. The GEMM line times XLA's and PyTorch's float32 matmul at the
model's shapes ([B*L, 384] x [384, 384 | 1536], [B*L, 1536] x [1536, 384], [B, 384] x
[384, 30522]), weights them by the FLOPs one forward pass spends in each, and prints the ratio
of the two rates: the sequences/s ratio that matmul speed alone allows. Every timing is the
fastest of --repeats calls after a warm-up (compile) call; a sampler's contenders (ours,
PyTorch, the forward-only runs) are called in rounds, one call each a round, so that a machine
whose speed drifts during the run (this 2-core VM's does, by 10-15% over minutes) moves them
alike and the overhead is not the drift between two blocks of calls. --tiny: a 2 x 32 model with a
2,048-token vocabulary, for the smoke test; --single_thread: both frameworks on one thread.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time

import numpy as np

N, PREFIX = 12, (2000, 2001, 2002)
CLS, SEP, MASK = 101, 102, 103
SHAPES = {
  "default": dict(
    hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536
  ),
  "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
}
VOCAB = 30522
TINY_VOCAB = 2048


def peak_rss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def best_seconds(fn, repeats: int) -> float:
  fn()  # compile / warm up
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - t0)
  return best


def best_interleaved(fns: dict, repeats: int) -> dict:
  """The fastest of `repeats` calls of each function after one warm-up call each, the calls
  taken in rounds (every function once a round): a machine that speeds up or slows down during
  the run moves every contender alike, so their differences (the overhead) do not take the
  drift between two blocks of calls."""
  for fn in fns.values():
    fn()  # compile / warm up
  best = {name: float("inf") for name in fns}
  for _ in range(repeats):
    for name, fn in fns.items():
      t0 = time.perf_counter()
      fn()
      best[name] = min(best[name], time.perf_counter() - t0)
  return best


def gemm_rates(B: int, L: int, D: int, F: int, V: int, repeats: int) -> dict:
  """GF/s of XLA and PyTorch at the model's matmul shapes, FLOP-weighted over one forward."""
  import jax
  import jax.numpy as jnp
  import torch

  rng = np.random.default_rng(0)
  # (M, K, N, how many of it one forward pass runs per layer / per pass)
  shapes = [(B * L, D, D, 4), (B * L, D, F, 1), (B * L, F, D, 1), (B, D, V, 0)]
  dot = jax.jit(jnp.dot)
  out = {"xla": 0.0, "torch": 0.0}
  weights = []
  seconds = {"xla": [], "torch": []}
  for M, K, Nn, per_layer in shapes:
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, Nn), dtype=np.float32)
    aj, bj = jnp.asarray(a), jnp.asarray(b)
    at, bt = torch.from_numpy(a), torch.from_numpy(b)
    flops = 2 * M * K * Nn
    seconds["xla"].append(best_seconds(lambda: dot(aj, bj).block_until_ready(), repeats) / flops)
    seconds["torch"].append(best_seconds(lambda: torch.mm(at, bt), repeats) / flops)
    weights.append(flops * (per_layer or 1))
  total = sum(weights)
  for k in out:  # FLOP-weighted: total FLOPs / total seconds
    out[k] = total / sum(w * s for w, s in zip(weights, seconds[k])) / 1e9
  out["per_shape"] = [
    {"shape": f"{M}x{K}x{Nn}", "xla": 1e-9 / sx, "torch": 1e-9 / st}
    for (M, K, Nn, _), sx, st in zip(shapes, seconds["xla"], seconds["torch"])
  ]
  return out


def torch_sampler(model, tokens, counts, order, cands, generator, offset):
  """The same sampler batched in PyTorch: returns the final tokens."""
  import torch

  tokens = tokens.clone()
  B = tokens.shape[0]
  idx = torch.arange(N, dtype=torch.float32)
  for k in counts:
    masked = tokens[:, offset : offset + N] == MASK
    score = torch.rand(B, N, generator=generator) if order == "random" else -idx.expand(B, N)
    score = torch.where(masked, score, torch.tensor(-float("inf")))
    rows = int(masked.sum(1).max()) if order == "confidence" else k
    sites = torch.topk(score, rows, dim=1).indices
    h = model.bert(input_ids=tokens).last_hidden_state
    h = torch.gather(h, 1, (offset + sites)[..., None].expand(-1, -1, h.shape[-1]))
    logp1 = torch.log_softmax(model.cls(h)[..., cands], -1)
    if order == "confidence":
      top = torch.argsort(-logp1.max(-1).values, dim=1, stable=True)[:, :k]
      sites = torch.gather(sites, 1, top)
      logp1 = torch.gather(logp1, 1, top[..., None].expand(-1, -1, logp1.shape[-1]))
    draw = torch.multinomial(logp1.exp().reshape(-1, logp1.shape[-1]), 1, generator=generator)
    tokens.scatter_(1, offset + sites, cands[draw.reshape(B, -1)])
  return tokens


def torch_glauber(model, tokens, steps, cands, generator, offset):
  import torch

  tokens = tokens.clone()
  B = tokens.shape[0]
  rows = torch.arange(B)
  for _ in range(steps):
    site = offset + torch.randint(N, (B,), generator=generator)
    x = tokens.clone()
    x[rows, site] = MASK
    h = model.bert(input_ids=x).last_hidden_state[rows, site]
    p = torch.softmax(model.cls(h)[:, cands], -1)
    tokens[rows, site] = cands[torch.multinomial(p, 1, generator=generator)[:, 0]]
  return tokens


def forward_only(model, tokens_BL, rows_per_step: tuple[int, ...], confidence: bool = False):
  """The sampler's forward passes alone: one masked-logits call per step at that step's rows
  (a scan per distinct row count; the carry feeds the tokens so no call is hoisted). With
  confidence=True, also the confidence rule's own arithmetic at every row (its max
  probability, -log sum exp(s - max s) over the vocabulary: two passes over each row, 20% cheaper
  than max - logsumexp's three): the floor any implementation of that rule pays on top of the
  forward passes."""
  import collections

  import jax
  import jax.numpy as jnp

  from gmlm.nn import masked_logits

  B = tokens_BL.shape[0]
  positions = jnp.broadcast_to(len(PREFIX) + 1 + jnp.arange(N, dtype=jnp.int32), (B, N))
  acc = jnp.float32(0)
  for r, count in sorted(collections.Counter(rows_per_step).items()):

    def body(a, _, r=r):
      x = tokens_BL + (a > 1e30).astype(tokens_BL.dtype)
      logits = masked_logits(model, x, positions[:, :r])
      if confidence:  # log p_max = -log sum exp(s - max s): the cheapest form, two passes
        m = logits.max(-1, keepdims=True)
        return a - jnp.log(jnp.exp(logits - m).sum(-1)).sum(), None
      return a + logits[..., 0].sum(), None

    acc, _ = jax.lax.scan(body, acc, None, length=count)
  return acc


def main() -> None:
  p = argparse.ArgumentParser()
  p.add_argument("--chains", default="", help="chain counts, e.g. 64,1024 (--tiny: 8,16)")
  p.add_argument("--repeats", type=int, default=2)
  p.add_argument(
    "--tiny",
    action="store_true",
    help="a 2 x 32 model, vocab 2048, 8 and 16 chains unless --chains (smoke)",
  )
  p.add_argument(
    "--single_thread",
    action="store_true",
    help="XLA and PyTorch on one thread each (on a loaded machine, OpenMP / Eigen thread pools "
    "that wait for each other measure the load, not the code)",
  )
  a = p.parse_args()
  if a.single_thread:  # before jax is imported
    import os

    flags = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flags).strip()
  import jax
  import torch
  import transformers

  from glauber import chains, unmasking
  from glauber.layout import Layout
  from gmlm import nn as gm

  torch.set_grad_enabled(False)
  if a.single_thread:
    torch.set_num_threads(1)
  shape = SHAPES["tiny" if a.tiny else "default"]
  chains_arg = a.chains or ("8,16" if a.tiny else "64,1024")
  chain_counts = [int(c) for c in chains_arg.split(",")]
  V = TINY_VOCAB if a.tiny else VOCAB
  torch.manual_seed(0)
  with tempfile.TemporaryDirectory() as d:
    transformers.BertForMaskedLM(
      transformers.BertConfig(vocab_size=V, max_position_embeddings=64, **shape)
    ).save_pretrained(d)
    ours_model = gm.load_model(d)
    theirs = transformers.BertForMaskedLM.from_pretrained(d).eval()
  lay = Layout(PREFIX, N, CLS, SEP, MASK)
  cands_np = np.arange(999, V)
  spec = chains.make_spec(cands_np, V, lay, 1.0)
  cands = torch.from_numpy(cands_np).long()
  L, D, F = lay.length, shape["hidden_size"], shape["intermediate_size"]
  print(
    f"BERT {shape['num_hidden_layers']} x {D} (MLP {F}, vocab {V}, random weights), n = {N}, "
    f"L = {L}, float32, torch {torch.__version__} ({torch.get_num_threads()} threads), jax "
    f"{jax.__version__}"
  )
  samplers = {
    "ancestral random": unmasking.Sampler(),
    "ancestral confidence": unmasking.Sampler(order="confidence"),
    "parallel S=4 cosine confidence": unmasking.Sampler(
      steps=4, schedule="cosine", order="confidence"
    ),
  }
  fwd = jax.jit(forward_only, static_argnums=(2, 3))
  print(
    f"{'sampler':<32} {'chains':>6} | {'ours seq/s':>10} {'torch seq/s':>11} {'ratio':>6} | "
    f"{'overhead':>8} | {'padding':>8} | {'rule floor':>10}"
  )
  for B in chain_counts:
    gemm = gemm_rates(B, L, D, F, V, a.repeats)
    start = unmasking.all_masked(spec, B)
    start_t = torch.from_numpy(np.array(start.tokens_BL)).long()
    gen = torch.Generator().manual_seed(0)
    for name, s in samplers.items():
      counts = s.counts(N)
      left = N - np.concatenate([[0], np.cumsum(counts)[:-1]])  # masked before each step
      rows = tuple(int(r) for r in (left if s.order == "confidence" else counts))
      padded_rows = tuple(
        r for r, _, ks in unmasking._segments(counts, N, s.order) for _ in ks
      )  # the head rows the sampler's scans compute

      def torch_run(s=s, counts=counts):
        with torch.inference_mode():
          torch_sampler(theirs, start_t, counts, s.order, cands, gen, lay.offset)

      fns = {
        "ours": lambda s=s: jax.block_until_ready(
          unmasking.run(jax.random.key(0), ours_model, spec, start, s)[0].tokens_BL
        ),
        "forward": lambda rows=rows: fwd(ours_model, start.tokens_BL, rows).block_until_ready(),
        "torch": torch_run,
      }
      if padded_rows != rows:
        fns["padded"] = lambda r=padded_rows: fwd(
          ours_model, start.tokens_BL, r
        ).block_until_ready()
      if s.order == "confidence":  # the rule's arithmetic at the exact rows
        fns["ruled"] = lambda rows=rows: fwd(
          ours_model, start.tokens_BL, rows, True
        ).block_until_ready()
      best = best_interleaved(fns, a.repeats)
      ours, forward, torch_s = best["ours"], best["forward"], best["torch"]
      padded = best.get("padded", forward)
      floor = "-"
      if "ruled" in best:
        floor = f"{(best['ruled'] - forward) / forward:.1%}"
      print(
        f"{name:<32} {B:>6} | {B / ours:>10.1f} {B / torch_s:>11.1f} {torch_s / ours:>5.2f}x | "
        f"{(ours - forward) / forward:>7.1%} | {(padded - forward) / forward:>7.1%} | {floor:>10}"
      )
    # The Glauber engine's row: n plain steps.
    full = chains.init_state(lay.sequences(np.random.default_rng(0).choice(cands_np, (B, N))))
    full_t = torch.from_numpy(np.array(full.tokens_BL)).long()
    ours = best_seconds(
      lambda: jax.block_until_ready(
        chains.run(jax.random.key(0), ours_model, spec, full, 1, N)[0].tokens_BL
      ),
      a.repeats,
    )
    with torch.inference_mode():
      torch_s = best_seconds(
        lambda: torch_glauber(theirs, full_t, N, cands, gen, lay.offset), a.repeats
      )
    print(
      f"{'glauber (n steps)':<32} {B:>6} | {B / ours:>10.1f} {B / torch_s:>11.1f} {torch_s / ours:>5.2f}x |"
    )
    print(
      f"GEMM at the model's shapes, {B} chains: XLA {gemm['xla']:.1f} GF/s, PyTorch "
      f"{gemm['torch']:.1f} GF/s: ceiling ratio ours/torch {gemm['xla'] / gemm['torch']:.2f}x "
      + "("
      + ", ".join(f"{g['shape']} {g['xla']:.0f}/{g['torch']:.0f}" for g in gemm["per_shape"])
      + ")"
    )
  print(f"peak RSS {peak_rss_mb():.0f} MB (both frameworks, one process)")


if __name__ == "__main__":
  main()
