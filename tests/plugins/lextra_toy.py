"""An example plugin: one position scheme, mask, RoPE scaling, attention piece, extension method, retrieval task
and RULER task, each one small class in its registry (the worked examples of docs/extending.md;
tests/test_plugins.py runs them).

Use it with `LEXTRA_PLUGINS=tests/plugins/lextra_toy.py lextra list` or `lextra --plugin tests/plugins/lextra_toy.py`.
"""

from __future__ import annotations

import math
import random
from typing import Any, ClassVar

import torch
from torch import Tensor

from lextra.attention.masks import MASKS, UNBOUNDED, Mask
from lextra.attention.pieces import PIECES, AttentionPiece
from lextra.errors import ConfigError
from lextra.extend.base import EXTENSIONS, ExtensionMethod, Pass, constant_position, int_option, same_position
from lextra.positions import HeadDims, PositionScheme, register_scheme
from lextra.positions.scaling import RopeScaling, ScalingType, register_scaling, rope_inv_freq
from lextra.registry import Option
from lextra.tasks.retrieval import TASKS, PasskeyTask
from lextra.tasks.ruler.niah import NeedleTask
from lextra.tasks.ruler.tasks import RULER_TASKS
from lextra.validate import check_range


# --- a position scheme: a score bias -slope * (m - n), the same on every head ----------------------------------
@register_scheme("toy_bias")
class ToyBias(PositionScheme):
    """A linear distance penalty with one slope for every head (ALiBi with a single slope)."""

    summary = "toy: -slope * (m - n) on every head"
    has_bias = True

    def __init__(self, dims: HeadDims, *, slope: float = 0.5) -> None:
        super().__init__(dims)
        self.slope = check_range("toy_bias: slope", slope, 0.0, 1e6, high_open=True)

    def distance_bias(self, distance: Tensor) -> Tensor:
        return (-self.slope * distance.abs().float()).expand(self.dims.n_heads, *distance.shape)


# --- a mask: causal keys at distances 0, step, 2 step, ... -------------------------------------------------------
@MASKS.register("stride")
class StrideMask(Mask):
    """Each query sees the keys at distances that are multiples of `step` (itself included)."""

    summary = "toy: causal, keys at distances 0, step, 2 step, ..."
    causal = True
    positional = "step"

    def __init__(self, *, step: int = 2) -> None:
        if step < 1:
            raise ConfigError(f"stride: step must be >= 1, got {step}")
        self.step = step

    def allowed_distance(self, distance: Tensor) -> Tensor:
        return (distance >= 0) & (distance % self.step == 0)

    @property
    def options(self) -> dict[str, Any]:
        return {"step": self.step}


# --- a RoPE scaling: interpolate by sqrt(s) -----------------------------------------------------------------------
@register_scaling("sqrt_pi")
class SqrtInterpolation(ScalingType):
    """Position interpolation by sqrt(s): theta_k / sqrt(s), half way (in log scale) between none and linear."""

    summary = "toy: theta_k / sqrt(s); no Hugging Face type"
    params = (Option("factor", 1.0, "float"),)

    @classmethod
    def frequencies(cls, scaling: RopeScaling, head_dim: int, base: float, seq_len: int | None) -> tuple[Tensor, float]:
        return rope_inv_freq(head_dim, base) / math.sqrt(scaling["factor"]), 1.0


# --- a RoPE scaling with a parameter of its own: interpolate by s^alpha ------------------------------------------
@register_scaling("power_pi")
class PowerInterpolation(ScalingType):
    """Position interpolation by s^alpha: theta_k / s^alpha (alpha 0 is none, 1/2 sqrt_pi, 1 linear)."""

    summary = "toy: theta_k / s^alpha, alpha its own parameter; no Hugging Face type"
    params = (Option("factor", 1.0, "float"), Option("alpha", 0.5, "float"))

    @classmethod
    def check(cls, scaling: RopeScaling, where: str) -> None:
        check_range(f"{where}: alpha", scaling["alpha"], 0.0, 1.0)

    @classmethod
    def frequencies(cls, scaling: RopeScaling, head_dim: int, base: float, seq_len: int | None) -> tuple[Tensor, float]:
        return rope_inv_freq(head_dim, base) / scaling["factor"] ** scaling["alpha"], 1.0


# --- an attention piece: every query multiplied by one factor ---------------------------------------------------
@PIECES.register("toy_qscale")
class QueryScale(AttentionPiece):
    """Every query multiplied by `factor` (a sharper softmax above 1): the piece acts through one hook."""

    summary = "toy: every query multiplied by factor"
    positional = "factor"

    def __init__(self, dims: HeadDims, *, factor: float = 2.0) -> None:
        super().__init__(dims)
        self.factor = check_range("toy_qscale: factor", factor, 0.0, 1e6, low_open=True)

    def query_scale(self, positions: Tensor) -> Tensor:
        return torch.full(positions.shape, self.factor, device=positions.device)


# --- an extension method: distances clipped at `cap` --------------------------------------------------------------
@EXTENSIONS.register("clip")
class ClipDistance(ExtensionMethod):
    """d' = min(d, cap): ReRoPE without its log scale; two passes (near keys as they are, far keys at cap)."""

    summary = "toy: distances clipped at cap, d' = min(d, cap); cap = L/2"
    derived_defaults: ClassVar[dict[str, str]] = {"cap": "L/2"}

    def __init__(self, train_len: int, *, cap: int | None = None) -> None:
        super().__init__(train_len)
        L = self.train_len
        self.cap = int_option("clip", "cap", cap, max(1, L // 2), 1, L - 1, hint=f"cap must be below L = {L}")

    def remap(self, m: Tensor, n: Tensor) -> tuple[Tensor, Tensor]:
        d = m - n
        return d.clamp(max=self.cap).to(torch.float64), d >= 0

    def passes(self, q_first: int, q_last: int) -> list[Pass]:
        return [
            Pass("near", same_position, same_position, (0, self.cap - 1)),
            Pass("far", constant_position(self.cap), constant_position(0), (self.cap, UNBOUNDED)),
        ]

    @property
    def options(self) -> dict[str, Any]:
        return {"cap": self.cap}


# --- a retrieval task: the pass key in a shorter sentence ---------------------------------------------------------
@TASKS.register("toy-key")
class ToyKeyTask(PasskeyTask):
    """The passkey layout with a two-word needle and a one-word question, short enough for tiny models."""

    summary = "toy: passkey with a short needle, 'Key N.'"

    def draw(self, rng: random.Random) -> dict:
        content = super().draw(rng)
        content["needle"] = f"Key{content['answer']}. "
        content["question"] = "\nKey"
        return content


# --- a RULER task: a NIAH variant is its class attributes ---------------------------------------------------------
@RULER_TASKS.register("niah_pair")
class PairNeedles(NeedleTask):
    """Two word keys -> numbers in repeated noise sentences, both asked."""

    summary = "toy: 2 word keys -> numbers in noise sentences, both asked"
    haystack = "repeat"
    keys = 2
    queries = 2
