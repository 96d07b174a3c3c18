"""BABILong's tasks qa1-qa5 (Kuratov et al. 2024, arXiv 2406.10149) as RULER-style tasks: a bAbI story's facts
spread through a haystack of held-out corpus sentences at an exact token length, asked one question.

As BABILong's `NoiseInjectionDataset`, the facts keep their order and sit between whole haystack sentences at sorted
random places between the depths `start` and `end`. The prompt follows BABILong's layout; a cell's length is the
whole prompt's, as in `lextra ruler`."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any, ClassVar, cast

from lextra.data import Document, Tokenizer
from lextra.errors import ConfigError, DataError
from lextra.evaluate.babilong.scoring import answer_complete, compare_answers
from lextra.evaluate.babilong.world import DEFAULT_FACTS, LABELS, MIN_FACTS, STORIES
from lextra.registry import Registry
from lextra.tasks.ruler import ChatFormat, RulerTask
from lextra.tasks.ruler.layout import Chunk, Draft, insertion_index, interleave

#: a haystack sentence has this many words at least (BABILong drops sentences under 10 tokens) and at most
SENTENCE_WORDS = (5, 80)
_SPLIT = re.compile(r"(?<=[.!?])\s+")

PROMPTS = {
    "qa1": ("I give you a text with facts about where people are hidden in it, and a question. Answer from the "
            "facts only; when a person was in several places, the latest counts.",
            "Anna went to the porch. Tom walked to the shed. Anna moved to the attic. Where is Anna?\n"
            "Answer: The most recent location of Anna is attic.",
            "Answer in this form: The most recent location of PERSON is LOCATION."),
    "qa2": ("I give you a text with facts about where people go and what they take and leave, hidden in it, and a "
            "question. An object someone carries goes where they go; an object left stays where it was left.",
            "Tom went to the shed. Tom took the rope there. Tom moved to the porch. Where is the rope?\n"
            "Answer: The rope is in the porch.",
            "Answer in this form: The OBJECT is in LOCATION."),
    "qa3": ("I give you a text with facts about where people go and what they take and leave, hidden in it, and a "
            "question. An object someone carries goes where they go; an object left stays where it was left.",
            "Tom took the rope. Tom went to the shed. Tom moved to the porch. Where was the rope before the porch?\n"
            "Answer: Before the porch the rope was in the shed.",
            "Answer in this form: Before the LOCATION the OBJECT was in the LOCATION."),
    "qa4": ("I give you a text with facts about how places lie to one another, hidden in it, and a question.",
            "The shed is north of the porch. The attic is east of the porch. What is the porch south of?\n"
            "Answer: shed",
            "Answer with one word, a location."),
    "qa5": ("I give you a text with facts about people, the objects they carry and give to each other, hidden in "
            "it, and a question.",
            "Tom took the rope there. Tom gave the rope to Anna. Anna went to the porch. Who gave the rope?\n"
            "Answer: Tom",
            "Answer with one word."),
}  # fmt: skip


class SentenceStream:
    """The sentences of some documents (whitespace collapsed, lengths in `SENTENCE_WORDS`) as one cyclic stream."""

    def __init__(self, documents: Sequence[Document]) -> None:
        low, high = SENTENCE_WORDS
        sentences = [
            s
            for doc in documents
            for s in _SPLIT.split(re.sub(r"\s+", " ", doc.text).strip())
            if low <= len(s.split(" ")) <= high
        ]
        if not sentences:
            raise DataError(f"the haystack has no sentence of {low}-{high} words; give documents of running text")
        self.sentences = sentences

    def read(self, start: int, count: int) -> list[str]:
        """`count` sentences from `start`, wrapping around."""
        return [self.sentences[(start + i) % len(self.sentences)] for i in range(count)]


class BabilongTask(RulerTask):
    """A BABILong task: its bAbI generator, its labels and BABILong's score."""

    needs_documents: ClassVar[bool] = True
    keeps_question: ClassVar[bool] = True
    suite_name: ClassVar[str] = "BABILong"
    qa: ClassVar[str] = "qa1"

    def __init__(
        self,
        tokenizer: Tokenizer,
        documents: Sequence[Document] | None = None,
        chat: ChatFormat | None = None,
        *,
        facts: int | None = None,
        start: float = 0.0,
        end: float = 1.0,
        budget: int = 20,
    ) -> None:
        facts = DEFAULT_FACTS[self.qa] if facts is None else facts
        super().__init__(tokenizer, chat, {"facts": facts, "start": start, "end": end, "budget": budget})
        least = MIN_FACTS[self.qa]
        if isinstance(facts, bool) or not isinstance(facts, int) or facts < least:
            raise ConfigError(f"BABILong task {self.name!r}: facts must be an integer >= {least}, got {facts!r}")
        if self.qa == "qa4" and facts != 2:
            raise ConfigError("BABILong task 'qa4' tells two facts (bAbI's two argument relations); drop facts=")
        if not 0.0 <= float(start) < float(end) <= 1.0:
            raise ConfigError(f"BABILong task {self.name!r}: need 0 <= start < end <= 1, got start={start}, end={end}")
        self.facts, self.start, self.end = facts, float(start), float(end)
        self.haystack = SentenceStream(documents) if documents else None

    def score(self, prediction: str, references: Sequence[str], question: str = "") -> float:
        """BABILong's rule (`compare_answers`) with the task's labels: 1 or 0."""
        return float(compare_answers(references[0], prediction, question, LABELS[self.qa]))

    def finished(self, prediction: str, references: Sequence[str], question: str = "") -> bool:
        """BABILong reads the first sentence only: decoding stops once it has ended."""
        return answer_complete(prediction)

    def draft(self, rng: random.Random, length: int, depths: list[float]) -> Draft:
        story = STORIES[self.qa](rng, self.facts)
        haystack = self.haystack
        if haystack is None:  # built without documents: build_babilong_task refuses that first
            raise ConfigError(f"BABILong task {self.name!r} needs documents for its haystack")
        placed = sorted(self.start + (self.end - self.start) * rng.random() for _ in story.facts)
        first = rng.randrange(len(haystack.sentences))

        def context(n: int) -> list[Chunk]:
            inserts = [(insertion_index(d, n), fact) for d, fact in zip(placed, story.facts, strict=True)]
            return interleave(haystack.read(first, n), inserts, " ")

        def pad(n: int) -> str:
            return " " + " ".join(haystack.read(first + n, 4))

        instruction, example, form = PROMPTS[self.qa]
        prefix = f"{instruction}\n\n<example>\n{example}\n</example>\n\n{form}\n\n<context>\n"
        question = f"\n</context>\n\nQuestion: {story.question}"
        return Draft(prefix, question, "\nAnswer:", [story.answer], context, pad, minimum=0, depths=placed)


BABILONG_TASKS: Registry[RulerTask] = Registry("BABILong task")


def _register(qa: str, summary: str) -> None:
    cls = type(f"Babilong{qa.upper()}", (BabilongTask,), {"__doc__": f"BABILong {qa}: {summary}.", "qa": qa,
                                                          "summary": summary})  # fmt: skip
    BABILONG_TASKS.register(qa)(cls)


for _qa, _summary in (
    ("qa1", "single supporting fact: where is a person"),
    ("qa2", "two supporting facts: where is an object"),
    ("qa3", "three supporting facts: where was an object before a place"),
    ("qa4", "two argument relations: places on a compass"),
    ("qa5", "three argument relations: who gave what to whom"),
):
    _register(_qa, _summary)


def build_babilong_task(
    name: str,
    tokenizer: Tokenizer,
    documents: Sequence[Document] | None = None,
    chat: ChatFormat | None = None,
    **options: object,
) -> RulerTask:
    """A registered BABILong task with its options, its haystack read from `documents`."""
    cls: Any = BABILONG_TASKS.get(name)  # a BabilongTask subclass, whose constructor takes the documents
    BABILONG_TASKS.check_options(name, options)
    if not documents:
        raise DataError(f"BABILong task {name!r} hides its facts in text: give it documents (a corpus split)")
    return cast(RulerTask, cls(tokenizer, documents, chat=chat, **options))
