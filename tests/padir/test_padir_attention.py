"""padir.evaluation.stutter_attention: the Table 4-5 statistics equal a loop-by-loop numpy reference on hand-made
attention arrays; the sown weights of a model are its attention distributions and change
nothing in its output."""

import jax.numpy as jnp
import numpy as np
import padir_util
import pytest
from flax import nnx

from padir.data import tokenizer as tok_lib
from padir.evaluation import stutter_attention as attention

EOS, PAD = tok_lib.EOS_ID, tok_lib.PAD_ID


def _reference(tokens, self_att, cross_att, k_values=(1, 2)):
  """The module docstring's definitions, one pair, head and direction at a time."""
  rows = {g: {"self": [], "cross": [], "self_top": [], "cross_top": []} for g in (True, False)}
  B, N, T, _ = self_att.shape
  for b in range(B):
    for i in range(T - 1):
      x, y = tokens[b, i], tokens[b, i + 1]
      if x in (EOS, PAD) or y in (EOS, PAD):
        continue
      g = rows[bool(x == y)]
      for q, k in ((i, i + 1), (i + 1, i)):
        a = [self_att[b, n, q, k] for n in range(N)]
        g["self"].append((min(a), sum(a) / N, max(a)))
        for n in range(N):
          ranked = sorted(range(T), key=lambda j: (-self_att[b, n, q, j], j))
          g["self_top"].append([k in ranked[:kk] for kk in k_values])
      tv, cos = [], []
      for n in range(N):
        p, r = cross_att[b, n, i], cross_att[b, n, i + 1]
        tv.append(0.5 * sum(abs(p - r)))
        cos.append(1 - float(p @ r) / (np.sqrt(p @ p) * np.sqrt(r @ r)))
        top = lambda v, kk: set(sorted(range(len(v)), key=lambda j: (-v[j], j))[:kk])
        g["cross_top"].append([bool(top(p, kk) & top(r, kk)) for kk in k_values])
      g["cross"].append((min(tv), sum(tv) / N, max(tv), min(cos), sum(cos) / N, max(cos)))
  return rows


@pytest.mark.parametrize("seed", [0, 1])
def test_pair_statistics_equal_a_loop_reference(seed):
  rng = np.random.default_rng(seed)
  B, N, T, S = 3, 4, 9, 7
  tokens = rng.integers(6, 9, (B, T))  # 3 token values: many stutters and many other pairs
  tokens[0, 6:] = [EOS, PAD, PAD]
  tokens[1, 8] = EOS
  self_att = rng.dirichlet(np.ones(T) * 0.5, (B, N, T))
  cross_att = rng.dirichlet(np.ones(S) * 0.5, (B, N, T))
  got = attention.pair_statistics(tokens, self_att, cross_att)
  ref = _reference(tokens, self_att, cross_att)
  for group, stutter in (("stutter", True), ("other", False)):
    r = ref[stutter]
    assert got["self"][group]["pairs"] == len(r["self"]) // 2 == len(r["cross"]) > 0
    s = np.array(r["self"])
    for j, name in enumerate(("min", "avg", "max")):
      np.testing.assert_allclose(got["self"][group][name], [s[:, j].mean(), s[:, j].std()])
    c = np.array(r["cross"])
    for j, name in enumerate(("tv_min", "tv_avg", "tv_max", "cos_min", "cos_avg", "cos_max")):
      np.testing.assert_allclose(
        got["cross"][group][name], [c[:, j].mean(), c[:, j].std()], rtol=1e-6, atol=1e-12
      )
    for j, k in enumerate((1, 2)):
      assert got["self"][group][f"top{k}"] == pytest.approx(np.mean(r["self_top"], 0)[j])
      assert got["cross"][group][f"top{k}"] == pytest.approx(np.mean(r["cross_top"], 0)[j])


def test_hand_made_extremes():
  """Identical cross-attention rows: distances 0 and top-k overlap 1; disjoint one-hot rows:
  TV 1, cosine distance 1, no overlap at k=1. A self-attention row that puts all its weight on
  the neighbour gives weight 1 and a top-1 hit."""
  tokens = np.array([[7, 7, 8, EOS]])  # pairs (0,1) stutter, (1,2) other
  self_att = np.zeros((1, 1, 4, 4))
  self_att[0, 0, 0, 1] = self_att[0, 0, 1, 0] = 1.0  # the stutter pair attends to each other
  self_att[0, 0, 2, 0] = 1.0  # position 2 attends to 0, and 1 (above) to 0: not to each other
  cross = np.zeros((1, 1, 4, 3))
  cross[0, 0, 0] = cross[0, 0, 1] = [0.2, 0.8, 0.0]
  cross[0, 0, 2] = [0.0, 0.0, 1.0]
  got = attention.pair_statistics(tokens, self_att, cross)
  assert got["self"]["stutter"]["avg"] == [1.0, 0.0] and got["self"]["stutter"]["top1"] == 1.0
  assert got["self"]["other"]["max"] == [0.0, 0.0] and got["self"]["other"]["top1"] == 0.0
  assert got["cross"]["stutter"]["tv_avg"] == [0.0, 0.0]
  assert got["cross"]["stutter"]["cos_avg"][0] == pytest.approx(0.0, abs=1e-12)
  assert got["cross"]["stutter"]["top1"] == 1.0
  assert got["cross"]["other"]["tv_avg"] == [1.0, 0.0] and got["cross"]["other"]["cos_avg"] == [
    1.0,
    0.0,
  ]
  assert got["cross"]["other"]["top1"] == 0.0


@pytest.mark.slow  # two models compiled with and without sown weights
def test_sown_weights_are_the_attention_distributions_and_change_nothing():
  model = padir_util.tiny_model(max_source_length=8, max_target_length=8, num_decoder_layers=2)
  inputs = jnp.array([[7, 8, 9, EOS, PAD, PAD], [10, 11, EOS, PAD, PAD, PAD]])
  hyp = jnp.array([[7, 7, 9, 10, EOS, PAD, PAD], [12, 13, 13, EOS, PAD, PAD, PAD]])
  forward = nnx.jit(lambda m: m.decode(hyp, *m.encode(inputs)))
  before = forward(model)
  self_att, cross = attention.last_layer_attention(model, inputs, hyp)
  assert self_att.shape == (2, 2, 7, 7) and cross.shape == (2, 2, 7, 7)
  np.testing.assert_allclose(self_att.sum(-1), 1.0, rtol=1e-5)
  np.testing.assert_allclose(cross.sum(-1), 1.0, rtol=1e-5)
  # Keys at PAD positions get no weight from content queries; source PAD neither.
  assert np.all(self_att[0, :, :5, 5:] < 1e-6) and np.all(cross[1, :, :, 4:] < 1e-6)
  layer = model.decoder_layers[-1]
  assert not layer.self_attention.sow_weights and not nnx.state(model, nnx.Intermediate)
  np.testing.assert_array_equal(forward(model), before)
