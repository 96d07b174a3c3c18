"""RULER's variable tracking, `vt` (Hsieh et al. 2024, arXiv 2404.06654): a chain "VAR A = 12345", "VAR B = VAR A",
... hidden among noise lines; asked for every variable that holds the value.

As in RULER: 5-letter variable names, a 5-digit value, the statements in chain order at sorted depths, the noise
lines joined by spaces, RULER's template and answer prefix (its spelling "assgined" kept), and one solved example
first (3-letter names, `example_noise` noise lines) unless `fewshot=False`.
"""

from __future__ import annotations

import itertools
import random
import string

from lextra.data import Tokenizer
from lextra.errors import ConfigError
from lextra.tasks.ruler.haystack import NOISE
from lextra.tasks.ruler.layout import ChatFormat, Chunk, Draft, insertion_index, interleave
from lextra.tasks.ruler.tasks import RULER_TASKS, RulerTask

INSTRUCTION = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
QUESTION = "\nQuestion: Find all variables that are assigned the value {value} in the text above."
ANSWER_PREFIX = (
    " Answer: According to the chain(s) of variable assignment in the text above, {count} variables are assgined "
    "the value {value}, they are: "
)
NOISE_LINE = NOISE + "\n"


def chains(rng: random.Random, count: int, hops: int, letters: int, exclude: set[str]) -> list[list[str]]:
    """`count` chains of `hops` + 1 distinct upper-case names of `letters` letters, not in `exclude` (which grows)."""
    out: list[list[str]] = []
    for _ in range(count):
        names: list[str] = []
        while len(names) < hops + 1:
            name = "".join(rng.choices(string.ascii_uppercase, k=letters))
            if name not in exclude:
                exclude.add(name)
                names.append(name)
        out.append(names)
    return out


def statements(names: list[str], value: str) -> list[str]:
    """RULER's chain: `VAR A = value`, then `VAR B = VAR A ` (trailing space kept), ..."""
    return [f"VAR {names[0]} = {value}"] + [f"VAR {b} = VAR {a} " for a, b in itertools.pairwise(names)]


def place(lines: list[str], depths: list[float]) -> list[tuple[float, str]]:
    """Statements of one chain at its depths, sorted so the chain reads in order."""
    return list(zip(sorted(depths), lines, strict=True))


@RULER_TASKS.register("vt")
class VariableTracking(RulerTask):
    """Multi-hop tracing: follow the chain of assignments from a value to every variable holding it."""

    summary = "variable tracking: 1 chain of 4 hops in noise lines; asked for every variable holding the value"

    def __init__(
        self,
        tokenizer: Tokenizer,
        chat: ChatFormat | None = None,
        *,
        chains: int = 1,
        hops: int = 4,
        fewshot: bool = True,
        example_noise: int = 8,
        budget: int = 30,
    ) -> None:
        super().__init__(
            tokenizer,
            chat,
            {"chains": chains, "hops": hops, "fewshot": fewshot, "example_noise": example_noise, "budget": budget},
        )
        for key, value, low in (("chains", chains, 1), ("hops", hops, 1), ("example_noise", example_noise, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"RULER task vt: {key} must be an integer >= {low}, got {value!r}")
        self.chains, self.hops, self.fewshot, self.example_noise = chains, hops, bool(fewshot), example_noise

    @property
    def needles(self) -> int:
        return self.chains * (self.hops + 1)

    def example(self, rng: random.Random, names: set[str], values: set[str]) -> str:
        """One solved instance: a chain of 3-letter names in `example_noise` noise lines, then its answer."""
        chain = chains(rng, 1, self.hops, 3, names)[0]
        value = self.value(rng, values)
        depths = [rng.choice(range(0, 101)) / 100 for _ in chain]
        n = self.example_noise
        inserts = [(insertion_index(d, n), t) for d, t in place(statements(chain, value), depths)]
        context = "".join(c.text for c in interleave([NOISE_LINE] * n, inserts, " "))
        answer = ANSWER_PREFIX.format(count=len(chain), value=value) + " ".join(chain)
        return INSTRUCTION + context + QUESTION.format(value=value) + answer + "\n\n"

    @staticmethod
    def value(rng: random.Random, values: set[str]) -> str:
        """A 5-digit value not drawn before in this sample."""
        while True:
            value = str(rng.randint(10000, 99999))
            if value not in values:
                values.add(value)
                return value

    def draft(self, rng: random.Random, length: int, depths: list[float]) -> Draft:
        names: set[str] = set()
        values: set[str] = set()
        found = chains(rng, self.chains, self.hops, 5, names)
        chain_values = [self.value(rng, values) for _ in found]
        placed: list[tuple[float, str]] = []
        size = self.hops + 1
        for c, (chain, value) in enumerate(zip(found, chain_values, strict=True)):
            placed += place(statements(chain, value), depths[c * size : (c + 1) * size])
        prefix = (self.example(rng, names, values) if self.fewshot else "") + INSTRUCTION
        value = chain_values[0]

        def context(n: int) -> list[Chunk]:
            return interleave([NOISE_LINE] * n, [(insertion_index(d, n), t) for d, t in placed], " ")

        def pad(n: int) -> str:
            return " " + NOISE_LINE

        return Draft(
            prefix,
            QUESTION.format(value=value),
            ANSWER_PREFIX.format(count=size, value=value),
            list(found[0]),
            context,
            pad,
            depths=[d for d, _ in placed],
        )
