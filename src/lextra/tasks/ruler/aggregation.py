"""RULER's aggregation tasks (Hsieh et al. 2024, arXiv 2404.06654): common words (`cwe`) and frequent words (`fwe`).

`cwe`: a numbered list where `common` words appear `common_repeats` times and the others `rare_repeats` times;
asked for the common ones. Below 4096 tokens RULER uses 6 and 1 repeats and a smaller solved example (20 words
at 3 and 1 repeats) instead of 40 words at 10 and 3; lextra does the same. The list words are drawn from the
built-in word list, the example's apart from the task's. The haystack size is the number of rare words.

`fwe`: random lower-case "coded" words of `word_length` letters with Zipf counts int(N k^-alpha / zeta(alpha)) for
ranks k = 1..V (V = length // 50 unless `vocabulary` is set), the top-ranked word replaced by "..." (noise the
question says to ignore); asked for the three most frequent, ranks 2 to 4. The haystack size is N; the smallest N
is the first where rank 4 outnumbers rank 5, so that the answer is unique.
"""

from __future__ import annotations

import math
import random
import string

from lextra.data import Tokenizer
from lextra.errors import ConfigError
from lextra.tasks.ruler.layout import ChatFormat, Chunk, Draft
from lextra.tasks.ruler.tasks import RULER_TASKS, RulerTask
from lextra.tasks.ruler.words import WORDS

CWE_INSTRUCTION = (
    "Below is a numbered list of words. In these words, some appear more often than others. "
    "Memorize the ones that appear most often.\n"
)
CWE_QUESTION = "\nQuestion: What are the {count} most common words in the above list?"
CWE_ANSWER_PREFIX = " Answer: The top {count} words that appear most often in the list are:"
FWE_INSTRUCTION = (
    "Read the following coded text and track the frequency of each coded word. "
    "Find the three most frequently appeared coded words. "
)
FWE_QUESTION = (
    "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. "
    "What are the three most frequently appeared words in the above coded text?"
)
FWE_ANSWER_PREFIX = " Answer: According to the coded text above, the three most frequently appeared words are:"
FWE_NOISE = "..."
#: below this many tokens `cwe` uses RULER's short configuration
SHORT = 4096


def numbered(words: list[str]) -> str:
    """RULER's list: `1. w1 2. w2 ...`."""
    return " ".join(f"{i + 1}. {w}" for i, w in enumerate(words))


def zeta(alpha: float, terms: int = 4096) -> float:
    """Riemann zeta(alpha), alpha > 1: a partial sum plus the Euler-Maclaurin tail (error far below 1e-12)."""
    partial = math.fsum(k**-alpha for k in range(1, terms))
    n = float(terms)
    return partial + n ** (1 - alpha) / (alpha - 1) + 0.5 * n**-alpha + alpha * n ** (-alpha - 1) / 12


def _positive_int(task: str, key: str, value: object, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"RULER task {task}: {key} must be an integer >= {low}, got {value!r}")
    return value


@RULER_TASKS.register("cwe")
class CommonWords(RulerTask):
    """Aggregation: the words that appear most often in a long numbered list."""

    summary = "common words: 10 words x30 among words x3 (x6 and x1 below 4096 tokens); asked for the 10"

    def __init__(
        self,
        tokenizer: Tokenizer,
        chat: ChatFormat | None = None,
        *,
        common: int = 10,
        common_repeats: int = 30,
        rare_repeats: int = 3,
        fewshot: bool = True,
        budget: int = 120,
    ) -> None:
        options = {"common": common, "common_repeats": common_repeats, "rare_repeats": rare_repeats}
        super().__init__(tokenizer, chat, {**options, "fewshot": fewshot, "budget": budget})
        for key, value in options.items():
            _positive_int("cwe", key, value)
        if common_repeats <= rare_repeats:
            raise ConfigError(f"RULER task cwe: common_repeats ({common_repeats}) must exceed rare_repeats")
        self.common, self.common_repeats, self.rare_repeats = common, common_repeats, rare_repeats
        self.fewshot = bool(fewshot)

    def repeats(self, length: int) -> tuple[tuple[int, int], tuple[int, int, int]]:
        """(common, rare) repeats of the list and (words, common, rare repeats) of the example at `length`."""
        if length < SHORT:
            return (6, 1), (20, 3, 1)
        return (self.common_repeats, self.rare_repeats), (40, 10, 3)

    def draft(self, rng: random.Random, length: int, depths: list[float]) -> Draft:
        (common_n, rare_n), (example_words, example_common, example_rare) = self.repeats(length)
        pool = rng.sample(WORDS, len(WORDS))
        prefix = CWE_INSTRUCTION
        if self.fewshot:
            words, pool = pool[:example_words], pool[example_words:]
            top = words[: self.common]
            listing = top * example_common + words[self.common :] * example_rare
            rng.shuffle(listing)
            prefix = (
                CWE_INSTRUCTION
                + numbered(listing)
                + CWE_QUESTION.format(count=self.common)
                + CWE_ANSWER_PREFIX.format(count=self.common)
                + numbered(top)
                + "\n"
                + CWE_INSTRUCTION
            )
        common, rare = pool[: self.common], pool[self.common :]
        order = rng.getrandbits(64)

        def context(n: int) -> list[Chunk]:
            entries = common * common_n + rare[:n] * rare_n
            random.Random(order).shuffle(entries)
            return [Chunk(numbered(entries))]

        def pad(n: int) -> str:
            return " "

        return Draft(
            prefix,
            CWE_QUESTION.format(count=self.common),
            CWE_ANSWER_PREFIX.format(count=self.common),
            list(common),
            context,
            pad,
            minimum=1,
            maximum=len(rare),
        )


@RULER_TASKS.register("fwe")
class FrequentWords(RulerTask):
    """Aggregation: the three most frequent coded words of a Zipf-distributed text."""

    summary = "frequent words: Zipf (alpha 2) coded words; asked for the 3 most frequent"

    def __init__(
        self,
        tokenizer: Tokenizer,
        chat: ChatFormat | None = None,
        *,
        alpha: float = 2.0,
        word_length: int = 6,
        vocabulary: int = 0,
        budget: int = 50,
    ) -> None:
        options = {"alpha": alpha, "word_length": word_length, "vocabulary": vocabulary}
        super().__init__(tokenizer, chat, {**options, "budget": budget})
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 1.0 < alpha <= 10.0:
            raise ConfigError(f"RULER task fwe: alpha must be a number in (1, 10], got {alpha!r}")
        _positive_int("fwe", "word_length", word_length, 3)
        _positive_int("fwe", "vocabulary", vocabulary, 0)
        if 0 < vocabulary < 5:
            raise ConfigError(f"RULER task fwe: vocabulary must be 0 (length // 50) or >= 5, got {vocabulary}")
        self.alpha, self.word_length, self.vocabulary = float(alpha), word_length, vocabulary
        self.zeta = zeta(self.alpha)

    def counts(self, n: int, size: int) -> list[int]:
        """Each rank's count among n words: int(n k^-alpha / zeta(alpha)), k = 1..size."""
        return [int(n * k**-self.alpha / self.zeta) for k in range(1, size + 1)]

    def smallest(self) -> int:
        """The fewest words at which rank 4 outnumbers rank 5 (so the three answers are unique)."""
        n = 1
        while True:
            counts = self.counts(n, 5)
            if counts[3] > counts[4]:
                return n
            n += 1

    def draft(self, rng: random.Random, length: int, depths: list[float]) -> Draft:
        size = self.vocabulary or max(5, length // 50)
        vocab: list[str] = []
        seen: set[str] = set()
        while len(vocab) < size:
            word = "".join(rng.choices(string.ascii_lowercase, k=self.word_length))
            if word not in seen:
                seen.add(word)
                vocab.append(word)
        vocab[0] = FWE_NOISE
        order = rng.getrandbits(64)

        def context(n: int) -> list[Chunk]:
            words = [w for w, count in zip(vocab, self.counts(n, size), strict=True) for _ in range(count)]
            random.Random(order).shuffle(words)
            return [Chunk(" ".join(words))]

        def pad(n: int) -> str:
            return " " + FWE_NOISE

        return Draft(
            FWE_INSTRUCTION, FWE_QUESTION, FWE_ANSWER_PREFIX, vocab[1:4], context, pad, minimum=self.smallest()
        )
