"""The suite record of Ruoss et al.'s tasks, shared by each task's file."""

from __future__ import annotations

from typing import ClassVar

from lextra.tasks.base import AlgorithmicTask, LengthRange, Suite

RUOSS = Suite(
    name="ruoss",
    paper="Ruoss et al. 2023, Randomized Positional Encodings Boost Length Generalization (arXiv 2305.16843)",
    code="google-deepmind/randomized_positional_encodings (tasks: google-deepmind/neural_networks_chomsky_hierarchy)",
    notes="encoder, 5 layers, width 64, 8 heads; lengths 1-40 in training (one length per batch), 41-500 at test",
)
#: the authors' training range and the test range lextra uses by default (their example averages 41..100)
TRAIN = LengthRange(1, 40)
TEST = LengthRange(41, 100)


class RuossTask(AlgorithmicTask):
    """What every task of the suite shares: encoder style (answers at placeholders, a `full` mask), per-token
    accuracy, binary input unless a task says otherwise, the authors' training and test lengths. Registered
    subclasses only; this class is not a task."""

    suite: ClassVar[Suite] = RUOSS
    style: ClassVar[str] = "encoder"
    score: ClassVar[str] = "per_token"
    alphabet: tuple[str, ...] = ("0", "1")
    train_lengths: ClassVar[LengthRange] = TRAIN
    test_lengths: ClassVar[LengthRange] = TEST
