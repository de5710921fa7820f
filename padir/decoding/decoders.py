"""The one decoder interface: a `Decoder` names one way to translate, `decode_fn` turns it into
a jitted (inputs_BS, key) -> (tokens_BT, passes) function for a model.

Kinds: PaDIR refinement (padir.decoding.refinement, num_steps passes at most, num_lengths length
candidates; with trim, decoded at the batch's longest candidate: `Trimmed`, `OneCallTrimmed`),
CTC decoding of a CTC model (padir.decoding.ctc; with trim, on sources cut to their width:
`SourceTrimmed`), the greedy, lookahead or Viterbi path of a DAG model (padir.decoding.dag; trim
as CTC's), AR greedy, or AR beam search (padir.decoding.autoregressive). translate,
evaluation, distillation and the latency measurement (padir.evaluation.latency) all decode
through it. Which kind a run decodes with is one choice, `choose` (the jobs' `decoder` key):
"auto" is the run's recommended decoder (`recommended`: CTC for a CTC model, refinement for a
PaDIR model, greedy for an AR model); a kind the model cannot decode is refused naming both.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from padir.data import tokenizer as tokenizer_lib
from padir.decoding import autoregressive as decode
from padir.decoding import ctc, refinement
from padir.decoding import dag as dag_decoding
from padir.model import transformer as model_lib

AUTO = "auto"
KINDS = ("ctc", "dag", "padir", "greedy", "beam")  # the kinds a user chooses (config.decoder)
CHOICES = (AUTO, *KINDS)


def model_kinds(model: Mapping[str, Any]) -> tuple[str, ...]:
  """The kinds that decode a model (a run's config.model, or a ModelConfig's fields as a dict),
  its recommended one first: ("ctc",) for a CTC model, ("dag",) for a DAG model, ("padir",) for
  a PaDIR model, ("greedy", "beam") for an AR model."""
  if model.get("decoder") == "ar":
    return ("greedy", "beam")
  if model.get("dag_upsample"):
    return ("dag",)
  return ("ctc",) if model.get("ctc_upsample") else ("padir",)


def recommended(model: Mapping[str, Any]) -> str:
  """The decoder "auto" stands for: CTC decoding for a CTC model, the DAG's lookahead path for a
  DAG model, refinement for a PaDIR model, greedy search for an AR model."""
  return model_kinds(model)[0]


def model_name(model: Mapping[str, Any]) -> str:
  """A model's kind in words, for messages."""
  if model.get("decoder") == "ar":
    return "an AR model"
  if model.get("dag_upsample"):
    return "a DAG model"
  return "a CTC model" if model.get("ctc_upsample") else "a PaDIR (refinement) model"


def choose(choice: str, model: Mapping[str, Any]) -> str:
  """The kind `choice` (one of CHOICES; "auto": `recommended`) decodes this model with; a
  kind the model cannot decode raises ValueError saying which kinds it can."""
  if choice not in CHOICES:
    raise ValueError(f"must be one of {', '.join(repr(c) for c in CHOICES)}")
  if choice == AUTO:
    return recommended(model)
  kinds = model_kinds(model)
  if choice not in kinds:
    raise ValueError(
      f"a {choice!r} decoder cannot decode {model_name(model)}; it decodes with "
      + " or ".join(repr(k) for k in kinds)
      + f" (or {AUTO!r}: {kinds[0]!r})"
    )
  return choice


@dataclasses.dataclass(frozen=True)
class Decoder:
  """One decoding method: kind "padir" (padir.decoding.refinement with `options`, default the paper's),
  "greedy" or "beam" (AR models, beam_size beams), or "torch" (AR greedy in eager PyTorch on
  the same weights: padir.torch_ar, a reference for the JAX decoders' speed). PaDIR with trim = k > 0 decodes each batch at
  the width of its longest candidate rounded up to a multiple of k (`Trimmed`), not at
  max_target_length: the same tokens for less work. source_trim = k > 0 (PaDIR, greedy, beam)
  also cuts the sources to their width rounded up to a multiple of k (`SourceTrimmed`: the
  encoder and the cross-attention over fewer positions, the same tokens); a CTC decoder's trim
  is that source trim already."""

  name: str
  kind: str
  options: refinement.RefineOptions = refinement.RefineOptions()
  beam_size: int = 5
  length_penalty: float = 0.6  # kind "beam": score / ((5 + n) / 6) ** length_penalty
  trim: int = 0
  one_call: bool = False  # trimmed PaDIR: the length choice and the refinement in one call
  passes: int = 1  # kind "ctc": at most this many passes
  blank_penalty: float = 0.0  # kind "ctc": lowers the blank's logit (padir.decoding.ctc.decode)
  source_trim: int = 0  # kinds "padir", "greedy", "beam": sources cut to their width (above)
  cache_window: int = 0  # kind "greedy": the KV cache grown k slots at a time (decode.greedy_ar)
  dag_strategy: str = "lookahead"  # kind "dag": padir.decoding.dag.STRATEGIES
  # kind "dag", strategy "beam": an n-gram model (padir.decoding.ngram.NgramLM) joined to the
  # beam with this weight (padir.decoding.dag.beam); None: the plain beam
  dag_lm: Any = dataclasses.field(default=None, compare=False, repr=False)
  dag_lm_weight: float = 0.0
  # kind "dag", strategy "beam": finished translations ranked by their score / |y|^this
  dag_length_norm: float = 0.0

  def record(self) -> dict[str, Any]:
    """The decoder's fields for a JSON record; an n-gram model as its order and state count."""
    out = dataclasses.asdict(dataclasses.replace(self, dag_lm=None))
    if self.dag_lm is not None:
      out["dag_lm"] = {"order": self.dag_lm.order, "states": self.dag_lm.num_states}
    return out

  @property
  def hypotheses(self) -> int:
    """Hypotheses decoded per source: PaDIR candidates, beams, 1 for greedy."""
    return {"padir": self.options.num_candidates, "beam": self.beam_size}.get(self.kind, 1)

  def check(self, model: model_lib.Transformer) -> None:
    wanted = "nar" if self.kind in ("padir", "ctc", "dag") else "ar"
    if self.kind not in ("padir", "ctc", "dag", "greedy", "beam", "torch"):
      raise ValueError(
        f"{self.name}: kind must be 'padir', 'ctc', 'dag', 'greedy', 'beam' or 'torch', got "
        f"{self.kind!r}"
      )
    if (self.kind == "dag") != bool(model.cfg.dag_upsample):
      raise ValueError(
        f"{self.name}: a {self.kind} decoder "
        + ("needs" if self.kind == "dag" else "cannot decode")
        + f" a DAG model (model.dag_upsample > 0); this one has {model.cfg.dag_upsample}"
      )
    if self.dag_lm is not None and (self.kind != "dag" or self.dag_strategy != "beam"):
      raise ValueError(
        f"{self.name}: an n-gram model joins a DAG model's beam search only, got kind "
        f"{self.kind!r} with strategy {self.dag_strategy!r}"
      )
    if self.dag_length_norm and (self.kind != "dag" or self.dag_strategy != "beam"):
      raise ValueError(
        f"{self.name}: dag_length_norm ranks a DAG model's beam search only, got kind "
        f"{self.kind!r} with strategy {self.dag_strategy!r}"
      )
    if self.dag_length_norm < 0:
      raise ValueError(f"{self.name}: dag_length_norm must be >= 0, got {self.dag_length_norm}")
    if self.cache_window and self.kind != "greedy":
      raise ValueError(f"{self.name}: cache_window is for kind 'greedy', got kind {self.kind!r}")
    if self.source_trim and self.kind not in ("padir", "greedy", "beam"):
      raise ValueError(
        f"{self.name}: source_trim is for kinds 'padir', 'greedy' and 'beam' (a ctc decoder's "
        f"trim cuts the source already), got kind {self.kind!r}"
      )
    if (self.kind == "ctc") != bool(model.cfg.ctc_upsample):
      raise ValueError(
        f"{self.name}: a {self.kind} decoder "
        + ("needs" if self.kind == "ctc" else "cannot decode")
        + f" a CTC model (model.ctc_upsample > 0); this one has {model.cfg.ctc_upsample}"
      )
    if model.cfg.decoder != wanted:
      raise ValueError(
        f"{self.name}: a {self.kind} decoder needs a model with decoder={wanted!r}, "
        f"got {model.cfg.decoder!r}"
      )


def _refine(model, inputs_BS, key, options, ar_model=None, width=None, encoded=None):
  out = refinement.refine(
    model, inputs_BS, key, options, ar_model=ar_model, width=width, encoded=encoded
  )
  return out["tokens"], out["passes"].mean()


def _greedy(model, inputs_BS, window=0):
  """The decoder passes greedy decoding ran: up to the batch's last EOS (its loop stops there)."""
  tokens_BT = decode.greedy_ar(model, inputs_BS, window)
  return tokens_BT, jnp.max(jnp.sum(tokens_BT != tokenizer_lib.PAD_ID, axis=1))


def _beam(model, inputs_BS, beam_size, length_penalty=0.6):
  out = decode.beam_search(model, inputs_BS, beam_size, length_penalty=length_penalty)
  return out["tokens"], out["steps"]


def _ctc(model, inputs_BS, num_passes, blank_penalty=0.0):
  out = ctc.decode(model, inputs_BS, num_passes, blank_penalty)
  return out["tokens"], out["passes"].mean()


def _dag(model, inputs_BS, strategy, lm=None, lm_weight=0.0, length_norm=0.0):
  out = dag_decoding.decode(
    model, inputs_BS, strategy, lm=lm, lm_weight=lm_weight, length_norm=length_norm
  )
  return out["tokens"], jnp.float32(1)


def pure_jit(fn: Callable, *models: nnx.Module) -> Callable:
  """fn(*models, *args) jitted with the models split ONCE into (graph, state): a call passes
  the state arrays only. nnx.jit instead walks and splits the module graph on every call, which
  costs ~7.6 ms per call for the synthetic task's 1.6M-parameter model on this CPU (2026-11-23),
  more than the whole AR greedy decode; latency at batch 1 must not include it. The arrays go
  in as a plain list read from the state's Variables at each call (so the function follows
  later updates of the model's parameters): jit flattens a list in microseconds, an
  nnx.State in a fraction of a millisecond (issue 30)."""
  graphdefs, states = zip(*(nnx.split(m) for m in models)) if models else ((), ())
  is_var = lambda x: isinstance(x, nnx.Variable)
  variables = [jax.tree.leaves(s, is_leaf=is_var) for s in states]
  treedefs = [jax.tree.structure(s) for s in states]
  if any(len(v) != td.num_leaves for v, td in zip(variables, treedefs)):
    raise ValueError("pure_jit: a model Variable holds other than one array")

  @jax.jit
  def run(arrays, *args):
    states = [jax.tree.unflatten(td, a) for td, a in zip(treedefs, arrays)]
    return fn(*(nnx.merge(g, s) for g, s in zip(graphdefs, states)), *args)

  return lambda *args: run([[v.get_raw_value() for v in vs] for vs in variables], *args)


class Trimmed:
  """PaDIR decoding at a trimmed width: one jitted call finds the batch's longest candidate
  length (the encoder and length head), the host rounds it up to a multiple of `multiple`
  (refinement.trimmed_width), and the refinement compiled for that width decodes. Each width
  compiles once: `warm` compiles all of them (ceil(T / multiple)) for an input shape, so that
  timed calls compile nothing. The tokens equal the untrimmed decode's; the cost is a
  device-to-host read of one integer per call (the encoder's states pass on to the refinement)."""

  def __init__(self, model, options, multiple: int, ar_model=None):
    self.max_len = model.cfg.max_target_length
    self.multiple = multiple
    self.widths = sorted(
      {refinement.trimmed_width(n, self.max_len, multiple) for n in range(1, self.max_len + 1)}
    )
    self._longest = pure_jit(lambda m, x: refinement.longest_candidate(m, x, options), model)
    models = (model,) if ar_model is None else (model, ar_model)

    def fn(width):
      if ar_model is None:
        return lambda m, x, key, enc: _refine(m, x, key, options, width=width, encoded=enc)
      return lambda m, a, x, key, enc: _refine(m, x, key, options, a, width, enc)

    self._by_width = {w: pure_jit(fn(w), *models) for w in self.widths}

  def _plan(self, inputs_BS):
    """(the width these inputs decode at, their encoder states)."""
    longest, encoded = self._longest(inputs_BS)
    return refinement.trimmed_width(int(longest), self.max_len, self.multiple), encoded

  def width(self, inputs_BS) -> int:
    return self._plan(inputs_BS)[0]

  def __call__(self, inputs_BS, key):
    width, encoded = self._plan(inputs_BS)
    return self._by_width[width](inputs_BS, key, encoded)

  def warm(self, inputs_BS, key) -> None:
    """Compiles every width (and the length call) for this input shape."""
    _, encoded = self._longest(inputs_BS)
    for f in self._by_width.values():
      jax.block_until_ready(f(inputs_BS, key, encoded))


class OneCallTrimmed:
  """Trimmed's decoding in ONE jitted call per batch: the encoder, the length choice and the
  refinement at the width of the longest candidate rounded up to `multiple`, chosen inside the
  call by a switch between the refinements compiled for each width (no host round trip
  between the length choice and the passes, one dispatch). The same tokens as Trimmed's."""

  def __init__(self, model, options, multiple: int, ar_model=None):
    T = model.cfg.max_target_length
    self.widths = sorted({refinement.trimmed_width(n, T, multiple) for n in range(1, T + 1)})
    widths = jnp.asarray(self.widths)

    def run(m, *rest):
      a, (x, key) = (rest[0], rest[1:]) if ar_model is not None else (None, rest)
      longest, encoded = refinement.longest_candidate(m, x, options)
      branches = [
        lambda w=w: _refine(m, x, key, options, a, width=w, encoded=encoded) for w in self.widths
      ]
      return jax.lax.switch(jnp.searchsorted(widths, longest), branches)

    self._fn = pure_jit(run, *((model,) if ar_model is None else (model, ar_model)))

  def __call__(self, inputs_BS, key):
    return self._fn(inputs_BS, key)


class SourceTrimmed:
  """A decoder run on the sources cut to the batch's longest source (PAD excluded) rounded up
  to a multiple of `multiple`: the columns cut hold PAD in every row, which every attention
  masks out, so the same tokens for less work (the encoder, the cross-attention and, with
  CTC, the decoder's slots all scale with the source width). The width is read on the host
  from the inputs (no device round trip); each width compiles once (`warm` compiles all)."""

  def __init__(self, fn: Callable, max_len: int, multiple: int):
    self.fn, self.max_len, self.multiple = fn, max_len, multiple
    self.widths = sorted(
      {refinement.trimmed_width(n, max_len, multiple) for n in range(1, max_len + 1)}
    )

  def width(self, inputs_BS) -> int:
    longest = int((np.asarray(inputs_BS) != tokenizer_lib.PAD_ID).sum(-1).max())
    return refinement.trimmed_width(max(longest, 1), self.max_len, self.multiple)

  def __call__(self, inputs_BS, key):
    return self.fn(inputs_BS[:, : self.width(inputs_BS)], key)

  def warm(self, inputs_BS, key) -> None:
    """Compiles every source width (and, inside, every width the wrapped decoder has)."""
    for w in self.widths:
      if hasattr(self.fn, "warm"):
        self.fn.warm(inputs_BS[:, :w], key)
      else:
        jax.block_until_ready(self.fn(inputs_BS[:, :w], key))


def decode_fn(
  model: model_lib.Transformer,
  decoder: Decoder,
  ar_model: model_lib.Transformer | None = None,
) -> Callable[..., tuple[Any, Any]]:
  """(inputs_BS, key) -> (tokens_BT, decoder passes per source), jitted (pure_jit), for this
  model and method. PaDIR tokens are the output after the options' stutter drop; ar_model: the
  reranker of options.rerank="ar"."""
  decoder.check(model)
  if decoder.source_trim:
    fn = decode_fn(model, dataclasses.replace(decoder, source_trim=0), ar_model)
    return SourceTrimmed(fn, model.cfg.max_source_length, decoder.source_trim)
  if decoder.kind == "ctc":
    passes, penalty = decoder.passes, decoder.blank_penalty
    fn = pure_jit(lambda m, x, key: _ctc(m, x, passes, penalty), model)
    return SourceTrimmed(fn, model.cfg.max_source_length, decoder.trim) if decoder.trim else fn
  if decoder.kind == "dag":
    strategy, lm = decoder.dag_strategy, decoder.dag_lm
    norm = jnp.float32(decoder.dag_length_norm)
    if lm is None:
      inner = pure_jit(lambda m, x, key, b: _dag(m, x, strategy, length_norm=b), model)
      fn = lambda x, key: inner(x, key, norm)  # noqa: E731
    else:  # the n-gram tables go in as arguments, not as constants of the program
      tables = lm.tables()
      weight = jnp.float32(decoder.dag_lm_weight)
      inner = pure_jit(lambda m, x, key, t, w, b: _dag(m, x, strategy, t, w, b), model)
      fn = lambda x, key: inner(x, key, tables, weight, norm)  # noqa: E731
    return SourceTrimmed(fn, model.cfg.max_source_length, decoder.trim) if decoder.trim else fn
  if decoder.kind == "padir":
    options = decoder.options
    if decoder.trim and decoder.one_call:
      return OneCallTrimmed(model, options, decoder.trim, ar_model)
    if decoder.trim:
      return Trimmed(model, options, decoder.trim, ar_model)
    if ar_model is None:
      return pure_jit(lambda m, x, key: _refine(m, x, key, options), model)
    return pure_jit(lambda m, a, x, key: _refine(m, x, key, options, a), model, ar_model)
  if decoder.kind == "greedy":
    window = decoder.cache_window
    return pure_jit(lambda m, x, key: _greedy(m, x, window), model)
  if decoder.kind == "torch":
    raise ValueError(
      f"{decoder.name}: a torch decoder is a benchmark's peer, not the library's: "
      "benchmarks/torch_ar.py builds it (pass its function to latency.measure(fn=...))"
    )
  beam_size, penalty = decoder.beam_size, decoder.length_penalty
  return pure_jit(lambda m, x, key: _beam(m, x, beam_size, penalty), model)


def standard_decoders(passes: Sequence[int] = (4, 10)) -> list[Decoder]:
  """The issue's set: PaDIR with 4 and 10 passes (5 lengths), AR greedy and beam 5."""
  return [Decoder(f"padir-{p}", "padir", refinement.RefineOptions(num_steps=p)) for p in passes] + [
    Decoder("ar-greedy", "greedy"),
    Decoder("ar-beam5", "beam", beam_size=5),
  ]


def frontier_decoders(
  lengths: Sequence[int] = (1, 2, 5),
  passes: Sequence[int] = (1, 2, 4),
  trims: Sequence[int] = (0, 8),
  variant: str = "length-prior-reset",
  row_stop: str = "compact",
  one_call: bool = True,
  source_trim: bool = True,
) -> list[Decoder]:
  """The PaDIR grid of the BLEU-latency frontier (issue 30): every number of length
  candidates x passes x trim, the named refinement variant (default: with the length prior),
  frozen candidates leaving the work (row_stop), trimmed decoders in one call (one_call) and
  with their sources cut to the same multiple (source_trim)."""
  extra = {**refinement.VARIANTS[variant], "row_stop": row_stop}
  return [
    Decoder(
      f"padir-L{g}-S{s}" + (f"-trim{k}" if k else ""),
      "padir",
      refinement.RefineOptions(num_steps=s, num_lengths=g, **extra),
      trim=k,
      one_call=one_call,
      source_trim=k if source_trim else 0,
    )
    for g in lengths
    for s in passes
    for k in trims
  ]


def dag_decoders(trims: Sequence[int] = (0, 8)) -> list[Decoder]:
  """A DAG model's rows: each strategy of padir.decoding.dag x source trim."""
  return [
    Decoder(f"dag-{s}" + (f"-trim{k}" if k else ""), "dag", trim=k, dag_strategy=s)
    for s in dag_decoding.STRATEGIES
    for k in trims
  ]


def ctc_decoders(
  passes: Sequence[int] = (1, 2), trims: Sequence[int] = (0, 8), blank_penalty: float = 0.0
) -> list[Decoder]:
  """The CTC model's rows of the frontier: at most each number of passes x source trim."""
  return [
    Decoder(
      f"ctc-S{s}" + (f"-trim{k}" if k else ""), "ctc", passes=s, trim=k, blank_penalty=blank_penalty
    )
    for s in passes
    for k in trims
  ]
