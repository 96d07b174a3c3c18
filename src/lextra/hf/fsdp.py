"""FSDP2 sharding of a Hugging Face decoder for `lextra hf finetune --fsdp`: each decoder layer and the model's root
are `fully_shard`ed (`lextra.train.distributed.shard_blocks`), for models whose weights, gradients and AdamW state
do not fit one device. Autocast (bf16 on CUDA) runs inside the sharded model as it does without FSDP; parameters
stay fp32.
"""

from __future__ import annotations

from typing import Any

import torch

from lextra.errors import ConfigError
from lextra.train.distributed import shard_blocks


def decoder_layers(model: Any) -> list[torch.nn.Module]:
    """The decoder layers of a (LoRA-wrapped) Llama-family model: the units FSDP gathers one at a time."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(getattr(base, "model", None), "layers", None)
    if layers is None:
        raise ConfigError(f"--fsdp: {type(base).__name__} has no model.layers to shard; run without --fsdp")
    return list(layers)


def shard_model(model: Any, device: torch.device, world_size: int) -> Any:
    """Shard `model` in place over the `world_size` processes of the default group: each decoder layer, then the
    root (the embeddings, final norm and head); the same module is returned, its parameters now DTensors."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    shard_blocks(decoder_layers(model) if world_size > 1 else [], base, device, world_size)
    return model
