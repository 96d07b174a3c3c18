"""The noise the needles hide in: RULER's repeated sentences, and an essay stream read from a corpus.

RULER's essay haystack is Paul Graham's essays, which need a download; lextra reads the held-out (test) split of
its built-in `english` corpus instead, whitespace collapsed as RULER does, as one stream of words that a sample
reads from a seeded sentence start (wrapping around at the end).
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Sequence

from lextra.data import BUILTIN_CORPORA, Document, load_corpus, split_corpus
from lextra.errors import DataError

#: RULER's noise: the haystack of niah_single_1 and, one per line, of variable tracking
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
#: the corpus an essay haystack reads by default
DEFAULT_HAYSTACK = "english"
#: a word that ends a sentence: its last letter or digit is followed by . ! or ? (and maybe quotes or brackets)
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")
#: how far (in words) a needle may move to reach a sentence boundary
SNAP_WORDS = 40


def haystack_documents(corpus: str = DEFAULT_HAYSTACK, split: str = "test") -> list[Document]:
    """A split of `corpus` (default the test split, held out from models trained on it), the documents of an essay
    haystack; training rows read the train split. A built-in corpus is read once per process."""
    documents = builtin_split(corpus, split) if corpus in BUILTIN_CORPORA else read_split(corpus, split)
    if not documents:
        raise DataError(f"corpus {corpus!r} has no {split}-split documents to hide needles in; give a larger corpus")
    return list(documents)


def read_split(corpus: str, split: str) -> tuple[Document, ...]:
    """The `split` documents of `corpus`, read now."""
    return tuple(split_corpus(load_corpus(corpus))[split])


@functools.lru_cache(maxsize=2 * len(BUILTIN_CORPORA))
def builtin_split(corpus: str, split: str) -> tuple[Document, ...]:
    """A split of a built-in corpus (it cannot change while the process runs), read once."""
    return read_split(corpus, split)


class EssayStream:
    """The words of some documents as one cyclic stream, with the positions where sentences start."""

    def __init__(self, documents: Sequence[Document]) -> None:
        words = [w for doc in documents for w in re.sub(r"\s+", " ", doc.text).strip().split(" ") if w]
        if len(words) < 2:
            raise DataError("an essay haystack needs documents with text; the ones given are empty")
        self.words = words
        self.ends = [bool(_SENTENCE_END.search(w)) for w in words]
        starts = [i + 1 for i, end in enumerate(self.ends[:-1]) if end]
        self.starts = starts or [0]

    def start(self, rng: random.Random) -> int:
        """A seeded sentence start."""
        return rng.choice(self.starts)

    def read(self, start: int, count: int) -> list[str]:
        """`count` words from `start`, wrapping around."""
        n = len(self.words)
        return [self.words[(start + i) % n] for i in range(count)]

    def snap(self, start: int, count: int, index: int) -> int:
        """The insertion point (words before it) nearest `index` that ends a sentence, within `SNAP_WORDS`; the
        haystack's ends always qualify; `index` itself when none does."""
        n = len(self.words)

        def boundary(i: int) -> bool:
            return i in (0, count) or (0 < i < count and self.ends[(start + i - 1) % n])

        for shift in range(SNAP_WORDS + 1):
            for candidate in (index - shift, index + shift):
                if 0 <= candidate <= count and boundary(candidate):
                    return candidate
        return index
