"""Ruoss et al.'s binary_multiplication (context-sensitive): two little-endian binary numbers, answered by their
product."""

from __future__ import annotations

import numpy as np

from lextra.tasks.base import TaskBatch
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.ruoss import binary_addition as addition
from lextra.tasks.ruoss.suite import RuossTask


@TRAINING_TASKS.register("ruoss.binary_multiplication")
class BinaryMultiplication(RuossTask):
    """Input `n * m` drawn as binary_addition's (lengths k uniform in 1..L-2 and L-1-k, nonzero numbers,
    little-endian with leading zeros); output L symbols: n * m little-endian without leading zeros, the terminator
    `$`, then 0s. The score counts the symbols up to `$`, the loss all (the authors' `binary_multiplication`). At
    L <= 2, as their code does, the input is one number in 0..2^L-2 (no `*`) and the output `$` (L = 1) or
    `0 $` (L = 2) whatever it is. Their output index 2 (terminator) is our `$`."""

    summary = "little-endian binary n*m -> the product (Ruoss 2023, context-sensitive)"
    alphabet = ("0", "1", "*", "$")

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        if length <= 2:
            inputs = addition.fixed_binary(rng.integers(0, 2**length - 1, size=count), length)
            outputs = np.zeros((count, length), np.int64)
            outputs[:, -1] = addition.END
            return TaskBatch(inputs, outputs, np.ones((count, length), bool))
        inputs, first, second = addition.sample_operands(length, count, rng)
        limbs = -(-length // addition.LIMB)
        a, b = addition.to_limbs(first, limbs), addition.to_limbs(second, limbs)
        # schoolbook over 16-bit limbs: each column sums < limbs products of < 2^32, exact in int64
        product = np.zeros((count, 2 * limbs), np.int64)
        for k in range(limbs):
            product[:, k : k + limbs] += a[:, k : k + 1] * b
        outputs, scored = addition.terminated(addition.from_limbs(product, length), length)
        return TaskBatch(inputs, outputs, scored)
