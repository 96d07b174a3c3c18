"""Perplexity at many lengths under three protocols, on the same held-out documents at every length.

Each evaluation document is a whole held-out document cut to `max(lengths) + last_token_targets` tokens
(documents are never stitched unless none is long enough, which the result then says). Protocols:

- `chunks`: the first max(L)+1 tokens in non-overlapping chunks of L (ALiBi's tables); each token's context is
  its offset in its chunk, so short chunks suffer the "early token curse".
- `sliding`: windows of L tokens moving by `stride` (default L/2); each window scores only the tokens no earlier window
  scored (the first scores all), so most tokens see at least L - stride context (CoCA, Hugging Face).
- `last-token` (Chi et al. 2023): the same final `last_token_targets` tokens of each document are scored with
  exactly L - 1... L preceding tokens visible, so only the visible context changes with L.

chunks and sliding score the same max(L) tokens at every L; last-token scores the same K tokens at every L.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from lextra.attention.masks import build_mask
from lextra.data.prepare import PreparedData
from lextra.data.windows import encode_documents
from lextra.errors import ConfigError, DataError
from lextra.methods.align import log_length_temperature
from lextra.model import GPT

PROTOCOLS = ("chunks", "sliding", "last-token")
LENGTH_MULTIPLES = (1, 2, 4, 8, 16)


@dataclass
class EvalConfig:
    """What to evaluate: lengths (default L_tr x 1..16), protocols, inference-time mask and data size."""

    lengths: list[int] | None = None
    protocols: list[str] = field(default_factory=lambda: list(PROTOCOLS))
    mask: str = "causal"
    backend: str = "auto"
    split: str = "test"
    documents: int = 8
    stride: int | None = None
    last_token_targets: int = 16
    max_batch_tokens: int = 16384
    #: "none", or "log-length": at each length L > L_tr every layer uses tau = ln L_tr / ln L (no calibration)
    temperature: str = "none"
    #: tokens of each document scored by chunks/sliding (default max(lengths)); fix it to compare separate runs
    span: int | None = None

    def resolved_lengths(self, train_len: int) -> list[int]:
        lengths = self.lengths or [train_len * m for m in LENGTH_MULTIPLES]
        if any(int(n) < 1 for n in lengths):
            raise ConfigError(f"evaluation lengths must be positive, got {lengths}")
        return sorted({int(n) for n in lengths})

    def resolved_stride(self, length: int) -> int:
        """The sliding stride at evaluation length L: the configured one, else L / 2 (each scored token then
        sees between L/2 and L tokens of context, at twice the cost of `chunks`)."""
        stride = self.stride or max(1, length // 2)
        if stride < 1:
            raise ConfigError(f"sliding stride must be >= 1, got {stride}")
        return min(stride, length)

    def validate(self) -> EvalConfig:
        unknown = [p for p in self.protocols if p not in PROTOCOLS]
        if unknown or not self.protocols:
            raise ConfigError(f"unknown protocol(s) {unknown}; choose from {', '.join(PROTOCOLS)}")
        if self.documents < 1 or self.last_token_targets < 1:
            raise ConfigError("documents and last_token_targets must be >= 1")
        build_mask(self.mask, train_len=2)  # raises on a bad spec
        if self.temperature not in ("none", "log-length"):
            raise ConfigError(f"evaluation temperature must be 'none' or 'log-length', got {self.temperature!r}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def evaluation_documents(data: PreparedData, split: str, need: int, count: int) -> tuple[list[Tensor], bool]:
    """Up to `count` whole held-out documents of at least `need` tokens, cut to `need`; or, when none is that
    long, consecutive pieces of the split's concatenated text (flagged True: documents were stitched)."""
    if split not in data.splits:
        raise ConfigError(f"unknown split {split!r}; use train, validation or test")
    tokens = encode_documents(data.splits[split], data.tokenizer)
    long_docs = [t[:need] for t in tokens if t.numel() >= need][:count]
    if long_docs:
        return long_docs, False
    stream = torch.cat(tokens) if tokens else torch.zeros(0, dtype=torch.long)
    if stream.numel() < need:
        raise DataError(
            f"the {split} split has {stream.numel()} tokens, fewer than the {need} needed for the longest "
            "evaluation length; evaluate at shorter lengths or use a bigger corpus"
        )
    pieces = min(count, stream.numel() // need)
    return [stream[i * need : (i + 1) * need] for i in range(pieces)], True


class _Scorer:
    """Sums next-token log-likelihoods of chosen positions, batching windows of equal length."""

    def __init__(self, model: GPT, config: EvalConfig) -> None:
        self.model, self.config = model, config
        self.mask = build_mask(config.mask, model.config.train_len)
        self.nll, self.count = 0.0, 0

    def add(self, windows: list[Tensor], targets: list[Tensor], scored_from: list[int]) -> None:
        """windows[i] (L,) input tokens, targets[i] (L,) next tokens; score positions >= scored_from[i]."""
        if not windows:
            return
        L = windows[0].numel()
        per_batch = max(1, self.config.max_batch_tokens // L)
        for start in range(0, len(windows), per_batch):
            inputs = torch.stack(windows[start : start + per_batch])
            gold = torch.stack(targets[start : start + per_batch])
            first = scored_from[start : start + per_batch]
            hidden = self.model.features(inputs, mask=self.mask, backend=self.config.backend)
            lo = min(first)
            logits = self.model.head(hidden[:, lo:]).float()
            nll = F.cross_entropy(logits.flatten(0, 1), gold[:, lo:].flatten(), reduction="none").view(len(first), -1)
            keep = torch.arange(lo, L)[None, :] >= torch.tensor(first)[:, None]
            self.nll += float(nll[keep].sum())
            self.count += int(keep.sum())

    def result(self) -> dict[str, float]:
        mean = self.nll / max(1, self.count)
        return {"ppl": math.exp(mean), "nll": mean, "tokens": self.count}


def _chunks(doc: Tensor, L: int, span: int) -> Iterator[tuple[Tensor, Tensor, int]]:
    for start in range(0, span - L + 1, L):
        yield doc[start : start + L], doc[start + 1 : start + L + 1], 0


def _sliding(doc: Tensor, L: int, span: int, stride: int) -> Iterator[tuple[Tensor, Tensor, int]]:
    """Windows of L (the last may be shorter: yielded alone) moving by stride over the first span targets."""
    scored_to = 0
    for begin in range(0, span, stride):
        end = min(begin + L, span)
        if end <= scored_to:
            continue
        yield doc[begin:end], doc[begin + 1 : end + 1], scored_to - begin
        scored_to = end
        if end == span:
            break


def _last_token(doc: Tensor, L: int, span: int, targets: int) -> Iterator[tuple[Tensor, Tensor, int]]:
    for t in range(span, span + targets):
        yield doc[t - L : t], doc[t - L + 1 : t + 1], L - 1


@torch.no_grad()
def evaluate_model(
    model: GPT, data: PreparedData, config: EvalConfig, *, progress: bool = True, label: str = ""
) -> dict[str, Any]:
    """Perplexity per protocol and length: {"results": {protocol: {L: {ppl, nll, tokens}}}, ...}."""
    config.validate()
    model.eval()
    train_len = model.config.train_len
    lengths = config.resolved_lengths(train_len)
    span = max(lengths) if config.span is None else max(config.span, *lengths)
    docs, stitched = evaluation_documents(data, config.split, span + config.last_token_targets, config.documents)
    if stitched:
        print(
            f"lextra eval: warning: no {config.split} document has {span + config.last_token_targets} tokens; "
            "evaluating on stitched text",
            file=sys.stderr,
        )
    results: dict[str, dict[str, dict[str, float]]] = {}
    cells = [(p, L) for p in config.protocols for L in lengths]
    bar = tqdm(
        cells, disable=not progress, desc=f"eval {label}".strip(), unit="cell", file=sys.stderr, dynamic_ncols=True
    )
    saved_temperatures = model.config.temperatures
    for protocol, L in bar:
        bar.set_postfix(protocol=protocol, length=L)
        if config.temperature == "log-length":
            tau = log_length_temperature(train_len, L)
            model.set_temperatures([[tau] * model.config.n_head for _ in range(model.config.n_layer)])
        scorer = _Scorer(model, config)
        groups: dict[int, tuple[list[Tensor], list[Tensor], list[int]]] = {}
        for doc in docs:
            if protocol == "chunks":
                pieces = _chunks(doc, L, span)
            elif protocol == "sliding":
                pieces = _sliding(doc, L, span, config.resolved_stride(L))
            else:
                pieces = _last_token(doc, L, span, config.last_token_targets)
            for window, target, first in pieces:
                group = groups.setdefault(window.numel(), ([], [], []))
                group[0].append(window)
                group[1].append(target)
                group[2].append(first)
        for windows, targets, firsts in groups.values():
            scorer.add(windows, targets, firsts)
        results.setdefault(protocol, {})[str(L)] = scorer.result()
    model.set_temperatures(saved_temperatures)
    return {
        "results": results,
        "lengths": lengths,
        "train_len": train_len,
        "strides": {str(L): config.resolved_stride(L) for L in lengths} if "sliding" in config.protocols else {},
        "documents": len(docs),
        "stitched": stitched,
        "eval": config.to_dict(),
    }
