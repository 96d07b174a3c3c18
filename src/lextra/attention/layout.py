"""Host-side facts about an attention call's positions, read from the device at most once per call:
`PositionLayout.ranges` from what a caller already knows (no device read), `of` from the tensors in one transfer."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class PositionLayout:
    """How many query and key positions, their first / last / smallest / largest values (0 when empty), whether
    each run is contiguous (up by exactly 1) and whether the queries are the keys' positions (`same`)."""

    n_q: int
    n_k: int
    q_first: int
    q_last: int
    q_min: int
    q_max: int
    k_first: int
    k_last: int
    k_min: int
    k_max: int
    q_contiguous: bool
    k_contiguous: bool
    same: bool

    @classmethod
    def ranges(cls, q_first: int, n_q: int, k_first: int, n_k: int) -> PositionLayout:
        """Contiguous runs q_first.. (n_q of them) and k_first.. (n_k): no device read."""
        q_last, k_last = q_first + max(n_q, 1) - 1, k_first + max(n_k, 1) - 1
        same = n_q == n_k and (n_q == 0 or q_first == k_first)
        return cls(n_q, n_k, q_first, q_last, q_first, q_last, k_first, k_last, k_first, k_last, True, True, same)

    @classmethod
    def of(cls, q_pos: Tensor, k_pos: Tensor) -> PositionLayout:
        """The facts of these position tensors, in one device-to-host transfer."""
        n_q, n_k = q_pos.numel(), k_pos.numel()
        parts = [_stats(q_pos), _stats(k_pos)]
        same = n_q == n_k and n_q > 0
        if same:
            parts.append((q_pos.long() == k_pos.long()).all().long().reshape(1))
        values = torch.cat(parts).tolist()
        q, k = values[:5], values[5:10]
        return cls(
            n_q=n_q,
            n_k=n_k,
            q_first=q[0],
            q_last=q[1],
            q_min=q[2],
            q_max=q[3],
            k_first=k[0],
            k_last=k[1],
            k_min=k[2],
            k_max=k[3],
            q_contiguous=bool(q[4]),
            k_contiguous=bool(k[4]),
            same=(n_q == n_k == 0) or (same and bool(values[10])),
        )

    @property
    def seq_len(self) -> int | None:
        """The largest position + 1 (what length-dependent scalings use), or None without positions."""
        top = [hi for hi, n in ((self.q_max, self.n_q), (self.k_max, self.n_k)) if n]
        return max(top) + 1 if top else None

    @property
    def span(self) -> int:
        """Positions from the smallest to the largest of queries and keys, both included."""
        return max(self.q_max, self.k_max) - min(self.q_min, self.k_min) + 1


def _stats(pos: Tensor) -> Tensor:
    """(first, last, min, max, contiguous) of a 1-D position tensor as int64, on its device (zeros when empty)."""
    if pos.numel() == 0:
        return torch.tensor([0, 0, 0, 0, 1], dtype=torch.long, device=pos.device)
    p = pos.long()
    contiguous = (p.diff() == 1).all().long().reshape(1) if p.numel() > 1 else p.new_ones(1)
    return torch.cat((p[:1], p[-1:], p.min().reshape(1), p.max().reshape(1), contiguous))
