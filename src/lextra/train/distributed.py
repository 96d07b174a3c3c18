"""torchrun plumbing for the `Trainer`: `Distributed` (rank, world size, the process group; DDP replication) and
FSDP2 sharding (torch's per-parameter `fully_shard`: every process holds 1/N of each parameter, gradient and
optimizer state, and gathers a block's weights only while it runs). The helpers move between sharded tensors
(DTensors) and the full CPU tensors a checkpoint holds, so a checkpoint is the same file whether the run was sharded
or not, and resumes either way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, cast

import torch

from lextra.errors import ConfigError


class Distributed:
    """torchrun / DDP plumbing: rank and world size from the environment (nccl on GPUs, gloo on the CPU).

    Every process draws the same global batch and keeps its own rows, so a run on N processes sees exactly the
    data of a one-process run with the same global batch, and DDP's gradient average equals its gradient. On
    GPUs each process uses the device `resolve_device` gave it: the GPU of its LOCAL_RANK.
    """

    def __init__(self, rank: int = 0, size: int = 1, device: torch.device | None = None) -> None:
        self.rank, self.size = rank, size
        self.device = device or torch.device("cpu")

    @classmethod
    def from_environment(cls, device: torch.device | None = None) -> Distributed:
        """The process group torchrun describes (none for one process), with the backend `device` needs."""
        device = device or torch.device("cpu")
        size = int(os.environ.get("WORLD_SIZE", "1"))
        if size <= 1:
            return cls(device=device)
        import torch.distributed as dist

        if device.type == "cuda":
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            if device.type == "cuda":
                dist.init_process_group("nccl", device_id=device)
            else:
                dist.init_process_group("gloo")
        return cls(dist.get_rank(), dist.get_world_size(), device)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """`model` replicated over the processes (DDP); itself on one process."""
        if self.size == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel

        if self.device.type == "cuda":
            return DistributedDataParallel(model, device_ids=[self.device.index], output_device=self.device.index)
        return DistributedDataParallel(model)

    def shard(self, batch: torch.Tensor) -> torch.Tensor:
        """This process's rows of the global batch."""
        rows = batch.shape[0] // self.size
        return batch[self.rank * rows : (self.rank + 1) * rows]

    def mean(self, value: torch.Tensor) -> float:
        """The mean of a scalar over processes (the global batch's loss), as a float."""
        if self.size > 1:
            import torch.distributed as dist

            value = value.clone()
            dist.all_reduce(value)
            value /= self.size
        return value.item()

    def total(self, values: torch.Tensor) -> torch.Tensor:
        """The sum of a tensor over processes (itself on one process)."""
        if self.size > 1:
            import torch.distributed as dist

            values = values.clone()
            dist.all_reduce(values)
        return values

    def barrier(self) -> None:
        if self.size > 1:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        if self.size > 1:
            import torch.distributed as dist

            dist.barrier()
            dist.destroy_process_group()


def _api() -> tuple[Any, Any, Any]:
    """fully_shard, DTensor and distribute_tensor (public in torch 2.6; torch 2.5 names them under _composable)."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch 2.5
        from torch.distributed._composable.fsdp import fully_shard
    from torch.distributed.tensor import DTensor, distribute_tensor

    return fully_shard, DTensor, distribute_tensor


def shard_blocks(
    blocks: Iterable[torch.nn.Module], root: torch.nn.Module, device: torch.device, world_size: int
) -> None:
    """Shard each of `blocks`, then `root` (the parameters no block holds), in place over the `world_size`
    processes of the default group (one mesh dimension); their parameters become DTensors."""
    if world_size < 2:
        raise ConfigError(
            "--fsdp shards the model over torchrun's processes; run under torchrun --nproc-per-node N with N >= 2, "
            "or drop --fsdp"
        )
    from torch.distributed.device_mesh import init_device_mesh

    fully_shard, _, _ = _api()
    mesh = init_device_mesh(device.type, (world_size,))
    for block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(root, mesh=mesh)


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
    """(name, tensor) pairs as whole CPU tensors, gathered one at a time when sharded (every process takes part;
    only one with `keep` holds the copies, so the host holds one full state, not one per process)."""
    out: dict[str, torch.Tensor] = {}
    for name, value in items:
        whole = full_tensor(value.detach())
        if keep:
            out[name] = whole.contiguous().cpu()
    return out
