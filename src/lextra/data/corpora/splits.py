"""Hash splits: each document's split is decided by a hash of its id alone (stable across runs and machines),
with the few moves that give every split of a small corpus at least one document."""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterable, Sequence

from lextra.data.corpora.document import Document
from lextra.errors import DataError

SPLITS: tuple[str, str, str] = ("train", "validation", "test")
"""Split names, in the order of the `fractions` arguments."""

DEFAULT_FRACTIONS: tuple[float, float, float] = (0.9, 0.05, 0.05)
"""Default train / validation / test fractions."""


def _check_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    """Validate train/validation/test fractions: three non-negative numbers summing to 1."""
    values = tuple(float(f) for f in fractions)
    if len(values) != 3 or any(not math.isfinite(f) or f < 0 for f in values) or abs(sum(values) - 1) > 1e-6:
        raise DataError(
            f"split fractions must be three non-negative numbers (train, validation, test) summing to 1, "
            f"got {tuple(fractions)}"
        )
    return values[0], values[1], values[2]


def _unit_hash(doc_id: str) -> float:
    """A stable number in [0, 1) from the document id (SHA-256, identical on every machine and run)."""
    digest = hashlib.sha256(doc_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def split_of(doc_id: str, fractions: Sequence[float] = DEFAULT_FRACTIONS) -> str:
    """The split ("train", "validation" or "test") of a document, decided by its id alone."""
    train, validation, _ = _check_fractions(fractions)
    u = _unit_hash(doc_id)
    if u < train:
        return "train"
    if u < train + validation:
        return "validation"
    return "test"


def split_corpus(docs: Sequence[Document], fractions: Sequence[float] = DEFAULT_FRACTIONS) -> dict[str, list[Document]]:
    """Partition documents by `split_of` and `split_overrides`, keeping corpus order."""
    values = _check_fractions(fractions)
    moved = split_overrides((doc.id for doc in docs), values)
    parts: dict[str, list[Document]] = {name: [] for name in SPLITS}
    for doc in docs:
        parts[moved.get(doc.id) or split_of(doc.id, values)].append(doc)
    return parts


def split_overrides(doc_ids: Iterable[str], fractions: Sequence[float] = DEFAULT_FRACTIONS) -> dict[str, str]:
    """The documents `split_corpus` moves out of their `split_of` split (id -> split), streaming the ids once.

    With at least three documents, each empty split with a positive fraction (in train, validation, test order)
    takes the smallest-(hash, id) document of the largest split (train wins ties) when that split has two or more.
    """
    values = _check_fractions(fractions)
    counts = dict.fromkeys(SPLITS, 0)
    smallest: dict[str, list[tuple[float, str]]] = {name: [] for name in SPLITS}
    for doc_id in doc_ids:
        name = split_of(doc_id, values)
        counts[name] += 1
        key = (_unit_hash(doc_id), doc_id)
        if len(smallest[name]) < 2 or key < smallest[name][-1]:
            bisect.insort(smallest[name], key)
            del smallest[name][2:]
    moved: dict[str, str] = {}
    if sum(counts.values()) < 3:
        return moved
    for name, fraction in zip(SPLITS, values, strict=True):
        if counts[name] or fraction == 0:
            continue
        donor = max(SPLITS, key=lambda s: (counts[s], s == "train"))
        if counts[donor] < 2:
            continue
        _, doc_id = smallest[donor].pop(0)
        counts[donor] -= 1
        counts[name] += 1
        moved[doc_id] = name
    return moved
