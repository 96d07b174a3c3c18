"""The Hugging Face folder a fine-tuned model is saved as, read the same by every supported transformers version.

`config.json` holds both `rope_parameters` (transformers 5) and the 4.x keys (`rope_scaling`, `rope_theta`) with
the same numbers; where `rope_parameters` are kept per layer type the 4.x keys follow the full-attention entry."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from lextra.io import atomic_write_json

#: the rope types whose saved `max_position_embeddings` is the base model's own (HF reads it as L_tr)
KEEPS_ORIGINAL_LENGTH = frozenset({"dynamic"})
#: the transformers 4.x key of the sliding layers' RoPE base, for families with per-layer-type `rope_parameters`
LOCAL_BASE_KEYS = {"gemma3_text": "rope_local_base_freq"}


def saved_length(rope: dict[str, Any], original: int, trained: int) -> int:
    """`max_position_embeddings` to save: `original` for dynamic NTK, factor x original for YaRN, else `trained`
    (the largest position trained, exclusive)."""
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind in KEEPS_ORIGINAL_LENGTH:
        return int(original)
    if kind == "yarn":
        return math.ceil(float(rope["factor"]) * int(rope.get("original_max_position_embeddings") or original))
    return int(trained)


def legacy_rope_keys(rope: dict[str, Any]) -> dict[str, Any]:
    """The transformers 4.x keys of a `rope_parameters` dict: `rope_scaling` (None for plain RoPE), `rope_theta`."""
    kind = rope.get("rope_type", rope.get("type", "default"))
    scaling: dict[str, Any] | None = None
    if kind != "default":
        scaling = {"rope_type": kind, "type": kind}
        for key, value in rope.items():
            if key in ("rope_type", "type", "rope_theta"):
                continue
            if kind in KEEPS_ORIGINAL_LENGTH and key == "original_max_position_embeddings":
                continue
            scaling[key] = float(value) if key in ("factor", "beta_fast", "beta_slow") else value
    return {"rope_scaling": scaling, "rope_theta": float(rope["rope_theta"])}


def export_model(model: Any, folder: str | Path, *, original: int, trained: int) -> Path:
    """Save a plain Hugging Face causal LM into `folder` with `max_position_embeddings` and the RoPE keys above."""
    folder = Path(folder)
    rope = dict(model.config.rope_parameters)
    full = rope["full_attention"] if isinstance(rope.get("full_attention"), dict) else rope
    model.config.max_position_embeddings = saved_length(full, original, trained)
    model.save_pretrained(folder)
    path = folder / "config.json"
    saved = json.loads(path.read_text())
    saved["rope_parameters"] = rope
    saved.update(legacy_rope_keys(full))
    local_key = LOCAL_BASE_KEYS.get(model.config.model_type)
    if local_key is not None and isinstance(rope.get("sliding_attention"), dict):
        saved[local_key] = float(rope["sliding_attention"]["rope_theta"])
    atomic_write_json(path, saved)
    return folder
