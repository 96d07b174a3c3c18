"""The algorithmic and synthetic length-generalization tasks: one class per task, registered in the training-task
registry (`lextra.tasks.registry.TRAINING_TASKS`) under `SUITE.name` (`ruoss.reverse_string`, `kazemnejad.copy`,
`zhou.addition`, `mqar`).

A task is a seeded, vectorised generator over its own alphabet: `generate(length, count, rng)` returns a
`TaskBatch` of `count` examples whose size is `length` as the task's paper defines it. How examples meet a model
is the task's `style`:
- `encoder` (Ruoss et al. 2023): the input followed by one placeholder token per output symbol, read at once under a
  bidirectional (`full`) mask; the answer is the argmax at the placeholder positions.
- `decoder` (Kazemnejad et al. 2023, Zhou et al. 2024): input ++ output ++ EOS under a causal mask, the loss on the
  output tokens and EOS only; greedy decoding.
- `inline` (Zoology's MQAR): the input alone under a causal mask, the answers at input positions (a query's value is
  the prediction at the query itself), so the loss and score are at those positions only.
Its `score` is `per_token` (the share of scored output symbols predicted right) or `exact` (a whole answer right).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from lextra.errors import ConfigError
from lextra.registry import Option, constructor_options
from lextra.tasks.registry import TRAINING_TASKS, TrainingTask, parse_task_spec

#: the padding value of `TaskBatch` arrays (a row shorter than the batch's width; never a symbol)
PAD = -1
#: tokens appended to every task's alphabet: padding, end of answer (decoder), answer placeholder (encoder)
SPECIALS = ("<pad>", "<eos>", "<answer>")


@dataclass(frozen=True)
class TaskBatch:
    """`count` examples of one length: symbol indices into the task's alphabet, right-padded with `PAD`.

    `inputs` (n, I) and `outputs` (n, O); an encoder task's rows all have I inputs and O outputs (no padding), a
    decoder task's rows may be shorter; an inline task's `outputs` are (n, I), aligned with the inputs, PAD where a
    position has no answer. `scored` (n, O) marks the output symbols the score counts (None: every
    non-PAD one); they are all trained on either way (as the authors' losses do; e.g. Ruoss et al.'s binary
    addition trains on the padding after the terminator and scores up to it).
    """

    inputs: np.ndarray
    outputs: np.ndarray
    scored: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.inputs.ndim != 2 or self.outputs.ndim != 2 or len(self.inputs) != len(self.outputs):
            raise ValueError(f"TaskBatch: inputs {self.inputs.shape} and outputs {self.outputs.shape} must be (n, .)")
        if self.scored is not None and self.scored.shape != self.outputs.shape:
            raise ValueError(f"TaskBatch: scored {self.scored.shape} must match outputs {self.outputs.shape}")

    def __len__(self) -> int:
        return len(self.inputs)

    def score_mask(self) -> np.ndarray:
        """(n, O) bool: the output symbols the score counts."""
        present = self.outputs != PAD
        return present if self.scored is None else present & self.scored

    def row(self, index: int) -> tuple[list[int], list[int]]:
        """Row `index`'s input and output symbols, padding removed."""
        strip = lambda a: [int(v) for v in a if v != PAD]  # noqa: E731
        return strip(self.inputs[index]), strip(self.outputs[index])


@dataclass(frozen=True)
class LengthRange:
    """An inclusive range of task lengths, e.g. Ruoss et al.'s training range 1..40."""

    low: int
    high: int

    def values(self) -> list[int]:
        return list(range(self.low, self.high + 1))

    def text(self) -> str:
        return f"{self.low}-{self.high}"


@dataclass(frozen=True)
class Suite:
    """Where a group of tasks comes from: the paper and its code, and the setup its tables use."""

    name: str
    paper: str
    code: str
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class AlgorithmicTask(TrainingTask):
    """Base class of the length-generalization tasks (see the module docstring). A subclass sets the class
    variables below, takes its options as keyword-only constructor parameters, and writes `generate`."""

    suite: ClassVar[Suite]
    summary: ClassVar[str] = ""
    positional: ClassVar[str | None] = None
    retrieval_evaluated: ClassVar[bool] = False
    style: ClassVar[str] = "decoder"
    score: ClassVar[str] = "exact"
    #: the symbols the task writes, in the order of their indices (an instance sets its own where an option
    #: changes them, e.g. a modulus)
    alphabet: tuple[str, ...] = ()
    #: the paper's training and test length ranges (the defaults of training and evaluation)
    train_lengths: ClassVar[LengthRange] = LengthRange(1, 40)
    test_lengths: ClassVar[LengthRange] = LengthRange(41, 100)
    #: the smallest length the generator accepts (an instance may set its own, e.g. from its options)
    min_length: int = 1
    #: a decoder task's rows of one training batch take lengths drawn row by row (True: Kazemnejad et al.'s data
    #: sets mix lengths), or one length per batch (False: Ruoss et al.'s curriculum draws one per step)
    mixed_lengths: ClassVar[bool] = False

    def __init__(self) -> None:
        pass

    # ---- the registry's view -----------------------------------------------------------------------------
    @classmethod
    def task_options(cls) -> list[Option]:
        """The task's keyword-only constructor parameters."""
        return constructor_options(cls)

    @classmethod
    def spec_options(cls) -> list[Option]:
        """The task's own options only: an algorithmic task fills whole batches (no `ratio`)."""
        return cls.task_options()

    @classmethod
    def rows(cls, config: Any, data: Any, options: dict[str, Any]) -> Any:
        raise ConfigError(
            f"{cls.name} is a length-generalization task with its own alphabet, not rows mixed into corpus text; "
            f"train it with lextra train --task {cls.name} (not retrieval train)"
        )

    # ---- what a task writes --------------------------------------------------------------------------------
    @property
    def vocabulary(self) -> tuple[str, ...]:
        """The model's vocabulary for this task: the alphabet, then `SPECIALS`."""
        return (*self.alphabet, *SPECIALS)

    @property
    def vocab_size(self) -> int:
        return len(self.vocabulary)

    def special(self, name: str) -> int:
        """The token id of a special token (`<pad>`, `<eos>`, `<answer>`)."""
        return len(self.alphabet) + SPECIALS.index(name)

    def check_length(self, length: int) -> int:
        """`length` as an int the generator accepts, else a ConfigError naming the task's smallest length."""
        if isinstance(length, bool) or not isinstance(length, int | np.integer) or length < self.min_length:
            raise ConfigError(f"task {self.name}: lengths start at {self.min_length}, got {length!r}")
        return int(length)

    def length_values(self, lengths: LengthRange) -> list[int]:
        """The lengths of a range the generator can make (all from `min_length` on; SCAN has gaps)."""
        return [n for n in lengths.values() if n >= self.min_length]

    @abstractmethod
    def generate(self, length: int, count: int, rng: np.random.Generator) -> TaskBatch:
        """`count` examples of task length `length`, drawn from `rng` alone."""

    def spec(self) -> str:
        """The spec that builds this task again (every option written)."""
        from lextra.registry import format_spec

        return format_spec(self.name, {o.name: getattr(self, o.name) for o in self.task_options()})

    def render(self, batch: TaskBatch, index: int = 0) -> str:
        """Row `index` as text, `input -> output`, for messages, docs and tests."""
        inputs, outputs = batch.row(index)
        join = "" if all(len(s) == 1 for s in self.alphabet) else " "
        text = lambda ids: join.join(self.alphabet[i] for i in ids)  # noqa: E731
        return f"{text(inputs)} -> {text(outputs)}"


def task_rng(seed: int, *stream: int) -> np.random.Generator:
    """An independent generator for (seed, stream...): training steps, evaluation lengths, seeds of a study."""
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, *(int(s) & 0xFFFFFFFF for s in stream)])


def algorithmic_task(spec: str) -> AlgorithmicTask | None:
    """The algorithmic task a training-task spec names, built with its options (`ruoss.parity_check`,
    `mqar,pairs=8`); None where the spec names another kind of task (retrieval rows mixed into text)."""
    parsed = parse_task_spec(spec)
    cls = TRAINING_TASKS.get(parsed.name)
    if not issubclass(cls, AlgorithmicTask):
        return None
    return cls(**parsed.options)


def build_task(spec: str) -> AlgorithmicTask:
    """`algorithmic_task`, refusing a spec that names another kind of task."""
    task = algorithmic_task(spec)
    if task is None:
        known = ", ".join(n for n in TRAINING_TASKS.names() if issubclass(TRAINING_TASKS.get(n), AlgorithmicTask))
        raise ConfigError(f"{spec!r} is not a length-generalization task; known: {known}")
    return task


def check_task_mask(task: AlgorithmicTask, causal: bool, mask: str) -> None:
    """Refuse a mask the task's style cannot be read under: encoder tasks see the whole input and their
    placeholders at once (`full`), decoder and inline tasks predict left to right (a causal mask)."""
    if task.style == "encoder" and causal:
        raise ConfigError(
            f"task {task.name} is encoder-style (answers read at placeholders after the input, Ruoss et al.) and "
            f"needs a bidirectional mask, not {mask}; drop it (its runs use full)"
        )
    if task.style != "encoder" and not causal:
        raise ConfigError(
            f"task {task.name} is {task.style}-style (answers predicted left to right) and needs a causal mask; use "
            f"causal, window:W or bca, not {mask}"
        )
