"""PaDIR's data: corpora on disk to token batches.

tokenizer (SentencePiece with fixed special ids), corpus (local corpora -> grain batches),
tfds_corpus (a local corpus as array_record files; the only module that loads
tensorflow_datasets), vocab (a config's vocabulary, trained once), bible (the offline en-es
corpus), synthetic (the synthetic cipher and reordering tasks).
"""
