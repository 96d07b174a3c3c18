"""A document: a stable id (it decides the split) and its whole text."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Document:
    """One whole document: `id` is stable across runs (it decides the split), `text` is its full text."""

    id: str
    text: str
