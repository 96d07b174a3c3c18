"""Ruoss et al.'s binary_addition (context-sensitive): two little-endian binary numbers, answered by their sum."""

from __future__ import annotations

import numpy as np

from lextra.tasks.base import TaskBatch
from lextra.tasks.registry import TRAINING_TASKS
from lextra.tasks.ruoss.suite import RuossTask

#: the operator between the numbers (the authors' input index 2) and our index of their terminator (output index 2)
SEPARATOR, END = 2, 3
LIMB = 16  # bits per limb of the vectorised big-number arithmetic


def sample_operands(length: int, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The authors' `_sample_expressions_and_results` draws for `length` >= 3: the first number's length k uniform
    in 1..L-2, the second's L-1-k, each number uniform over the nonzero ones of its length (leading zeros kept).
    Returns the inputs `n 2 m` (count, L) and the two numbers as little-endian bits, zero-padded to (count, L)."""
    rows, column = np.arange(count), np.arange(length)[None, :]
    split = rng.integers(1, length - 1, size=count)
    first_part, second_part = column < split[:, None], column > split[:, None]
    bits = rng.integers(0, 2, size=(count, length), dtype=np.int64)
    while True:  # rejection: a number of all zeros is redrawn (with its row), as the authors draw from 1..2^k-1
        redraw = ~((bits * first_part).any(axis=1) & (bits * second_part).any(axis=1))
        if not redraw.any():
            break
        bits[redraw] = rng.integers(0, 2, size=(int(redraw.sum()), length), dtype=np.int64)
    first = np.where(first_part, bits, 0)
    source = split[:, None] + 1 + column
    second = np.where(source < length, bits[rows[:, None], np.minimum(source, length - 1)], 0)
    bits[rows, split] = SEPARATOR
    return bits, first, second


def fixed_binary(numbers: np.ndarray, width: int) -> np.ndarray:
    """Small non-negative ints as little-endian bits (count, width)."""
    return (numbers[:, None] >> np.arange(width)[None, :]) & 1


def to_limbs(bits: np.ndarray, limbs: int) -> np.ndarray:
    """Little-endian bits (count, W) as `limbs` little-endian 16-bit limbs (count, limbs), int64."""
    padded = np.zeros((len(bits), limbs * LIMB), np.int64)
    padded[:, : bits.shape[1]] = bits
    return (padded.reshape(len(bits), limbs, LIMB) << np.arange(LIMB)).sum(axis=2)


def from_limbs(limbs: np.ndarray, width: int) -> np.ndarray:
    """Limb sums (count, K), each >= 0 and possibly over 16 bits, carried and written as little-endian bits
    (count, width); the value must fit in `width` bits."""
    carried = np.empty_like(limbs)
    carry = np.zeros(len(limbs), np.int64)
    for k in range(limbs.shape[1]):
        total = limbs[:, k] + carry
        carried[:, k], carry = total & (2**LIMB - 1), total >> LIMB
    bits = (carried[:, :, None] >> np.arange(LIMB)) & 1
    return bits.reshape(len(limbs), limbs.shape[1] * LIMB)[:, :width]


def terminated(result: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The authors' target: a little-endian result without leading zeros (0 is `0`), the terminator, then 0s, to
    `width` symbols; and the score mask (up to the terminator, their `accuracy_mask`). `result` (count, >= width)
    holds bits, zero past the number."""
    nonzero = result[:, :width] != 0
    size = np.where(nonzero.any(axis=1), width - np.argmax(nonzero[:, ::-1], axis=1), 1)
    outputs = result[:, :width].copy()
    outputs[np.arange(len(result)), size] = END
    return outputs, np.arange(width)[None, :] <= size[:, None]


@TRAINING_TASKS.register("ruoss.binary_addition")
class BinaryAddition(RuossTask):
    """Input `n + m`, two little-endian binary numbers with leading zeros of lengths k (uniform in 1..L-2) and
    L-1-k, each uniform over its nonzero values; output L + 1 symbols: n + m little-endian without leading zeros,
    the terminator `$`, then 0s. The score counts the symbols up to `$`, the loss all (the authors'
    `binary_addition`: `accuracy_mask` up to the terminator). At L <= 2, as their code does, the input is one
    number in 0..2^L-2 (no `+`) and the output that number. Their output index 2 (terminator) is our `$`."""

    summary = "little-endian binary n+m -> the sum (Ruoss 2023, context-sensitive)"
    alphabet = ("0", "1", "+", "$")

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        length = self.check_length(length)
        if length <= 2:
            numbers = rng.integers(0, 2**length - 1, size=count)
            inputs = fixed_binary(numbers, length)
            outputs, scored = terminated(fixed_binary(numbers, length + 1), length + 1)
            return TaskBatch(inputs, outputs, scored)
        inputs, first, second = sample_operands(length, count, rng)
        limbs = -(-(length + 1) // LIMB)
        total = from_limbs(to_limbs(first, limbs) + to_limbs(second, limbs), length + 1)
        outputs, scored = terminated(total, length + 1)
        return TaskBatch(inputs, outputs, scored)
