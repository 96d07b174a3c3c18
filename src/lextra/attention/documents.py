"""The document mask of one packed row (`DocumentMask`): causal attention within each document, nothing across
documents (Zhao et al. 2024, arXiv 2402.13991; attention-gym's `generate_doc_mask_mod`).

With `first[m]` the index where query m's document starts, query m sees key n exactly when first[m] <= n <= m: a
band, declared as the other masks do. Positions are the row's indices, exact per document for schemes that depend
on m - n alone."""

from __future__ import annotations

import hashlib
from typing import Any

import torch
from torch import Tensor

from lextra.attention.masks import UNBOUNDED, CausalMask, Mask
from lextra.errors import ConfigError


class DocumentMask(Mask):
    """Causal within each document of a row whose (L,) `documents` ids run in contiguous blocks."""

    name = "documents"
    summary = "causal within each document of a packed row, nothing across documents"
    causal = True

    def __init__(self, documents: Tensor) -> None:
        ids = documents.reshape(-1).long()
        if ids.numel() == 0:
            raise ConfigError("a document mask needs one document id per position, got none")
        change = torch.ones_like(ids, dtype=torch.bool)
        change[1:] = ids[1:] != ids[:-1]
        index = torch.arange(ids.numel(), device=ids.device)
        #: the index where each position's document starts (non-decreasing)
        self.first = torch.where(change, index, torch.zeros_like(index)).cummax(0).values
        self._first_host = self.first.cpu()
        self.length = ids.numel()
        self.documents = int(change.sum())
        self._digest = hashlib.sha1(self._first_host.numpy().tobytes()).hexdigest()[:12]

    def _start(self, position: Tensor) -> Tensor:
        """Where the document of each position starts (positions past the row read its last document's)."""
        return self.first.to(position.device)[position.clamp(0, self.length - 1)]

    def visible(self, q: Tensor, k: Tensor) -> Tensor:
        return (k <= q) & (k >= self._start(q))

    def _host_start(self, position: int) -> int:
        return int(self._first_host[min(max(position, 0), self.length - 1)])

    def key_range(self, q_first: int, q_last: int) -> tuple[int, int]:
        return self._host_start(q_first), q_last

    def within(self, q_first: int, q_last: int) -> Mask:
        """Queries of one document see its keys (from `key_range`'s first on) causally: the causal mask."""
        return CausalMask() if self._host_start(q_first) == self._host_start(q_last) else self

    def band(self, q_first: int, q_last: int) -> tuple[tuple[int, int], tuple[int, int]] | None:
        if self._host_start(q_first) != self._host_start(q_last):
            return None
        return (self._host_start(q_first), UNBOUNDED), (0, UNBOUNDED)

    def visible_keys(self, q_pos: Tensor, k_first: int, k_last: int) -> Tensor:
        start = self._start(q_pos).clamp(min=k_first)
        return (q_pos.clamp(max=k_last) - start + 1).clamp(min=1)

    @property
    def options(self) -> dict[str, Any]:
        return {"length": self.length, "documents": self.documents, "digest": self._digest}
