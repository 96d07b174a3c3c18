"""Log-n scalings of the attention logits (`LOG_SCALINGS`): `none`; `qwen`, the query at 1-based position i > L_tr times
log_{L_tr} i (Qwen's `use_logn_attn`, applicable at inference); `ssmax`, Scalable-Softmax (Nakanishi 2025, arXiv
2501.19399), logits times a learned s_h ln n (only for models trained with it: `learned`)."""

from __future__ import annotations

import math
from typing import ClassVar, Protocol

import torch
from torch import Tensor

from lextra.errors import ConfigError
from lextra.registry import Registry


class Mask(Protocol):
    """What a log-n scaling reads of a mask (`lextra.attention.masks.Mask`): how many keys each query sees."""

    def visible_keys(self, q_pos: Tensor, k_first: int, k_last: int) -> Tensor: ...


class LogScaling:
    """Base class of `LOG_SCALINGS`: `factor` is what the logits of each query are multiplied by, (1, Lq) or
    (H, Lq) fp32, or None (no scaling); `learned` scalings read a trained per-head scale and need training."""

    name: ClassVar[str] = "none"
    summary: ClassVar[str] = ""
    learned: ClassVar[bool] = False

    @staticmethod
    def factor(q_pos: Tensor, k_pos: Tensor, mask: Mask, train_len: int, scale: Tensor | None) -> Tensor | None:
        """The multiplier of the logits of queries at `q_pos` over keys at `k_pos` under `mask`; `scale` is a
        learned scaling's per-head scale (H,)."""
        return None


LOG_SCALINGS: Registry[LogScaling] = Registry("log-n scaling")


@LOG_SCALINGS.register("none")
class NoLogScaling(LogScaling):
    summary = "no log-n scaling"


@LOG_SCALINGS.register("qwen")
class QwenLogScaling(LogScaling):
    summary = "queries past L_tr multiplied by log_{L_tr} i (Qwen's logn attention)"

    @staticmethod
    def factor(q_pos: Tensor, k_pos: Tensor, mask: Mask, train_len: int, scale: Tensor | None) -> Tensor:
        i = q_pos.to(torch.float64) + 1
        return torch.where(i > train_len, torch.log(i) / math.log(train_len), 1.0).float()[None]


@LOG_SCALINGS.register("ssmax")
class SsmaxLogScaling(LogScaling):
    summary = "Scalable-Softmax: logits times a learned s_h ln n (Nakanishi 2025); needs training"
    learned = True

    @staticmethod
    def factor(q_pos: Tensor, k_pos: Tensor, mask: Mask, train_len: int, scale: Tensor | None) -> Tensor:
        if scale is None:
            raise ConfigError("ssmax is a learned per-head scale: only a model trained with it has it")
        # a row that sees one key has softmax 1 at any temperature; n >= 2 keeps its factor (and gradient) finite
        n = mask.visible_keys(q_pos, int(k_pos[0]), int(k_pos[-1])).to(torch.float32).clamp(min=2.0)
        return scale[:, None] * torch.log(n)[None]


def log_scaling_names(*, inference: bool = False) -> list[str]:
    """The registered names; `inference`: only those that can be switched on at inference (not learned)."""
    return [name for name in LOG_SCALINGS.names() if not (inference and LOG_SCALINGS.get(name).learned)]


def check_log_scaling(kind: str, what: str = "log-n scaling") -> str:
    """`kind` when it is a registered log-n scaling."""
    if kind not in LOG_SCALINGS:
        raise ConfigError(f"{what} must be one of {', '.join(LOG_SCALINGS.names())}, got {kind!r}")
    return kind
