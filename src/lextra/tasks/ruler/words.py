"""The built-in word list of the RULER tasks: keys of the needles (`word-word`) and the words of `cwe`.

The list is package data, `words.txt` beside this module (one word a line), generated offline from the `english`
corpus (Shakespeare and the King James Bible) by `corpus_words`: every lowercase word of 4 to 10 letters that
occurs at least 5 times, sorted. RULER (Hsieh et al. 2024, arXiv 2404.06654)
draws the same roles from the `wonderwords` lists; a list of our own keeps the suite offline and dependency-free.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Sequence
from importlib import resources

from lextra.data import Document

#: a lowercase word not glued to other letters or an apostrophe (so "o'er" and "Lord" are not words here)
WORD = re.compile(r"(?<![A-Za-z'])[a-z]+(?![A-Za-z'])")
#: the list's file in this package
WORDS_FILE = "words.txt"


def corpus_words(docs: Sequence[Document], min_count: int = 5, shortest: int = 4, longest: int = 10) -> list[str]:
    """The sorted words of `docs` with `shortest`..`longest` letters occurring at least `min_count` times."""
    counts = collections.Counter(word for doc in docs for word in WORD.findall(doc.text))
    return sorted(w for w, n in counts.items() if n >= min_count and shortest <= len(w) <= longest)


def load_words() -> tuple[str, ...]:
    """The built-in list, read from the package's `words.txt` (one word a line, sorted)."""
    text = resources.files("lextra.tasks.ruler").joinpath(WORDS_FILE).read_text(encoding="utf-8")
    return tuple(text.split())


#: the words, sorted
WORDS: tuple[str, ...] = load_words()
