"""Seeded, tokenizer-agnostic retrieval prompts with the needle at a chosen depth in a chosen token length; every
task of `TASKS` (plugins' included) is also a training task whose rows are its prompts with their answers.

A prompt is built from pieces whose token ids are concatenated (filler is cut at the token level), so its length
in tokens is exactly the target for every task and tokenizer. `prompt_text` is the pieces' decoded text; with a
BPE tokenizer, re-encoding it may merge tokens across piece joins, so evaluation feeds `prompt_ids` directly.

Depth: for `passkey` and `code-key` the needle starts after `round(depth * F)` of the F filler tokens; for `lines`
and `kv` (whose haystack is other records) the gold record is record `round(depth * (n - 1))` of n.
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from lextra.data import Document, Tokenizer, encode_documents
from lextra.errors import ConfigError, DataError
from lextra.registry import Option, Registry
from lextra.tasks.registry import TRAINING_TASKS, TrainingTask

PASSKEY_INSTRUCTION = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
    "I will quiz you about the important information there.\n"
)
PASSKEY_FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
CODE_KEY_NAMES = (
    "secret", "magic", "answer", "token", "offset", "limit", "seed", "budget", "quota", "level",
    "weight", "factor", "code", "index", "number", "bonus",
)  # fmt: skip


@dataclass
class Sample:
    """One prompt: ids of exactly the target length, the answer, and where the needle lies."""

    prompt_ids: list[int]
    answer_ids: list[int]
    prompt_text: str
    answer_text: str
    #: the needle's [start, end) characters in `prompt_text` and tokens in `prompt_ids`
    needle_span: tuple[int, int]
    needle_tokens: tuple[int, int]
    depth: float
    #: other answers of the same format, for ranking the gold answer's likelihood
    distractors: list[str] = field(default_factory=list)


class _Builder:
    """Concatenates pieces' token ids and decoded text, recording where each piece lands."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.text = ""

    def add(self, ids: Sequence[int]) -> tuple[tuple[int, int], tuple[int, int]]:
        """Append ids; return their (char span, token span)."""
        piece = self.tokenizer.decode(list(ids)) if ids else ""
        chars = (len(self.text), len(self.text) + len(piece))
        tokens = (len(self.ids), len(self.ids) + len(ids))
        self.ids.extend(ids)
        self.text += piece
        return chars, tokens


def _cycle(ids: Sequence[int], count: int, start: int = 0) -> list[int]:
    """`count` ids read cyclically from `ids` starting at `start`."""
    if count <= 0:
        return []
    if not ids:
        raise DataError("the filler text encodes to no tokens")
    n = len(ids)
    return [ids[(start + i) % n] for i in range(count)]


def _split(total: int, depth: float) -> int:
    """Tokens before the needle: round(depth * total), halves rounded up."""
    return math.floor(depth * total + 0.5)


def _check_depth(depth: float) -> float:
    if not 0.0 <= float(depth) <= 1.0:
        raise ConfigError(f"needle depth must be in [0, 1], got {depth}")
    return float(depth)


def _distinct_numbers(rng: random.Random, count: int, digits: int, exclude: Sequence[str] = ()) -> list[str]:
    """`count` distinct random numbers of exactly `digits` digits (no leading zero), not in `exclude`."""
    seen, out = set(exclude), list[str]()
    while len(out) < count:
        value = str(rng.randint(10 ** (digits - 1), 10**digits - 1))
        if value not in seen:
            seen.add(value)
            out.append(value)
    return out


class RetrievalTask(ABC):
    """Base of the generators: draw the content (seeded), then lay it out in an exact token budget."""

    name: ClassVar[str] = "task"
    summary: ClassVar[str] = ""
    #: the constructor takes documents to hide the needle in, after the tokenizer
    needs_documents: ClassVar[bool] = False

    def __init__(self, tokenizer: Tokenizer, *, distractors: int = 4, ends: float = 0.0) -> None:
        if not 0.0 <= float(ends) <= 1.0:
            raise ConfigError(f"task {self.name}: ends={ends!r} is a share of training rows; use a value in [0, 1]")
        self.tokenizer = tokenizer
        self.num_distractors = distractors
        self.ends = float(ends)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    def sample(self, length: int, depth: float, rng: random.Random, *, with_answer: bool = False) -> Sample:
        """A prompt of exactly `length` tokens (or `length` tokens of prompt + answer when `with_answer`)."""
        depth = _check_depth(depth)
        content = self.draw(rng)
        answer_ids = self.encode(content["answer"])
        budget = length - len(answer_ids) if with_answer else length
        sample = self.build(content, budget, depth, rng)
        sample.answer_ids, sample.answer_text, sample.depth = answer_ids, content["answer"], depth
        sample.distractors = content["distractors"]
        if len(sample.prompt_ids) != budget:  # an internal invariant, not a user error
            raise AssertionError(f"{self.name}: built {len(sample.prompt_ids)} tokens instead of {budget}")
        return sample

    def training_row(self, length: int, rng: random.Random) -> list[int]:
        """A training row of exactly `length` tokens: a prompt, then its answer. The needle's depth is 0 or 1 (half
        each) in a share `ends` of the rows, else uniform in [0, 1]: a uniform depth puts the needle at either end
        in about 1/F of the rows for F filler tokens (4% for passkey's 26 at 128 bytes), where the evaluation's depth
        grid puts 2 of its 5 depths."""
        depth = float(rng.random() < 0.5) if self.ends and rng.random() < self.ends else rng.random()
        sample = self.sample(length, depth, rng, with_answer=True)
        return sample.prompt_ids + sample.answer_ids

    @abstractmethod
    def draw(self, rng: random.Random) -> dict:
        """Provided by each concrete task."""

    @abstractmethod
    def build(self, content: dict, budget: int, depth: float, rng: random.Random) -> Sample:
        """Provided by each concrete task."""

    def _too_short(self, budget: int, needed: int) -> ConfigError:
        return ConfigError(
            f"task {self.name!r} needs prompts of at least {needed} tokens with this tokenizer, got {budget}; "
            "use a longer length"
        )


TASKS: Registry[RetrievalTask] = Registry("retrieval task")


class _FillerTask(RetrievalTask):
    """prefix, filler before, needle, filler after, question: the passkey layout."""

    @abstractmethod
    def filler(self, before: int, after: int, rng: random.Random) -> tuple[list[int], list[int]]:
        """Provided by each concrete task."""

    def build(self, content: dict, budget: int, depth: float, rng: random.Random) -> Sample:
        prefix, needle, question = (self.encode(content[k]) for k in ("prefix", "needle", "question"))
        fixed = len(prefix) + len(needle) + len(question)
        total = budget - fixed
        if total < 0:
            raise self._too_short(budget, fixed)
        before_count = _split(total, depth)
        before, after = self.filler(before_count, total - before_count, rng)
        builder = _Builder(self.tokenizer)
        builder.add(prefix)
        builder.add(before)
        chars, tokens = builder.add(needle)
        builder.add(after)
        builder.add(question)
        return Sample(builder.ids, [], builder.text, "", chars, tokens, depth)


@TASKS.register("passkey")
class PasskeyTask(_FillerTask):
    """Mohtashami & Jaggi (2023, arXiv 2305.16300): a 5-digit pass key in repeated filler sentences (instruction
    line optional: at 148 characters it does not fit a 128-byte training window)."""

    summary = "a pass key hidden in repeated filler sentences (Mohtashami & Jaggi 2023)"
    #: start the prompt with the paper's instruction line
    instruction: ClassVar[bool] = False

    def __init__(self, tokenizer: Tokenizer, *, digits: int = 5, distractors: int = 4, ends: float = 0.0) -> None:
        super().__init__(tokenizer, distractors=distractors, ends=ends)
        self.digits = digits
        self._filler = self.encode(PASSKEY_FILLER)

    def draw(self, rng: random.Random) -> dict:
        key, *others = _distinct_numbers(rng, 1 + self.num_distractors, self.digits)
        return {
            "prefix": PASSKEY_INSTRUCTION if self.instruction else "",
            "needle": f"The pass key is {key}. Remember it. {key} is the pass key. ",
            "question": "\nWhat is the pass key? The pass key is",
            "answer": f" {key}",
            "distractors": [f" {k}" for k in others],
        }

    def filler(self, before: int, after: int, rng: random.Random) -> tuple[list[int], list[int]]:
        """Both sides start at a filler sentence boundary, as in the original repeated-filler format."""
        return _cycle(self._filler, before), _cycle(self._filler, after)


@TASKS.register("passkey-mj")
class InstructedPasskeyTask(PasskeyTask):
    """The pass key prompt with Mohtashami & Jaggi's instruction line first, as in their paper."""

    summary = "passkey with the paper's instruction line first"
    instruction = True


@TASKS.register("code-key")
class CodeKeyTask(_FillerTask):
    """A function returning a constant, hidden among real code files; asked: `assert NAME() == ` -> the number."""

    summary = "a function returning a constant, hidden among code files; asked for the number"
    needs_documents = True

    def __init__(
        self,
        tokenizer: Tokenizer,
        documents: Sequence[Document],
        *,
        digits: int = 5,
        distractors: int = 4,
        ends: float = 0.0,
    ) -> None:
        super().__init__(tokenizer, distractors=distractors, ends=ends)
        self.digits = digits
        tokens = encode_documents([d for d in documents if d.text.strip()], tokenizer, compact=True)
        separator = np.asarray(self.encode("\n"), dtype=np.int64)
        pieces = [p for t in tokens for p in (t.numpy().astype(np.int64), separator)]
        self._stream = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
        if len(self._stream) < 64:
            raise DataError("code-key needs code documents to hide the needle in; the split given is empty")

    def draw(self, rng: random.Random) -> dict:
        key, *others = _distinct_numbers(rng, 1 + self.num_distractors, self.digits)
        name = f"get_{rng.choice(CODE_KEY_NAMES)}_{rng.choice(CODE_KEY_NAMES)}"
        return {
            "prefix": "",
            "needle": f"\ndef {name}():\n    return {key}\n\n",
            "question": f"\n\nassert {name}() ==",
            "answer": f" {key}",
            "distractors": [f" {k}" for k in others],
        }

    def filler(self, before: int, after: int, rng: random.Random) -> tuple[list[int], list[int]]:
        """Contiguous code: the needle is inserted into one stretch of the stream at a seeded offset."""
        start = rng.randrange(len(self._stream))
        ids = np.take(self._stream, np.arange(start, start + before + after), mode="wrap").tolist()
        return ids[:before], ids[before:]


class _RecordTask(RetrievalTask):
    """header, pad, records (one of them gold), question: the lines and key-value layout."""

    header = ""
    separator = ""
    pad = "\n"

    @abstractmethod
    def record(self, key: str, value: str) -> str:
        """Provided by each concrete task."""

    @abstractmethod
    def question(self, key: str) -> str:
        """Provided by each concrete task."""

    @abstractmethod
    def new_pair(self, rng: random.Random, seen: set[str]) -> tuple[str, str]:
        """Provided by each concrete task."""

    def draw(self, rng: random.Random) -> dict:
        return {"seed": rng.getrandbits(64)}  # the records are drawn from their own generator, seeded here

    def build(self, content: dict, budget: int, depth: float, rng: random.Random) -> Sample:
        header, separator, pad = self.encode(self.header), self.encode(self.separator), self.encode(self.pad)
        draw = random.Random(content["seed"])
        seen: set[str] = set()
        first = self.new_pair(draw, seen)
        query = self.encode(self.question(first[0]))
        records: list[tuple[str, str, list[int]]] = []
        used = len(header) + len(query)
        pair = first
        while True:
            ids = (separator if records else []) + self.encode(self.record(*pair))
            if used + len(ids) > budget:
                break
            records.append((*pair, ids))
            used += len(ids)
            pair = self.new_pair(draw, seen)
        if not records:
            raise self._too_short(budget, used + len(self.encode(self.record(*first))))
        gold = _split(len(records) - 1, depth)
        records.insert(gold, records.pop(0))  # the first pair (the one asked about) moves to the gold slot
        records = [
            (k, v, (separator if i else []) + self.encode(self.record(k, v))) for i, (k, v, _) in enumerate(records)
        ]
        used = len(header) + len(query) + sum(len(r[2]) for r in records)  # unchanged: only the order moved
        builder = _Builder(self.tokenizer)
        builder.add(header)
        builder.add(_cycle(pad, budget - used))
        chars = tokens = (0, 0)
        for index, (_, _, ids) in enumerate(records):
            lead = len(separator) if index else 0
            builder.add(ids[:lead])
            span = builder.add(ids[lead:])
            if index == gold:
                chars, tokens = span
        builder.add(query)
        others = [v for k, v, _ in records if k != first[0]]
        extra = self.num_distractors - len(others[: self.num_distractors])
        distractors = others[: self.num_distractors] + [self.new_pair(draw, seen)[1] for _ in range(max(0, extra))]
        sample = Sample(builder.ids, [], builder.text, "", chars, tokens, depth)
        content["answer"], content["distractors"] = first[1], distractors
        return sample

    def sample(self, length: int, depth: float, rng: random.Random, *, with_answer: bool = False) -> Sample:
        """As `RetrievalTask.sample`; the answer is known once the records are drawn."""
        depth = _check_depth(depth)
        content = self.draw(rng)
        answer = self.new_pair(random.Random(content["seed"]), set())[1]
        answer_ids = self.encode(answer)
        budget = length - len(answer_ids) if with_answer else length
        sample = self.build(content, budget, depth, rng)
        sample.answer_ids, sample.answer_text = answer_ids, content["answer"]
        sample.distractors = content["distractors"]
        if len(sample.prompt_ids) != budget or content["answer"] != answer:
            raise AssertionError(f"{self.name}: built {len(sample.prompt_ids)} tokens instead of {budget}")
        return sample


@TASKS.register("lines")
class LinesTask(_RecordTask):
    """LongChat line retrieval (Li et al. 2023, LMSYS blog post): `line <i>: REGISTER_CONTENT is <n>` lines;
    asked for the number of one line."""

    summary = "numbered lines with a value each (LongChat); asked for the value of one line"
    header = ""
    pad = "\n"

    def __init__(self, tokenizer: Tokenizer, *, digits: int = 5, distractors: int = 4, ends: float = 0.0) -> None:
        super().__init__(tokenizer, distractors=distractors, ends=ends)
        self.digits = digits

    def record(self, key: str, value: str) -> str:
        return f"line {key}: REGISTER_CONTENT is <{value}>\n"

    def question(self, key: str) -> str:
        return f"What is the REGISTER_CONTENT in line {key}? It is <"

    def new_pair(self, rng: random.Random, seen: set[str]) -> tuple[str, str]:
        if len(seen) >= 8000:
            raise ConfigError("lines: more than 8000 lines do not fit distinct 4-digit line numbers")
        key = _distinct_numbers(rng, 1, 4, exclude=tuple(seen))[0]
        seen.add(key)
        return key, str(rng.randint(10 ** (self.digits - 1), 10**self.digits - 1))


@TASKS.register("kv")
class KeyValueTask(_RecordTask):
    """Lost in the middle (Liu et al. 2023, arXiv 2307.03172): a JSON object of random hex key-value pairs;
    asked for the value of one key."""

    summary = "a JSON object of random hex pairs (lost in the middle); asked for the value of one key"
    header = "JSON data:\n{"
    separator = ", "
    pad = " "

    def __init__(self, tokenizer: Tokenizer, *, width: int = 8, distractors: int = 4, ends: float = 0.0) -> None:
        super().__init__(tokenizer, distractors=distractors, ends=ends)
        self.width = width

    def record(self, key: str, value: str) -> str:
        return f'"{key}": "{value}"'

    def question(self, key: str) -> str:
        return f'}}\nKey: "{key}"\nCorresponding value: "'

    def new_pair(self, rng: random.Random, seen: set[str]) -> tuple[str, str]:
        while True:
            key = "".join(rng.choice("0123456789abcdef") for _ in range(self.width))
            if key not in seen:
                break
        seen.add(key)
        return key, "".join(rng.choice("0123456789abcdef") for _ in range(self.width))


TASK_NAMES = tuple(TASKS.names())


def build_task(
    name: str, tokenizer: Tokenizer, documents: Sequence[Document] | None = None, **options: Any
) -> RetrievalTask:
    """A registered task with its options; tasks with `needs_documents` (code-key) hide their needle in
    `documents` (the train split to train, the test split to evaluate), the others ignore them."""
    cls = TASKS.get(name)
    TASKS.check_options(name, options)
    if not cls.needs_documents:
        return cls(tokenizer, **options)
    if not documents:
        raise DataError(f"task {name!r} needs code documents (a corpus split) to hide its needle in")
    with_documents: Callable[..., RetrievalTask] = cls  # `needs_documents`: the constructor takes them second
    return with_documents(tokenizer, documents, **options)


def _register_training_task(name: str, task: type[RetrievalTask]) -> None:
    """The training task of retrieval task `name`: its rows are `build_task`'s over the train split."""

    class RetrievalTraining(TrainingTask):
        summary = task.summary

        @classmethod
        def task_options(cls) -> list[Option]:
            return TASKS.options(name)

        @classmethod
        def rows(cls, config: Any, data: Any, options: dict[str, Any]) -> RetrievalTask:
            return build_task(name, data.tokenizer, data.splits["train"], **options)

    TRAINING_TASKS.register(name)(RetrievalTraining)


TASKS.on_register(_register_training_task)
