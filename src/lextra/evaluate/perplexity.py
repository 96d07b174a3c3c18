"""Perplexity at many lengths under three protocols, on the same held-out documents at every length.

Each evaluation document is a whole held-out document cut to `max(lengths) + last_token_targets` tokens
(documents are never stitched unless none is long enough, which the result then says). Protocols:

- `chunks`: the first max(L)+1 tokens in non-overlapping chunks of L (as in the tables of Press et al. 2022,
  arXiv 2108.12409); each token's context is its offset in its chunk, so short chunks suffer the "early token
  curse".
- `sliding`: windows of L tokens moving by `stride` (default L/2); each window scores only the tokens no earlier
  window scored (the first scores all), so most tokens see at least L - stride context (as in Zhu et al. 2023,
  arXiv 2309.08646, and Hugging Face's perplexity guide).
- `last-token` (Chi et al. 2023): the same final `last_token_targets` tokens of each document are scored with
  exactly L - 1... L preceding tokens visible, so only the visible context changes with L.

chunks and sliding score the same max(L) tokens at every L; last-token scores the same K tokens at every L.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from lextra.attention.masks import build_mask
from lextra.data.prepare import PreparedData
from lextra.data.shards import PreparedShards
from lextra.data.windows import encode_documents
from lextra.devices import module_device
from lextra.errors import ConfigError, DataError
from lextra.evaluate.prefix import evaluation_prefix
from lextra.extend import InferenceSetup
from lextra.methods.align import log_length_temperature
from lextra.model import GPT
from lextra.serialize import Serializable, options
from lextra.validate import check_int_list, check_optional_int, check_positive_int

PROTOCOLS = ("chunks", "sliding", "last-token")
LENGTH_MULTIPLES = (1, 2, 4, 8, 16)
#: most logits (rows x positions x vocabulary) scored at once: 2^26 fp32 values = 256 MiB
LOGIT_BUDGET = 1 << 26


@dataclass
class EvalConfig(Serializable):
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
        """Refuse unknown names and every non-finite or out-of-range number before any work."""
        unknown = [p for p in self.protocols if p not in PROTOCOLS]
        if unknown or not self.protocols:
            raise ConfigError(f"unknown protocol(s) {unknown}; choose from {', '.join(PROTOCOLS)}")
        if self.lengths is not None and self.lengths != []:  # None or [] mean the default lengths
            self.lengths = check_int_list("evaluation lengths", self.lengths, 1)
        for name in ("documents", "last_token_targets", "max_batch_tokens"):
            setattr(self, name, check_positive_int(f"evaluation {name}", getattr(self, name)))
        hint = "leave it unset for the default"
        self.stride = check_optional_int("sliding stride", self.stride, 1, hint=hint + " (L/2)")
        self.span = check_optional_int("evaluation span", self.span, 1, hint=hint + " (the longest length)")
        build_mask(self.mask, train_len=2)  # raises on a bad spec
        if self.temperature not in ("none", "log-length"):
            raise ConfigError(f"evaluation temperature must be 'none' or 'log-length', got {self.temperature!r}")
        return self


def evaluation_documents(
    data: PreparedData | PreparedShards, split: str, need: int, count: int, prefix: Sequence[int] = ()
) -> tuple[list[Tensor], bool]:
    """Up to `count` whole held-out documents of at least `need` tokens, cut to `need`; or, when none is that
    long, consecutive pieces of the split's concatenated text (flagged True: documents were stitched). Each
    document starts with `prefix` (a Hugging Face model's BOS, `evaluation_prefix`), counted in `need`.

    A prepared folder gives its split's documents as stored (no re-tokenizing), the same tokens as the raw
    split's; the documents taken are int64 either way."""
    if split not in ("train", "validation", "test"):
        raise ConfigError(f"unknown split {split!r}; use train, validation or test")
    if isinstance(data, PreparedShards):
        tokens = data.documents(split)
    else:
        tokens = encode_documents(data.splits[split], data.tokenizer)
    if prefix:
        head = torch.tensor(list(prefix), dtype=torch.long)
        tokens = [torch.cat([head, t.long()]) for t in tokens]
    long_docs = [t[:need].long() for t in tokens if t.numel() >= need][:count]
    if long_docs:
        return long_docs, False
    stream = torch.cat(tokens).long() if tokens else torch.zeros(0, dtype=torch.long, device="cpu")
    if stream.numel() < need:
        raise DataError(
            f"the {split} split has {stream.numel()} tokens, fewer than the {need} needed for the longest "
            "evaluation length; evaluate at shorter lengths or use a bigger corpus"
        )
    pieces = min(count, stream.numel() // need)
    return [stream[i * need : (i + 1) * need] for i in range(pieces)], True


#: where a window lies: (document index, first token, end), so the same window met by two protocols runs once
WindowKey = tuple[int, int, int]


class TokenScorer:
    """Sums next-token log-likelihoods of chosen positions, per protocol, running each distinct window once.

    `add` files a window under its place in its document; a window several protocols score (every chunk is also
    a sliding window) gets one forward pass, whose per-position losses each protocol sums from its own first
    scored position. `run` stacks windows of equal length into batches of `max_batch_tokens`, moved to the model's
    device; the sums stay there (fp64), read once by `result`.
    """

    def __init__(self, model: GPT, config: EvalConfig) -> None:
        self.model, self.config = model, config
        self.device = module_device(model)
        self.mask = build_mask(config.mask, model.config.train_len)
        self.windows: dict[WindowKey, tuple[Tensor, Tensor, dict[str, int]]] = {}
        self.nll: dict[str, Tensor] = {}
        self.count: dict[str, int] = {}

    def add(self, protocol: str, key: WindowKey, window: Tensor, target: Tensor, scored_from: int) -> None:
        """window (L,) input tokens, target (L,) next tokens, scored from position `scored_from` for `protocol`."""
        self.nll.setdefault(protocol, torch.zeros((), dtype=torch.float64, device=self.device))
        self.count.setdefault(protocol, 0)
        entry = self.windows.setdefault(key, (window, target, {}))
        entry[2][protocol] = scored_from

    def run(self) -> None:
        """Score every window filed so far (one forward pass each), then forget them."""
        by_length: dict[int, list[tuple[Tensor, Tensor, dict[str, int]]]] = {}
        for entry in self.windows.values():
            by_length.setdefault(entry[0].numel(), []).append(entry)
        self.windows = {}
        for L, entries in by_length.items():
            per_batch = max(1, self.config.max_batch_tokens // L)
            for start in range(0, len(entries), per_batch):
                self._score(entries[start : start + per_batch], L)

    def _score(self, entries: list[tuple[Tensor, Tensor, dict[str, int]]], L: int) -> None:
        inputs = torch.stack([e[0] for e in entries]).to(self.device)
        gold = torch.stack([e[1] for e in entries]).to(self.device)
        # per protocol, each row's first scored position (L: the protocol does not score that row)
        firsts = {p: [e[2].get(p, L) for e in entries] for p in self.nll}
        firsts = {p: f for p, f in firsts.items() if min(f) < L}
        lo = min(min(f) for f in firsts.values())
        # the features of the scored positions alone: the last block computes no other row (`GPT.features`)
        hidden = self.model.features(inputs, mask=self.mask, backend=self.config.backend, last=L - lo)
        starts = {p: torch.tensor(f, device=hidden.device)[:, None] for p, f in firsts.items()}
        # full-vocabulary logits for a slice of positions at a time: (rows x L x vocab) never exists at once
        step = max(1, LOGIT_BUDGET // (len(entries) * self.model.config.vocab_size))
        for a in range(lo, L, step):
            b = min(a + step, L)
            logits = self.model.head(hidden[:, a - lo : b - lo]).float()
            nll = F.cross_entropy(logits.flatten(0, 1), gold[:, a:b].flatten(), reduction="none").view(len(entries), -1)
            at = torch.arange(a, b, device=hidden.device)[None, :]
            for p, first in firsts.items():
                self.nll[p] += torch.where(at >= starts[p], nll, 0.0).sum().double()
                self.count[p] += sum(max(0, b - max(a, f)) for f in first)

    def result(self, protocol: str) -> PerplexityPoint:
        count = self.count.get(protocol, 0)
        mean = float(self.nll.get(protocol, 0.0)) / max(1, count)
        return PerplexityPoint(ppl=math.exp(mean), nll=mean, tokens=count)


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


def _windows(
    protocol: str, doc: Tensor, L: int, span: int, config: EvalConfig
) -> Iterator[tuple[int, Tensor, Tensor, int]]:
    """(first token's index in `doc`, window, targets, first scored position) of one protocol at length L."""
    if protocol == "chunks":
        pieces = _chunks(doc, L, span)
    elif protocol == "sliding":
        pieces = _sliding(doc, L, span, config.resolved_stride(L))
    else:
        pieces = _last_token(doc, L, span, config.last_token_targets)
    for window, target, first in pieces:
        # windows are views of `doc`: their storage offset is where they start
        yield window.storage_offset() - doc.storage_offset(), window, target, first


@dataclass(frozen=True)
class PerplexityPoint(Serializable):
    """One (protocol, length) cell: perplexity, mean next-token NLL and the number of tokens scored."""

    ppl: float
    nll: float
    tokens: int


@dataclass
class Evaluation(Serializable):
    """Perplexity of one model per protocol and length, with what it was computed on (`to_dict` is the JSON)."""

    #: protocol -> length -> point, in evaluation order
    results: dict[str, dict[int, PerplexityPoint]]
    lengths: list[int]
    train_len: int
    #: the sliding stride used at each length (empty without the sliding protocol)
    strides: dict[int, int]
    documents: int
    stitched: bool
    #: the `EvalConfig.to_dict()` it was computed with, as saved (under "eval")
    config: dict[str, Any] = field(metadata=options(key="eval"))

    @property
    def protocols(self) -> list[str]:
        return list(self.results)

    def point(self, protocol: str, length: int) -> PerplexityPoint:
        return self.results[protocol][int(length)]

    def ppl(self, protocol: str, length: int) -> float:
        return self.point(protocol, length).ppl

    def curve(self, protocol: str) -> dict[int, float]:
        """Perplexity by length under `protocol`."""
        return {n: p.ppl for n, p in self.results[protocol].items()}


@torch.no_grad()
def evaluate_model(
    model: GPT, data: PreparedData | PreparedShards, config: EvalConfig, *, progress: bool = True, label: str = ""
) -> Evaluation:
    """Perplexity per protocol and length, on the same documents at every length; a Hugging Face model's
    documents start with the BOS its tokenizer adds by default (`evaluation_prefix`)."""
    config.validate()
    model.eval()
    train_len = model.config.train_len
    lengths = config.resolved_lengths(train_len)
    span = max(lengths) if config.span is None else max(config.span, *lengths)
    need = span + config.last_token_targets
    tokenizer = data.tokenizer() if isinstance(data, PreparedShards) else data.tokenizer
    prefix = evaluation_prefix(model, tokenizer)
    docs, stitched = evaluation_documents(data, config.split, need, config.documents, prefix)
    if stitched:
        print(
            f"lextra eval: warning: no {config.split} document has {span + config.last_token_targets} tokens; "
            "evaluating on stitched text",
            file=sys.stderr,
        )
    results: dict[str, dict[int, PerplexityPoint]] = {p: {} for p in config.protocols}
    bar = tqdm(
        lengths, disable=not progress, desc=f"eval {label}".strip(), unit="length", file=sys.stderr, dynamic_ncols=True
    )
    saved_temperatures = model.config.temperatures
    for L in bar:
        bar.set_postfix(length=L)
        if config.temperature == "log-length":
            tau = log_length_temperature(train_len, L)
            InferenceSetup(temperatures=[[tau] * model.config.n_head for _ in range(model.config.n_layer)]).apply(model)
        # every protocol's windows at this length, each distinct window run once (`TokenScorer`)
        scorer = TokenScorer(model, config)
        for protocol in config.protocols:
            for index, doc in enumerate(docs):
                for begin, window, target, first in _windows(protocol, doc, L, span, config):
                    scorer.add(protocol, (index, begin, begin + window.numel()), window, target, first)
        scorer.run()
        for protocol in config.protocols:
            results[protocol][L] = scorer.result(protocol)
    InferenceSetup(temperatures=saved_temperatures).apply(model)
    return Evaluation(
        results=results,
        lengths=lengths,
        train_len=train_len,
        strides={L: config.resolved_stride(L) for L in lengths} if "sliding" in config.protocols else {},
        documents=len(docs),
        stitched=stitched,
        config=config.to_dict(),
    )
