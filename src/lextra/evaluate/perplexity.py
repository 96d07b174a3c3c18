"""Perplexity at many lengths under three protocols, on the same held-out tokens at every length.

Each document is a held-out piece of `span + last_token_targets` tokens; the span (default 16 x L_tr) does not
depend on the lengths asked, so every length scores the same tokens. Each cell keeps its NLL sum per document, from
which its 95% interval is bootstrapped. Protocols:

- `chunks`: non-overlapping chunks of L (Press et al. 2022, arXiv 2108.12409).
- `sliding`: windows of L moving by `stride` (default L/2), each scoring only tokens no earlier window scored
  (Zhu et al. 2023, arXiv 2309.08646).
- `last-token` (Chi et al. 2023): the final `last_token_targets` tokens of each document, each with L - 1
  preceding tokens visible.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from lextra.attention.masks import Mask, build_mask
from lextra.data.prepare import PreparedData
from lextra.data.windows import eval_pieces
from lextra.devices import autocast, check_eval_precision, module_device, resolve_precision
from lextra.errors import ConfigError, DataError
from lextra.evaluate.bootstrap import ppl_interval
from lextra.evaluate.prefix import evaluation_prefix
from lextra.extend import InferenceSetup
from lextra.extend.setup import setup_mask
from lextra.methods.align import log_length_temperature
from lextra.model import GPT, Block
from lextra.positions.scaling import depends_on_length
from lextra.serialize import Serializable, options
from lextra.validate import check_int_list, check_optional_int, check_positive_int

PROTOCOLS = ("chunks", "sliding", "last-token")
LENGTH_MULTIPLES = (1, 2, 4, 8, 16)
#: the default span (tokens scored per document) as a multiple of L_tr: the longest default length
SPAN_MULTIPLE = max(LENGTH_MULTIPLES)
#: most logits (rows x positions x vocabulary) scored at once: 2^26 fp32 values = 256 MiB
LOGIT_BUDGET = 1 << 26


@dataclass
class EvalConfig(Serializable):
    """What to evaluate: lengths (default L_tr x 1..16), protocols, inference-time mask and data size."""

    lengths: list[int] | None = None
    protocols: list[str] = field(default_factory=lambda: list(PROTOCOLS))
    #: the mask set on the model's layers while evaluating (layers with their own keep theirs)
    mask: str = "causal"
    backend: str = "auto"
    split: str = "test"
    documents: int = 8
    stride: int | None = None
    last_token_targets: int = 16
    max_batch_tokens: int = 16384
    #: "none", or "log-length": at each length L > L_tr every layer uses tau = ln L_tr / ln L (no calibration)
    temperature: str = "none"
    #: tokens of each document scored by chunks/sliding at every length (default SPAN_MULTIPLE x L_tr)
    span: int | None = None
    #: "fp32", "bf16" (matrix products under bf16 autocast; logits and losses fp32) or "auto"
    precision: str = "fp32"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; `precision` is left out at fp32, so older results and cache keys compare equal."""
        values = super().to_dict()
        if values.get("precision") == "fp32":
            del values["precision"]
        return values

    def for_device(self, device: torch.device | str) -> EvalConfig:
        """A copy with `auto` precision resolved for `device` (`lextra.devices.resolve_precision`)."""
        return dataclasses.replace(self, precision=resolve_precision(self.precision, device))

    def resolved_lengths(self, train_len: int) -> list[int]:
        lengths = self.lengths or [train_len * m for m in LENGTH_MULTIPLES]
        if any(int(n) < 1 for n in lengths):
            raise ConfigError(f"evaluation lengths must be positive, got {lengths}")
        return sorted({int(n) for n in lengths})

    def resolved_span(self, train_len: int, lengths: Sequence[int]) -> int:
        """The tokens scored per document (default SPAN_MULTIPLE x L_tr); the longest length must fit in it."""
        span = self.span or SPAN_MULTIPLE * train_len
        if max(lengths) > span:
            raise ConfigError(
                f"evaluation length {max(lengths)} is longer than the {span} tokens scored per document (the span, "
                f"default {SPAN_MULTIPLE} x L_tr): pass --span {max(lengths)} or more, the same to every evaluation "
                "you compare"
            )
        return span

    def resolved_stride(self, length: int) -> int:
        """The sliding stride at evaluation length L: the configured one, else L / 2."""
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
        check_eval_precision(self.precision)
        return self


def evaluation_documents(
    data: PreparedData, split: str, need: int, count: int, prefix: Sequence[int] = ()
) -> tuple[list[Tensor], bool, list[dict[str, Any]]]:
    """Up to `count` held-out int64 pieces of `need` tokens (`eval_pieces`), each starting with `prefix`; whether
    they were stitched from the joined text; and where each came from with the SHA-1 of its tokens."""
    if split not in ("train", "validation", "test"):
        raise ConfigError(f"unknown split {split!r}; use train, validation or test")
    tokens = data.documents(split)
    head = torch.tensor(list(prefix), dtype=torch.long, device="cpu")
    try:
        pieces, stitched, origins = eval_pieces(tokens, need - head.numel(), count)
    except DataError:
        total = sum(int(t.numel()) for t in tokens)
        raise DataError(
            f"the {split} split has {total} tokens, fewer than the {need} one evaluation document needs (the span "
            "and the last-token targets); lower --span or use a bigger corpus"
        ) from None
    pieces = [torch.cat([head, piece]) for piece in pieces]
    sources = [
        {"offset": start, "sha1": _fingerprint(piece)} if index < 0
        else {"index": index, "offset": start, "sha1": _fingerprint(piece)}
        for (index, start), piece in zip(origins, pieces, strict=True)
    ]  # fmt: skip
    return pieces, stitched, sources


def _fingerprint(tokens: Tensor) -> str:
    """The SHA-1 of a document's token ids (int64, little-endian): what a rerun compares."""
    return hashlib.sha1(tokens.to(torch.int64).numpy().astype("<i8").tobytes()).hexdigest()


#: where a window lies: (document index, first token, end), so the same window met by two protocols runs once
WindowKey = tuple[int, int, int]
#: what a result sums: (protocol, evaluation length)
Cell = tuple[str, int]


@dataclass
class _Window:
    """A window's input and next tokens, and per cell the positions it scores: [first, stop)."""

    tokens: Tensor
    target: Tensor
    document: int
    scores: dict[Cell, tuple[int, int]] = field(default_factory=dict)


class ScoredModel(Protocol):
    """What perplexity reads from a model: a lextra `GPT` or a Hugging Face decoder adapter (`lextra.hf`)."""

    @property
    def config(self) -> Any: ...  # train_len, vocab_size, n_layer, n_head, temperatures

    def eval(self) -> Any: ...

    def features(self, tokens: Tensor, *, backend: str, last: int | None) -> Tensor: ...

    def head(self, hidden: Tensor) -> Tensor: ...


def prefix_invariant(model: Any, mask: Mask) -> bool:
    """True when a window's per-position losses equal those of the same positions in a longer window from the same
    token: a lextra GPT, causal in every layer, with no extension method and no length-dependent RoPE scaling."""
    if not isinstance(model, GPT) or not mask.causal:
        return False
    for block in model.blocks:
        attn = cast(Block, block).attn
        own = attn.inference
        if own.extension is not None or (own.local and own.mask is not None and not own.mask.causal):
            return False
    for scheme in model.schemes:
        scaling = getattr(scheme, "scaling", None)
        if scaling is not None and depends_on_length(scaling):
            return False
    return True


class TokenScorer:
    """Sums next-token NLLs of chosen positions per cell (protocol, length), running each distinct window once.

    With `share_prefixes` (`prefix_invariant` models) a window runs inside the longest filed window starting at
    the same token. Sums are fp64, one per cell and document, kept on the model's device.
    """

    def __init__(self, model: ScoredModel, config: EvalConfig, documents: int, share_prefixes: bool = False) -> None:
        self.model, self.config, self.share_prefixes = model, config, share_prefixes
        self.documents = documents
        self.device = module_device(model)
        self.head_dtype = _parameter_dtype(model)
        self.windows: dict[WindowKey, _Window] = {}
        self.nll: dict[Cell, Tensor] = {}  # cell -> (documents,) NLL sums
        self.count: dict[Cell, list[int]] = {}  # cell -> scored tokens per document

    def add(self, cell: Cell, key: WindowKey, window: Tensor, target: Tensor, scored_from: int) -> None:
        """window (L,) input tokens, target (L,) next tokens, scored from position `scored_from` for `cell`."""
        self.nll.setdefault(cell, torch.zeros(self.documents, dtype=torch.float64, device=self.device))
        self.count.setdefault(cell, [0] * self.documents)
        entry = self.windows.setdefault(key, _Window(window, target, key[0]))
        entry.scores[cell] = (scored_from, window.numel())

    def hosts(self) -> list[_Window]:
        """The windows to run: all, or with `share_prefixes` the longest per (document, start) with its cells."""
        if not self.share_prefixes:
            return list(self.windows.values())
        longest: dict[tuple[int, int], WindowKey] = {}
        for key in self.windows:
            start = key[:2]
            if start not in longest or key[2] > longest[start][2]:
                longest[start] = key
        for key, entry in self.windows.items():
            host = self.windows[longest[key[:2]]]
            if host is not entry:
                host.scores.update(entry.scores)
        return [self.windows[key] for key in longest.values()]

    def batches(self) -> list[tuple[list[_Window], int]]:
        """The windows to run in batches of one length each, and that length; forgets the filed windows."""
        by_length: dict[int, list[_Window]] = {}
        for entry in self.hosts():
            by_length.setdefault(entry.tokens.numel(), []).append(entry)
        self.windows = {}
        out = []
        for L, entries in by_length.items():
            per_batch = max(1, self.config.max_batch_tokens // L)
            out += [(entries[start : start + per_batch], L) for start in range(0, len(entries), per_batch)]
        return out

    def score(self, entries: list[_Window], L: int) -> None:
        """Run one batch of windows of length L and add their losses to their cells."""
        inputs = torch.stack([e.tokens for e in entries]).to(self.device)
        gold = torch.stack([e.target for e in entries]).to(self.device)
        cells = list(dict.fromkeys(c for e in entries for c in e.scores))
        # per cell, each row's scored positions [first, stop) ([L, L): the cell does not score that row)
        spans = {c: [e.scores.get(c, (L, L)) for e in entries] for c in cells}
        lo = min(first for span in spans.values() for first, _ in span)
        # the features of the scored positions alone: the last block computes no other row (`GPT.features`)
        with autocast(self.config.precision, self.device):
            hidden = self.model.features(inputs, backend=self.config.backend, last=L - lo)
        hidden = hidden.to(self.head_dtype)  # the head (logits) in the model's own dtype, outside autocast
        bounds = {
            c: torch.tensor(span, device=hidden.device).T[:, :, None] for c, span in spans.items()
        }  # (2, rows, 1)
        documents = torch.tensor([e.document for e in entries], device=hidden.device)
        # full-vocabulary logits for a slice of positions at a time: (rows x L x vocab) never exists at once
        step = max(1, LOGIT_BUDGET // (len(entries) * self.model.config.vocab_size))
        for a in range(lo, L, step):
            b = min(a + step, L)
            logits = self.model.head(hidden[:, a - lo : b - lo]).float()
            nll = F.cross_entropy(logits.flatten(0, 1), gold[:, a:b].flatten(), reduction="none").view(len(entries), -1)
            at = torch.arange(a, b, device=hidden.device)[None, :]
            nll = nll.double()  # summed in fp64: a cell sums up to millions of losses
            for c, span in spans.items():
                inside = (at >= bounds[c][0]) & (at < bounds[c][1])
                self.nll[c].index_add_(0, documents, torch.where(inside, nll, 0.0).sum(1))
                for entry, (first, stop) in zip(entries, span, strict=True):
                    self.count[c][entry.document] += max(0, min(b, stop) - max(a, first))

    def result(self, cell: Cell) -> PerplexityPoint:
        """The cell's perplexity over all its tokens, with its per-document sums and their bootstrap interval."""
        return PerplexityPoint.of(self.nll[cell].tolist(), self.count[cell])


def _parameter_dtype(model: Any) -> torch.dtype:
    """The dtype of a model's first floating-point parameter (fp32 when it has none): what its head takes."""
    parameters = getattr(model, "parameters", None)
    for tensor in parameters() if callable(parameters) else ():
        if tensor.is_floating_point():
            return tensor.dtype
    return torch.float32


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
        yield int(window.storage_offset() - doc.storage_offset()), window, target, first


@dataclass(frozen=True)
class PerplexityPoint(Serializable):
    """One (protocol, length) cell: perplexity, mean NLL, tokens scored, the bootstrapped 95% interval (None with
    one document) and the per-document NLL sums and token counts it came from."""

    ppl: float
    nll: float
    tokens: int
    low: float | None = field(default=None, metadata=options(omit_none=True))
    high: float | None = field(default=None, metadata=options(omit_none=True))
    nll_by_document: list[float] | None = field(default=None, metadata=options(omit_none=True))
    tokens_by_document: list[int] | None = field(default=None, metadata=options(omit_none=True))

    @classmethod
    def of(cls, nll_by_document: Sequence[float], tokens_by_document: Sequence[int]) -> PerplexityPoint:
        """The point of per-document NLL sums and token counts."""
        nll, tokens = [float(n) for n in nll_by_document], [int(t) for t in tokens_by_document]
        mean = math.fsum(nll) / max(1, sum(tokens))
        interval = ppl_interval(nll, tokens)
        low, high = interval if interval is not None else (None, None)
        return cls(math.exp(mean), mean, sum(tokens), low, high, nll, tokens)


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
    #: tokens scored per document by chunks and sliding at every length
    span: int | None = field(default=None, metadata=options(omit_none=True))
    #: where each document came from and the SHA-1 of its tokens (`evaluation_documents`)
    sources: list[dict[str, Any]] | None = field(default=None, metadata=options(omit_none=True))

    @property
    def protocols(self) -> list[str]:
        return list(self.results)

    @property
    def precision(self) -> str:
        """The precision the forwards ran in (the saved `eval.precision`, absent for fp32)."""
        return str(self.config.get("precision", "fp32"))

    def point(self, protocol: str, length: int) -> PerplexityPoint:
        return self.results[protocol][int(length)]

    def ppl(self, protocol: str, length: int) -> float:
        return self.point(protocol, length).ppl

    def curve(self, protocol: str) -> dict[int, float]:
        """Perplexity by length under `protocol`."""
        return {n: p.ppl for n, p in self.results[protocol].items()}


def _file_windows(
    model: ScoredModel, config: EvalConfig, docs: list[Tensor], lengths: list[int], span: int
) -> list[tuple[list[int], TokenScorer, list[tuple[list[_Window], int]]]]:
    """Each group of lengths with its `TokenScorer` and batches (one group per length under a length temperature)."""
    share = config.temperature == "none" and prefix_invariant(model, build_mask(config.mask, model.config.train_len))
    groups = [lengths] if config.temperature == "none" else [[L] for L in lengths]
    scorers = []
    for group in groups:
        scorer = TokenScorer(model, config, len(docs), share_prefixes=share)
        for L in group:
            for protocol in config.protocols:
                for index, doc in enumerate(docs):
                    for begin, window, target, first in _windows(protocol, doc, L, span, config):
                        scorer.add((protocol, L), (index, begin, begin + window.numel()), window, target, first)
        scorers.append((group, scorer, scorer.batches()))
    return scorers


#: an evaluation projected to take longer than this (seconds) says so once, with its estimate, even when quiet
ESTIMATE_AFTER_S = 60.0
#: seconds of work the rate is measured over before the estimate
ESTIMATE_WARMUP_S = 2.0


class _Estimate:
    """For a quiet evaluation, one stderr line with the expected time once over `ESTIMATE_AFTER_S` remain."""

    def __init__(self, total: int, label: str, *, announce: bool) -> None:
        self.total, self.label, self.pending = total, label, announce
        self.done, self.start = 0, time.perf_counter()

    def update(self, tokens: int) -> None:
        self.done += tokens
        elapsed = time.perf_counter() - self.start
        if not self.pending or elapsed < ESTIMATE_WARMUP_S or self.done >= self.total:
            return
        rate = self.done / elapsed
        remaining = (self.total - self.done) / rate
        self.pending = False
        if remaining > ESTIMATE_AFTER_S:
            print(
                f"lextra eval: {self.label or 'model'}: {self.total:,} tokens to score, about {remaining / 60:.1f} min "
                f"more at the {rate:,.0f} tokens/s measured so far (longer lengths run slower per token)",
                file=sys.stderr,
            )


def _scored_documents(
    model: ScoredModel, data: PreparedData, config: EvalConfig, span: int
) -> tuple[list[Tensor], bool, list[dict[str, Any]]]:
    """The evaluation's documents, warning on stderr where they are stitched or fewer than asked."""
    need = span + config.last_token_targets
    prefix = evaluation_prefix(model, data.tokenizer)
    docs, stitched, sources = evaluation_documents(data, config.split, need, config.documents, prefix)
    if stitched:
        print(
            f"lextra eval: warning: no {config.split} document has {need} tokens (the span {span} + "
            f"{config.last_token_targets} last-token targets); evaluating on stitched text",
            file=sys.stderr,
        )
    elif len(docs) < config.documents:
        print(
            f"lextra eval: warning: {len(docs)} of the {config.documents} documents asked: the {config.split} split "
            f"holds only {len(docs)} piece(s) of {need} tokens (the span {span} + {config.last_token_targets} "
            f"last-token targets){'; one gives no interval' if len(docs) == 1 else ''}; lower --span or use a "
            "bigger corpus",
            file=sys.stderr,
        )
    return docs, stitched, sources


@torch.no_grad()
def evaluate_model(
    model: ScoredModel,
    data: PreparedData,
    config: EvalConfig,
    *,
    progress: bool = True,
    label: str = "",
) -> Evaluation:
    """Perplexity per protocol and length with its 95% interval, under `config.mask` set by an `InferenceSetup`
    (the model's own mask and temperatures are put back after)."""
    config = config.validate().for_device(module_device(model))
    model.eval()
    train_len = model.config.train_len
    lengths = config.resolved_lengths(train_len)
    span = config.resolved_span(train_len, lengths)
    docs, stitched, sources = _scored_documents(model, data, config, span)
    scorers = _file_windows(model, config, docs, lengths, span)
    total = sum(len(entries) * L for _, _, batches in scorers for entries, L in batches)
    bar = tqdm(total=total, disable=not progress, desc=f"eval {label}".strip(), unit="tok", unit_scale=True,
               file=sys.stderr, dynamic_ncols=True)  # fmt: skip
    estimate = _Estimate(total, label, announce=not progress)
    saved = InferenceSetup(temperatures=model.config.temperatures, mask=setup_mask(model))
    results: dict[str, dict[int, PerplexityPoint]] = {p: {} for p in config.protocols}
    try:
        InferenceSetup(mask=config.mask).apply(model)
        for group, scorer, batches in scorers:
            if config.temperature == "log-length":
                tau = log_length_temperature(train_len, group[0])
                n_layer, n_head = model.config.n_layer, model.config.n_head
                InferenceSetup(temperatures=[[tau] * n_head for _ in range(n_layer)]).apply(model)
            for entries, L in batches:
                scorer.score(entries, L)
                bar.update(len(entries) * L)
                estimate.update(len(entries) * L)
            for L in group:
                for protocol in config.protocols:
                    results[protocol][L] = scorer.result((protocol, L))
    finally:
        bar.close()
        saved.apply(model)
    return Evaluation(
        results=results,
        lengths=lengths,
        train_len=train_len,
        strides={L: config.resolved_stride(L) for L in lengths} if "sliding" in config.protocols else {},
        documents=len(docs),
        stitched=stitched,
        config=config.to_dict(),
        span=span,
        sources=sources,
    )
