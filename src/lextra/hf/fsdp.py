"""FSDP2 sharding for `lextra hf finetune --fsdp`: each decoder layer and the model's root are `fully_shard`ed
(torch's per-parameter sharding: every process holds 1/N of each parameter, gradient and optimizer state, and
gathers a layer's weights only while it runs), for models whose weights, gradients and AdamW state do not fit one
device. The helpers move between sharded tensors (DTensors) and the full CPU tensors a checkpoint holds, so a
checkpoint is the same file whether the run was sharded or not, and resumes either way.

Autocast (bf16 on CUDA) runs inside the sharded model as it does without FSDP; parameters stay fp32.
"""

from __future__ import annotations

from typing import Any

import torch

from lextra.errors import ConfigError


def _api() -> tuple[Any, Any, Any]:
    """fully_shard, DTensor and distribute_tensor (public in torch 2.6; torch 2.5 names them under _composable)."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch 2.5
        from torch.distributed._composable.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, distribute_tensor

    return fully_shard, DTensor, distribute_tensor


def decoder_layers(model: Any) -> list[torch.nn.Module]:
    """The decoder layers of a (LoRA-wrapped) Llama-family model: the units FSDP gathers one at a time."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(getattr(base, "model", None), "layers", None)
    if layers is None:
        raise ConfigError(f"--fsdp: {type(base).__name__} has no model.layers to shard; run without --fsdp")
    return list(layers)


def shard_model(model: Any, device: torch.device, world_size: int) -> Any:
    """Shard `model` in place over the `world_size` processes of the default group (one mesh dimension); the
    same module is returned, its parameters now DTensors."""
    if world_size < 2:
        raise ConfigError(
            "--fsdp shards the model over torchrun's processes; run under torchrun --nproc-per-node N with N >= 2, "
            "or drop --fsdp"
        )
    from torch.distributed.device_mesh import init_device_mesh

    fully_shard, _, _ = _api()
    mesh = init_device_mesh(device.type, (world_size,))
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    fully_shard(base, mesh=mesh)  # the embeddings, final norm and head: the parameters no layer holds
    return model


def is_sharded(value: Any) -> bool:
    """Whether `value` is a DTensor (a sharded parameter, gradient norm or optimizer state)."""
    if not torch.distributed.is_available():
        return False
    _, dtensor, _ = _api()
    return isinstance(value, dtensor)


def full_tensor(value: torch.Tensor) -> torch.Tensor:
    """The whole tensor behind a DTensor (a collective: every process calls it), or `value` itself."""
    return value.full_tensor() if is_sharded(value) else value


def placed_like(value: torch.Tensor, like: Any) -> torch.Tensor:
    """A full tensor `value` laid out as `like`: sharded as `like` is when it is a DTensor, else on its device."""
    if is_sharded(like):
        _, _, distribute_tensor = _api()
        return distribute_tensor(value.to(like.to_local().device), like.device_mesh, like.placements)
    return value.to(like.device)
