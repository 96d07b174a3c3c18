"""FSDP2 sharding for the `Trainer` (torch's `fully_shard`): every process holds 1/N of each parameter,
gradient and optimizer state. `shard_model` shards the target's `shard_units` one at a time, then the root (so tied
weights stay one parameter); the helpers move between DTensors and the full CPU tensors a checkpoint holds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

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


def check_sharding(fsdp: bool, world_size: int) -> None:
    """Refuse `--fsdp` without processes to shard over (before any work: the world is known, nothing read)."""
    if fsdp and world_size < 2:
        raise ConfigError(
            "--fsdp shards the model over torchrun's processes; run under torchrun --nproc-per-node N with N >= 2, "
            "or drop --fsdp"
        )


def shard_model(
    model: torch.nn.Module, units: Iterable[torch.nn.Module], device: torch.device, world_size: int
) -> None:
    """Shard each of `units`, then `model` (the root), in place over the default group; parameters become DTensors."""
    check_sharding(True, world_size)
    from torch.distributed.device_mesh import init_device_mesh

    fully_shard, _, _ = _api()
    mesh = init_device_mesh(device.type, (world_size,))
    for unit in units:
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)


def is_sharded(value: Any) -> bool:
    """Whether `value` is a DTensor (a sharded parameter, gradient norm or optimizer state)."""
    if not torch.distributed.is_available():
        return False
    _, dtensor, _ = _api()
    return isinstance(value, dtensor)


def full_tensor(value: torch.Tensor) -> torch.Tensor:
    """The whole tensor behind a DTensor (a collective: every process calls it), or `value` itself."""
    return cast(Any, value).full_tensor() if is_sharded(value) else value


def local_tensor(value: torch.Tensor) -> torch.Tensor:
    """This process's part of a DTensor (no communication), or `value` itself."""
    return cast(Any, value).to_local() if is_sharded(value) else value


def placed_like(value: torch.Tensor, like: Any) -> torch.Tensor:
    """A full tensor `value` laid out as `like`: sharded as `like` is when it is a DTensor, else on its device."""
    if is_sharded(like):
        _, _, distribute_tensor = _api()
        return distribute_tensor(value.to(like.to_local().device), like.device_mesh, like.placements)
    return value.to(like.device)


def gathered(items: Iterable[tuple[str, torch.Tensor]], keep: bool) -> dict[str, torch.Tensor]:
    """(name, tensor) pairs as whole CPU tensors, gathered one at a time (only a process with `keep` holds them)."""
    out: dict[str, torch.Tensor] = {}
    for name, value in items:
        whole = full_tensor(value.detach())
        if keep:
            out[name] = whole.contiguous().cpu()
    return out


def load_full(module: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Copy whole tensors by name into `module`, each laid out as the one it replaces; a missing name is a KeyError."""
    own = module.state_dict(keep_vars=True)
    with torch.no_grad():
        for name, value in state.items():
            own[name].copy_(placed_like(value, own[name]))
