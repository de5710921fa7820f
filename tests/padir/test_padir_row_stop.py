"""Per-row stopping (refinement.RefineOptions.row_stop, issue 30): decoding only the rows that
have not reached their fixed point changes no token, score or pass count, for each option,
alone and inside a padded batch."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import padir_util
import pytest

from padir.decoding import decoders, refinement

INPUTS = np.array(
  [[7, 8, 9, 1, 0, 0], [10, 11, 12, 13, 14, 1], [5, 1, 0, 0, 0, 0], [6, 6, 7, 1, 0, 0]], np.int32
)
OPTIONS = (
  refinement.RefineOptions(num_lengths=3, num_steps=6),
  refinement.RefineOptions(num_lengths=3, num_steps=6, **refinement.VARIANTS["length-prior-reset"]),
  refinement.RefineOptions(num_lengths=2, num_starts=2, num_steps=6, remask="confidence"),
  refinement.RefineOptions(num_lengths=2, num_steps=6, temperature=1.0, stutter="mask"),
  refinement.RefineOptions(num_lengths=2, length_offsets=3, num_steps=6, cache_cross=False),
)
FIELDS = ("tokens", "lengths", "scores", "passes", "steps", "candidates", "candidate_scores")


def _run(model, options, inputs, keys):
  fn = decoders.pure_jit(lambda m, x, k: refinement.refine(m, x, k, options), model)
  return {k: np.asarray(v) for k, v in fn(inputs, keys).items() if k in FIELDS}


def _check(options_list, alone=(2,)):
  model = padir_util.tiny_model("nar", max_target_length=8, seed=3)
  keys = jax.random.split(jax.random.key(0), len(INPUTS))
  early = 0  # outputs whose chosen candidate froze before the loop ended: compaction ran
  for options in options_list:
    masked = _run(model, options, INPUTS, keys)
    compact = _run(model, dataclasses.replace(options, row_stop="compact"), INPUTS, keys)
    for k in FIELDS:  # scores: the same sums over differently blocked products (1 ulp)
      check = np.testing.assert_allclose if "scores" in k else np.testing.assert_array_equal
      check(
        compact[k], masked[k], err_msg=f"{options} {k}", **({"rtol": 1e-6} if "scores" in k else {})
      )
    early += int((masked["passes"] < masked["steps"]).sum())
    # alone: each source with its key gives its row of the padded batch
    for b in alone:
      one = _run(
        model, dataclasses.replace(options, row_stop="compact"), INPUTS[b : b + 1], keys[b : b + 1]
      )
      for k in ("tokens", "passes", "candidates"):
        np.testing.assert_array_equal(one[k][0], compact[k][b], err_msg=f"{options} {k}")
  assert early > 0


def test_compacting_the_live_rows_changes_no_output():
  _check(OPTIONS[1:2])


@pytest.mark.slow
def test_compacting_the_live_rows_changes_no_output_for_each_option():
  _check(OPTIONS, alone=(0, 2))


def test_row_stop_is_checked():
  try:
    refinement.RefineOptions(row_stop="drop")
  except ValueError as e:
    assert "row_stop" in str(e)
  else:
    raise AssertionError("row_stop='drop' was accepted")
