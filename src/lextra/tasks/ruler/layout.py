"""Prompts of an exact token length: a template around a haystack of units (noise sentences, essay words, list
entries), sized by a search on the unit count, then padded at the token level to the exact length.

A prompt is `[BOS] [chat prefix] prefix context [pad] question [chat suffix] answer_prefix`, each piece encoded on its
own and the ids concatenated (pieces meet at spaces or newlines, where byte-level BPE splits anyway). The context
is encoded in chunks, runs of haystack units and each needle alone, so every needle's token span is known. The
unit count n is the largest whose prompt fits; the tokens still missing (fewer than about one unit) are the
draft's `pad` text, cycled and cut at the token level, between the context and the question.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lextra.data import Tokenizer
from lextra.errors import ConfigError, DataError

#: RULER's needle depths: 40 whole percentages spread evenly over [0, 100]
DEPTHS: tuple[float, ...] = tuple(round(100 * i / 39) / 100 for i in range(40))
#: consecutive sample indices step through `DEPTHS` by this stride (coprime with 40: all 40 within 40 samples)
DEPTH_STRIDE = 17


@dataclass(frozen=True)
class Chunk:
    """A piece of the context: a run of haystack units, or one needle (whose token span is recorded)."""

    text: str
    needle: bool = False


@dataclass(frozen=True)
class ChatFormat:
    """What a chat template puts before the user's message and between it and the answer."""

    prefix: str
    suffix: str


@dataclass
class Draft:
    """One sample's content before its size is known: the template, the references, and the context as a
    function of its size in units (`minimum`..`maximum`)."""

    prefix: str
    question: str
    answer_prefix: str
    references: list[str]
    context: Callable[[int], list[Chunk]]
    #: text whose tokens, cycled, make up the last few tokens of the context (a function of the unit count)
    pad: Callable[[int], str]
    minimum: int = 1
    maximum: int | None = None
    depths: list[float] = field(default_factory=list)


@dataclass
class Layout:
    """A fitted prompt: ids of exactly the asked length, where its needles and its context lie, its text."""

    ids: list[int]
    text: str
    needle_spans: list[tuple[int, int]]
    context_span: tuple[int, int]
    units: int


def sample_seed(*parts: object) -> int:
    """A 63-bit seed from the parts alone (SHA-256, not Python's salted `hash`), stable across runs."""
    key = ":".join(str(p) for p in ("lextra-ruler", *parts)).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") & (2**63 - 1)


def spread_depth(index: int, offset: int) -> float:
    """The first needle's depth for sample `index`: consecutive indices step through `DEPTHS` by 17 of 40, so
    any run of samples spreads over [0, 1]; `offset` (seeded per task, length and seed) says where they start."""
    return DEPTHS[(offset + DEPTH_STRIDE * index) % len(DEPTHS)]


def insertion_index(depth: float, units: int) -> int:
    """Units before a needle at `depth` of a haystack of `units`: round(depth x units), halves up."""
    return math.floor(depth * units + 0.5)


def interleave(units: Sequence[str], needles: Sequence[tuple[int, str]], separator: str) -> list[Chunk]:
    """`units` joined by `separator` with each needle inserted before the unit at its index (in the order
    given where indices tie); runs of units become one chunk, each needle a chunk of its own."""
    inserts = sorted(enumerate(needles), key=lambda item: (item[1][0], item[0]))
    chunks: list[Chunk] = []
    run: list[str] = []
    first = True
    position = 0

    def add_needle(text: str) -> None:
        nonlocal first
        if run:
            chunks.append(Chunk("".join(run)))
            run.clear()
        chunks.append(Chunk(("" if first else separator) + text, needle=True))
        first = False

    for index, unit in enumerate(units):
        while position < len(inserts) and inserts[position][1][0] <= index:
            add_needle(inserts[position][1][1])
            position += 1
        run.append(("" if first else separator) + unit)
        first = False
    for _, (_, text) in inserts[position:]:
        add_needle(text)
    if run:
        chunks.append(Chunk("".join(run)))
    return chunks


def cycle_ids(ids: Sequence[int], count: int) -> list[int]:
    """`count` ids read cyclically from `ids`."""
    if count <= 0:
        return []
    return [ids[i % len(ids)] for i in range(count)]


class PromptTooShortError(ConfigError):
    """A cell's prompt is shorter than a task's template, needles and question: `needed` is the shortest cell length
    that fits (prompt and answer budget)."""

    def __init__(self, message: str, task: str, needed: int) -> None:
        super().__init__(message)
        self.task, self.needed = task, needed


class Fitter:
    """Fits drafts into exact token lengths for one tokenizer (and chat format); `task` names errors, `suite` the
    task's suite in them (RULER, BABILong), `budget` the answer budget a cell's prompt leaves free."""

    def __init__(
        self, tokenizer: Tokenizer, task: str, chat: ChatFormat | None = None, *, suite: str = "RULER", budget: int = 0
    ) -> None:
        self.tokenizer, self.task, self.chat, self.suite, self.budget = tokenizer, task, chat, suite, budget

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text)) if text else []

    def fit(self, draft: Draft, length: int, prefix: Sequence[int] = ()) -> Layout:
        """The prompt of exactly `length` tokens with the most haystack units that fit, opened by `prefix` (a BOS)
        unless the chat template's text already starts with it."""
        chat = self.chat or ChatFormat("", "")
        opening = self.encode(chat.prefix)
        prefix = list(prefix)
        head = ([] if opening[: len(prefix)] == prefix else prefix) + opening + self.encode(draft.prefix)
        tail = self.encode(draft.question) + self.encode(chat.suffix) + self.encode(draft.answer_prefix)
        budget = length - len(head) - len(tail)
        costs: dict[int, tuple[int, list[list[int]]]] = {}

        def cost(n: int) -> int:
            if n not in costs:
                encoded = [self.encode(chunk.text) for chunk in draft.context(n)]
                costs[n] = (sum(len(ids) for ids in encoded), encoded)
            return costs[n][0]

        least = cost(draft.minimum)
        if least > budget:
            needed = length - budget + least
            raise PromptTooShortError(
                f"{self.suite} task {self.task!r} needs prompts of at least {needed} tokens with this tokenizer (its "
                f"template, needles and question), got a {length}-token prompt (a cell's length less its "
                f"{self.budget}-token answer budget); use lengths of at least {needed + self.budget} or drop the task",
                self.task,
                needed + self.budget,
            )
        units = largest_fitting(cost, budget, draft.minimum, draft.maximum)
        used = cost(units)
        if draft.maximum is not None and units == draft.maximum and used < budget:
            raise ConfigError(
                f"{self.suite} task {self.task!r} runs out of haystack at {length} tokens (all {units} units fill only "
                f"{length - budget + used}); use shorter lengths for it"
            )
        pad_ids = self.encode(draft.pad(units)) if used < budget else []
        if used < budget and not pad_ids:
            raise DataError(f"the tokenizer encodes {self.suite} task {self.task!r}'s padding text to no tokens")
        ids = list(head)
        text = chat.prefix + draft.prefix
        spans: list[tuple[int, int]] = []
        for chunk, chunk_ids in zip(draft.context(units), costs[units][1], strict=True):
            if chunk.needle:
                spans.append((len(ids), len(ids) + len(chunk_ids)))
            ids.extend(chunk_ids)
            text += chunk.text
        pad = cycle_ids(pad_ids, budget - used)
        ids.extend(pad)
        text += self.tokenizer.decode(pad) if pad else ""
        context = (len(head), len(ids))
        ids.extend(tail)
        text += draft.question + chat.suffix + draft.answer_prefix
        if len(ids) != length:  # an internal invariant, not a user error
            raise AssertionError(f"{self.task}: built {len(ids)} tokens instead of {length}")
        return Layout(ids, text, spans, context, units)


def largest_fitting(cost: Callable[[int], int], budget: int, low: int, high: int | None) -> int:
    """The largest n in [low, high] with cost(n) <= budget, given cost(low) <= budget, in a few evaluations: cost
    grows with n about linearly (not always strictly), so extrapolate to just past the estimate, then interpolate
    between the last n that fits and the first that does not, checking the neighbour of each guess; bisect when
    interpolation stalls."""
    good, good_cost = low, cost(low)
    bad, bad_cost = None, 0
    guess = low + 8
    while bad is None:
        if high is not None:
            guess = min(guess, high)
        if guess <= good:
            return good
        value = cost(guess)
        if value > budget:
            bad, bad_cost = guess, value
            break
        rate = max((value - good_cost) / (guess - good), 1e-3)
        good, good_cost = guess, value
        guess = good + max(1, math.ceil(1.02 * (budget - value) / rate) + 1)
    for attempt in range(64):
        if bad - good <= 1:
            break
        if attempt < 6 and bad_cost > good_cost:
            guess = good + int((budget - good_cost) * (bad - good) / (bad_cost - good_cost))
            guess = min(max(guess, good + 1), bad - 1)
        else:
            guess = (good + bad) // 2
        value = cost(guess)
        if value <= budget:
            good, good_cost = guess, value
            step = guess + 1  # is the next one already too long?
        else:
            bad, bad_cost = guess, value
            step = guess - 1  # does the previous one fit?
        if good < step < bad:
            value = cost(step)
            if value <= budget:
                good, good_cost = step, value
            else:
                bad, bad_cost = step, value
    return good
