"""`LayerInference`: what inference changes on one attention layer (mask, temperature, log-n scaling, temperature
tuning, extension method, rotation), held alike by a GPT's `SelfAttention` and a Hugging Face adapter's layers;
`lextra.extend.InferenceSetup.apply` is the one writer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from operator import mul

from torch import Tensor

from lextra.attention.backends import PassExtension
from lextra.attention.masks import Mask
from lextra.attention.pieces import TemperatureTuning
from lextra.positions.base import PositionScheme
from lextra.positions.logn import LOG_SCALINGS


@dataclass
class LayerInference:
    """One layer's inference state; `train_len` is the model's L_tr (the log-n scaling's)."""

    train_len: int
    #: the mask the layer attends with when a call names none (its own `local` one or the setup's), or None
    mask: Mask | None = None
    local: bool = False
    #: per-head softmax temperature (H,), None: 1
    temperature: Tensor | None = None
    #: a `LOG_SCALINGS` name
    log_scaling: str = "none"
    #: Llama 4's query temperature tuning added at inference, or None
    temp_tuning: TemperatureTuning | None = None
    #: the training-free extension method the layer attends through, or None
    extension: PassExtension | None = None
    #: lextra's rotation of q and k in place of the model's own (a Hugging Face layer's RoPE), or None
    rotary: PositionScheme | None = None

    def layer_mask(self, call: Mask | None, default: Mask) -> Mask:
        """The mask the layer attends with: its own, else the call's, else the setup's, else `default`."""
        if call is not None and not self.local:
            return call
        return default if self.mask is None else self.mask

    def query_temperature(
        self, q_pos: Tensor, k_pos: Tensor, mask: Mask, scales: Sequence[Tensor] = (), learned: Tensor | None = None
    ) -> Tensor | None:
        """The softmax temperature (None, (H,) or (H, Lq)) over the log-n factor and the query `scales`."""
        tau = self.temperature
        if tau is not None and tau.device != q_pos.device:  # the model moved since the setup
            tau = self.temperature = tau.to(q_pos.device)
        factor = LOG_SCALINGS.get(self.log_scaling).factor(q_pos, k_pos, mask, self.train_len, learned)
        if factor is not None:
            tau = 1.0 / factor if tau is None else tau[:, None] / factor
        if self.temp_tuning is not None:
            scales = [*scales, self.temp_tuning.query_scale(q_pos)]
        if not scales:
            return tau
        scale = reduce(mul, scales)
        inverse = 1.0 / (scale[None] if scale.dim() == 1 else scale)  # (1, Lq) or (H, Lq)
        if tau is None:
            return inverse
        return (tau[:, None] if tau.dim() == 1 else tau) * inverse
