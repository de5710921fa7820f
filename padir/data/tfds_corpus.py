"""A local parallel corpus (padir.data.corpus's format) as a tfds dataset: array_record files, opened
as random-access data sources for padir.data.corpus.make_dataset.

tensorflow_datasets is imported here only, so `import padir` does not load it; it loads when a
dataset is built (`local_data_sources`).
"""

from __future__ import annotations

import fcntl
import os
from typing import Any, Sequence

import tensorflow_datasets as tfds

from padir.data.corpus import SPLITS, fingerprint, read_split, split_files


class LocalParallelCorpus(tfds.core.GeneratorBasedBuilder):
  """A local parallel corpus as a tfds dataset with features {source, target} (UTF-8 bytes).

  The builder config is named after a fingerprint of the corpus files, so editing the corpus
  makes a fresh dataset instead of silently reusing a stale one.
  """

  VERSION = tfds.core.Version("1.0.0")

  @tfds.core.utils.classproperty
  @classmethod
  def code_path(cls) -> None:
    # No checksums file to look up next to this module (nothing is downloaded). tfds' own lookup
    # imports `importlib_resources`, which tensorflow-datasets does not declare.
    return None

  def __init__(
    self,
    *,
    corpus_dir: str,
    source_lang: str,
    target_lang: str,
    splits: Sequence[str] = SPLITS,
    **kwargs,
  ):
    self._corpus_dir = corpus_dir
    self._langs = (source_lang, target_lang)
    self._files = {s: split_files(corpus_dir, s, source_lang, target_lang) for s in splits}
    digest = fingerprint(self._files)
    config = tfds.core.BuilderConfig(name=f"{source_lang}_{target_lang}_{digest[:12]}")
    kwargs.setdefault("file_format", "array_record")
    super().__init__(config=config, **kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
      builder=self,
      description=f"Local parallel corpus {self._corpus_dir} ({self._langs[0]}->{self._langs[1]})",
      features=tfds.features.FeaturesDict(
        {"source": tfds.features.Text(), "target": tfds.features.Text()}
      ),
    )

  def _split_generators(self, dl_manager):
    del dl_manager
    return {split: self._generate_examples(split) for split in self._files}

  def _generate_examples(self, split: str):
    pairs = read_split(self._corpus_dir, split, *self._langs)
    for i, (src, tgt) in enumerate(pairs):
      yield i, {"source": src, "target": tgt}


def local_data_sources(
  corpus_dir: str,
  source_lang: str,
  target_lang: str,
  data_dir: str | None = None,
  splits: Sequence[str] = SPLITS,
) -> dict[str, Any]:
  """Prepares (once) and opens the array_record files: split -> random-access data source.

  Two runs on one corpus (an AR baseline and PaDIR trained side by side) would build the same
  cache at once and the second's final rename fail; a lock file in data_dir makes the second
  wait and then read the first's files."""
  data_dir = data_dir or os.path.join(corpus_dir, "tfds")
  os.makedirs(data_dir, exist_ok=True)
  with open(os.path.join(data_dir, ".prepare.lock"), "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    builder = LocalParallelCorpus(
      corpus_dir=corpus_dir,
      source_lang=source_lang,
      target_lang=target_lang,
      splits=splits,
      data_dir=data_dir,
    )
    builder.download_and_prepare(file_format="array_record")
  return builder.as_data_source()
