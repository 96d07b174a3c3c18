"""SCAN's length split as Kazemnejad et al. use it (`scan`, split `mdlen_tr25_ts48`): a command of Lake and Baroni's
grammar after `Solve:`, answered by its actions; built here from the grammar, not downloaded."""

from __future__ import annotations

import functools

import numpy as np

from lextra.errors import ConfigError
from lextra.tasks.base import PAD, LengthRange, TaskBatch
from lextra.tasks.kazemnejad.suite import KazemnejadTask
from lextra.tasks.registry import TRAINING_TASKS

COMMAND_WORDS: tuple[str, ...] = ("walk", "look", "run", "jump", "turn", "left", "right", "opposite", "around")
COMMAND_WORDS += ("twice", "thrice", "and", "after")
#: the authors' names of SCAN's actions I_WALK, I_LOOK, I_RUN, I_JUMP, I_TURN_LEFT, I_TURN_RIGHT
ACTIONS = ("Walk", "Look", "Run", "Jump", "Left", "Right")
ALPHABET = (*COMMAND_WORDS, "Solve:", "[SEP]", *ACTIONS)
SOLVE, SEP = len(COMMAND_WORDS), len(COMMAND_WORDS) + 1
#: the split: a command's length is its number of actions, training <= 25, test above (at most 48)
TRAIN = LengthRange(1, 25)
TEST = LengthRange(26, 48)


@functools.cache
def scan_pairs() -> dict[str, str]:
    """Every command of SCAN's grammar (Lake and Baroni 2018, arXiv 1711.00350) -> its actions, as text: 20,910."""
    act = {"walk": "Walk", "look": "Look", "run": "Run", "jump": "Jump"}
    turn = {"left": "Left", "right": "Right"}
    verbs: list[tuple[str, list[str]]] = [(u, [a]) for u, a in act.items()]
    for u in (*act, "turn"):
        own = [] if u == "turn" else [act[u]]
        for d, t in turn.items():
            verbs += [(f"{u} {d}", [t, *own]), (f"{u} opposite {d}", [t, t, *own])]
            verbs += [(f"{u} around {d}", [t, *own] * 4)]
    phrases = [(f"{c}{w}", a * k) for c, a in verbs for w, k in (("", 1), (" twice", 2), (" thrice", 3))]
    pairs = {c: " ".join(a) for c, a in phrases}
    for c1, a1 in phrases:
        for c2, a2 in phrases:
            pairs[f"{c1} and {c2}"] = " ".join(a1 + a2)
            pairs[f"{c1} after {c2}"] = " ".join(a2 + a1)
    return pairs


@functools.cache
def _pool(solve: bool) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Action length -> (inputs (n, w) PAD-padded, outputs (n, length)) of every command of that length."""
    index = {s: i for i, s in enumerate(ALPHABET)}
    groups: dict[int, list[tuple[list[int], list[int]]]] = {}
    for command, actions in scan_pairs().items():
        row = [*([SOLVE] if solve else []), *(index[w] for w in command.split()), SEP]
        out = [index[a] for a in actions.split()]
        groups.setdefault(len(out), []).append((row, out))
    pool = {}
    for length, rows in sorted(groups.items()):
        inputs = np.full((len(rows), max(len(r) for r, _ in rows)), PAD, np.int64)
        for i, (row, _) in enumerate(rows):
            inputs[i, : len(row)] = row
        pool[length] = (inputs, np.array([out for _, out in rows], np.int64))
    return pool


@TRAINING_TASKS.register("kazemnejad.scan")
class Scan(KazemnejadTask):
    """A SCAN command (Lake and Baroni 2018, arXiv 1711.00350) answered by its actions; the authors pool SCAN's length
    split (train and test) and cut it at 25 actions (17,774 commands <= 25, 3,136 above), training on a fixed 90% of
    the short ones. Here a length is an action count and its commands are drawn uniformly; counts no command has
    (23, 29, 31, ...) are refused."""

    summary = "Solve: command [SEP] -> actions (SCAN length split, Kazemnejad 2023)"
    alphabet = ALPHABET
    train_lengths, test_lengths = TRAIN, TEST

    def __init__(self, *, solve: bool = True) -> None:
        super().__init__()
        self.solve = solve  # the `Solve:` prefix of the `mdlen_` split (the authors' `scan_bos` processor)

    def length_values(self, lengths: LengthRange) -> list[int]:
        """The lengths of `lengths` some command has (SCAN has no command of 23, 29, 31, 34, 35, 37-39 or 41-47
        actions): what a runner should draw from and evaluate."""
        return [v for v in lengths.values() if v in _pool(self.solve)]

    def check_length(self, length: int) -> int:
        length = super().check_length(length)
        if length not in _pool(self.solve):
            have = ", ".join(map(str, _pool(self.solve)))
            raise ConfigError(f"task {self.name}: no SCAN command has {length} actions; use one of {have}")
        return length

    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        inputs, outputs = _pool(self.solve)[self.check_length(length)]
        pick = rng.integers(0, len(inputs), size=count)
        chosen = inputs[pick]
        width = int((chosen != PAD).sum(axis=1).max(initial=0))
        return TaskBatch(chosen[:, :width], outputs[pick])
