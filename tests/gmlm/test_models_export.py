"""`save_pretrained` writes a checkpoint that transformers reads back to the same logits."""

from __future__ import annotations

import numpy as np
import pytest
from models_util import batch, tiny_torch_model, torch_logits

from gmlm import nn as gm

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("arch", ["BertForMaskedLM", "RobertaForMaskedLM"])
def test_untied_head_round_trips_through_transformers(tiny_checkpoint, tmp_path, arch):
  """An untied head's output bias is the decoder's own (PyTorch adds decoder.bias)."""
  overrides = dict(tie_word_embeddings=False, hidden_act="relu")
  model, _ = gm.load(tiny_checkpoint(arch, **overrides))
  gm.save_pretrained(model, tmp_path)
  again = getattr(transformers, arch).from_pretrained(str(tmp_path)).eval()
  tokens, mask = batch(again.config)
  want = torch_logits(tiny_torch_model(arch, **overrides), tokens, mask)
  np.testing.assert_allclose(
    torch_logits(again, tokens, mask)[mask == 1], want[mask == 1], atol=1e-5, rtol=0
  )
  ours = np.asarray(gm.full_logits(gm.load_model(tmp_path), tokens, mask))
  np.testing.assert_allclose(ours[mask == 1], want[mask == 1], atol=1e-4, rtol=0)
