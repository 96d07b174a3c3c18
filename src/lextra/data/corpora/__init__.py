"""Text corpora as lists of whole documents, read offline (`sources`: a corpus spec to documents; `builtin` and
`formats`: the readers; `splits`: each document's train, validation or test split)."""

from lextra.data.corpora.builtin import BUILTIN_CORPORA
from lextra.data.corpora.document import Document
from lextra.data.corpora.formats import skipped_files
from lextra.data.corpora.sources import (
    iter_documents,
    iter_part_documents,
    load_corpus,
    mixture_parts,
    mixture_weights,
    source_files,
    source_fingerprint,
)
from lextra.data.corpora.splits import DEFAULT_FRACTIONS, SPLITS, split_corpus, split_of, split_overrides

__all__ = [
    "BUILTIN_CORPORA",
    "DEFAULT_FRACTIONS",
    "SPLITS",
    "Document",
    "iter_documents",
    "iter_part_documents",
    "load_corpus",
    "mixture_parts",
    "mixture_weights",
    "skipped_files",
    "source_files",
    "source_fingerprint",
    "split_corpus",
    "split_of",
    "split_overrides",
]
