"""Next-line code completion on held-out files by context length, with a truncation baseline.

Lines are completed greedily (until a newline) from the last C tokens (`full`) and from the last L_tr tokens only
(`truncated`), scored by exact match (trailing whitespace ignored) and edit similarity (difflib ratio)."""

from __future__ import annotations

import difflib
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm

from lextra.data import Document, Tokenizer
from lextra.devices import module_device
from lextra.errors import ConfigError, DataError
from lextra.evaluate.retrieval.evaluate import default_lengths
from lextra.evaluate.retrieval.scoring import greedy_continue, prefill
from lextra.serialize import Serializable, options
from lextra.tasks.rows import row_seed


@dataclass(frozen=True)
class LineScores(Serializable):
    """Next-line exact-match rate and mean edit similarity."""

    exact: float
    edit_sim: float


@dataclass(frozen=True)
class CompletionExample(Serializable):
    """A held-out line and its completions from the full and the truncated context."""

    target: str
    full: str
    truncated: str


@dataclass
class CompletionBucket(Serializable):
    """One context length: lines scored, scores with the full and with the truncated context, three examples."""

    lines: int
    full: LineScores
    truncated: LineScores
    examples: list[CompletionExample]


@dataclass
class CompletionResult(Serializable):
    """Next-line completion of one model by context length (`to_dict` is the JSON, lengths as string keys)."""

    label: str
    train_len: int
    lengths: list[int]
    buckets: dict[int, CompletionBucket]
    #: the model folder or name, when the caller records it
    model: str | None = field(default=None, metadata=options(omit_none=True))


def edit_similarity(predicted: str, target: str) -> float:
    """difflib's ratio: 1 for identical strings, 0 for nothing in common."""
    if not predicted and not target:
        return 1.0
    return difflib.SequenceMatcher(None, predicted, target).ratio()


def line_match(predicted: str, target: str) -> bool:
    """Exact match of a line, trailing whitespace ignored."""
    return predicted.rstrip() == target.rstrip()


def tokenize_lines(doc: Document, tokenizer: Tokenizer) -> tuple[list[int], list[tuple[int, str]]]:
    """The document's ids (each line encoded on its own, newline included) and (start token, text) per line."""
    ids: list[int] = []
    lines: list[tuple[int, str]] = []
    for line in doc.text.splitlines(keepends=True):
        lines.append((len(ids), line.rstrip("\n")))
        ids.extend(tokenizer.encode(line))
    return ids, lines


def pick_lines(
    docs: Sequence[Document], tokenizer: Tokenizer, context: int, count: int, seed: int, max_line_tokens: int
) -> list[tuple[list[int], str]]:
    """Up to `count` seeded (last `context` ids before the line, line text) pairs with non-blank lines."""
    eligible: list[tuple[int, int, str]] = []
    encoded = [tokenize_lines(doc, tokenizer) for doc in docs]
    for index, (_, lines) in enumerate(encoded):
        for start, text in lines:
            if start >= context and text.strip() and len(tokenizer.encode(text)) <= max_line_tokens:
                eligible.append((index, start, text))
    if not eligible:
        raise DataError(f"no held-out file has a line with {context} tokens before it; use shorter lengths")
    rng = random.Random(row_seed("completion", seed, context))
    chosen = rng.sample(eligible, min(count, len(eligible)))
    return [(encoded[i][0][start - context : start], text) for i, start, text in chosen]


@torch.no_grad()
def complete_lines(
    model: Any, contexts: Sequence[Sequence[int]], tokenizer: Tokenizer, max_new: int, batch_size: int = 8
) -> list[str]:
    """Greedy continuation of equal-length contexts, cut at the first newline."""
    newline = tokenizer.encode("\n")
    stop = newline[0] if len(newline) == 1 else None
    out: list[str] = []
    for start in range(0, len(contexts), batch_size):
        rows = [list(c) for c in contexts[start : start + batch_size]]
        batch = torch.tensor(rows, dtype=torch.long, device=module_device(model))
        logits, cache = prefill(model, batch)
        for row in greedy_continue(model, logits, cache, max_new, stop_token=stop).tolist():
            if stop is not None and stop in row:
                row = row[: row.index(stop)]
            out.append(tokenizer.decode(row).split("\n")[0])
    return out


def _scores(predictions: Sequence[str], targets: Sequence[str]) -> LineScores:
    pairs = list(zip(predictions, targets, strict=True))
    return LineScores(
        exact=sum(line_match(p, t) for p, t in pairs) / len(pairs),
        edit_sim=sum(edit_similarity(p.rstrip(), t.rstrip()) for p, t in pairs) / len(pairs),
    )


@torch.no_grad()
def evaluate_completion(
    model: Any,
    docs: Sequence[Document],
    tokenizer: Tokenizer,
    lengths: Sequence[int] | None = None,
    *,
    lines: int = 32,
    max_new: int = 96,
    seed: int = 0,
    batch_size: int = 8,
    label: str = "",
    progress: bool = False,
) -> CompletionResult:
    """Per context length: exact match and edit similarity with the full context and truncated to L_tr."""
    train_len = model.config.train_len
    lengths = list(lengths or default_lengths(train_len))
    if lines < 1 or max_new < 1 or any(n < 1 for n in lengths):
        raise ConfigError("completion needs positive lengths, lines and max_new")
    if hasattr(model, "eval"):
        model.eval()
    buckets: dict[int, CompletionBucket] = {}
    for context in tqdm(lengths, disable=not progress, desc=f"completion {label}", file=sys.stderr):
        picked = pick_lines(docs, tokenizer, context, lines, seed, max_new)
        targets = [text for _, text in picked]
        full = complete_lines(model, [ids for ids, _ in picked], tokenizer, max_new, batch_size)
        keep = min(train_len, context)
        truncated = complete_lines(model, [ids[-keep:] for ids, _ in picked], tokenizer, max_new, batch_size)
        buckets[int(context)] = CompletionBucket(
            lines=len(picked),
            full=_scores(full, targets),
            truncated=_scores(truncated, targets),
            examples=[CompletionExample(*e) for e in zip(targets[:3], full, truncated, strict=False)],
        )
    return CompletionResult(label=label, train_len=train_len, lengths=lengths, buckets=buckets)
