"""Writes tests/fixtures/accelerator/<arch>.npz: float32 CPU references for model parity on an
accelerator (tests/test_accelerator.py).

  python tools/make_accelerator_fixtures.py      # needs torch and transformers (CPU)

For each family (BERT, ModernBERT, GPT-2, Llama) a tiny transformers model with every weight
randomised (tests/models_util.py: tiny_torch_model, seed 0) is saved with save_pretrained; the
file holds its config.json text ("config_json"), its safetensors tensors ("w/<name>", float32),
a batch with one right-padded row ("tokens", "mask": models_util.batch, seed 0) and PyTorch's
float32 CPU logits at every position ("logits"). The test rebuilds the checkpoint directory
from the file, loads it with gmlm.nn.load_model and compares logits at the real positions.
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "fixtures" / "accelerator"
ARCHS = ("BertForMaskedLM", "ModernBertForMaskedLM", "GPT2LMHeadModel", "LlamaForCausalLM")


def main() -> None:
  sys.path.insert(0, str(REPO / "tests"))
  import torch
  from models_util import batch, tiny_torch_model, torch_logits
  from safetensors.numpy import load_file

  torch.set_num_threads(1)
  OUT.mkdir(parents=True, exist_ok=True)
  for arch in ARCHS:
    model = tiny_torch_model(arch, seed=0)
    with tempfile.TemporaryDirectory() as d:
      model.save_pretrained(d)
      config = json.loads((pathlib.Path(d) / "config.json").read_text())
      tensors = load_file(str(pathlib.Path(d) / "model.safetensors"))
    tokens, mask = batch(model.config, seed=0)
    logits = torch_logits(model, tokens, mask).astype(np.float32)
    arrays = {f"w/{k}": np.asarray(v, np.float32) for k, v in tensors.items()}
    path = OUT / f"{arch}.npz"
    np.savez_compressed(
      path,
      config_json=np.array(json.dumps(config)),
      tokens=tokens.astype(np.int32),
      mask=mask.astype(np.int32),
      logits=logits,
      **arrays,
    )
    print(
      f"{path.relative_to(REPO)}: {path.stat().st_size / 1e3:.0f} kB, {len(arrays)} tensors, "
      f"logits {logits.shape}, max |logit| {np.abs(logits).max():.2f}"
    )


if __name__ == "__main__":
  main()
