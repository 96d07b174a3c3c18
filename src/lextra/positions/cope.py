"""CoPE, contextual position encoding (Golovneva et al. 2024, arXiv 2405.18719): positions counted by gates.

p_ij = sum over visible keys k = j..i of sigmoid(q_i . k_k / sqrt(D)), clamped to npos - 1; the score adds
q_i . e(p_ij), e a learned (head_dim, npos) table read by linear interpolation. As the authors' code
(facebookresearch/RAM, `ContextPosSelfAttn`): (q . k + q . e(p)) / sqrt(D) by default, `nodiv=true` the paper's
printed order. Only the backends of `lextra.attention.cope` compute it (`content_dependent`)."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from lextra.errors import ConfigError
from lextra.positions.base import HeadDims, PositionScheme, register_scheme
from lextra.validate import check_bool, check_int


def reverse_cumsum(gates: Tensor) -> Tensor:
    """Sums along the keys from each key to the last one (the query's end): out[..., j] = sum_{k >= j} g[..., k]."""
    return gates.flip(-1).cumsum(-1).flip(-1)


@register_scheme("cope")
class CoPE(PositionScheme):
    """Contextual position encoding: p_ij counts the query's sigmoid gates over keys j..i, the logits add q_i . e(p_ij).
    `npos` defaults to L_tr + 1 (the authors' block size + 1); `clamp` keeps counts past the table at its last entry
    (false: refused); `nodiv` adds the position logits after the 1/sqrt(D) scale (the paper's printed order)."""

    summary = "contextual positions: counts of sigmoid(q.k) gates, interpolated learned table (Golovneva 2024)"
    positional = "npos"
    derived_defaults: ClassVar[dict[str, str]] = {"npos": "L_tr + 1"}
    content_dependent = True

    def __init__(self, dims: HeadDims, *, npos: int | None = None, clamp: bool = True, nodiv: bool = False) -> None:
        super().__init__(dims)
        self.npos = dims.train_len + 1 if npos is None else check_int("cope: npos", npos, 2, 1 << 24)
        self.clamp = check_bool("cope: clamp", clamp)
        self.nodiv = check_bool("cope: nodiv", nodiv)
        self.pos_emb = nn.Parameter(torch.zeros(dims.head_dim, self.npos))

    def check_count(self, n_keys: int) -> None:
        """Refuse a call whose `n_keys` keys could count past the table when positions are not clamped."""
        if not self.clamp and n_keys > self.npos - 1:
            raise ConfigError(
                f"cope: {n_keys} keys can count up to {n_keys} positions but its table holds {self.npos} (npos, "
                f"counts 0..{self.npos - 1}); train with npos >= {n_keys + 1}, or set clamp=true to clamp them as "
                "the authors do"
            )

    def position_scale(self, scale: float) -> float:
        """The factor on q . e(p) in the logits: the score's scale (the authors' code), or 1 with `nodiv`."""
        return 1.0 if self.nodiv else scale

    def position_tables(self, q: Tensor, factor: float) -> tuple[Tensor, Tensor]:
        """q . e[t] x factor for every integer position t and its slope to the next entry, each (B, H, c, npos) fp32."""
        table = (q.float() * factor) @ self.pos_emb.float()
        slope = torch.cat((table[..., 1:] - table[..., :-1], torch.zeros_like(table[..., :1])), dim=-1)
        return table, slope

    def position_logits(
        self,
        tables: tuple[Tensor, Tensor],
        gates: Tensor,
        carried: Tensor | None = None,
        reversed_keys: bool = False,
        inplace: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """The position logits (B, H, c, n) of one block of keys, and each row's gate count (B, H, c) in fp64.

        `gates` (B, H, c, n) are 0 where masked, in key order or with `reversed_keys` from the last back; `carried` is
        the count of the keys right of the block (the tiled path walks leftwards). Counts are the carried fp64 whole
        part plus the block's fp32 sum, so fractions keep fp32 precision at any length. `inplace` overwrites `gates`."""
        table, slope = tables
        if not gates.shape[-1]:  # no keys: the count is what was carried
            none = gates.new_zeros(gates.shape[:-1], dtype=torch.float64)
            return table.new_zeros(gates.shape), none if carried is None else carried
        counts = reverse_cumsum(gates) if not reversed_keys else gates.cumsum_(-1) if inplace else gates.cumsum(-1)
        whole = None if carried is None else carried.floor()
        if carried is not None and whole is not None:
            fraction = (carried - whole).float()[..., None]
            counts = counts.add_(fraction) if inplace else counts + fraction
        first = (counts[..., -1] if reversed_keys else counts[..., 0]).double()
        total = first if whole is None else whole + first
        steps = counts.floor()
        weight = counts.sub_(steps) if inplace else counts - steps
        if whole is not None:  # whole numbers: exact in fp32 below 2^24
            steps.add_(whole.float()[..., None])  # `steps` is floor's fresh output, which nothing else reads
        index = steps.clamp_(max=self.npos - 1).long()
        logits = table.gather(-1, index)
        if inplace:
            return logits.addcmul_(slope.gather(-1, index), weight), total
        return torch.addcmul(logits, slope.gather(-1, index), weight), total
