"""torchrun plumbing for the `Trainer` (DDP replication); FSDP2 sharding is `lextra.train.sharding`."""

from __future__ import annotations

import atexit
import os
from typing import TypeVar

import torch

T = TypeVar("T")


class Distributed:
    """torchrun / DDP plumbing: rank and world size from the environment (nccl on GPUs, gloo on the CPU). Every
    process draws the same global batch and keeps its own rows, so N processes see one process's data."""

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
        if not dist.is_initialized():  # one group per process, kept for every run it makes (compare, study)
            if device.type == "cuda":
                dist.init_process_group("nccl", device_id=device)
            else:
                dist.init_process_group("gloo")
            atexit.register(_destroy_group)
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

    def first(self, value: T) -> T:
        """The first process's `value` on every process (`value` itself on one process)."""
        if self.size == 1:
            return value
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.size > 1:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        """The end of one run: every process waits for the others; the group stays until exit (a new one may hang)."""
        self.barrier()


def main_process() -> bool:
    """Whether this is the process that reports: the first of a torchrun launch (RANK 0), or the only one."""
    return int(os.environ.get("RANK", "0")) == 0


def _destroy_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
