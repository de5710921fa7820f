"""Our flax models compute what transformers' PyTorch models compute, on random tiny checkpoints.

The parity matrix: every family, with tied and untied output layers and each activation we
support (every name in `_layers.activation`), on padded batches of several lengths (left and
right padding for the causal LMs), with non-zero token types for BERT, and ModernBERT beyond
its local window over several global-attention periods. One checkpoint and one compile each.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from models_util import CAUSAL, TINY, batch, save_tiny, tiny_torch_model, torch_logits

from gmlm import nn as gm

pytest.importorskip("torch")

_full = jax.jit(gm.full_logits)
_masked = jax.jit(gm.masked_logits)
_causal = jax.jit(gm.causal_logits)


@jax.jit
def _bert_logits(model, tokens_BL, mask_BL, types_BL):
  return model.mlm_logits(model.encode(tokens_BL, mask_BL, token_types_BL=types_BL))


ACTIVATIONS = ("gelu", "relu", "gelu_new", "silu", "gelu_pytorch_tanh", "swish", "gelu_fast")
# architecture -> the config keys that name its activations
ACTIVATION_KEYS = {
  "BertForMaskedLM": ("hidden_act",),
  "RobertaForMaskedLM": ("hidden_act",),
  "XLMRobertaForMaskedLM": ("hidden_act",),
  "ModernBertForMaskedLM": ("hidden_activation", "classifier_activation"),
  "GPT2LMHeadModel": ("activation_function",),
  "LlamaForCausalLM": ("hidden_act",),
}
# ModernBERT: 6 layers alternating global / local (3 periods), local window +-4, length 40.
LONG = {"ModernBertForMaskedLM": dict(num_hidden_layers=6, global_attn_every_n_layers=2)}
LENGTH = {"ModernBertForMaskedLM": 40}


def _matrix(marks: bool = False):
  """(arch, activation, untied): each activation once per family, tied and untied alternating
  (XLM-RoBERTa, RoBERTa's code under another name, gets two). With `marks`, the first untied
  and the first tied case past "gelu" of each family run in the fast suite, the rest are slow
  (each case compiles its own model: ~3 s)."""
  cases = []
  for arch in TINY:
    acts = ACTIVATIONS[1:4:2] if arch == "XLMRobertaForMaskedLM" else ACTIVATIONS
    for i, act in enumerate(acts):
      case = (arch, act, i % 2 == 1)
      slow = i not in (1, 2) or arch == "XLMRobertaForMaskedLM"
      cases.append(pytest.param(*case, marks=pytest.mark.slow) if marks and slow else case)
  return cases


def _padded(config, L: int, left: bool = False, seed: int = 1):
  """A batch of 4 of lengths L, L - 7, 5 and 1 (padding on the right, or the left)."""
  rng = np.random.default_rng(seed)
  lengths = [L, L - 7, 5, 1]
  tokens = rng.integers(3, config.vocab_size, (4, L))
  mask = np.zeros((4, L), np.int64)
  for b, n in enumerate(lengths):
    if left:
      mask[b, L - n :] = 1
    else:
      mask[b, :n] = 1
  pad = config.pad_token_id if config.pad_token_id is not None else 0
  return np.where(mask == 1, tokens, pad), mask


@pytest.mark.parametrize(
  "arch,act,untied", _matrix(marks=True), ids=lambda v: {True: "untied", False: "tied"}.get(v, v)
)
def test_logits_match_pytorch(tmp_path, arch, act, untied):
  overrides = {k: act for k in ACTIVATION_KEYS[arch]}
  overrides.update(LONG.get(arch, {}), tie_word_embeddings=not untied)
  torch_model = save_tiny(arch, tmp_path, **overrides)
  model, tokenizer = gm.load(tmp_path)
  assert tokenizer is None  # save_pretrained of a bare model writes no tokenizer
  L = LENGTH.get(arch, 20)
  batches = [_padded(torch_model.config, L)]
  if arch in CAUSAL:
    batches.append(_padded(torch_model.config, L, left=True))
  for tokens, mask in batches:
    types = None
    if arch == "BertForMaskedLM":  # token types: the second segment from a random point on
      types = (np.arange(L)[None] >= np.array([[3], [9], [2], [0]])).astype(np.int64)
      ours = _bert_logits(model, jnp.asarray(tokens), jnp.asarray(mask), jnp.asarray(types))
    elif arch in CAUSAL:
      ours = _causal(model, jnp.asarray(tokens), jnp.asarray(mask))
    else:
      ours = _full(model, jnp.asarray(tokens), jnp.asarray(mask))
    ours, ref = np.asarray(ours), torch_logits(torch_model, tokens, mask, types)
    assert ours.shape == ref.shape
    assert np.abs(ref).max() > 0.5  # the check is not vacuous
    np.testing.assert_allclose(ours[mask == 1], ref[mask == 1], atol=1e-4, rtol=0)


def test_matrix_covers_every_supported_activation_and_both_heads():
  from gmlm.nn._layers import activation

  supported = {name for name in ACTIVATIONS if activation(name)}
  for arch in TINY:
    cases = [(act, untied) for a, act, untied in _matrix() if a == arch]
    assert {untied for _, untied in cases} == {False, True}, arch
    if arch != "XLMRobertaForMaskedLM":
      assert {act for act, _ in cases} == supported, arch
  with pytest.raises(ValueError, match="Unsupported activation 'mish'"):
    activation("mish")


@pytest.fixture(scope="module")
def checkpoints(tiny_checkpoint):
  """arch -> (directory, torch model): conftest's tiny random checkpoint of each architecture."""
  return {arch: (tiny_checkpoint(arch), tiny_torch_model(arch)) for arch in TINY}


@pytest.mark.parametrize("arch", [a for a in TINY if a not in CAUSAL])
def test_masked_logits_are_full_logits_at_those_positions(checkpoints, arch):
  model, _ = gm.load(checkpoints[arch][0])
  tokens, mask = batch(model.config, B=4)
  positions = np.array([[0, 5, 12], [12, 1, 7], [19, 19, 3], [2, 4, 6]])
  full = np.asarray(_full(model, jnp.asarray(tokens), jnp.asarray(mask)))
  masked = np.asarray(
    _masked(model, jnp.asarray(tokens), jnp.asarray(positions), jnp.asarray(mask))
  )
  assert masked.shape == (4, 3, model.config.vocab_size)
  expected = np.take_along_axis(full, positions[..., None], axis=1)
  np.testing.assert_allclose(masked, expected, atol=1e-5, rtol=0)


def test_large_batches_run_in_chunks_with_the_same_logits(checkpoints, monkeypatch):
  """With the chunk limit at 2 sequences, a batch of 6 runs as 3 chunks of rows {j, j+3}."""
  from gmlm.nn import masked

  model, _ = gm.load(checkpoints["BertForMaskedLM"][0])
  tokens, mask = batch(model.config, B=6)
  L = tokens.shape[1]
  monkeypatch.setattr(masked, "CPU_CHUNK_TOKENS", 2 * L)
  assert masked._num_chunks(6, L, 2 * L) == 3 and masked._num_chunks(7, L, 5 * L) == 1  # 7 is prime
  positions = np.array([[0, 5], [12, 1], [19, 3], [2, 6], [7, 7], [4, 9]])
  chunked = np.asarray(
    jax.jit(gm.masked_logits.__wrapped__)(
      model, jnp.asarray(tokens), jnp.asarray(positions), jnp.asarray(mask)
    )
  )
  full = np.asarray(_full(model, jnp.asarray(tokens), jnp.asarray(mask)))
  np.testing.assert_allclose(
    chunked, np.take_along_axis(full, positions[..., None], axis=1), atol=1e-5, rtol=0
  )


def test_masked_logits_vmap_over_sequences_equals_batch(checkpoints):
  model, _ = gm.load(checkpoints["BertForMaskedLM"][0])
  tokens, mask = batch(model.config, B=4)
  positions = np.array([[0, 5], [12, 1], [19, 3], [2, 6]])
  batched = _masked(model, jnp.asarray(tokens), jnp.asarray(positions), jnp.asarray(mask))
  one = lambda t, p, m: gm.masked_logits(model, t[None], p[None], m[None])[0]
  mapped = jax.jit(jax.vmap(one))(jnp.asarray(tokens), jnp.asarray(positions), jnp.asarray(mask))
  np.testing.assert_allclose(np.asarray(mapped), np.asarray(batched), atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", CAUSAL)
def test_sequence_logprob_is_the_sum_of_pytorch_next_token_logprobs(checkpoints, arch):
  import torch

  directory, torch_model = checkpoints[arch]
  model, _ = gm.load(directory)
  tokens, mask = batch(torch_model.config)
  logp = torch.log_softmax(torch.tensor(torch_logits(torch_model, tokens, mask)), -1).numpy()
  per_token = np.take_along_axis(logp[:, :-1], tokens[:, 1:, None], axis=-1)[..., 0] * mask[:, 1:]
  ours_tok = np.asarray(jax.jit(gm.token_logprobs)(model, jnp.asarray(tokens), jnp.asarray(mask)))
  ours_seq = np.asarray(jax.jit(gm.sequence_logprob)(model, jnp.asarray(tokens), jnp.asarray(mask)))
  np.testing.assert_allclose(ours_tok, per_token, atol=1e-4, rtol=0)
  np.testing.assert_allclose(ours_seq, per_token.sum(-1), atol=1e-3, rtol=1e-5)


def test_padding_does_not_change_the_real_tokens_logits(checkpoints):
  model, _ = gm.load(checkpoints["BertForMaskedLM"][0])
  tokens, mask = batch(model.config)
  short = np.asarray(_full(model, jnp.asarray(tokens[1:2, :13]), None))
  padded = np.asarray(_full(model, jnp.asarray(tokens), jnp.asarray(mask)))[1:2, :13]
  np.testing.assert_allclose(padded, short, atol=1e-5, rtol=0)


def test_sharded_checkpoint_loads_like_a_single_file(checkpoints, tmp_path):
  directory, torch_model = checkpoints["BertForMaskedLM"]
  torch_model.save_pretrained(str(tmp_path / "shards"), max_shard_size="20KB")
  assert (tmp_path / "shards" / "model.safetensors.index.json").is_file()
  one, _ = gm.load(directory)
  shards, _ = gm.load(tmp_path / "shards")
  tokens, mask = batch(one.config)
  np.testing.assert_array_equal(
    np.asarray(_full(shards, tokens, mask)), np.asarray(_full(one, tokens, mask))
  )


def test_bfloat16_compute_stays_close_to_float32(checkpoints):
  directory = checkpoints["BertForMaskedLM"][0]
  f32, _ = gm.load(directory)
  bf16, _ = gm.load(directory, dtype=jnp.bfloat16)
  tokens, mask = batch(f32.config)
  a = np.asarray(_full(f32, tokens, mask))[mask == 1]
  b = np.asarray(_full(bf16, tokens, mask))[mask == 1]
  assert b.dtype == np.float32
  assert np.abs(a - b).max() < 0.05 * np.abs(a).max()
  assert (a.argmax(-1) == b.argmax(-1)).mean() > 0.9


def test_bfloat16_checkpoint_loads_into_float32_params(tmp_path):
  import torch
  import transformers

  save_tiny("LlamaForCausalLM", tmp_path / "f32")
  transformers.LlamaForCausalLM.from_pretrained(
    str(tmp_path / "f32"), dtype=torch.bfloat16
  ).save_pretrained(str(tmp_path / "bf16"))
  reference = transformers.LlamaForCausalLM.from_pretrained(
    str(tmp_path / "bf16"), dtype=torch.float32
  ).eval()
  model, _ = gm.load(tmp_path / "bf16")
  assert model.word_VD.dtype == jnp.float32
  tokens, mask = batch(reference.config)
  np.testing.assert_allclose(
    np.asarray(_causal(model, tokens, mask))[mask == 1],
    torch_logits(reference, tokens, mask)[mask == 1],
    atol=1e-4,
  )


def test_exact_gelu_matches_the_float64_closed_form():
  """The erf-form GELU (the models' "gelu") is x Phi(x) to float32 precision, tails included,
  and keeps a bfloat16 input bfloat16."""
  import math

  from gmlm.nn._layers import activation

  x = np.linspace(-12.0, 12.0, 48001, dtype=np.float32)
  exact = np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in x.astype(np.float64)])
  ours = np.asarray(activation("gelu")(jnp.asarray(x)), np.float64)
  assert np.abs(ours - exact).max() < 2e-6
  assert activation("gelu")(jnp.ones(3, jnp.bfloat16)).dtype == jnp.bfloat16


def test_heads_output_projection_is_the_sum_over_heads():
  from gmlm.nn._layers import merge_heads

  rng = np.random.default_rng(0)
  a_BLNH = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
  o_NHD = rng.standard_normal((3, 4, 6)).astype(np.float32)
  want = np.einsum("blnh,nhd->bld", a_BLNH.astype(np.float64), o_NHD.astype(np.float64))
  np.testing.assert_allclose(
    np.asarray(merge_heads(jnp.asarray(a_BLNH), jnp.asarray(o_NHD))), want, rtol=1e-5, atol=1e-5
  )
