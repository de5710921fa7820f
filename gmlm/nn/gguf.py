"""GGUF files read with numpy alone: no `gguf` package, no torch.

The format (llama.cpp's gguf.md, versions 2 and 3): the magic b"GGUF", a uint32 version, the
tensor and metadata counts (uint64), then the metadata as (string key, uint32 type, value)
triples, the tensor table (name, dims fastest-moving first, ggml type, offset into the data),
and the data from the next multiple of `general.alignment` (32). Everything little-endian.

  meta, tensors = read("model.gguf")      # metadata dict; {name: (ggml type, shape, raw bytes)}
  w = dequantize(*tensors["blk.0.attn_q.weight"])   # float32, numpy's (reversed) shape
  tok = tokenizer("model.gguf")           # a transformers fast tokenizer, built without torch

Dequantised types: F32, F16, BF16, Q4_0, Q4_1, Q8_0 (32-element blocks: an f16 scale d, for
Q4_1 an f16 minimum m, then the codes; a Q4 byte holds element k in its low nibble and element
k + 16 in its high one): x = d (q - 8) (Q4_0), d q + m (Q4_1), d q (Q8_0). Other types are
refused in one line naming the type (tested equal to the `gguf` package and transformers).
"""

from __future__ import annotations

import pathlib
import struct
from typing import Any

import numpy as np

from gmlm.checks import UserError

_SCALARS = {  # metadata value type -> struct format
  0: "<B",
  1: "<b",
  2: "<H",
  3: "<h",
  4: "<I",
  5: "<i",
  6: "<f",
  7: "<?",
  10: "<Q",
  11: "<q",
  12: "<d",
}
STRING, ARRAY = 8, 9
F32, F16, Q4_0, Q4_1, Q8_0, BF16 = 0, 1, 2, 3, 8, 30
NAMES = {F32: "F32", F16: "F16", Q4_0: "Q4_0", Q4_1: "Q4_1", Q8_0: "Q8_0", BF16: "BF16"}
BLOCK = {Q4_0: (32, 18), Q4_1: (32, 20), Q8_0: (32, 34)}  # elements, bytes per block
WIDTH = {F32: 4, F16: 2, BF16: 2}


class _Cursor:
  def __init__(self, blob: np.ndarray, path: str):
    self.blob, self.pos, self.path = blob, 0, path

  def many(self, fmt: str) -> tuple:
    try:
      out = struct.unpack_from(fmt, self.blob, self.pos)
    except struct.error:
      raise UserError(f"{self.path}: the GGUF file ends early (truncated download?)") from None
    self.pos += struct.calcsize(fmt)
    return out

  def unpack(self, fmt: str):
    return self.many(fmt)[0]

  def string(self) -> str:
    n = self.unpack("<Q")
    raw = bytes(self.blob[self.pos : self.pos + n])
    self.pos += n
    return raw.decode("utf-8", errors="replace")

  def value(self, kind: int):
    if kind in _SCALARS:
      return self.unpack(_SCALARS[kind])
    if kind == STRING:
      return self.string()
    if kind == ARRAY:
      inner, count = self.unpack("<I"), self.unpack("<Q")
      if inner in _SCALARS:
        return list(self.many(f"<{count}{_SCALARS[inner][1]}"))
      return [self.value(inner) for _ in range(count)]
    raise UserError(f"{self.path}: unknown GGUF metadata type {kind}")


def read(path: str | pathlib.Path) -> tuple[dict[str, Any], dict[str, tuple[int, tuple, Any]]]:
  """(metadata, {tensor name: (ggml type, numpy shape, raw bytes view)}), memory-mapped."""
  path = str(path)
  blob = np.memmap(path, mode="r", dtype=np.uint8)
  cur = _Cursor(blob, path)
  if bytes(blob[:4]) != b"GGUF":
    raise UserError(f"{path} is not a GGUF file (it does not start with b'GGUF')")
  cur.pos = 4
  version = cur.unpack("<I")
  if version not in (2, 3):
    raise UserError(f"{path} is GGUF version {version}; versions 2 and 3 are read")
  num_tensors, num_meta = cur.unpack("<Q"), cur.unpack("<Q")
  meta = {}
  for _ in range(num_meta):
    key = cur.string()
    meta[key] = cur.value(cur.unpack("<I"))
  table = []
  for _ in range(num_tensors):
    name = cur.string()
    dims = [cur.unpack("<Q") for _ in range(cur.unpack("<I"))]
    kind, offset = cur.unpack("<I"), cur.unpack("<Q")
    table.append((name, kind, tuple(reversed(dims)), offset))
  align = int(meta.get("general.alignment", 32))
  start = -(-cur.pos // align) * align
  tensors = {}
  for name, kind, shape, offset in table:
    count = int(np.prod(shape))
    if kind in WIDTH:
      size = count * WIDTH[kind]
    elif kind in BLOCK:
      size = count // BLOCK[kind][0] * BLOCK[kind][1]
    else:
      raise UserError(
        f"{path}: tensor {name} has ggml type {kind}, which gmlm does not dequantise (it reads "
        f"{', '.join(NAMES.values())}); use a file quantised to one of those"
      )
    lo = start + offset
    if lo + size > len(blob):
      raise UserError(f"{path}: the GGUF file ends early (truncated download?)")
    tensors[name] = (kind, shape, blob[lo : lo + size])
  return meta, tensors


def dequantize(kind: int, shape: tuple, raw) -> np.ndarray:
  """A tensor's float32 values in numpy's shape."""
  raw = np.asarray(raw)
  if kind == F32:
    return raw.view("<f4").reshape(shape).astype(np.float32)
  if kind == F16:
    return raw.view("<f2").reshape(shape).astype(np.float32)
  if kind == BF16:
    return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
  elements, width = BLOCK[kind]
  b = raw.reshape(-1, width)
  d = b[:, :2].copy().view("<f2").astype(np.float32)  # [blocks, 1]
  if kind == Q8_0:
    q = b[:, 2:].copy().view(np.int8).astype(np.float32)
    return (d * q).reshape(shape)
  codes = b[:, 2:] if kind == Q4_0 else b[:, 4:]
  q = np.concatenate([codes & 0x0F, codes >> 4], axis=1).astype(np.float32)
  if kind == Q4_0:
    return (d * (q - 8.0)).reshape(shape)
  m = b[:, 2:4].copy().view("<f2").astype(np.float32)
  return (d * q + m).reshape(shape)


_SPECIAL = {"bos_token": "bos_token_id", "eos_token": "eos_token_id"}
_SPECIAL.update(unk_token="unknown_token_id", pad_token="padding_token_id")


def tokenizer(path: str | pathlib.Path):
  """The file's tokenizer as transformers builds it for `from_pretrained(gguf_file=...)`, but
  from this reader's metadata (transformers' own GGUF reader imports torch)."""
  from transformers import PreTrainedTokenizerFast
  from transformers.integrations.gguf.gguf_tokenizer_mapping import (
    GGUF_TOKENIZER_MAPPING,
    convert_gguf_tokenizer,
  )

  meta, _ = read(path)
  grouped = {
    group: {
      new: meta[f"tokenizer.{old}"] for old, new in names.items() if f"tokenizer.{old}" in meta
    }
    for group, names in GGUF_TOKENIZER_MAPPING.items()
  }
  tok_dict, tok_config = grouped["tokenizer"], grouped["tokenizer_config"]
  if "tokens" not in tok_dict:
    raise UserError(f"{path} holds no tokenizer (no tokenizer.ggml.tokens in its metadata)")
  if tok_dict.get("tokenizer_type") == "llama":
    tok_config.setdefault("add_bos_token", True)
  for name, key in _SPECIAL.items():
    token_id = meta.get(f"tokenizer.ggml.{key}")
    tok_config[name] = tok_dict["tokens"][token_id] if token_id is not None else None
  backend, extra = convert_gguf_tokenizer(meta["general.architecture"], tok_dict)
  return PreTrainedTokenizerFast(tokenizer_object=backend, **tok_config, **extra)
