"""A Hugging Face `DynamicCache` whose full-attention layers append into growing buffers.

transformers' `DynamicLayer` concatenates the whole cache with each new token; `GrowingLayer` keeps keys and
values in a buffer with room to spare, reallocating only when it is full or transformers replaced its tensors."""

from __future__ import annotations

from typing import Any

from torch import Tensor
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

#: room a buffer leaves past what it holds: at least this many tokens, or this share of them
MIN_ROOM = 256
ROOM_SHARE = 1 / 16


class GrowingLayer(DynamicLayer):
    """A full-attention cache layer: keys and values (B, H, L, D) are views of buffers with room to grow."""

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.key_buffer: Tensor | None = None
        self.value_buffer: Tensor | None = None

    def _holds_views(self) -> bool:
        """Whether `keys` / `values` are still the filled part of the buffers (transformers may have replaced them)."""
        pairs = ((self.keys, self.key_buffer), (self.values, self.value_buffer))
        return all(
            t is not None
            and b is not None
            and t.data_ptr() == b.data_ptr()
            and t.stride() == b.stride()
            and t.shape[:2] == b.shape[:2]
            for t, b in pairs
        )

    def _reserve(self, total: int) -> None:
        """Buffers holding the current keys and values with room for `total` tokens and more."""
        capacity = total + max(MIN_ROOM, int(total * ROOM_SHARE))
        assert self.keys is not None, "an initialised layer holds keys"
        held = self.keys.shape[-2]
        for name in ("key", "value"):
            current = getattr(self, f"{name}s")
            buffer = current.new_empty((*current.shape[:2], capacity, current.shape[-1]))
            buffer[:, :, :held].copy_(current)
            setattr(self, f"{name}_buffer", buffer)
            setattr(self, f"{name}s", buffer[:, :, :held])

    def update(self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
        """Append the new keys and values; return every key and value held (views, valid until the next update)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self.keys = key_states.new_empty((*key_states.shape[:2], 0, key_states.shape[-1]))
            self.values = value_states.new_empty((*value_states.shape[:2], 0, value_states.shape[-1]))
        assert self.keys is not None, "initialised above"
        held, new = self.keys.shape[-2], key_states.shape[-2]
        room = self.key_buffer.shape[-2] if self.key_buffer is not None and self._holds_views() else -1
        if held + new > room:
            self._reserve(held + new)
        key_buffer, value_buffer = self.key_buffer, self.value_buffer
        assert key_buffer is not None and value_buffer is not None, "_reserve makes both buffers"
        key_buffer[:, :, held : held + new].copy_(key_states)
        value_buffer[:, :, held : held + new].copy_(value_states)
        self.keys = key_buffer[:, :, : held + new]
        self.values = value_buffer[:, :, : held + new]
        return self.keys, self.values


def growing_cache(config: Any) -> DynamicCache:
    """`DynamicCache(config=config)` with each full-attention layer a `GrowingLayer`."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
