"""Attention whose scores read q and k beyond their product (`content_dependent` schemes: CoPE). Each registers
one `ContentAttention` here, naming the backend that computes a call or refusing it in one line."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from torch import Tensor

from lextra.attention.context import AttentionBackend, AttentionContext
from lextra.errors import ConfigError
from lextra.registry import Registry


class ContentAttention(ABC):
    """The backends of one content-dependent scheme, by the name a call asks for."""

    name: ClassVar[str] = "content"

    @abstractmethod
    def backend_for(self, ctx: AttentionContext) -> AttentionBackend:
        """The backend computing `ctx` for the backend it asked for, or a ConfigError naming its backends."""

    @abstractmethod
    def logits(self, q: Tensor, k: Tensor, ctx: AttentionContext) -> Tensor:
        """Dense pre-mask logits (B, H, Lq, Lk) in fp32 of q (B, H, Lq, D) against k for `ctx`: what analyses read
        (`lextra.analysis.capture`); keys the mask hides enter nothing but are not set to -inf."""


CONTENT: Registry[ContentAttention] = Registry("content-dependent attention", modules=("lextra.attention.cope",))


def content_backend(ctx: AttentionContext) -> AttentionBackend:
    """The backend that computes `ctx`, whose scheme is content-dependent (a ConfigError where none can)."""
    scheme = ctx.scheme
    assert scheme is not None and scheme.content_dependent  # the dispatch routes only such calls here
    if scheme.name not in CONTENT:
        raise ConfigError(f"scheme {scheme.name!r} reads q and k in its scores but registers no backend for them")
    if ctx.extension is not None:
        raise ConfigError(
            f"{scheme.name}: its scores read q and k, which {ctx.extension.name!r} does not pass through; attend "
            "without it (no extension method, no S2-Attn)"
        )
    return CONTENT.get(scheme.name)().backend_for(ctx)


def content_logits(q: Tensor, k: Tensor, ctx: AttentionContext) -> Tensor:
    """The dense pre-mask logits of a content-dependent scheme's call (`ContentAttention.logits`)."""
    scheme = ctx.scheme
    assert scheme is not None and scheme.content_dependent  # callers ask only for such schemes
    return CONTENT.get(scheme.name)().logits(q, k, ctx)
