"""Ruoss et al.'s compute_sqrt (context-sensitive): a big-endian binary number, answered by its integer square
root."""

from __future__ import annotations

import math

import numpy as np

from lextra.tasks.base import TaskBatch
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.ruoss.suite import RuossTask


@TRAINING_TASKS.register("ruoss.compute_sqrt")
class ComputeSqrt(RuossTask):
    """Input: a number uniform in 1..2^L-1 as L big-endian bits (leading zeros kept); output its floor square
    root as ceil(L/2) big-endian bits, leading zeros kept (the authors' `compute_sqrt.ComputeSqrt`)."""

    summary = "big-endian binary number -> floor of its square root (Ruoss 2023, context-sensitive)"

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        inputs = rng.integers(0, 2, size=(count, length), dtype=np.int64)
        while True:  # rejection: all zeros is redrawn, as the authors draw from 1..2^L-1
            redraw = ~inputs.any(axis=1)
            if not redraw.any():
                break
            inputs[redraw] = rng.integers(0, 2, size=(int(redraw.sum()), length), dtype=np.int64)
        # big ints per row (Python's isqrt; packing and unpacking are vectorised)
        nbytes = -(-length // 8)
        padded = np.zeros((count, nbytes * 8), np.uint8)
        padded[:, nbytes * 8 - length :] = inputs
        packed = np.packbits(padded, axis=1)
        roots = b"".join(math.isqrt(int.from_bytes(row, "big")).to_bytes(nbytes, "big") for row in packed.tolist())
        bits = np.unpackbits(np.frombuffer(roots, np.uint8).reshape(count, nbytes), axis=1)
        return TaskBatch(inputs, bits[:, nbytes * 8 - math.ceil(length / 2) :].astype(np.int64))
