"""padir.evaluation.latency.decode_fn: the once-split jitted decoders give what the decoding functions give
when called directly, and follow the model's parameters."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import padir_util
import pytest
from flax import nnx

from padir.decoding import autoregressive as decode
from padir.decoding import decoders as decoding
from padir.decoding import ngram, refinement
from padir.evaluation import latency as speed

INPUTS = jnp.array([[7, 8, 9, 1, 0, 0], [10, 11, 12, 13, 14, 1]], jnp.int32)


def test_each_decoder_equals_its_function_called_directly():
  nar, ar = padir_util.tiny_model("nar"), padir_util.tiny_model("ar", seed=1)
  key = jax.random.key(2)
  options = refinement.RefineOptions(num_lengths=2, rerank="ar")
  tokens, passes = decoding.decode_fn(nar, decoding.Decoder("p", "padir", options), ar)(INPUTS, key)
  direct = refinement.refine(nar, INPUTS, key, options, ar_model=ar)
  np.testing.assert_array_equal(np.asarray(tokens), np.asarray(direct["tokens"]))
  assert float(passes) == float(direct["passes"].mean())
  tokens, _ = decoding.decode_fn(ar, decoding.Decoder("g", "greedy"))(INPUTS, key)
  np.testing.assert_array_equal(np.asarray(tokens), np.asarray(decode.greedy_ar(ar, INPUTS)))
  tokens, steps = decoding.decode_fn(ar, decoding.Decoder("b", "beam", beam_size=3))(INPUTS, key)
  beam = decode.beam_search(ar, INPUTS, 3)
  np.testing.assert_array_equal(np.asarray(tokens), np.asarray(beam["tokens"]))
  assert int(steps) == int(beam["steps"])


def test_a_decoder_reads_the_models_current_parameters_not_a_stale_copy():
  ar = padir_util.tiny_model("ar", seed=1)
  before = np.asarray(decode.greedy_ar(ar, INPUTS))
  fn = decoding.decode_fn(ar, decoding.Decoder("g", "greedy"))
  np.testing.assert_array_equal(np.asarray(fn(INPUTS, jax.random.key(0))[0]), before)
  nnx.update(ar, nnx.state(padir_util.tiny_model("ar", seed=7), nnx.Param))
  after = np.asarray(decode.greedy_ar(ar, INPUTS))
  assert not np.array_equal(after, before)  # the update changes the output
  np.testing.assert_array_equal(np.asarray(fn(INPUTS, jax.random.key(0))[0]), after)


def _short_lengths_model(longest: int):
  """A tiny PaDIR model (targets up to 12) whose length head ranks lengths 1..longest first."""
  nar = padir_util.tiny_model("nar", max_target_length=12)
  head = nar.length_head
  head.kernel[...] = jnp.zeros_like(head.kernel[...])
  head.bias[...] = jnp.where(jnp.arange(13) <= longest, 10.0 - jnp.arange(13), -10.0)
  return nar


def test_trimmed_width_is_the_longest_length_rounded_up_to_the_multiple():
  for T, k in ((12, 4), (12, 5), (36, 8), (7, 1)):
    for n in range(1, T + 1):
      w = refinement.trimmed_width(n, T, k)
      assert n <= w <= T and (w == T or (w % k == 0 and w < n + k))


@pytest.mark.parametrize(
  "options",
  [
    refinement.RefineOptions(num_lengths=3),
    refinement.RefineOptions(num_lengths=3, **refinement.VARIANTS["length-prior-reset"]),
    refinement.RefineOptions(num_lengths=2, remask="confidence", num_starts=2),
    refinement.RefineOptions(num_lengths=2, temperature=1.0, stutter="mask"),
    refinement.RefineOptions(num_lengths=2, rerank="ar", length_offsets=3),
  ],
  ids=["plain", "length_prior_reset", "remask_starts", "sampled_stutter_mask", "ar_rerank"],
)
def test_a_trimmed_decoder_decodes_the_full_width_tokens_at_a_smaller_width(options):
  """Every option that touches positions (stutter resets, drops, remasking, sampling, the AR
  reranker) gives the same tokens and passes at the trimmed width as at max_target_length."""
  nar = _short_lengths_model(longest=5)
  inputs = jnp.array([[7, 8, 9, 1, 0, 0], [10, 11, 12, 13, 14, 1], [5, 1, 0, 0, 0, 0]])
  a = padir_util.tiny_model("ar", max_target_length=12) if options.rerank == "ar" else None
  full = decoding.decode_fn(nar, decoding.Decoder("f", "padir", options), a)
  trimmed = decoding.decode_fn(nar, decoding.Decoder("t", "padir", options, trim=2), a)
  assert trimmed.width(inputs) <= 4 and trimmed.widths == [2, 4, 6, 8, 10, 12]  # of 12
  for seed in range(3):
    key = jax.random.key(seed)
    (t_full, p_full), (t_trim, p_trim) = full(inputs, key), trimmed(inputs, key)
    np.testing.assert_array_equal(np.asarray(t_trim), np.asarray(t_full))
    assert float(p_trim) == float(p_full)


def test_breakdown_counts_the_loop_passes_and_times_its_parts():
  """speed.breakdown on the short-length model: the loop's passes and the chosen candidate's
  are refine's own, each width is the source's longest candidate rounded up to the multiple,
  and the parts add up as documented (one source: the medians are its values)."""
  nar = _short_lengths_model(longest=5)
  options = refinement.RefineOptions(num_lengths=3)
  inputs = np.array([[7, 8, 9, 1, 0, 0], [10, 11, 12, 13, 14, 1]], np.int32)
  parts = speed.breakdown(nar, options, inputs, multiple=4, repeats=2)
  outs = [
    refinement.refine(nar, jnp.asarray(x[None]), jax.random.fold_in(jax.random.key(0), n), options)
    for n, x in enumerate(inputs)
  ]
  assert parts["steps"] == np.mean([int(o["steps"]) for o in outs])
  assert parts["passes"] == np.mean([int(o["passes"][0]) for o in outs])
  widths = [refinement.trimmed_width(int(o["candidate_lengths"].max()), 12, 4) for o in outs]
  assert parts["width"] == np.mean(widths) and max(widths) < 12
  assert parts["candidates"] == 3 and parts["sentences"] == 2
  one = speed.breakdown(nar, options, inputs[:1], multiple=4, repeats=2)
  assert one["encoder_ms"] > 0 and one["pass_ms"] > 0
  assert one["floor_ms"] == pytest.approx(one["encoder_ms"] + 2 * one["pass_ms"])
  assert one["model_ms"] == pytest.approx(one["encoder_ms"] + one["steps"] * one["pass_ms"])
  assert 1 <= one["passes"] <= one["steps"] <= options.num_steps


def test_pareto_marks_exactly_the_non_dominated_rows():
  """A hand-made (p50 ms, BLEU) table: dominated rows are those some other row beats in one
  coordinate without losing in the other; ties are kept (neither dominates)."""
  table = [
    (10.0, 99.0),  # 0: optimal (the best BLEU)
    (5.0, 98.0),  # 1: optimal
    (6.0, 98.0),  # 2: dominated by 1 (slower, same BLEU)
    (5.0, 97.0),  # 3: dominated by 1 (as fast, lower BLEU)
    (2.0, 90.0),  # 4: optimal (the fastest)
    (20.0, 99.0),  # 5: dominated by 0
    (3.0, 95.0),  # 6: optimal
    (3.0, 95.0),  # 7: equal to 6: optimal too
    (4.0, 94.0),  # 8: dominated by 6
  ]
  assert speed.pareto(table) == [True, True, False, False, True, False, True, True, False]
  assert speed.pareto([]) == [] and speed.pareto([(1.0, 2.0)]) == [True]


def test_frontier_grid_names_each_decoder_once_with_its_options():
  grid = decoding.frontier_decoders((1, 5), (1, 4), (0, 8))
  assert len({d.name for d in grid}) == len(grid) == 8
  d = next(d for d in grid if d.name == "padir-L5-S4-trim8")
  assert (d.options.num_lengths, d.options.num_steps, d.trim, d.source_trim) == (5, 4, 8, 8)
  assert next(d for d in grid if d.name == "padir-L5-S4").source_trim == 0
  assert d.options.length_prior and d.options.drop == "reset"


@pytest.mark.slow  # a compile per width: ~1 min, out of the quick tier
def test_a_one_call_trimmed_decoder_gives_the_two_call_decoders_tokens():
  """decoding.OneCallTrimmed (length choice and refinement in one jitted call, the width chosen by
  a switch inside it) against the full-width decoder, with and without the AR reranker."""
  nar, ar = _short_lengths_model(longest=5), padir_util.tiny_model("ar", max_target_length=12)
  inputs = jnp.array([[7, 8, 9, 1, 0, 0], [10, 11, 12, 13, 14, 1], [5, 1, 0, 0, 0, 0]])
  for options in (
    refinement.RefineOptions(num_lengths=3, **refinement.VARIANTS["length-prior-reset"]),
    refinement.RefineOptions(num_lengths=2, rerank="ar", row_stop="compact"),
  ):
    a = ar if options.rerank == "ar" else None
    full = decoding.decode_fn(nar, decoding.Decoder("f", "padir", options), a)
    one = decoding.decode_fn(nar, decoding.Decoder("o", "padir", options, trim=4, one_call=True), a)
    assert isinstance(one, decoding.OneCallTrimmed) and one.widths == [4, 8, 12]
    for rows in (inputs, inputs[1:2]):
      key = jax.random.key(5)
      (t_full, p_full), (t_one, p_one) = full(rows, key), one(rows, key)
      np.testing.assert_array_equal(np.asarray(t_one), np.asarray(t_full))
      assert float(p_one) == float(p_full)


@pytest.mark.slow  # a compile per width and decoder: minutes, out of the quick tier
def test_source_trimming_changes_no_token_of_padir_greedy_or_beam():
  """source_trim = k cuts the sources to their width (PAD excluded) rounded up to k: the tokens
  and passes of the untrimmed decoder, alone and in a padded batch, for PaDIR (untrimmed,
  trimmed in two calls and in one, with the AR reranker), AR greedy and beam search."""
  nar, ar = _short_lengths_model(longest=5), padir_util.tiny_model("ar", max_target_length=12)
  inputs = jnp.array([[7, 8, 9, 1, 0, 0], [10, 11, 12, 13, 14, 1], [5, 1, 0, 0, 0, 0]])
  prior = refinement.RefineOptions(num_lengths=2, **refinement.VARIANTS["length-prior-reset"])
  cases = [
    (nar, None, decoding.Decoder("p", "padir", prior)),
    (nar, None, decoding.Decoder("p", "padir", prior, trim=2)),
    (
      nar,
      ar,
      decoding.Decoder("p", "padir", refinement.RefineOptions(rerank="ar"), trim=4, one_call=True),
    ),
    (ar, None, decoding.Decoder("g", "greedy")),
    (ar, None, decoding.Decoder("g", "greedy", cache_window=4)),
    (ar, None, decoding.Decoder("b", "beam", beam_size=3)),
  ]
  for model, a, dec in cases:
    full = decoding.decode_fn(model, dec, a)
    cut = decoding.decode_fn(model, dataclasses.replace(dec, source_trim=3), a)
    assert isinstance(cut, decoding.SourceTrimmed) and cut.widths == [3, 6]
    assert [cut.width(inputs[b : b + 1]) for b in range(3)] == [6, 6, 3]
    cut.warm(inputs, jax.random.key(0))
    for rows in (inputs, inputs[2:3]):  # the batch at the full width, a row cut to 3
      key = jax.random.key(3)
      (t_full, p_full), (t_cut, p_cut) = full(rows, key), cut(rows, key)
      np.testing.assert_array_equal(np.asarray(t_cut), np.asarray(t_full))
      assert float(p_cut) == float(p_full)
  with pytest.raises(ValueError, match="source_trim is for kinds"):
    decoding.decode_fn(ar, decoding.Decoder("t", "torch", source_trim=2))
  with pytest.raises(ValueError, match="cache_window is for kind 'greedy'"):
    decoding.decode_fn(ar, decoding.Decoder("b", "beam", cache_window=2))


def test_gc_paused_stops_the_collector_inside_and_restores_it_after():
  """Latencies are timed with the cyclic collector off (as timeit does); the caller's setting
  comes back, also when the timed code raises."""
  import gc

  assert gc.isenabled()
  with speed.gc_paused():
    assert not gc.isenabled()
  assert gc.isenabled()
  with pytest.raises(RuntimeError):
    with speed.gc_paused():
      raise RuntimeError("boom")
  assert gc.isenabled()
  gc.disable()
  try:
    with speed.gc_paused():
      assert not gc.isenabled()
    assert not gc.isenabled()  # a caller that had it off keeps it off
  finally:
    gc.enable()


def test_latency_by_width_groups_every_decode_by_its_sources_trimmed_width():
  """A stub trimmed decoder (width = the source's tokens rounded up to 4) that records its
  calls: each source is decoded `repeats` times at batch 1, each width's row counts its sources
  and decodes, the percentiles are ordered, and the "all" row covers every decode."""
  calls = []

  class Stub:
    def width(self, inputs_BS):
      return refinement.trimmed_width(int((np.asarray(inputs_BS) != 0).sum()), 12, 4)

    def __call__(self, inputs_BS, key):
      calls.append(np.asarray(inputs_BS).copy())
      return jnp.zeros((1, 2), jnp.int32), jnp.float32(1)

  sources = np.zeros((5, 12), np.int32)
  for i, n in enumerate((1, 3, 4, 5, 9)):
    sources[i, :n] = 7
  rows = speed.latency_by_width(Stub(), sources, repeats=3)
  assert len(calls) == 1 + 5 * 3  # one warm-up, then every source 3 times
  assert [(r["width"], r["sources"], r["decodes"]) for r in rows] == [
    (4, 3, 9),
    (8, 1, 3),
    (12, 1, 3),
    ("all", 5, 15),
  ]
  for r in rows:
    assert 0 <= r["min_ms"] <= r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"]
  with pytest.raises(ValueError, match="trimmed decoder"):
    speed.latency_by_width(lambda x, k: x, sources)


def test_interleaved_latencies_decode_each_block_by_every_decoder_before_the_next():
  """Stub decoders that record their calls: per repeat, each block of sources goes through
  every decoder (in a per-block shuffled order) before the next block, each decoder taking one
  untimed call on the block's first source and then the block's sources in order with the key
  fold_in(key, n); the tokens and passes kept are the first repeat's timed calls'; sources of
  different counts and a block < 1 are refused."""
  calls = []

  def stub(j):
    def fn(inputs_BS, key):
      calls.append((j, int(np.asarray(inputs_BS)[0, 0]), jax.random.key_data(key).tolist()))
      return jnp.full((1, 2), len(calls), jnp.int32), jnp.float32(j + 10)

    return fn

  N, J, repeats, block = 7, 3, 2, 3  # blocks of 3, 3 and 1 sources
  sources = [np.arange(N)[:, None] * 10 + j + np.zeros((N, 4), np.int64) for j in range(J)]
  key = jax.random.key(5)
  out = speed.interleaved_latencies(
    [(stub(j), sources[j]) for j in range(J)],
    key,
    repeats=repeats,
    block=block,
    keep_tokens=True,
  )
  fold = lambda n: jax.random.key_data(jax.random.fold_in(key, n)).tolist()
  expected_per_repeat = sum(J * (1 + min(block, N - b)) for b in range(0, N, block))
  assert len(calls) == repeats * expected_per_repeat
  pos, orders, timed = 0, [], {j: [] for j in range(J)}  # timed: call counts, repeat 0
  for r in range(repeats):
    for b in range(0, N, block):
      size = min(block, N - b)
      chunk = calls[pos : pos + J * (1 + size)]
      order = [chunk[i * (1 + size)][0] for i in range(J)]
      assert sorted(order) == list(range(J))  # every decoder once per block
      orders.append(tuple(order))
      for i, j in enumerate(order):
        run = chunk[i * (1 + size) : (i + 1) * (1 + size)]
        assert all(c[0] == j for c in run)  # a decoder's block is contiguous
        assert run[0][1:] == (b * 10 + j, fold(b))  # the untimed warm call
        assert [c[1] for c in run[1:]] == [n * 10 + j for n in range(b, b + size)]
        assert [c[2] for c in run[1:]] == [fold(n) for n in range(b, b + size)]
        if r == 0:
          timed[j] += [pos + i * (1 + size) + 1 + m + 1 for m in range(size)]
      pos += J * (1 + size)
  assert len(set(orders)) > 1  # the order is shuffled, not fixed
  for j, o in enumerate(out):
    assert o["ms"].shape == (repeats * N,) and (o["ms"] > 0).all()
    np.testing.assert_array_equal(o["passes"], np.full(N, j + 10.0))
    np.testing.assert_array_equal(o["tokens"][:, 0], timed[j])
  with pytest.raises(ValueError, match="the same sources"):
    speed.interleaved_latencies([(stub(0), sources[0]), (stub(1), sources[1][:3])], key)
  with pytest.raises(ValueError, match="block must be >= 1"):
    speed.interleaved_latencies([(stub(0), sources[0])], key, block=0)


def test_measure_many_gives_each_decoder_what_measure_gives_it_alone():
  """Interleaving the timing changes no output: tokens and passes of measure_many equal
  measure's for each decoder alone, and p50 / p99 come from repeats x N decodes."""
  nar, ar = padir_util.tiny_model("nar"), padir_util.tiny_model("ar", seed=1)
  src = np.asarray(INPUTS)
  decoders = [
    (nar, decoding.Decoder("p", "padir", refinement.RefineOptions(num_lengths=2)), src, None),
    (ar, decoding.Decoder("g", "greedy"), src, None),
    (ar, decoding.Decoder("b", "beam", beam_size=2), src, None),
  ]
  many = speed.measure_many(decoders, throughput_batch=1, keep_tokens=True, repeats=3)
  for (model, decoder, _, _), r in zip(decoders, many):
    alone = speed.measure(model, decoder, src, throughput_batch=1, keep_tokens=True)
    np.testing.assert_array_equal(r["tokens"], alone["tokens"])
    assert r["passes"] == alone["passes"]
    assert r["decodes"] == 3 * len(src) and alone["decodes"] == len(src)
    assert 0 < r["p50_ms"] <= r["p99_ms"]


def test_the_speed_benchmark_chooses_the_nar_runs_decoder_by_its_kind(capsys, monkeypatch):
  """benchmarks/padir_speed.py --decoder: "auto" gives a CTC model CTC rows and a PaDIR model
  refinement rows (the kinds decode_fn accepts for each, checked by building them); a decoder
  the run cannot use is one line on stderr and rc 2, before anything is measured."""
  import pathlib

  monkeypatch.syspath_prepend(str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
  bench = padir_util.benchmark_module("padir_speed")  # imports its peer benchmarks/torch_ar.py
  ctc_model, nar = padir_util.tiny_model(ctc_upsample=2), padir_util.tiny_model()
  dag_model = padir_util.tiny_model(dag_upsample=2)
  for model, kind in ((ctc_model, "ctc"), (nar, "padir"), (dag_model, "dag")):
    rows = bench.nar_decoders(model, "auto")
    assert rows == bench.nar_decoders(model, kind) and {d.kind for d in rows} == {kind}
    for d in rows:
      decoding.decode_fn(model, d)  # Decoder.check: the model can decode it
  with pytest.raises(ValueError, match="cannot decode a CTC model"):
    bench.nar_decoders(ctc_model, "padir")
  lm = ngram.build([[5, 6]], dag_model.cfg.vocab_size, order=2)
  rows = bench.nar_decoders(dag_model, "auto", lm, 0.3)
  assert [(d.dag_strategy, d.dag_lm is lm) for d in rows] == [
    ("lookahead", False),
    ("beam", False),
    ("beam", True),
  ]
  # a row's record (the benchmark's JSON) names the n-gram model by its order and states
  assert json.loads(json.dumps(rows[2].record()))["dag_lm"] == {
    "order": 2,
    "states": lm.num_states,
  }
  with pytest.raises(ValueError, match="must name a PaDIR, CTC or DAG run; this one is an AR"):
    bench.nar_decoders(padir_util.tiny_model("ar"), "auto")
  assert bench.main(["--tiny", "--decoder", "ctc"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: --decoder=ctc: a 'ctc' decoder cannot decode a PaDIR")
  assert len(err.strip().splitlines()) == 1
