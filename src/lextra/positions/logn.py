"""Log-n scalings of the attention logits: a small registry (`LOG_SCALINGS`) that every user reads its names from.

- `none`: no scaling.
- `qwen`: the query at 1-based position i > L_tr multiplied by log_{L_tr} i (Qwen's `use_logn_attn`), a fixed
  function of position, so it applies at inference to any model.
- `ssmax`: Scalable-Softmax (Nakanishi 2025, arXiv 2501.19399), logits times a learned s_h ln n: only a model
  trained with it has the scale, so it cannot be switched on at inference (`learned`).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from lextra.errors import ConfigError
from lextra.registry import Registry


class LogScaling:
    """Base class of `LOG_SCALINGS`: `learned` scalings need training; `factor` is the query multiplier of the
    others ((Lq,) fp32)."""

    name: ClassVar[str] = "none"
    summary: ClassVar[str] = ""
    learned: ClassVar[bool] = False

    @staticmethod
    def factor(q_pos: Tensor, train_len: int) -> Tensor:
        return torch.ones(q_pos.shape, dtype=torch.float32, device=q_pos.device)


LOG_SCALINGS: Registry[LogScaling] = Registry("log-n scaling")


@LOG_SCALINGS.register("none")
class NoLogScaling(LogScaling):
    summary = "no log-n scaling"


@LOG_SCALINGS.register("qwen")
class QwenLogScaling(LogScaling):
    summary = "queries past L_tr multiplied by log_{L_tr} i (Qwen's logn attention)"

    @staticmethod
    def factor(q_pos: Tensor, train_len: int) -> Tensor:
        return qwen_log_factor(q_pos, train_len)


@LOG_SCALINGS.register("ssmax")
class SsmaxLogScaling(LogScaling):
    summary = "Scalable-Softmax: logits times a learned s_h ln n (Nakanishi 2025); needs training"
    learned = True


def qwen_log_factor(q_pos: Tensor, train_len: int) -> Tensor:
    """Qwen's log-n scaling: the query at 1-based position i > L_tr is multiplied by log_{L_tr} i, (Lq,) fp32."""
    i = q_pos.to(torch.float64) + 1
    return torch.where(i > train_len, torch.log(i) / math.log(train_len), 1.0).float()


def log_scaling_names(*, inference: bool = False) -> list[str]:
    """The registered names; `inference`: only those that can be switched on at inference (not learned)."""
    return [name for name in LOG_SCALINGS.names() if not (inference and LOG_SCALINGS.get(name).learned)]


def check_log_scaling(kind: str, *, inference: bool = False, what: str = "log-n scaling") -> str:
    """`kind` when it is a registered log-n scaling (and, with `inference`, one that needs no training)."""
    known = log_scaling_names(inference=inference)
    if kind not in known:
        extra = " (ssmax is a learned per-head scale: only a model trained with it has it)" if kind == "ssmax" else ""
        raise ConfigError(f"{what} must be one of {', '.join(known)}, got {kind!r}{extra}")
    return kind


def log_scaling_factor(kind: str, q_pos: Tensor, train_len: int) -> Tensor:
    """The query multiplier (Lq,) of an inference-time log-n scaling."""
    return LOG_SCALINGS.get(kind).factor(q_pos, train_len)
