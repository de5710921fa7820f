"""Rectangle test throughput: our batched path vs a per-edge PyTorch loop on the same weights.

  python benchmarks/rectangle.py [--rectangles 128] [--batch_size 32] [--torch_rectangles 8]
  python benchmarks/rectangle.py --tiny            # a smoke run on a 2 x 32 model

A BERT-base-shaped BertForMaskedLM (12 x 768, vocab 30522) with random weights is built in
PyTorch (transformers), saved, and loaded into our JAX BERT: both sides hold the same weights,
in one process. Passages are random token sequences ([CLS] w_1..w_m [SEP], m = --length - 2).

  ours:  glauber.measures.rectangle.draw: per batch of rectangles one masked-logits call for the
         replacements (x00 masked at i and at j) and one for the four edges' contexts.
  torch: per rectangle, one forward per conditional: x00 masked at i and at j (top-k, the
         replacements), then one forward per edge log-ratio (4), each a single sequence.

Work: ours runs 4 one-mask rows a rectangle (the last layer and the head at the masked row
only), torch 6 forwards (every layer and the head at every position, as transformers does). The
ratio is (torch's FLOPs per rectangle / ours) x (ours' GFLOP/s / torch's); both rates are printed
beside the float32 matmul peak measured in the same run, and with them the ceiling of the ratio
on this machine: torch's FLOPs over ours, times the peak over torch's rate (ours at 100% peak).

The torch loop measures ours' rectangles (same sites and replacements), so the two dR agree
(printed as a parity check). Reports rectangles/s of each, their ratio, and peak memory: the
process's peak RSS after each side (monotone: torch's is what it added), and on an accelerator
the JAX / torch device peaks. On a CPU shared with other work, torch's intra-op threads can
stall on busy cores (a 2 x 32 forward measured 3 ms with 1 thread, 40-400 ms with 2):
--torch_threads sets them; time on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from mlm_forward import (  # noqa: E402  (benchmarks/ is sys.path[0])
  BERT_BASE,
  flops_per_sequence,
  matmul_peak_gflops,
  peak_rss_mb,
)

TINY = dict(
  vocab_size=1000,
  hidden_size=32,
  num_hidden_layers=2,
  num_attention_heads=4,
  intermediate_size=64,
  max_position_embeddings=64,
)
PAD, CLS, SEP, MASK = 0, 101, 102, 103  # BERT's special ids
FIRST_WORD = 999  # ids below are special or [unused] in BERT's vocabulary


def build(shape: dict, directory: str):
  """(torch model, our model) with the same random weights."""
  import torch
  import transformers

  from gmlm import nn as gm

  torch.manual_seed(0)
  ref = transformers.BertForMaskedLM(transformers.BertConfig(**shape)).eval()
  ref.save_pretrained(directory)
  return ref, gm.load_model(directory)


def passages(num: int, length: int, vocab_size: int, seed: int = 0) -> list[np.ndarray]:
  rng = np.random.default_rng(seed)
  words = rng.integers(min(FIRST_WORD, vocab_size // 2), vocab_size, (num, length - 2))
  return [np.asarray([CLS, *w, SEP], np.int32) for w in words]


def run_ours(model, texts, num: int, batch_size: int, top_k: int):
  """(rectangles, ell_X4, seconds) of the batched path, timed after a warm-up batch."""
  from glauber.measures import rectangle

  tok = types.SimpleNamespace(
    all_special_ids=[PAD, CLS, SEP, MASK], pad_token_id=PAD, mask_token_id=MASK
  )
  allowed = np.arange(model.config.vocab_size) >= min(FIRST_WORD, model.config.vocab_size // 2)
  kw = dict(top_k=top_k, batch_size=batch_size, allowed_V=allowed)
  list(rectangle.draw(model, tok, texts, batch_size, seed=1, **kw))  # compiles
  start = time.perf_counter()
  rects, ells = zip(*rectangle.draw(model, tok, texts, num, **kw))
  return rects, np.concatenate(ells), time.perf_counter() - start


def run_torch(ref, rects, num: int, top_k: int, device: str) -> tuple[np.ndarray, float]:
  """ell_X4 of the first `num` rectangles, one forward per conditional, and the seconds (after
  one untimed warm-up rectangle)."""
  import torch

  ref = ref.to(device)

  def logp(tokens_L, site: int):
    masked = torch.tensor(tokens_L, device=device)[None].clone()
    masked[0, site] = MASK
    with torch.no_grad():
      return torch.log_softmax(ref(input_ids=masked).logits[0, site], -1)

  rows = [(r, x) for r in rects for x in range(len(r.i_X))][:num]
  ell = []
  for k, (r, x) in enumerate(rows[:1] + rows):  # the first (repeated) warms up: not timed
    if k == 1:
      start = time.perf_counter()
    x00 = r.tokens_XL[x][r.mask_XL[x] > 0]
    i, j, bi, bj = int(r.i_X[x]), int(r.j_X[x]), int(r.bi_X[x]), int(r.bj_X[x])
    for site in (i, j):  # the replacements' top-k (ours' draws are reused, so dR can agree)
      torch.topk(logp(x00, site), top_k).indices.cpu()
    x10, x01 = x00.copy(), x00.copy()
    x10[i], x01[j] = bi, bj
    ai, aj = x00[i], x00[j]
    edges = ((x00, i, bi, ai), (x10, j, bj, aj), (x00, j, bj, aj), (x01, i, bi, ai))
    row = []
    for s, site, b, a in edges:
      logp_V = logp(s, site)
      row.append(float(logp_V[b] - logp_V[a]))
    ell.append(row)
  return np.asarray(ell[1:]), time.perf_counter() - start


def device_peaks() -> str:
  import jax

  parts = []
  stats = jax.devices()[0].memory_stats() or {}
  if "peak_bytes_in_use" in stats:
    parts.append(f"jax device peak {stats['peak_bytes_in_use'] / 2**20:.0f} MiB")
  try:
    import torch

    if torch.cuda.is_available():
      parts.append(f"torch device peak {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")
  except ImportError:
    pass
  return ", ".join(parts)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--tiny", action="store_true", help="a 2 x 32 model, a few rectangles")
  p.add_argument("--rectangles", type=int, default=128)
  p.add_argument("--torch_rectangles", type=int, default=8, help="the loop is slow: fewer")
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--length", type=int, default=48, help="tokens per passage, [CLS]/[SEP] included")
  p.add_argument("--top_k", type=int, default=50)
  p.add_argument(
    "--torch_threads", type=int, default=0, help="0: torch's default (on a loaded CPU, try 1)"
  )
  a = p.parse_args()
  if a.tiny:
    a.rectangles, a.torch_rectangles, a.batch_size, a.length = 8, 4, 4, 16
  import jax
  import torch

  from glauber.measures import rectangle

  shape = TINY if a.tiny else BERT_BASE
  if a.torch_threads:
    torch.set_num_threads(a.torch_threads)
  device = "cuda" if torch.cuda.is_available() else "cpu"
  print(
    f"model: BertForMaskedLM {shape['num_hidden_layers']} x {shape['hidden_size']}, vocab "
    f"{shape['vocab_size']}, random weights; passages of {a.length} tokens; top-{a.top_k}; "
    f"jax {jax.default_backend()}, torch {device} ({torch.get_num_threads()} threads)"
  )
  with tempfile.TemporaryDirectory() as d:
    ref, ours = build(shape, d)
  texts = passages(64, a.length, shape["vocab_size"])
  rss0 = peak_rss_mb()
  rects, ell_ours, t_ours = run_ours(ours, texts, a.rectangles, a.batch_size, a.top_k)
  rss1 = peak_rss_mb()
  ell_torch, t_torch = run_torch(ref, rects, a.torch_rectangles, a.top_k, device)
  rss2 = peak_rss_mb()
  n = len(ell_torch)
  peak = max(matmul_peak_gflops(reps=3).values())
  hf_head = 2 * (shape["hidden_size"] ** 2 + shape["hidden_size"] * shape["vocab_size"])
  flops_ours = 4 * flops_per_sequence(shape, a.length, rows_in_last_layer=1)
  flops_torch = 6 * (flops_per_sequence(shape, a.length) + (a.length - 1) * hf_head)
  gap = np.abs(rectangle.delta_r(ell_ours[:n]) - rectangle.delta_r(ell_torch)).max()
  ours_rate, torch_rate = a.rectangles / t_ours, n / t_torch
  print(
    f"ours   batched ({a.batch_size}/call)  {ours_rate:10.2f} rectangles/s  ({a.rectangles} rect.)"
  )
  print(f"torch  per-edge loop         {torch_rate:10.2f} rectangles/s  ({n} rect.)")
  print(f"ratio ours/torch {ours_rate / torch_rate:.1f}x")
  gf_ours, gf_torch = ours_rate * flops_ours / 1e9, torch_rate * flops_torch / 1e9
  print(
    f"work: {flops_ours / 1e9:.2f} GFLOP a rectangle (ours), {flops_torch / 1e9:.2f} (torch): "
    f"{flops_torch / flops_ours:.2f}x; rate: ours {gf_ours:.0f} GFLOP/s ({gf_ours / peak:.0%} of "
    f"the {peak:.0f} GFLOP/s float32 matmul peak), torch {gf_torch:.0f} ({gf_torch / peak:.0%})"
  )
  print(
    f"ceiling of the ratio here (ours at 100% of peak): "
    f"{flops_torch / flops_ours * peak / gf_torch:.1f}x"
  )
  print(f"parity: max |dR ours - dR torch| = {gap:.2e} over {n} rectangles")
  print(
    f"peak RSS: {rss0:.0f} MiB after setup, {rss1:.0f} after ours, {rss2:.0f} after torch"
    + (f"; {device_peaks()}" if device_peaks() else "")
  )
  if gap > 1e-3:
    print("FAILED: the two paths disagree")
    sys.exit(1)


if __name__ == "__main__":
  main()
