"""The rectangle test (glauber.measures.rectangle) against independent computations: a joint (causal LMs,
an explicit-joint MaskedLM) gives dR = 0; a random MLM gives dR > 0; the batched four-context
call equals a plain loop over the 8 (state, site) conditionals; bad input is one line; the job
writes its report section and resumes from its cells."""

from __future__ import annotations

import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from glauber_util import CLS, MASK, PAD, SEP, V

from glauber.measures import drift, influence, margins, rectangle
from gmlm import cli
from gmlm import nn as gm
from gmlm.checks import ConfigError, UserError

TOKENIZER = types.SimpleNamespace(
  all_special_ids=[PAD, CLS, SEP, MASK, 4], pad_token_id=PAD, mask_token_id=MASK
)
ALLOWED = np.arange(V) >= 5  # the tiny vocabulary's non-special ids
TOL = 1e-4  # the float32 tolerance for a compatible model
BERT = {  # glauber_util.tiny_mlm's shape
  "architectures": ["BertForMaskedLM"],
  "hidden_size": 16,
  "num_hidden_layers": 2,
  "num_attention_heads": 2,
  "intermediate_size": 32,
  "max_position_embeddings": 16,
}


def passages(num: int = 5, seed: int = 0) -> list[np.ndarray]:
  """[CLS] w_1..w_m [SEP] with random non-special words, m in 4..9."""
  rng = np.random.default_rng(seed)
  return [
    np.asarray([CLS, *rng.integers(5, V, rng.integers(4, 10)), SEP], np.int32) for _ in range(num)
  ]


def drawn(model, num: int = 24, top_k: int = 4):
  rects, ells = zip(
    *rectangle.draw(model, TOKENIZER, passages(), num, top_k=top_k, batch_size=8, allowed_V=ALLOWED)
  )
  return rects, np.concatenate(ells)


def random_model(hf: dict, std: float):
  """Weights N(0, std^2): far larger than GPT-2's 0.02, so edges are far from 0."""
  return rectangle.random_weights({"vocab_size": V, **hf}, std=std)


def causal(arch: str):
  hf = {
    "GPT2LMHeadModel": dict(n_embd=32, n_layer=2, n_head=4, n_positions=32),
    "LlamaForCausalLM": dict(
      hidden_size=32,
      num_hidden_layers=2,
      num_attention_heads=4,
      num_key_value_heads=2,
      intermediate_size=48,
      max_position_embeddings=32,
    ),
  }[arch]
  return random_model({"architectures": [arch], **hf}, 0.3)


@pytest.mark.parametrize("arch", ["GPT2LMHeadModel", "LlamaForCausalLM"])
def test_causal_lm_edges_from_the_joint_telescope_to_zero(arch):
  _, ell_X4 = drawn(causal(arch))
  assert np.abs(ell_X4).mean() > 0.3  # the edges themselves are far from 0 ...
  assert rectangle.delta_r(ell_X4).max() < TOL  # ... their cycle sum is 0 in float32


@pytest.mark.slow  # dequantising the 4-bit file dominates
def test_smollm2_joint_gives_dR_zero_in_float32():
  try:
    path = rectangle.smollm2_path()
  except UserError as e:
    pytest.skip(str(e))
  model, tokenizer = gm.load(path)
  r = rectangle.measure(
    model,
    tokenizer,
    ["The river runs past the old mill and into the sea at dawn."],
    name="SmolLM2",
    num_rectangles=4,
    top_k=5,
    batch_size=4,
  )
  assert r["type"] == "AR" and r["n"] == 4
  assert r["mean_abs_edge"] > 0.3 and r["max"] < TOL


def test_explicit_joint_mlm_is_compatible_and_dR_vanishes():
  model = rectangle.JointMLM(rectangle.JointConfig(V, 16), nnx.Rngs(0))
  # Its conditionals are the joint's ratios, by enumeration of the 11 values at a site.
  x_L = passages(1)[0]
  logits_V = np.asarray(gm.masked_logits(model, x_L[None], jnp.asarray([[2]])))[0, 0]
  subst_VL = np.tile(x_L, (V, 1))
  subst_VL[:, 2] = np.arange(V)
  f_V = np.asarray(model.log_joint(jnp.asarray(subst_VL)))
  np.testing.assert_allclose(logits_V - logits_V[5], f_V - f_V[5], atol=1e-5)
  _, ell_X4 = drawn(model)
  assert np.abs(ell_X4).mean() > 0.3
  assert rectangle.delta_r(ell_X4).max() < TOL


@pytest.fixture(scope="module")
def random_mlm():
  """A tiny random BERT and 24 rectangles drawn with it."""
  model = random_model(BERT, 0.5)
  return model, *drawn(model)


def test_random_mlm_is_incompatible(random_mlm):
  _, _, ell_X4 = random_mlm
  d_X = rectangle.delta_r(ell_X4)
  assert d_X.mean() > 1000 * TOL and np.median(d_X) > 100 * TOL


def test_batched_edges_equal_a_loop_over_the_eight_conditionals(random_mlm):
  """Each edge s -> s' at site k from a one-row forward of s masked at k AND of s' masked at k
  (the same context), with the softmax normaliser kept: 8 conditionals per rectangle (the first
  batch of 8 rectangles)."""
  model, rects, ell_X4 = random_mlm
  rect = rects[0]
  ell_X4 = ell_X4[: len(rect.i_X)]
  ref = []
  states_4XL = rect.states()  # x00, x10, x01, x11
  for x in range(len(rect.i_X)):
    i, j = int(rect.i_X[x]), int(rect.j_X[x])
    edges = ((0, 1, i), (1, 3, j), (0, 2, j), (2, 3, i))
    row = []
    for a, b, site in edges:
      for s in (a, b):
        masked = states_4XL[s, x].copy()
        masked[site] = MASK
        logits = gm.masked_logits(
          model, masked[None], jnp.asarray([[site]]), rect.mask_XL[x : x + 1]
        )
        logp_V = np.asarray(jax.nn.log_softmax(logits[0, 0]), np.float64)
        row.append(logp_V[states_4XL[b, x, site]] - logp_V[states_4XL[a, x, site]])
    ref.append(row)
  ref_X42 = np.asarray(ref).reshape(-1, 4, 2)
  np.testing.assert_allclose(ref_X42[..., 0], ref_X42[..., 1], atol=1e-5)  # shared contexts
  np.testing.assert_allclose(ell_X4, ref_X42[..., 0], atol=1e-4)  # draw's 4-row path
  np.testing.assert_allclose(rectangle.edge_logratios(model, rect, MASK), ell_X4, atol=1e-4)
  ref_d = np.abs(ref_X42[:, 0, 0] + ref_X42[:, 1, 0] - ref_X42[:, 2, 0] - ref_X42[:, 3, 0])
  np.testing.assert_allclose(rectangle.delta_r(ell_X4), ref_d, atol=1e-4)


def test_bad_input_is_one_line():
  x_L = passages(1)[0]
  cases = [
    (lambda: rectangle.make_rectangles(x_L, 2, 2, 5, 6), "i = j = 2"),
    (lambda: rectangle.make_rectangles(x_L, 0, 2, 5, 6), r"site i = 0 is not a free site"),
    (lambda: rectangle.make_rectangles(x_L, 1, len(x_L) - 1, 5, 6), "site j = .* not a free"),
    (lambda: rectangle.make_rectangles(x_L, 1, 2, x_L[1], 6), "is the current token"),
    (lambda: rectangle.delta_r(np.zeros((1, 4)), 0.0), r"T = 0.0: .* 0 < T"),
    (lambda: rectangle.delta_r(np.zeros((1, 4)), -1.0), r"T = -1.0"),
    (lambda: next(rectangle.draw(None, TOKENIZER, [x_L], 1, top_k=1)), "size 1"),
  ]
  for call, match in cases:
    with pytest.raises(UserError, match=match) as info:
      call()
    assert "\n" not in str(info.value)


def test_config_refuses_a_candidate_set_of_size_one(tmp_path):
  from configs.glauber_incompatibility import get_config

  c = get_config()
  c.replacement_top_k = 1
  with pytest.raises(ConfigError, match=r"config.replacement_top_k=1: must be an integer >= 2"):
    cli.prepare(c, str(tmp_path / "run"), "sample.py")


@pytest.mark.slow  # the rectangle job end to end, killed and resumed
def test_job_writes_the_section_and_resumes_from_its_cells(
  tiny_english_bert, tmp_path, monkeypatch
):
  """A tiny random BERT with SPLADE-tiny's tokenizer, a GPT-2 control, every stage at tiny size:
  report.md holds each stage's section; a rerun after losing results.json recomputes no cell."""
  from configs.glauber_incompatibility import get_config
  from glauber.jobs import incompatibility

  model_dir = tiny_english_bert
  text = tmp_path / "passages.txt"
  text.write_text(
    "the river runs past the old mill and into the sea\n\n"
    "she bought bread, cheese and apples at the market on saturday\n"
  )
  c = get_config()
  c.model, c.text, c.controls = str(model_dir), str(text), "gpt2-random-tiny"
  c.num_rectangles, c.control_rectangles, c.replacement_top_k = 6, 3, 5
  c.batch_size, c.max_tokens = 4, 24
  c.influence.seed_text, c.influence.temperatures = "the river runs past the mill", (1.0, 8.0)
  c.influence.num_contexts, c.influence.num_values, c.influence.num_rectangles = 2, 3, 4
  c.margins.texts, c.margins.temperatures = ("the river runs",), (1.0,)
  c.drift.num_sites, c.drift.k, c.drift.num_states, c.drift.temperatures = 4, 2, 3, (1.0,)
  workdir = tmp_path / "run"
  results = incompatibility.run(c, str(workdir))
  mlm, control = results["rectangle"]["models"]
  assert (mlm["type"], mlm["n"], control["type"], control["n"]) == ("MLM", 6, "AR", 3)
  assert mlm["mean"] > 1000 * TOL and control["max"] < TOL
  report = (workdir / "report.md").read_text()
  assert "## Rectangle test" in report and "| model | type | parameters | mean ΔR |" in report
  assert (workdir / "rectangle_hist.png").is_file() and (
    workdir / "rectangle_distance.png"
  ).is_file()
  assert json.loads((workdir / "results.json").read_text())["rectangle"] == results["rectangle"]
  for heading in ("## Influence", "## Score margins", "## Drift certificate"):
    assert heading in report
  assert len(results["influence"]["seed_rectangles"]["rectangles"]) == 4
  for figure in ("rectangle_influence.png", "influence_vs_T.png", "margins.png", "drift.png"):
    assert (workdir / figure).is_file()

  (workdir / "results.json").unlink()  # as if killed before the end: every cell is stored

  def refuse(*args, **kwargs):
    raise AssertionError("a finished cell was recomputed")

  for module in (rectangle, influence, margins, drift):
    monkeypatch.setattr(module, "measure", refuse)
  again = incompatibility.run(c, str(workdir))
  assert json.loads(json.dumps(again)) == json.loads(json.dumps(results))


def test_influence_pairs_and_the_alpha_figure(tmp_path):
  """A rectangle's alpha is (alpha_ij + alpha_ji) / 2 on the free sites alpha covers; the
  section draws the dR-vs-alpha panel when alpha is given."""
  from gmlm.runs import RunDir

  recs = [
    {"passage": 0, "i": 0, "j": 2, "distance": 2, "tokens": [5, 6, 7, 8], "delta_r": 0.5},
    {"passage": 1, "i": 1, "j": 0, "distance": 1, "tokens": [5, 6, 7, 8], "delta_r": 0.25},
    {"passage": 0, "i": 3, "j": 1, "distance": 2, "tokens": [5, 6, 7, 8], "delta_r": 0.75},
  ]
  alpha_NN = np.arange(9.0).reshape(3, 3)  # site 3 is outside
  model = {"model": "m", "type": "MLM", "parameters": 10, "n": 3, "top_k": 4, "temperature": 1.0}
  model |= {**rectangle.summary([0.5, 0.25, 0.75]), "mean_abs_edge": 1.0, "rectangles": recs}
  a, d = rectangle.influence_pairs(model, alpha_NN)
  np.testing.assert_array_equal(a, [(2 + 6) / 2, (3 + 1) / 2])
  np.testing.assert_array_equal(d, [0.5, 0.25])
  a, d = rectangle.influence_pairs(model, alpha_NN, passage=1)
  np.testing.assert_array_equal(d, [0.25])
  text = rectangle.section({"text": "t", "models": [model]}, RunDir(tmp_path), alpha_NN)
  assert "| m | MLM | 10 | 0.5 | 3 |" in text
  assert (tmp_path / "rectangle_distance.png").stat().st_size > 0
