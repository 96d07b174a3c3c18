"""The RULER task base: a registry of generators, the sample they make, and what every sample guarantees.

A sample is a pure function of (task, length, index, seed): its generator is `random.Random` seeded from those by
SHA-256 (`layout.sample_seed`). Its prompt has exactly `length` tokens for the task's tokenizer (template, haystack,
question and answer prefix, and a BOS when one is asked for). A RULER cell of length L follows RULER's rule,
prompt + tokens_to_generate <= L: its prompts have `prompt_tokens(L)` = L - `budget` tokens; the rule "exact" gives
them all L tokens and generates the budget on top. Needle depths: the first needle of sample `index` sits
at `spread_depth(index, ...)`, so the samples of a cell spread over RULER's 40 depths, the others at random ones.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from lextra.data import Document, Tokenizer
from lextra.errors import ConfigError, DataError
from lextra.registry import Registry
from lextra.tasks.ruler.layout import DEPTHS, ChatFormat, Draft, Fitter, sample_seed, spread_depth
from lextra.tasks.ruler.scoring import sample_score

#: how a cell's length L sizes its prompts: "ruler" (L less the answer budget, RULER's rule) or "exact" (all L)
PROMPT_LENGTHS = ("ruler", "exact")


@dataclass
class RulerSample:
    """One prompt of exactly `length` tokens, the strings a correct answer contains, and where its needles lie."""

    task: str
    length: int
    index: int
    seed: int
    prompt_ids: list[int]
    references: list[str]
    #: the depth asked of each needle (empty for the aggregation tasks, cwe and fwe)
    depths: list[float]
    #: token spans of the needles in `prompt_ids`, in prompt order
    needle_spans: list[tuple[int, int]]
    #: token span of the haystack (needles and padding included)
    context_span: tuple[int, int]
    #: haystack units that fitted (noise sentences, essay words, list words, ...)
    units: int
    #: the pieces' text (re-encoding it may merge tokens across pieces: feed `prompt_ids`)
    text: str
    #: tokens to generate for the answer
    budget: int
    #: the question asked (BABILong's scoring leaves out the labels it names)
    question: str = ""


class RulerTask(ABC):
    """A RULER generator: `draft` draws one sample's content, the base fits it to an exact length."""

    name: ClassVar[str] = "task"
    summary: ClassVar[str] = ""
    #: the constructor takes the documents of an essay haystack after the tokenizer
    needs_documents: ClassVar[bool] = False
    #: its answers keep the question asked, which its score reads (BABILong's leaves out the labels it names)
    keeps_question: ClassVar[bool] = False
    #: what messages call the task's suite
    suite_name: ClassVar[str] = "RULER"

    def __init__(
        self,
        tokenizer: Tokenizer,
        chat: ChatFormat | None,
        options: dict[str, Any],
    ) -> None:
        budget = options.get("budget", 1)
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ConfigError(f"RULER task {self.name!r}: budget (tokens to generate) must be >= 1, got {budget!r}")
        self.tokenizer, self.chat, self.options = tokenizer, chat, dict(options)
        self.budget = budget
        self.fitter = Fitter(tokenizer, self.name, chat, suite=self.suite_name, budget=budget)

    @property
    def needles(self) -> int:
        """How many items the sample places at depths (0: none)."""
        return 0

    def prompt_tokens(self, length: int, rule: str = "ruler") -> int:
        """The prompt length of a cell of `length` tokens under `rule` (`PROMPT_LENGTHS`): RULER's leaves the
        answer budget free (prompt + budget = `length`), "exact" gives the prompt all `length` tokens."""
        if rule not in PROMPT_LENGTHS:
            raise ConfigError(f"unknown RULER prompt length {rule!r}; use {' or '.join(PROMPT_LENGTHS)}")
        tokens = length - self.budget if rule == "ruler" else length
        if tokens < 1:
            raise ConfigError(
                f"RULER task {self.name!r}: a {length}-token cell leaves no prompt after its {self.budget}-token "
                "answer budget; use a longer length or --prompt-length exact"
            )
        return tokens

    def sample(
        self,
        length: int,
        index: int,
        seed: int = 0,
        depths: Sequence[float] | None = None,
        *,
        prefix: Sequence[int] = (),
    ) -> RulerSample:
        """The sample `index` of `length` tokens; `depths` (one per needle, in [0, 1]) overrides the spread ones;
        `prefix` (a Hugging Face model's BOS, `evaluation_prefix`) opens the prompt and counts in `length`."""
        if isinstance(length, bool) or not isinstance(length, int) or length < 1:
            raise ConfigError(f"RULER lengths must be positive integers, got {length!r}")
        rng = random.Random(sample_seed(self.name, length, index, seed))
        if depths is None:
            first = spread_depth(index, sample_seed(self.name, length, seed) % len(DEPTHS))
            others = rng.sample([d for d in DEPTHS if d != first], max(0, self.needles - 1))
            asked = [first, *others][: self.needles]
        else:
            asked = [float(d) for d in depths]
            if len(asked) != self.needles or any(not 0.0 <= d <= 1.0 for d in asked):
                raise ConfigError(f"RULER task {self.name!r} takes {self.needles} depths in [0, 1], got {asked}")
        draft = self.draft(rng, length, asked)
        layout = self.fitter.fit(draft, length, prefix)
        self.check_encoding(layout.ids, draft.references)
        return RulerSample(
            task=self.name,
            length=length,
            index=index,
            seed=seed,
            prompt_ids=layout.ids,
            references=list(draft.references),
            depths=list(draft.depths),
            needle_spans=layout.needle_spans,
            context_span=layout.context_span,
            units=layout.units,
            text=layout.text,
            budget=self.budget,
            question=draft.question,
        )

    def score(self, prediction: str, references: Sequence[str], question: str = "") -> float:
        """An answer's score (0..1); RULER's: the share of the references it contains (`sample_score`)."""
        return sample_score(prediction, references)

    def finished(self, prediction: str, references: Sequence[str], question: str = "") -> bool:
        """Whether decoding may stop, more output being unable to change the score (RULER's: every reference is
        in it, and more text only adds text)."""
        return self.score(prediction, references, question) == 1

    def training_row(self, length: int, rng: random.Random) -> list[int]:
        """A prompt then its answer (" a, b." after the answer prefix), exactly `length` tokens: content and
        depths drawn from `rng`, the prompt fitted to what the answer leaves."""
        asked = rng.sample(DEPTHS, self.needles)
        draft = self.draft(rng, length, asked)
        answer = list(self.tokenizer.encode(" " + ", ".join(draft.references) + "."))
        return self.fitter.fit(draft, length - len(answer)).ids + answer

    def check_encoding(self, ids: Sequence[int], references: Sequence[str]) -> None:
        """Refuse a tokenizer that loses the answers: every reference must survive encoding and decoding."""
        decoded = self.tokenizer.decode(list(ids)).lower()
        lost = [r for r in references if r.lower() not in decoded]
        if lost:
            raise DataError(
                f"tokenizer {self.tokenizer.name} cannot encode RULER task {self.name!r}'s prompt: decoding it loses "
                f"{lost[0]!r}; use a tokenizer that covers every character (bytes, bpe, or the model's own)"
            )

    @abstractmethod
    def draft(self, rng: random.Random, length: int, depths: list[float]) -> Draft:
        """Provided by each concrete task."""


RULER_TASKS: Registry[RulerTask] = Registry(
    "RULER task",
    modules=("lextra.tasks.ruler.niah", "lextra.tasks.ruler.tracking", "lextra.tasks.ruler.aggregation"),
)


def build_ruler_task(
    name: str,
    tokenizer: Tokenizer,
    documents: Sequence[Document] | None = None,
    chat: ChatFormat | None = None,
    **options: Any,
) -> RulerTask:
    """A registered RULER task with its options; an essay haystack reads `documents` (e.g. `haystack_documents()`),
    the other tasks ignore them. `chat` wraps the prompt in a chat template (RULER's base template without)."""
    cls = RULER_TASKS.get(name)
    RULER_TASKS.check_options(name, options)
    if not cls.needs_documents:
        return cls(tokenizer, chat=chat, **options)
    if not documents:
        raise DataError(f"RULER task {name!r} hides its needles in essays: give it documents (a corpus split)")
    with_documents: Callable[..., RulerTask] = cls  # `needs_documents`: the constructor takes them second
    return with_documents(tokenizer, documents, chat=chat, **options)
