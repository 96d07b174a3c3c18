"""CoCA, collinear constrained attention (Zhu et al. 2023, arXiv 2309.08646), in its exact fused form.

Keys are non-negative multiples of the query in every 2-D rotary slice, k_{n,k} = tau_{n,k} q_{m,k}, with
tau = ReLU(W_T x) (D/2 coefficients per head). The score is
    s(m, n) = sum_k tau_{n,k} |q_{m,k}|^2 cos((m - n) theta_k) / sqrt(D),
which we compute exactly as Q'.K' with Q'_{m,k} = rotate_m((|q_{m,k}|^2, 0)) and K'_{n,k} = rotate_n((tau_{n,k}, 0)),
so any SDPA/flash kernel and an ordinary key cache apply. We follow the paper's formulation, not the released
code: the latter's einsum makes the score depend on absolute position.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lextra.positions.base import HeadDims, register_scheme
from lextra.positions.rotary import RotaryFrequencies, check_rotary_dims, sequence_length


@register_scheme("coca")
class CoCA(RotaryFrequencies):
    """Collinear constrained attention: key = ReLU(tau) * query per rotary slice (exact, m - n only); `scaling`
    applies a RoPE frequency scaling (the paper pairs CoCA with dynamic NTK)."""

    summary = "collinear constrained attention (Zhu 2023): exact Q'.K' form, scores depend on m - n only"

    def __init__(self, dims: HeadDims, *, base: float = 10000.0, scaling: dict | None = None) -> None:
        super().__init__(dims)
        check_rotary_dims(dims.head_dim, "coca")
        self._init_frequencies(base, scaling)

    def key_dim(self) -> int:
        """The key projection yields tau: one coefficient per 2-D slice."""
        return self.dims.head_dim // 2

    def rotate(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, seq_len: int | None = None
    ) -> tuple[Tensor, Tensor]:
        half = self.dims.head_dim // 2
        qf = q.float()
        magnitude = qf[..., :half].square() + qf[..., half:].square()  # |q_{m,k}|^2, half-split slices
        tau = torch.relu(k.float())
        length = sequence_length(q_pos, k_pos, seq_len)
        cos_q, sin_q = self.angles(q_pos, length)
        cos_k, sin_k = self.angles(k_pos, length)
        q_prime = torch.cat((magnitude * cos_q, magnitude * sin_q), dim=-1)
        k_prime = torch.cat((tau * cos_k, tau * sin_k), dim=-1)
        return q_prime.to(q.dtype), k_prime.to(k.dtype)
