"""The training-free extension methods, each as its formula (`remap`) and its passes (`passes`).

d = m - n throughout; L is the model's training length. Defaults are the authors' (from their code, scaled with
L where they are tied to a 4k model); where the released code and the paper differ we follow the code and say so.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from lextra.attention.masks import UNBOUNDED, Pass, same_position
from lextra.extend.base import EXTENSIONS, ExtensionMethod, constant_position, int_option
from lextra.validate import check_bool, check_int, check_range


def _float(x: Tensor) -> Tensor:
    return x.to(torch.float64)


@EXTENSIONS.register("self_extend")
class SelfExtend(ExtensionMethod):
    """Self-Extend (Jin et al. 2024, arXiv 2401.01325; datamllab/LongLM `self_extend_patch/Llama.py`).

    Keys with d < W keep their positions; farther keys are scored with query floor(m/G) + W - W/G and key
    floor(n/G); one softmax over both. Valid up to (L - W) G + W tokens. Defaults G = 8, W = L/4 (1024 at 4k);
    `log_scale` is the code's optional `scale_base` query scaling, off by default.
    """

    summary = "Self-Extend (Jin 2024): d < W at true positions, farther at floor(m/G) + W - W/G vs floor(n/G)"
    derived_defaults: ClassVar[dict[str, str]] = {"window": "L/4"}

    def __init__(self, train_len: int, *, group: int = 8, window: int | None = None, log_scale: bool = False) -> None:
        super().__init__(train_len)
        L = self.train_len
        self.group = check_int("self_extend: group", group, 1, hint="G = 8 in the authors' code; 2-64 work")
        self.window = int_option(
            "self_extend",
            "window",
            window,
            max(1, L // 4),
            1,
            L - 1,
            hint=f"the neighbour window W must be below L = {L} (W = L/4 by default, 1024 for 4k models)",
        )
        self.log_scale = check_bool("self_extend: log_scale", log_scale)

    def _group_query(self, m: Tensor) -> Tensor:
        return _float(m // self.group) + (self.window - self.window / self.group)

    def remap(self, m: Tensor, n: Tensor) -> tuple[Tensor, Tensor]:
        d = m - n
        grouped = self._group_query(m) - _float(n // self.group)
        return torch.where(d < self.window, _float(d), grouped), d >= 0

    def passes(self, q_first: int, q_last: int) -> list[Pass]:
        return [
            Pass("neighbour", same_position, same_position, (0, self.window - 1)),
            Pass("group", self._group_query, lambda n: _float(n // self.group), (self.window, UNBOUNDED)),
        ]

    def max_length(self) -> int | None:
        return (self.train_len - self.window) * self.group + self.window

    def length_hint(self, n_positions: int) -> str:
        needed = math.ceil((n_positions - self.window) / (self.train_len - self.window))
        return f"(L - W) x G + W; use group >= {needed} or a shorter input"


@EXTENSIONS.register("rerope")
class ReRoPE(ExtensionMethod):
    """ReRoPE (Su 2023, kexue.fm/archives/9708; bojone/rerope `rerope_patch.py`): d' = min(d, w).

    Two passes: keys with d < w at their true positions; farther keys with the query rotated at w and the key
    unrotated. w = L/8 (512 at 4k); `log_scale` on by default, as in the code.
    """

    summary = "ReRoPE (Su 2023): distances clipped at w, d' = min(d, w); w = L/8"
    derived_defaults: ClassVar[dict[str, str]] = {"window": "L/8"}

    def __init__(self, train_len: int, *, window: int | None = None, log_scale: bool = True) -> None:
        super().__init__(train_len)
        L = self.train_len
        self.window = int_option(
            "rerope",
            "window",
            window,
            max(1, L // 8),
            1,
            L - 1,
            hint=f"w must be below L = {L} (w = L/8 by default, 512 for 4k models)",
        )
        self.log_scale = check_bool("rerope: log_scale", log_scale)

    def remap(self, m: Tensor, n: Tensor) -> tuple[Tensor, Tensor]:
        d = m - n
        return _float(d.clamp(max=self.window)), d >= 0

    def passes(self, q_first: int, q_last: int) -> list[Pass]:
        return [
            Pass("local", same_position, same_position, (0, self.window - 1)),
            Pass("rectified", constant_position(self.window), constant_position(0), (self.window, UNBOUNDED)),
        ]


@EXTENSIONS.register("leaky_rerope")
class LeakyReRoPE(ExtensionMethod):
    """Leaky ReRoPE (Su 2023; bojone/rerope `leaky_rerope_patch.py`): d' = d for d < w, else w + (d - w)/k.

    The far pass rotates queries at (m + w(k - 1))/k and keys at n/k. Defaults w = L/8, k = 16, `log_scale` on.
    """

    summary = "Leaky ReRoPE (Su 2023): d' = d below w, w + (d - w)/k beyond; w = L/8, k = 16"
    derived_defaults: ClassVar[dict[str, str]] = {"window": "L/8"}

    def __init__(
        self, train_len: int, *, window: int | None = None, factor: float = 16.0, log_scale: bool = True
    ) -> None:
        super().__init__(train_len)
        L = self.train_len
        self.window = int_option(
            "leaky_rerope",
            "window",
            window,
            max(1, L // 8),
            1,
            L - 1,
            hint=f"w must be below L = {L} (w = L/8 by default, 512 for 4k models)",
        )
        self.factor = check_range("leaky_rerope: factor", factor, 1.0, hint="k = 16 in the authors' code")
        self.log_scale = check_bool("leaky_rerope: log_scale", log_scale)

    def remap(self, m: Tensor, n: Tensor) -> tuple[Tensor, Tensor]:
        d = m - n
        leaky = self.window + (_float(d) - self.window) / self.factor
        return torch.where(d < self.window, _float(d), leaky), d >= 0

    def passes(self, q_first: int, q_last: int) -> list[Pass]:
        shift = self.window * (self.factor - 1)
        return [
            Pass("local", same_position, same_position, (0, self.window - 1)),
            Pass(
                "leaky",
                lambda m: (_float(m) + shift) / self.factor,
                lambda n: _float(n) / self.factor,
                (self.window, UNBOUNDED),
            ),
        ]


@EXTENSIONS.register("dca")
class DualChunkAttention(ExtensionMethod):
    """Dual Chunk Attention (An et al. 2024, arXiv 2402.17463; HKUNLP/ChunkLlama `chunkllama_attn_replace.py`).

    Chunk size s = 3L/4, local window w = L/16, chunk length c = s - w. Keys are rotated at n mod c; a query at
    m mod c for its own chunk (intra), at min(m mod c + c, s) for the previous one (successive) and at
    min(2c - 1, s) for older ones (inter). The code's 0.05 ln(N/L) + 1 factor on cos and sin is not included.
    """

    summary = "Dual Chunk Attention (An 2024): intra / successive / inter-chunk positions; s = 3L/4, w = L/16"
    derived_defaults: ClassVar[dict[str, str]] = {"chunk": "3L/4", "local": "L/16"}

    def __init__(self, train_len: int, *, chunk: int | None = None, local: int | None = None) -> None:
        super().__init__(train_len)
        L = self.train_len
        self.chunk = int_option(
            "dca",
            "chunk",
            chunk,
            max(2, 3 * L // 4),
            2,
            L,
            hint=f"the chunk size s is at most L = {L} (3L/4 by default)",
        )
        self.local = int_option(
            "dca",
            "local",
            local,
            max(1, L // 16),
            1,
            self.chunk - 1,
            hint=f"the local window w must be below the chunk size s = {self.chunk} (L/16 by default)",
        )
        self.chunk_len = self.chunk - self.local
        self.period = self.chunk_len

    def _successive(self, m: Tensor) -> Tensor:
        return ((m % self.chunk_len) + self.chunk_len).clamp(max=self.chunk)

    def _inter(self) -> int:
        return min(2 * self.chunk_len - 1, self.chunk)

    def remap(self, m: Tensor, n: Tensor) -> tuple[Tensor, Tensor]:
        c = self.chunk_len
        behind = m // c - n // c
        q = torch.where(behind == 0, m % c, torch.where(behind == 1, self._successive(m), self._inter()))
        return _float(q - n % c), m - n >= 0

    def passes(self, q_first: int, q_last: int) -> list[Pass]:
        c = self.chunk_len
        chunk = q_first // c
        if q_last // c != chunk:
            raise ValueError(f"dca: queries {q_first}..{q_last} straddle a chunk boundary (every {c})")
        start = chunk * c
        key_at = lambda n: n % c  # noqa: E731
        passes = [Pass("intra", lambda m: m % c, key_at, (0, UNBOUNDED), (start, start + c - 1))]
        if chunk >= 1:
            passes.append(Pass("successive", self._successive, key_at, (0, UNBOUNDED), (start - c, start - 1)))
        if chunk >= 2:
            passes.append(Pass("inter", constant_position(self._inter()), key_at, (0, UNBOUNDED), (0, start - c - 1)))
        return passes


@EXTENSIONS.register("lm_infinite")
class LMInfinite(ExtensionMethod):
    """LM-Infinite (Han et al. 2024, arXiv 2308.16137; Glaciohound/LM-Infinite `models/lambda_attention.py`).

    A Lambda-shaped mask: a query sees the first `n_global` tokens and the keys with d < `local`; global keys
    beyond the local window are seen at distance min(`limit`, m), so cached decoding and the full forward agree.
    Defaults n_global = 10, local = limit = L.
    """

    summary = "LM-Infinite (Han 2024): first n_global + last `local` keys; global ones at distance `limit`"
    derived_defaults: ClassVar[dict[str, str]] = {"local": "L", "limit": "L"}

    def __init__(
        self, train_len: int, *, n_global: int = 10, local: int | None = None, limit: int | None = None
    ) -> None:
        super().__init__(train_len)
        L = self.train_len
        self.n_global = check_int("lm_infinite: n_global", n_global, 0, hint="10-100 starting tokens")
        self.local = int_option("lm_infinite", "local", local, L, 1, L, hint=f"at most L = {L} (L by default)")
        self.limit = int_option("lm_infinite", "limit", limit, L, 1, L, hint=f"at most L = {L} (L by default)")

    def remap(self, m: Tensor, n: Tensor) -> tuple[Tensor, Tensor]:
        d = m - n
        visible = (d >= 0) & ((d < self.local) | (n < self.n_global))
        return torch.where(d < self.local, _float(d), _float(m.clamp(max=self.limit))), visible

    def passes(self, q_first: int, q_last: int) -> list[Pass]:
        passes = [Pass("local", same_position, same_position, (0, self.local - 1))]
        if self.n_global:
            passes.append(
                Pass(
                    "global",
                    lambda m: _float(m.clamp(max=self.limit)),
                    constant_position(0),
                    (self.local, UNBOUNDED),
                    (0, self.n_global - 1),
                )
            )
        return passes

    def retains(self, n: Tensor, next_query: int) -> Tensor:
        return (n < self.n_global) | (n > next_query - self.local)


@EXTENSIONS.register("sinks")
class AttentionSinks(ExtensionMethod):
    """Attention sinks / StreamingLLM (Xiao et al. 2024, arXiv 2309.17453; mit-han-lab/streaming-llm
    `pos_shift/modify_llama.py`, `kv_cache.py`).

    A query sees the first S tokens (sinks) and the R most recent ones, itself included, at cache-slot positions:
    a sink n at distance min(m, S + R - 1) - n. Defaults S = 4, R = L - S. Generation stays stable past L; the
    usable context does not grow.
    """

    summary = "attention sinks (Xiao 2024): S first + R recent tokens at cache-slot positions; stable, not longer"
    derived_defaults: ClassVar[dict[str, str]] = {"recent": "L - sinks"}

    def __init__(self, train_len: int, *, sinks: int = 4, recent: int | None = None) -> None:
        super().__init__(train_len)
        L = self.train_len
        self.sinks = check_int("sinks: sinks", sinks, 0, L - 1, hint=f"S = 4 by default, below L = {L}")
        self.recent = int_option(
            "sinks",
            "recent",
            recent,
            L - self.sinks,
            1,
            L - self.sinks,
            hint=f"sinks + recent must be at most L = {L} so that cache slots stay trained (R = L - S by default)",
        )

    def _query_slot(self, m: Tensor) -> Tensor:
        return m.clamp(max=self.sinks + self.recent - 1)

    def remap(self, m: Tensor, n: Tensor) -> tuple[Tensor, Tensor]:
        d = m - n
        visible = (d >= 0) & ((d < self.recent) | (n < self.sinks))
        return torch.where(d < self.recent, _float(d), _float(self._query_slot(m) - n)), visible

    def passes(self, q_first: int, q_last: int) -> list[Pass]:
        passes = [Pass("recent", same_position, same_position, (0, self.recent - 1))]
        if self.sinks:
            passes.append(Pass("sinks", self._query_slot, same_position, (self.recent, UNBOUNDED), (0, self.sinks - 1)))
        return passes

    def retains(self, n: Tensor, next_query: int) -> Tensor:
        return (n < self.sinks) | (n > next_query - self.recent)


@EXTENSIONS.register("string")
class STRING(ExtensionMethod):
    """STRING (An et al. 2024, arXiv 2410.18745; HKUNLP/STRING `string_for_llama.py`): shifted positions.

    d' = d for d < S, else d - S + W. Defaults S = int(0.33 L), W = 128 (at most S/2); logits multiplied by
    `attention_factor`^2 = (1 + 0.1 ln 2)^2 as the code's cos and sin scaling (1 disables).
    """

    summary = "STRING (An 2024): d' = d below S, d - S + W beyond (shifted positions); S = 0.33 L, W = 128"
    derived_defaults: ClassVar[dict[str, str]] = {"offset": "int(0.33 L)", "local": "min(128, offset/2)"}

    def __init__(
        self,
        train_len: int,
        *,
        offset: int | None = None,
        local: int | None = None,
        attention_factor: float = 1.0 + 0.1 * math.log(2),
    ) -> None:
        super().__init__(train_len)
        L = self.train_len
        self.offset = int_option(
            "string",
            "offset",
            offset,
            max(2, int(0.33 * L)),
            2,
            L - 1,
            hint=f"the shift offset S must be below L = {L} (0.25-0.4 L; 0.33 L by default)",
        )
        self.local = int_option(
            "string",
            "local",
            local,
            max(1, min(128, self.offset // 2)),
            1,
            self.offset - 1,
            hint=f"the local window W must be below the offset S = {self.offset} (128 by default)",
        )
        self.attention_factor = check_range(
            "string: attention_factor", attention_factor, 0.0, low_open=True, hint="1 + 0.1 ln 2 in the code; 1 = off"
        )

    def remap(self, m: Tensor, n: Tensor) -> tuple[Tensor, Tensor]:
        d = m - n
        return _float(torch.where(d < self.offset, d, d - self.offset + self.local)), d >= 0

    def query_scale(self, m: Tensor) -> Tensor | None:
        if self.attention_factor == 1.0:
            return None
        return torch.full(m.shape, self.attention_factor**2, dtype=torch.float32, device=m.device)

    def passes(self, q_first: int, q_last: int) -> list[Pass]:
        shift = self.offset - self.local
        return [
            Pass("local", same_position, same_position, (0, self.offset - 1)),
            Pass("shifted", lambda m: m - shift, same_position, (self.offset, UNBOUNDED)),
        ]
