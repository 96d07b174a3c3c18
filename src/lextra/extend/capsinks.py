"""A layer's score softcap and learned sinks under a training-free extension method's passes.

Gemma 2 caps every score, tanh(s / c) c, after scaling and before the mask (Gemma Team, 2024, arXiv 2408.00118;
transformers' `gemma2` `eager_attention_forward`); gpt-oss adds one learned logit per head to each softmax's
denominator (OpenAI, 2025, arXiv 2508.10925; transformers' `gpt_oss` `eager_attention_forward`). Under a method a
pair's score is the one its pass gives it (query and key rotated at the pass's positions), so the cap applies to
each pass's scores as Gemma 2 applies it to the plain ones; the passes' partial softmaxes merge by log-sum-exp into
the one softmax over every visible pair, whose denominator takes the sink once (not once per pass):

    out_m = sum_n exp(cap(s'_mn)) v_n / (exp(sink_h) + sum_n exp(cap(s'_mn)))

`LayerScores` carries both through the dense reference (`cap`, `softmax`), each tile of the tiled passes
(`attend`), each FlexAttention pass (`flex`: the cap a score_mod there) and the end of every merge (`finish`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from lextra.attention.backends import AttentionContext, attention_with_lse, cap_scores, merge_tiles
from lextra.attention.backends.common import scores_with_lse


@dataclass(frozen=True, eq=False)
class LayerScores:
    """What a layer does to scores besides the method: `softcap` (each pass's scores become tanh(s / c) c before
    the pass's mask) and `sinks`, one logit per head (H,) or per head and query row (H, Lq), added once to the
    merged softmax's denominator. The default changes nothing."""

    softcap: float | None = None
    sinks: Tensor | None = None

    @classmethod
    def of(cls, ctx: AttentionContext) -> LayerScores:
        """The softcap and sinks of an attention call."""
        return PLAIN_SCORES if ctx.softcap is None and ctx.sinks is None else cls(ctx.softcap, ctx.sinks)

    def cap(self, scores: Tensor) -> Tensor:
        """Scaled scores capped (the dense reference's step before its mask)."""
        return scores if self.softcap is None else cap_scores(scores, self.softcap)

    def softmax(self, logits: Tensor) -> Tensor:
        """Weights over the keys of masked (B, H, Lq, Lk) logits, each row's denominator with its head's sink."""
        if self.sinks is None:
            return torch.softmax(logits, dim=-1)
        column = self._sinks(slice(None)).expand(*logits.shape[:-1])[..., None]
        return torch.softmax(torch.cat((logits, column), dim=-1), dim=-1)[..., :-1]

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, scale: float, *, causal: bool = False, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """One tile of a pass: its normalised output and rows' log-sum-exp (fp32), as `attention_with_lse` gives
        them (`causal` top-left aligned, `mask` float 0 / -inf; a row that sees no key gives 0 and -inf). With a
        softcap the tile's scores are written out in fp32 and capped before the mask (no fused kernel caps)."""
        if self.softcap is None:
            return attention_with_lse(q, k, v, scale, causal=causal, mask=mask)
        if not torch.is_grad_enabled():
            return _capped_tile(q, k, v, scale, self.softcap, causal, mask)
        scores = cap_scores((q.float() @ k.float().transpose(-1, -2)) * scale, self.softcap)
        return scores_with_lse(scores, v, causal=causal, mask=mask)

    @property
    def flex(self) -> dict[str, Any]:
        """`flex_band_attention`'s keywords for the softcap (none without one)."""
        return {} if self.softcap is None else {"softcap": self.softcap}

    def finish(self, out: Tensor, lse: Tensor, rows: slice) -> Tensor:
        """The merged output (B, H, r, Dv) of query rows `rows` with their log-sum-exp over every pass (B, H, r),
        re-normalised with the sinks in the denominator: out x sigmoid(lse - sink) (exact: the weights are
        e^s / Z and Z becomes Z + e^sink); a row that saw no key stays 0."""
        if self.sinks is None:
            return out
        return out * torch.sigmoid(lse.float() - self._sinks(rows))[..., None]

    def _sinks(self, rows: slice) -> Tensor:
        """The sinks as fp32 (1, H, 1) or, per query row, (1, H, r) for rows `rows`."""
        assert self.sinks is not None
        sinks = self.sinks.float()
        return sinks.reshape(1, -1, 1) if sinks.dim() == 1 else sinks[None, :, rows]


#: no softcap, no sinks
PLAIN_SCORES = LayerScores()
#: softcaps up to this bound the scores so that a tile's exponentials sum without a log-sum-exp (e^60 x 2^40 keys
#: < 3 x 10^38, fp32's largest)
BOUNDED_CAP = 60.0


def _capped_tile(
    q: Tensor, k: Tensor, v: Tensor, scale: float, softcap: float, causal: bool, mask: Tensor | None
) -> tuple[Tensor, Tensor]:
    """`LayerScores.attend` without autograd: the tile's scores in cache-sized pieces of `ROWS` x `KEYS`, each
    scaled, capped and masked in place. A cap of at most `BOUNDED_CAP` bounds every score, so each piece
    exponentiates them directly and the pieces of a row add their sums (no max pass, no merge); a larger cap
    merges the pieces by their log-sum-exp."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    qs, kf, vf = q.float() * (scale / softcap), k.float(), v.float()
    out = torch.zeros(*q.shape[:-1], v.shape[-1], device=q.device)
    lse = torch.full(q.shape[:-1], float("-inf"), device=q.device)
    for r0 in range(0, Lq, ROWS):
        r1 = min(r0 + ROWS, Lq)
        acc, sums = out[..., r0:r1, :], torch.zeros(*q.shape[:-2], r1 - r0, device=q.device)
        for c0 in range(0, min(Lk, r1) if causal else Lk, KEYS):
            c1 = min(c0 + KEYS, Lk)
            scores = torch.matmul(qs[..., r0:r1, :], kf[..., c0:c1, :].transpose(-1, -2)).tanh_().mul_(softcap)
            if causal and c1 - 1 > r0:
                hidden = torch.arange(c0, c1, device=q.device)[None, :] > torch.arange(r0, r1, device=q.device)[:, None]
                scores.masked_fill_(hidden, float("-inf"))
            if mask is not None:
                scores.add_(mask[..., r0:r1, c0:c1].float())
            if softcap <= BOUNDED_CAP:
                sums.add_(scores.exp_().sum(-1))
                acc.add_(torch.matmul(scores, vf[..., c0:c1, :]))
                continue
            part_lse = torch.logsumexp(scores, dim=-1)
            scores.sub_(part_lse.masked_fill(torch.isneginf(part_lse), 0.0)[..., None]).exp_()
            part = torch.matmul(scores, vf[..., c0:c1, :])
            lse[..., r0:r1] = merge_tiles(acc, lse[..., r0:r1], part, part_lse)[1]  # acc merged in place
        if softcap <= BOUNDED_CAP:
            acc.div_(sums.clamp(min=torch.finfo(torch.float32).tiny)[..., None])
            lse[..., r0:r1] = torch.log(sums)
    return out.to(v.dtype), lse


#: the pieces of a capped tile without autograd: (B, H, 128, 512) fp32 scores, 2 MiB at 8 heads
ROWS, KEYS = 128, 512
