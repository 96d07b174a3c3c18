"""Hugging Face `rope_parameters` (transformers 5.x; 4.x `rope_scaling`) to and from a `RopeScaling`: the identity
up to names and defaults HF keeps elsewhere ("none" is "default"; some types' L_tr is `max_position_embeddings`)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from lextra.errors import ConfigError
from lextra.positions.scaling import SCALING_TYPES, RopeScaling, ScalingType, check_head_dim

#: keys every Hugging Face rope dict may hold whatever its type
HF_COMMON = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor", "mrope_section"})


def hf_readers() -> dict[str, type[ScalingType]]:
    """Hugging Face rope_type -> the type that reads it: each type's `hf_type` first, then its `hf_reads`."""
    kinds = [SCALING_TYPES.get(name) for name in SCALING_TYPES.names()]
    readers = {kind.hf_type: kind for kind in kinds if kind.hf_type}
    for kind in kinds:
        readers.update({t: kind for t in kind.hf_reads if t not in readers})
    return readers


def from_hf(
    rope_parameters: Mapping[str, Any] | None, *, head_dim: int, base: float, max_position_embeddings: int
) -> RopeScaling:
    """Read a Hugging Face `rope_parameters` / `rope_scaling` dict (transformers 4.x or 5.x) as HF 5.24 would.

    "default" (or None / {}) is "none"; "proportional" with `partial_rotary_factor` 1 reads as "linear". Missing
    `original_max_position_embeddings` and factors default as in HF; dynamic takes L_tr from `max_position_embeddings`.
    Unused keys are ignored with a warning; `partial_rotary_factor` != 1, `mrope_section` and a `rope_theta` other
    than `base` are refused."""
    params = dict(rope_parameters or {})
    hf_type = params.get("rope_type", params.get("type", "default"))
    readers = hf_readers()
    if hf_type not in readers:
        raise ConfigError(
            f"Hugging Face rope_type {hf_type!r} is not supported; lextra reads {', '.join(readers)}"
            + (" (lextra's 'ntk' has no HF type)" if hf_type == "ntk" else "")
        )
    kind = readers[hf_type]
    where = f"Hugging Face rope_scaling (rope_type {hf_type!r})"
    partial = params.get("partial_rotary_factor")
    if partial is not None and partial != 1:
        raise ConfigError(f"{where}: partial_rotary_factor={partial} is not supported; lextra rotates the whole head")
    if params.get("mrope_section") is not None:
        raise ConfigError(f"{where}: multimodal RoPE (mrope_section) is not supported")
    theta = params.get("rope_theta")
    if theta is not None and float(theta) != float(base):
        raise ConfigError(f"{where}: rope_theta={theta} differs from base={base}; pass base={theta}")
    ignored = sorted(key for key in params if key not in HF_COMMON and not kind.declares(key))
    if ignored:
        warnings.warn(f"{where}: ignoring keys it does not use: {', '.join(ignored)}", stacklevel=2)
    scaling = RopeScaling(**kind.from_hf(params, hf_type, max_position_embeddings))
    check_head_dim(scaling, head_dim)
    return scaling


def to_hf(scaling: RopeScaling, *, base: float | None = None) -> dict[str, Any]:
    """The Hugging Face `rope_parameters` dict (5.x; also a valid 4.x `rope_scaling`) of this scaling; None
    parameters are omitted, `base` adds `rope_theta`. "ntk" has no HF type and raises."""
    kind = scaling.kind
    keys = kind.to_hf(scaling)  # raises for a type Hugging Face lacks with its own explanation (ntk)
    if kind.hf_type is None:
        raise ConfigError(f"RoPE scaling {scaling.rope_type!r} has no Hugging Face rope_type")
    out: dict[str, Any] = {"rope_type": kind.hf_type}
    if base is not None:
        out["rope_theta"] = float(base)
    out.update({key: list(value) if isinstance(value, tuple) else value for key, value in keys.items()})
    return out
