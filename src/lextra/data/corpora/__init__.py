"""Text corpora as lists of documents: built-in corpora, local files, saved Hugging Face datasets; hash splits.

Every loader works offline. A document stays whole from loading to evaluation, so long-context evaluation can
use documents that really are long instead of stitched-together short ones. `sources` turns a corpus spec into
documents, `builtin` and `formats` read them, `splits` assigns each to train, validation or test.
"""

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
