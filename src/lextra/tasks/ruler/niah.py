"""RULER's needle-in-a-haystack tasks (Hsieh et al. 2024, arXiv 2404.06654): needles "One of the special magic
{values} for {key} is: {value}." hidden in noise sentences, an essay, or other needles; asked for the values of
one or more keys, scored by the share of the asked values the answer contains.

The eight registered variants follow RULER's synthetic.yaml: haystack (repeat / essay / needle), key and value
types (words, numbers, uuids), keys, values per key and keys asked. Templates are RULER's `niah` template with its
singular rewrite when one value is asked. Needle i of a sample goes to depth i of the sample's depths; the asked
key's first value is needle 0, so it sits at the spread depth.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from typing import ClassVar

from lextra.data import Document, Tokenizer
from lextra.errors import ConfigError
from lextra.tasks.ruler.haystack import NOISE, EssayStream
from lextra.tasks.ruler.layout import ChatFormat, Chunk, Draft, insertion_index, interleave
from lextra.tasks.ruler.tasks import RULER_TASKS, RulerTask
from lextra.tasks.ruler.words import WORDS

NEEDLE = "One of the special magic {kind} for {key} is: {value}."
KINDS = ("words", "numbers", "uuids")
Haystack = tuple[Callable[[int], list[Chunk]], Callable[[int], str]]
"""A haystack's `context(n)` (its first n units with the needles inserted) and `pad(n)` (text after them)."""


def random_item(kind: str, rng: random.Random, digits: int) -> str:
    """A random key or value: `word-word`, a number of `digits` digits, or a UUID (version 4 layout)."""
    if kind == "words":
        return f"{rng.choice(WORDS)}-{rng.choice(WORDS)}"
    if kind == "numbers":
        return str(rng.randint(10 ** (digits - 1), 10**digits - 1))
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def distinct_items(kind: str, rng: random.Random, count: int, digits: int, exclude: set[str]) -> list[str]:
    """`count` distinct random items not in `exclude` (which grows by them)."""
    out: list[str] = []
    while len(out) < count:
        item = random_item(kind, rng, digits)
        if item not in exclude:
            exclude.add(item)
            out.append(item)
    return out


def join_keys(keys: Sequence[str]) -> str:
    """RULER's query: `a`, or `a, b, and c`."""
    return keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + ", and " + keys[-1]


class NeedleTask(RulerTask):
    """A needle-in-a-haystack variant; its class attributes are RULER's configuration of it."""

    haystack: ClassVar[str] = "repeat"
    key_type: ClassVar[str] = "words"
    value_type: ClassVar[str] = "numbers"
    keys: ClassVar[int] = 1
    values: ClassVar[int] = 1
    queries: ClassVar[int] = 1

    def __init__(
        self,
        tokenizer: Tokenizer,
        documents: Sequence[Document] | None = None,
        chat: ChatFormat | None = None,
        *,
        digits: int = 7,
        budget: int = 128,
    ) -> None:
        super().__init__(tokenizer, chat, {"digits": digits, "budget": budget})
        if isinstance(digits, bool) or not isinstance(digits, int) or not 2 <= digits <= 18:
            raise ConfigError(f"RULER task {self.name!r}: digits must be an integer in [2, 18], got {digits!r}")
        self.digits = digits
        self.essay = EssayStream(documents) if self.haystack == "essay" and documents else None

    @property
    def needles(self) -> int:
        return self.keys * self.values

    def template(self, query: str) -> tuple[str, str, str]:
        """RULER's niah template (instruction, question, answer prefix), singular when one value is asked."""
        kind = self.value_type
        if self.queries * self.values == 1:
            kind = kind[:-1]
            return (
                f"A special magic {kind} is hidden within the following text. Make sure to memorize it. "
                f"I will quiz you about the {kind} afterwards.\n",
                f"\nWhat is the special magic {kind} for {query} mentioned in the provided text?",
                f" The special magic {kind} for {query} mentioned in the provided text is",
            )
        return (
            f"Some special magic {kind} are hidden within the following text. Make sure to memorize it. "
            f"I will quiz you about the {kind} afterwards.\n",
            f"\nWhat are all the special magic {kind} for {query} mentioned in the provided text?",
            f" The special magic {kind} for {query} mentioned in the provided text are",
        )

    def draft(self, rng: random.Random, length: int, depths: list[float]) -> Draft:
        used: set[str] = set()
        keys = distinct_items(self.key_type, rng, self.keys, self.digits, used)
        values = [distinct_items(self.value_type, rng, self.values, self.digits, used) for _ in keys]
        pairs = [(k, v) for k, vs in zip(keys, values, strict=True) for v in vs]
        needles = [NEEDLE.format(kind=self.value_type, key=k, value=v) for k, v in pairs]
        asked = keys[: self.queries]
        rng.shuffle(asked)  # RULER asks its keys in a random order
        references = [v for k in asked for v in values[keys.index(k)]]
        instruction, question, answer_prefix = self.template(join_keys(asked))
        placed = list(zip(depths, needles, strict=True))
        if self.haystack == "essay":
            context, pad = self.essay_context(rng, placed)
        elif self.haystack == "needle":
            context, pad = self.needle_context(rng, placed, used)
        else:

            def context(n: int) -> list[Chunk]:
                return interleave([NOISE] * n, [(insertion_index(d, n), t) for d, t in placed], "\n")

            def pad(n: int) -> str:
                return "\n" + NOISE

        return Draft(instruction, question, answer_prefix, references, context, pad, depths=list(depths))

    def essay_context(self, rng: random.Random, placed: list[tuple[float, str]]) -> Haystack:
        """Words of the essay stream from a seeded sentence start; needles at the sentence boundaries nearest
        their depths, joined by spaces (RULER inserts them between sentences)."""
        essay = self.essay
        if essay is None:  # built without documents: build_ruler_task refuses that first
            raise ConfigError(f"RULER task {self.name!r} needs documents for its essay haystack")
        start = essay.start(rng)

        def context(n: int) -> list[Chunk]:
            inserts = [(essay.snap(start, n, insertion_index(d, n)), t) for d, t in placed]
            return interleave(essay.read(start, n), inserts, " ")

        def pad(n: int) -> str:
            return " " + " ".join(essay.read(start + n, 64))

        return context, pad

    def needle_context(self, rng: random.Random, placed: list[tuple[float, str]], used: set[str]) -> Haystack:
        """A haystack of distractor needles (other keys, other values), one per line, drawn as needed from a
        generator of their own, so the first n are the same whatever n."""
        stream = random.Random(rng.getrandbits(64))
        distractors: list[str] = []

        def grow(n: int) -> None:
            while len(distractors) < n:
                key = distinct_items(self.key_type, stream, 1, self.digits, used)[0]
                value = distinct_items(self.value_type, stream, 1, self.digits, used)[0]
                distractors.append(NEEDLE.format(kind=self.value_type, key=key, value=value))

        def context(n: int) -> list[Chunk]:
            grow(n)
            return interleave(distractors[:n], [(insertion_index(d, n), t) for d, t in placed], "\n")

        def pad(n: int) -> str:
            grow(n + 1)
            return "\n" + distractors[n]

        return context, pad


def _variant(name: str, summary: str, **config: object) -> type[RulerTask]:
    """Register a NIAH variant of RULER's synthetic.yaml under `name`."""
    attributes = {"summary": summary, "needs_documents": config.get("haystack") == "essay", **config}
    title = "".join(part.capitalize() for part in name.split("_"))
    cls = type(title, (NeedleTask,), {"__doc__": f"RULER's {name}: {summary}.", **attributes})
    return RULER_TASKS.register(name)(cls)


_variant("niah_single_1", "one word key -> 7-digit number in repeated noise sentences", haystack="repeat")
_variant("niah_single_2", "one word key -> 7-digit number in an essay", haystack="essay")
_variant("niah_single_3", "one word key -> UUID in an essay", haystack="essay", value_type="uuids")
_variant("niah_multikey_1", "4 word keys -> numbers in an essay, one asked", haystack="essay", keys=4)
_variant("niah_multikey_2", "word key -> number among distractor needles", haystack="needle")
_variant(
    "niah_multikey_3", "UUID key -> UUID among distractor needles", haystack="needle", key_type="uuids",
    value_type="uuids",
)  # fmt: skip
_variant("niah_multivalue", "one word key with 4 numbers in an essay, all asked", haystack="essay", values=4)
_variant("niah_multiquery", "4 word keys -> numbers in an essay, all 4 asked", haystack="essay", keys=4, queries=4)
