"""Zero-shot topic scores of texts over the paper's eleven labels (paper A, 6.2, B.1, B.5).

A scorer maps texts to scores_XY: a probability over the labels per text (rows sum to 1), so
the uniform baseline is 1 / #labels. Two scorers share that interface (`TopicScorer`):

(a) `EmbeddingScorer`, the offline default: with E our Flax all-MiniLM-L6-v2 sentence
    embedding (unit norm) and d_l a short description of label l,
      scores(x)_l = softmax_l( scale · cos(E(x), E(d_l)) ).
    `scale` (default 20, i.e. a softmax temperature of 0.05 on cosines) sets how peaked the
    scores are; it changes no ranking, only how far a winner stands above 1 / #labels.
(b) `NLIScorer`: a Hugging Face NLI classifier (e.g. facebook/bart-large-mnli) the way the
    zero-shot-classification pipeline uses it with one true label: for each label the
    entailment logit of (premise = x, hypothesis = template.format(l)), softmax over labels.
    Needs torch (loaded through transformers only when present).

Validation (`newsgroups_accuracy`): the labelled 20-Newsgroups sample in gensim's test data
(`gensim/test/test_data/mini_newsgroup`: 100 alt.atheism, 100 sci.space posts; a zlib-packed
pickle of a scikit-learn Bunch, read by an unpickler that builds only lists, dicts and numpy
arrays) with headers removed; the groups a label covers (`GROUP_LABELS`: sci.space -> science)
are scored by top-1 accuracy against the chance rate 1 / #labels.

Shape letters: glauber's legend (Y: the topic labels, scores_XY: texts x labels).
"""

from __future__ import annotations

import copyreg
import io
import pickle
import re
import zlib
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from gmlm.runs import RunDir, markdown_table

LABELS = (
  "politics",
  "health",
  "pop culture",
  "sport",
  "food",
  "science",
  "technology",
  "finance",
  "education",
  "environment",
  "art",
)

DESCRIPTIONS = {
  "politics": "politics: government, elections, political parties, presidents, laws and policy",
  "health": "health: medicine, disease, doctors, hospitals, nutrition and fitness",
  "pop culture": "pop culture: celebrities, movies, television, pop music and entertainment",
  "sport": "sport: games, teams, players, matches, athletes and championships",
  "food": "food: cooking, recipes, restaurants, meals, ingredients and eating",
  "science": "science: scientific research, physics, chemistry, biology and astronomy",
  "technology": "technology: computers, software, the internet, gadgets and engineering",
  "finance": "finance: money, banks, stock markets, investment, business and the economy",
  "education": "education: schools, students, teachers, universities and learning",
  "environment": "environment: nature, climate change, pollution, wildlife and conservation",
  "art": "art: painting, sculpture, artists, museums, literature and design",
}

# 20-Newsgroups groups (prefixes) -> the label that covers them; groups not listed are uncovered.
GROUP_LABELS = {
  "talk.politics.": "politics",
  "sci.med": "health",
  "sci.space": "science",
  "sci.electronics": "technology",
  "sci.crypt": "technology",
  "comp.": "technology",
  "rec.sport.": "sport",
}


class TopicScorer(Protocol):
  labels: tuple[str, ...]

  def scores(self, texts: Sequence[str]) -> np.ndarray:
    """scores_XY, each row a probability over self.labels."""
    ...


def _softmax(z_XY: np.ndarray) -> np.ndarray:
  z_XY = z_XY - z_XY.max(-1, keepdims=True)
  p_XY = np.exp(z_XY)
  return p_XY / p_XY.sum(-1, keepdims=True)


class EmbeddingScorer:
  """Scorer (a): cosine similarity to label descriptions in a sentence-embedding space."""

  def __init__(
    self,
    model,
    tokenizer,
    labels: Sequence[str] = LABELS,
    descriptions: dict[str, str] | None = None,
    scale: float = 20.0,
    batch_size: int = 128,
    max_length: int = 256,
  ):
    from glauber.measures.semantic_drift import embed_texts

    self.model, self.tokenizer, self.scale = model, tokenizer, scale
    self.batch_size, self.max_length = batch_size, max_length
    self.labels = tuple(labels)
    descriptions = DESCRIPTIONS if descriptions is None else descriptions
    self.descriptions = [descriptions.get(label, label) for label in self.labels]
    self.e_TD = embed_texts(model, tokenizer, self.descriptions, batch_size)

  @classmethod
  def from_preset(cls, name: str = "minilm", **kw) -> "EmbeddingScorer":
    from glauber.measures.semantic_drift import load_embedder

    return cls(*load_embedder(name), **kw)

  def embeddings(self, texts: Sequence[str]) -> np.ndarray:
    from glauber.measures.semantic_drift import embed_texts

    return embed_texts(self.model, self.tokenizer, texts, self.batch_size, self.max_length)

  def scores(self, texts: Sequence[str], e_XD: np.ndarray | None = None) -> np.ndarray:
    """scores_XY; e_XD: the texts' embeddings when already computed."""
    e_XD = self.embeddings(texts) if e_XD is None else np.asarray(e_XD)
    return _softmax(self.scale * (e_XD @ self.e_TD.T))


class NLIScorer:
  """Scorer (b): a zero-shot NLI classifier (transformers + torch)."""

  def __init__(
    self,
    model,
    tokenizer,
    labels: Sequence[str] = LABELS,
    template: str = "This example is about {}.",
    batch_size: int = 32,
  ):
    self.model, self.tokenizer, self.template = model.eval(), tokenizer, template
    self.labels, self.batch_size = tuple(labels), batch_size
    entail = [i for label, i in model.config.label2id.items() if label.lower().startswith("entail")]
    if not entail:
      raise ValueError(
        f"the classifier's labels {model.config.label2id} have no 'entailment' label; an NLI "
        "model (e.g. facebook/bart-large-mnli) is needed"
      )
    self.entailment_id = int(entail[0])

  @classmethod
  def from_pretrained(cls, name: str = "facebook/bart-large-mnli", **kw) -> "NLIScorer":
    try:
      import torch  # noqa: F401
    except ImportError:
      raise ImportError("the NLI topic scorer needs torch: pip install torch") from None
    import transformers

    model = transformers.AutoModelForSequenceClassification.from_pretrained(name)
    return cls(model, transformers.AutoTokenizer.from_pretrained(name), **kw)

  def scores(self, texts: Sequence[str]) -> np.ndarray:
    import torch

    texts, L = list(texts), len(self.labels)
    hypotheses = [self.template.format(label) for label in self.labels]
    premises = [t for t in texts for _ in range(L)]
    pairs = list(zip(premises, hypotheses * len(texts)))
    logits = []
    with torch.no_grad():
      for i in range(0, len(pairs), self.batch_size):
        chunk = pairs[i : i + self.batch_size]
        batch = self.tokenizer(
          [p for p, _ in chunk],
          [h for _, h in chunk],
          padding=True,
          truncation="only_first",
          return_tensors="pt",
        )
        out = self.model(**batch).logits[:, self.entailment_id]
        logits.append(out.float().numpy())
    if not texts:
      return np.zeros((0, L))
    return _softmax(np.concatenate(logits).reshape(len(texts), L).astype(np.float64))


class _Bunch(dict):
  """scikit-learn's Bunch, as the unpickler rebuilds it (a dict)."""


_ALLOWED = {
  ("copy_reg", "_reconstructor"): copyreg._reconstructor,
  ("sklearn.datasets.base", "Bunch"): _Bunch,
  ("__builtin__", "dict"): dict,
  ("__builtin__", "object"): object,
  ("numpy", "ndarray"): np.ndarray,
  ("numpy", "dtype"): np.dtype,
}


class _SafeUnpickler(pickle.Unpickler):
  def find_class(self, module: str, name: str):
    if (module, name) == ("numpy.core.multiarray", "_reconstruct"):
      from numpy._core.multiarray import _reconstruct  # builds an empty array of a dtype

      return _reconstruct
    if (module, name) not in _ALLOWED:
      raise pickle.UnpicklingError(f"refusing to load {module}.{name} from the newsgroups pickle")
    return _ALLOWED[(module, name)]


def newsgroups_file() -> Path:
  """gensim's mini_newsgroup: from the installed gensim, else the repo's .whl/."""
  import importlib.util

  spec = importlib.util.find_spec("gensim")
  roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
  roots += [Path(".whl/gensim"), Path(__file__).resolve().parents[1] / ".whl/gensim"]
  for root in roots:
    if (f := root / "test/test_data/mini_newsgroup").is_file():
      return f
  raise FileNotFoundError(
    "gensim's test data (test/test_data/mini_newsgroup) not found: "
    "pip install --no-deps --target .whl gensim==4.3.3"
  )


def _body(post: str) -> str:
  """The post without its header block (Newsgroups:, Path:, ...), the Subject line kept."""
  head, _, body = post.partition("\n\n")
  subject = re.search(r"^Subject:\s*(.*)$", head, re.M)
  return ((subject.group(1) + "\n") if subject else "") + body.strip()


def load_newsgroups(path: str | Path | None = None) -> tuple[list[str], list[str]]:
  """(texts without headers, newsgroup names) of the gensim 20-Newsgroups sample."""
  raw = zlib.decompress(Path(path or newsgroups_file()).read_bytes())
  bunch = _SafeUnpickler(io.BytesIO(raw), encoding="latin1").load()
  names = list(bunch["target_names"])
  return [_body(p) for p in bunch["data"]], [names[int(t)] for t in bunch["target"]]


def covering_label(group: str, labels: Sequence[str] = LABELS) -> str | None:
  for prefix, label in GROUP_LABELS.items():
    if group.startswith(prefix) and label in labels:
      return label
  return None


def newsgroups_accuracy(
  scorer: TopicScorer, path: str | Path | None = None, covered_only: bool = False
) -> dict:
  """Top-1 accuracy on the posts whose group a label covers, the chance rate, and per group
  how often each label wins (uncovered groups too, unless covered_only: where their posts go)."""
  texts, groups = load_newsgroups(path)
  if covered_only:
    keep = [covering_label(g, scorer.labels) is not None for g in groups]
    texts = [t for t, k in zip(texts, keep) if k]
    groups = [g for g, k in zip(groups, keep) if k]
  top = np.asarray(scorer.labels)[np.argmax(scorer.scores(texts), -1)]
  want = [covering_label(g, scorer.labels) for g in groups]
  covered = np.array([w is not None for w in want])
  correct = np.array([w == t for w, t in zip(want, top)])
  winners = {}
  for g in sorted(set(groups)):
    won = top[np.asarray(groups) == g]
    winners[g] = {label: int((won == label).sum()) for label in scorer.labels}
  return {
    "labels": list(scorer.labels),
    "covered": {g: covering_label(g, scorer.labels) for g in sorted(set(groups))},
    "num_covered": int(covered.sum()),
    "num_correct": int(correct[covered].sum()),
    "accuracy": float(correct[covered].mean()) if covered.any() else None,
    "chance": 1.0 / len(scorer.labels),
    "winners": winners,
  }


def section(results: dict, run: RunDir | None = None) -> str:
  """Markdown of the scorer's 20-Newsgroups check (no figure)."""
  groups = sorted(results["winners"])
  rows = [
    [
      g,
      results["covered"][g] or "(none)",
      ", ".join(
        f"{label} {k}"
        for label, k in sorted(results["winners"][g].items(), key=lambda kv: -kv[1])
        if k
      ),
    ]
    for g in groups
  ]
  acc = results["accuracy"]
  return "\n".join(
    [
      "## Topic scorer check (20-Newsgroups sample of gensim's test data)\n",
      f"Top-1 accuracy over {len(results['labels'])} labels on the {results['num_covered']} "
      f"posts whose group a label covers: "
      + ("—" if acc is None else f"{acc:.3f} ({results['num_correct']} correct)")
      + f"; chance {results['chance']:.3f}.\n",
      markdown_table(["newsgroup", "covering label", "top label: posts"], rows),
    ]
  )
