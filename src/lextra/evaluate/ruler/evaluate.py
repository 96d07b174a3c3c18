"""Running a model on RULER samples: one cached prefill per batch of equal-length prompts, greedy decoding in
chunks of `CHUNK` tokens within the task's answer budget (stopping once every row has ended or contains all its
references, which cannot change a score), RULER's score per (task, length) cell."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from tqdm import tqdm

from lextra.data import ByteTokenizer, Tokenizer
from lextra.errors import ConfigError, DataError
from lextra.evaluate.prefix import evaluation_prefix
from lextra.evaluate.retrieval.scoring import greedy_continue, prefill
from lextra.evaluate.ruler.results import RulerAnswer, RulerCell, total_if_known
from lextra.tasks.ruler.scoring import sample_score, wilson_interval
from lextra.tasks.ruler.tasks import RulerSample, RulerTask

#: tokens decoded between checks of whether every row is done
CHUNK = 16
#: most threads drawing samples at once
DRAW_THREADS = 8


def decode(tokenizer: Tokenizer, ids: Sequence[int]) -> str:
    """The text of generated ids, leaving out ids past the tokenizer's vocabulary (a model's padded rows)."""
    return tokenizer.decode([i for i in ids if 0 <= i < tokenizer.vocab_size])


def stop_token(tokenizer: Tokenizer) -> int | None:
    """The end-of-text id decoding stops at: the tokenizer's separator, except the byte tokenizer's newline."""
    return None if isinstance(tokenizer, ByteTokenizer) else tokenizer.separator_id


@torch.no_grad()
def generate(
    model: Any,
    prompts: Sequence[Sequence[int]],
    references: Sequence[Sequence[str]],
    tokenizer: Tokenizer,
    budget: int | Sequence[int],
    *,
    timings: dict[str, float] | None = None,
    finished: Callable[[int, str], bool] | None = None,
) -> list[str]:
    """Greedy answers of equal-length prompts, at most `budget` tokens each (one for all, or per row), stopping
    once every row has ended, used its budget or is `finished(row, text)` (default: contains all its references);
    `timings` receives the prefill's seconds as "prefill"."""
    if len({len(p) for p in prompts}) != 1:
        raise ValueError("generate needs prompts of one length")
    budgets = [budget] * len(prompts) if isinstance(budget, int) else [int(b) for b in budget]
    stop = stop_token(tokenizer)
    batch = torch.tensor([list(p) for p in prompts], dtype=torch.long)
    start = time.perf_counter()
    logits, cache = prefill(model, batch)
    if timings is not None:
        timings["prefill"] = time.perf_counter() - start
    rows: list[list[int]] = [[] for _ in prompts]
    done = [b < 1 for b in budgets]
    produced, longest = 0, max(budgets)
    while not all(done) and produced < longest:
        tokens = greedy_continue(model, logits, cache, min(CHUNK, longest - produced), stop_token=stop)
        produced += tokens.shape[1]
        for r, row in enumerate(tokens.tolist()):
            if done[r]:
                continue
            ended = stop is not None and stop in row
            rows[r].extend(row[: row.index(stop)] if ended else row)
            del rows[r][budgets[r] :]
            text = decode(tokenizer, rows[r])
            answered = finished(r, text) if finished is not None else sample_score(text, references[r]) == 1
            done[r] = ended or len(rows[r]) >= budgets[r] or answered
        if all(done) or produced >= longest or tokens.shape[1] == 0:
            break
        logits = model(tokens[:, -1:], cache=cache)[:, -1].float()
    return [decode(tokenizer, row) for row in rows]


def check_vocabulary(model: Any, samples: Sequence[RulerSample], tokenizer: Tokenizer) -> None:
    """Refuse token ids the model has no embedding for (a tokenizer that is not the model's)."""
    size = int(getattr(model.config, "vocab_size", 0) or 0)
    largest = max(max(s.prompt_ids) for s in samples)
    if size and largest >= size:
        raise DataError(
            f"tokenizer {tokenizer.name} gives token id {largest} but the model has {size} embeddings; "
            "use the model's own tokenizer"
        )


@torch.no_grad()
def answer_samples(
    model: Any,
    tasks: Sequence[RulerTask],
    length: int,
    indices: Mapping[str, Sequence[int]],
    seed: int = 0,
    *,
    batch_size: int = 8,
    progress: bool = False,
    prompt_length: str = "ruler",
) -> Iterator[list[tuple[str, RulerAnswer]]]:
    """The model's answers to samples `indices[task.name]` of each task at `length`, one batch at a time as
    (task name, answer) pairs, so a caller can save them as they come; samples sorted by answer budget, tasks
    sharing batches where prompts have one length."""
    if batch_size < 1:
        raise ConfigError(f"RULER needs a batch size >= 1, got {batch_size}")
    if len({t.tokenizer.name for t in tasks}) > 1:
        raise ConfigError("the tasks of one RULER run share one tokenizer")
    if hasattr(model, "eval"):
        model.eval()
    prefix = evaluation_prefix(model, tasks[0].tokenizer) if tasks else []
    drawn, drawing = _draw(model, tasks, length, indices, seed, prefix, prompt_length)
    budgets = {task.name: task.budget for task in tasks}
    rows = sorted(((name, s) for name, samples in drawn.items() for s in samples), key=lambda row: budgets[row[0]])
    bar = tqdm(total=len(rows), disable=not progress, desc=f"ruler {length}", file=sys.stderr, leave=False)
    by_name = {task.name: task for task in tasks}
    for batch in length_batches(rows, batch_size):
        start = time.perf_counter()
        timings: dict[str, float] = {}
        texts = generate(
            model,
            [s.prompt_ids for _, s in batch],
            [s.references for _, s in batch],
            tasks[0].tokenizer,
            [budgets[name] for name, _ in batch],
            timings=timings,
            finished=tasks_finished(by_name, batch),
        )
        share, prefill_share = (time.perf_counter() - start) / len(batch), timings["prefill"] / len(batch)
        yield [(name, answer_of(by_name[name], s, text, share + drawing[name], prefill_share))
               for (name, s), text in zip(batch, texts, strict=True)]  # fmt: skip
        bar.update(len(batch))
    bar.close()


def _draw(
    model: Any,
    tasks: Sequence[RulerTask],
    length: int,
    indices: Mapping[str, Sequence[int]],
    seed: int,
    prefix: list[int],
    prompt_length: str,
) -> tuple[dict[str, list[RulerSample]], dict[str, float]]:
    """Samples `indices[task.name]` of each task at `length`, drawn in threads, and the seconds per sample."""
    drawing: dict[str, float] = {}
    drawn: dict[str, list[RulerSample]] = {}
    wanted = {task.name: list(indices.get(task.name, ())) for task in tasks}
    threads = min(max(map(len, wanted.values()), default=1), os.cpu_count() or 1, DRAW_THREADS)
    with ThreadPoolExecutor(max(1, threads)) as pool:
        for task in tasks:
            if not wanted[task.name]:
                continue
            start = time.perf_counter()
            drawn[task.name] = list(
                pool.map(
                    lambda index, task=task: task.sample(
                        task.prompt_tokens(length, prompt_length), index, seed, prefix=prefix
                    ),
                    wanted[task.name],
                )
            )
            check_vocabulary(model, drawn[task.name], task.tokenizer)
            drawing[task.name] = (time.perf_counter() - start) / len(wanted[task.name])
    return drawn, drawing


def answer_of(task: RulerTask, sample: RulerSample, text: str, seconds: float, prefill: float) -> RulerAnswer:
    """The answer `text` to `sample`, scored by its task's rule (with the question where the task keeps it)."""
    question = sample.question if task.keeps_question else None
    score = task.score(text, sample.references, sample.question)
    return RulerAnswer(sample.index, list(sample.references), text, score, seconds, prefill, question)


def tasks_finished(
    tasks: Mapping[str, RulerTask], batch: Sequence[tuple[str, RulerSample]]
) -> Callable[[int, str], bool]:
    """`generate`'s stop rule for a batch: row r is done when its task says so (`RulerTask.finished`)."""
    return lambda r, text: tasks[batch[r][0]].finished(text, batch[r][1].references, batch[r][1].question)


def length_batches(rows: Sequence[tuple[str, RulerSample]], batch_size: int) -> Iterator[list[tuple[str, RulerSample]]]:
    """Consecutive runs of at most `batch_size` rows whose prompts have one length."""
    batch: list[tuple[str, RulerSample]] = []
    for row in rows:
        if batch and (len(batch) == batch_size or len(row[1].prompt_ids) != len(batch[0][1].prompt_ids)):
            yield batch
            batch = []
        batch.append(row)
    if batch:
        yield batch


def cell_from_answers(task: RulerTask, length: int, answers: Sequence[RulerAnswer]) -> RulerCell:
    """The cell's score: the mean of the task's score of each answer as a percentage (two decimals), its Wilson
    interval, their seconds and prefill seconds, and the first two as examples."""
    if not answers:
        raise ValueError(f"RULER cell {task.name}@{length} has no answers")
    scores = [task.score(a.output, a.references, a.question or "") for a in answers]
    score_ = round(sum(scores) / len(answers) * 100, 2)
    low, high = wilson_interval(score_, len(answers))
    seconds = round(sum(a.seconds for a in answers), 3)
    prefill = total_if_known([a.prefill_seconds for a in answers])
    prefill = None if prefill is None else round(prefill, 3)
    examples = [a.example() for a in answers[:2]]
    return RulerCell(task.name, length, score_, low, high, len(answers), seconds, examples, prefill)


def evaluate_length(
    model: Any,
    tasks: Sequence[RulerTask],
    length: int,
    samples: int,
    seed: int = 0,
    *,
    batch_size: int = 8,
    progress: bool = False,
    prompt_length: str = "ruler",
) -> dict[str, RulerCell]:
    """RULER's score of `model` on samples 0..`samples`-1 of each task at `length`."""
    if samples < 1:
        raise ConfigError(f"RULER needs samples >= 1, got {samples}")
    answers: dict[str, dict[int, RulerAnswer]] = {task.name: {} for task in tasks}
    indices = {task.name: range(samples) for task in tasks}
    for batch in answer_samples(
        model, tasks, length, indices, seed, batch_size=batch_size, progress=progress,
        prompt_length=prompt_length,
    ):  # fmt: skip
        for name, answer in batch:
            answers[name][answer.index] = answer
    return {
        task.name: cell_from_answers(task, length, [answers[task.name][i] for i in range(samples)]) for task in tasks
    }


def evaluate_cell(
    model: Any,
    task: RulerTask,
    length: int,
    samples: int,
    seed: int = 0,
    *,
    batch_size: int = 8,
    progress: bool = False,
    prompt_length: str = "ruler",
) -> RulerCell:
    """RULER's score of `model` on `samples` samples of `task` at `length` (`evaluate_length` of one task)."""
    cells = evaluate_length(
        model, [task], length, samples, seed, batch_size=batch_size, progress=progress,
        prompt_length=prompt_length,
    )  # fmt: skip
    return cells[task.name]
