"""The KV cache of a lextra GPT: per layer, the keys and values of the tokens seen so far (and their positions once
some are evicted), kept in buffers with room to grow, plus what attention pieces carry from step to step."""

from __future__ import annotations

import torch
from torch import Tensor

from lextra.attention.fox import piece_state_rows

#: rows a KV cache's buffers grow by at least, when full
CACHE_ROOM = 256


class KVCache:
    """Per-layer cache of keys and values plus their positions, for incremental decoding. Plain RoPE caches keys
    rotated; every other scheme caches them before the position transform, re-transformed at every step. A layer may
    evict keys (`evict`); buffers grow with room to spare."""

    def __init__(self, n_layer: int) -> None:
        self.keys: list[Tensor | None] = [None] * n_layer
        self.values: list[Tensor | None] = [None] * n_layer
        #: positions of a layer's cached keys once it has evicted some, else None
        self.positions: list[Tensor | None] = [None] * n_layer
        self.length = 0
        #: each row's place in its digit run at the last cached token (Abacus embeddings), or None
        self.abacus_run: Tensor | None = None
        #: per layer, key and value buffers with room to grow; `keys` / `values` are views of their first rows
        self.buffers: list[tuple[Tensor, Tensor] | None] = [None] * n_layer
        #: per layer, whether its keys are cached after the position transform (None: nothing cached yet)
        self.rotated: list[bool | None] = [None] * n_layer
        #: per layer, what its attention pieces carry from step to step (FoX: c of the cached keys, the last k, v)
        self.piece_state: list[dict[str, Tensor]] = [{} for _ in range(n_layer)]

    def extend(
        self, layer: int, k: Tensor, v: Tensor, positions: Tensor | None = None, rotated: bool = False
    ) -> tuple[Tensor, Tensor]:
        """Append keys and values of new positions to `layer`'s; `rotated` says whether the keys are cached after
        the position transform (plain RoPE) or before it, which must stay the same for the whole cache."""
        held_k, held_v = self.keys[layer], self.values[layer]
        if self.rotated[layer] is not None and self.rotated[layer] != rotated:
            raise ValueError(
                f"layer {layer}'s KV cache holds keys {'after' if self.rotated[layer] else 'before'} the position "
                "transform; continue it with the same model settings (scheme, extension method, observer), or "
                "start a new cache"
            )
        self.rotated[layer] = rotated
        if held_k is None or held_v is None:
            self.keys[layer], self.values[layer], self.buffers[layer] = k, v, None
        else:
            k, v = self._append(layer, held_k, held_v, k, v)
        held = self.positions[layer]
        if held is not None and positions is not None:
            self.positions[layer] = torch.cat((held, positions))
        return k, v

    def _append(self, layer: int, held_k: Tensor, held_v: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write k, v after the held rows, into buffers that grow by an eighth (at least CACHE_ROOM rows) when
        full, so that decoding one token copies one row instead of the whole cache."""
        n, add = held_k.shape[-2], k.shape[-2]
        buffer = self.buffers[layer]
        if buffer is None or buffer[0].shape[-2] < n + add or buffer[0].data_ptr() != held_k.data_ptr():
            rows = n + add + max(CACHE_ROOM, (n + add) // 8)
            buffer = (
                held_k.new_empty((*held_k.shape[:-2], rows, held_k.shape[-1])),
                held_v.new_empty((*held_v.shape[:-2], rows, held_v.shape[-1])),
            )
            buffer[0][..., :n, :], buffer[1][..., :n, :] = held_k, held_v
            self.buffers[layer] = buffer
        buffer[0][..., n : n + add, :], buffer[1][..., n : n + add, :] = k, v
        keys, values = buffer[0][..., : n + add, :], buffer[1][..., : n + add, :]
        self.keys[layer], self.values[layer] = keys, values
        return keys, values

    def key_positions(self, layer: int, positions: Tensor) -> Tensor:
        """Positions of `layer`'s cached keys after `extend` with queries at `positions`: contiguous up to the
        last query, or the kept ones after an eviction."""
        held = self.positions[layer]
        if held is not None:
            return held
        keys = self.keys[layer]
        assert keys is not None  # `extend` filled the layer
        n = keys.shape[-2]
        return torch.arange(n, device=positions.device) + (int(positions[-1]) + 1 - n)

    def evict(self, layer: int, keep: Tensor, positions: Tensor) -> None:
        """Drop `layer`'s cached keys and values where `keep` is False; `positions` are the cached keys'."""
        if bool(keep.all()):
            return
        index = keep.nonzero().squeeze(-1)
        keys, values = self.keys[layer], self.values[layer]
        assert keys is not None and values is not None  # only a filled layer has keys to evict
        self.keys[layer] = keys.index_select(-2, index)
        self.values[layer] = values.index_select(-2, index)
        self.positions[layer] = positions[index]
        self.buffers[layer] = None

    def repeat_rows(self, repeats: int) -> KVCache:
        """A copy with every batch row repeated `repeats` times (for scoring several continuations of a prompt)."""
        clone = KVCache(len(self.keys))
        clone.keys = [None if k is None else k.repeat_interleave(repeats, dim=0) for k in self.keys]
        clone.values = [None if v is None else v.repeat_interleave(repeats, dim=0) for v in self.values]
        clone.positions = list(self.positions)
        clone.rotated = list(self.rotated)
        clone.length = self.length
        clone.abacus_run = self.abacus_run
        clone.piece_state = [piece_state_rows(state, repeats) for state in self.piece_state]
        return clone
