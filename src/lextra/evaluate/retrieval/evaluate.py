"""Retrieval accuracy over a length x depth grid (the needle-in-a-haystack sweep).

The same seed gives the same prompts to every model, so schemes are compared on identical samples.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm

from lextra.data import ByteTokenizer
from lextra.data.prepare import PreparedData
from lextra.errors import ConfigError
from lextra.evaluate.prefix import evaluation_prefix
from lextra.evaluate.retrieval.scoring import score_prompts
from lextra.serialize import Serializable, options
from lextra.tasks.registry import TRAINING_TASKS, TaskSpec, parse_task_spec
from lextra.tasks.retrieval import TASKS, RetrievalTask, Sample, build_task
from lextra.tasks.rows import row_seed

DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
DEFAULT_MULTIPLES = (1, 2, 4, 8, 16)
METRICS = ("exact", "rank1", "mean_rank")


@dataclass(frozen=True)
class RetrievalExample(Serializable):
    """A prompt's expected answer and what the model generated, kept to show failures."""

    answer: str
    generated: str


@dataclass(frozen=True)
class RetrievalScores(Serializable):
    """Exact-match rate, rate of the gold answer ranked first, and its mean rank (1 = best)."""

    exact: float
    rank1: float
    mean_rank: float

    @classmethod
    def mean(cls, scores: Iterable[RetrievalScores]) -> RetrievalScores:
        """The metric-wise mean of several scores."""
        scores = list(scores)
        return cls(*(_mean(getattr(s, metric) for s in scores) for metric in METRICS))


@dataclass
class RetrievalCell(Serializable):
    """The scores of one (length, depth) cell, the prompts they average, the first two answers, and the gold
    answers' mean teacher-forced NLL per token (LongRoPE2's needle-driven perplexity, arXiv 2502.20082)."""

    exact: float
    rank1: float
    mean_rank: float
    samples: int
    examples: list[RetrievalExample]
    answer_nll: float | None = field(default=None, metadata=options(omit_none=True))

    @property
    def scores(self) -> RetrievalScores:
        return RetrievalScores(self.exact, self.rank1, self.mean_rank)


@dataclass
class RetrievalResult(Serializable):
    """Retrieval accuracy of one model over a length x depth grid; per-length and overall means derive from it."""

    serialized_properties = ("by_length", "overall")

    task: str
    label: str
    lengths: list[int]
    depths: list[float]
    samples: int
    candidates: int
    seed: int
    #: length -> depth -> cell
    cells: dict[int, dict[float, RetrievalCell]]
    #: the model folder or name, when the caller records it
    model: str | None = field(default=None, metadata=options(omit_none=True))
    #: True where a length counts the answer too (prompt + answer = length, as a training row); None: the prompt
    answer_inside: bool | None = field(default=None, metadata=options(omit_none=True))
    #: a study's `until_learned` rule: the steps fine-tuned past the budget, and the exact match at L_tr on held-out
    #: prompts after each extra round
    extra_steps: int | None = field(default=None, metadata=options(omit_none=True))
    held_out_exact: list[float] | None = field(default=None, metadata=options(omit_none=True))

    @property
    def by_length(self) -> dict[int, RetrievalScores]:
        """Scores per length, averaged over depths (summed in evaluation order, so a reloaded result agrees)."""
        depths = dict.fromkeys(float(d) for d in self.depths)
        return {
            n: RetrievalScores.mean(self.cells[n][d].scores for d in depths)
            for n in dict.fromkeys(int(n) for n in self.lengths)
        }

    @property
    def overall(self) -> RetrievalScores:
        """Scores averaged over lengths (of the per-length means)."""
        return RetrievalScores.mean(self.by_length.values())

    def cell(self, length: int, depth: float) -> RetrievalCell:
        return self.cells[int(length)][float(depth)]


def default_lengths(train_len: int, multiples: Sequence[int] = DEFAULT_MULTIPLES) -> list[int]:
    return [train_len * m for m in multiples]


@torch.no_grad()
def evaluate_retrieval(
    model: Any,
    task: RetrievalTask,
    lengths: Sequence[int],
    depths: Sequence[float] = DEFAULT_DEPTHS,
    *,
    samples: int = 20,
    seed: int = 0,
    batch_size: int = 8,
    progress: bool = False,
    label: str = "",
    answer_inside: bool = False,
) -> RetrievalResult:
    """Exact-match and rank-1 accuracy and mean rank per (length, depth) cell, per length and overall. A prompt is
    `length` tokens, or `length` minus its answer's where `answer_inside` (the whole row then fits `length`, as a
    training row of that length does)."""
    if samples < 1 or batch_size < 1:
        raise ConfigError(f"samples and batch size must be >= 1, got {samples} and {batch_size}")
    if not lengths or any(n < 1 for n in lengths):
        raise ConfigError(f"retrieval lengths must be positive integers, got {list(lengths)}")
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    prefix = evaluation_prefix(model, task.tokenizer)
    cells: dict[int, dict[float, RetrievalCell]] = {}
    bar = tqdm(total=len(lengths) * len(depths), disable=not progress, desc=f"retrieval {label}", file=sys.stderr)
    for length in lengths:
        cells[int(length)] = {}
        for depth in depths:
            rng = random.Random(row_seed("eval", task.name, seed, length, depth))
            drawn = [task.sample(length - len(prefix), depth, rng, with_answer=answer_inside) for _ in range(samples)]
            cells[int(length)][float(depth)] = _score_cell(model, task, prefix, drawn, batch_size)
            bar.update(1)
    bar.close()
    if was_training:
        model.train()
    return RetrievalResult(
        task=task.name,
        label=label,
        lengths=[int(n) for n in lengths],
        depths=[float(d) for d in depths],
        samples=samples,
        candidates=task.num_distractors + 1,
        seed=seed,
        cells=cells,
        answer_inside=answer_inside or None,
    )


def _score_cell(
    model: Any, task: RetrievalTask, prefix: list[int], drawn: Sequence[Sample], batch_size: int
) -> RetrievalCell:
    """One (length, depth) cell: the drawn prompts scored in batches; the first two answers kept as examples."""
    exact: list[bool] = []
    ranks: list[int] = []
    nll: list[float] = []
    examples: list[RetrievalExample] = []
    for start in range(0, len(drawn), batch_size):
        chunk = drawn[start : start + batch_size]
        scored = score_prompts(
            model,
            [prefix + s.prompt_ids for s in chunk],
            [s.answer_ids for s in chunk],
            [[task.encode(d) for d in s.distractors] for s in chunk],
        )
        exact.extend(scored["exact"])
        ranks.extend(scored["rank"])
        nll.extend(-row[0] / len(s.answer_ids) for row, s in zip(scored["loglik"], chunk, strict=True))
        for s, generated in zip(chunk, scored["generated"], strict=True):
            if len(examples) < 2:
                examples.append(RetrievalExample(s.answer_text, task.tokenizer.decode(generated)))
    return RetrievalCell(
        exact=sum(exact) / len(exact),
        rank1=sum(r == 1 for r in ranks) / len(ranks),
        mean_rank=sum(ranks) / len(ranks),
        samples=len(exact),
        examples=examples,
        answer_nll=sum(nll) / len(nll),
    )


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values)


def _evaluated_spec(spec: str) -> TaskSpec:
    """`spec` parsed, refusing an unknown task or option and a task another suite evaluates."""
    parsed = parse_task_spec(spec)
    if not TRAINING_TASKS.get(parsed.name).retrieval_evaluated:
        raise ConfigError(
            f"task {parsed.name!r} is evaluated by its own suite, not by retrieval eval (e.g. `lextra ruler`)"
        )
    return parsed


def check_retrieval_task(spec: str) -> TaskSpec:
    """`spec` parsed, refusing on read what evaluating it would refuse: `_evaluated_spec`'s checks and an option
    value the task rejects (built over bytes, where the task needs no documents)."""
    parsed = _evaluated_spec(spec)
    if not TASKS.get(parsed.name).needs_documents:
        build_task(parsed.name, ByteTokenizer(), **parsed.options)
    return parsed


def evaluation_task(spec: str, data: PreparedData, distractors: int = 4) -> RetrievalTask:
    """The task of `spec` for evaluation prompts: code-key hides its needles in the test split's files."""
    parsed = _evaluated_spec(spec)
    options = {"distractors": distractors, **parsed.options}
    return build_task(parsed.name, data.tokenizer, data.splits["test"], **options)
