"""Position samplers: the position ids a training window is read at (`lextra train --positions NAME[:options]`;
docs/extend-by-training.md): `contiguous` (0..L_tr-1), `pose` (Zhu et al. 2023, arXiv 2309.10400) and `randomized`
(Ruoss et al. 2023, arXiv 2305.16843). One position vector per step, shared by every row, a pure function of
(seed, step, rank); PoSE's content skip (`pose,span=S`) also picks the tokens (`sampled_batch`).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Protocol

import torch
from torch import Tensor

from lextra.errors import ConfigError
from lextra.registry import Registry
from lextra.validate import check_int

#: the default target of `pose` and range of `randomized`, in training lengths (PoSE's 2k window teaches 32k)
DEFAULT_FACTOR = 16


class PositionSampler(ABC):
    """Base class of the sampler registry: `positions(seed, step, rank)` gives the (L_tr,) int64 position ids."""

    name: ClassVar[str] = "sampler"
    summary: ClassVar[str] = ""
    positional: ClassVar[str | None] = None

    def __init__(self, train_len: int) -> None:
        self.train_len = train_len

    @property
    def contiguous(self) -> bool:
        """Whether the positions are always 0..L_tr-1 (the model then runs its default positions)."""
        return False

    @property
    def limit(self) -> int:
        """One past the largest position this sampler can draw (what a learned table must hold)."""
        return self.train_len

    @property
    def read_length(self) -> int:
        """How many tokens (plus the last one's target) a window is read from: L_tr, or more under a content skip."""
        return self.train_len

    def positions(self, seed: int, step: int, rank: int = 0) -> Tensor:
        return self.draw(self._generator(seed, step, rank))

    def window(self, seed: int, step: int, rank: int = 0) -> tuple[Tensor, Tensor | None]:
        """The step's positions and the (L_tr + 1,) indices of its tokens in a window read `read_length` long
        (None: the window's own tokens in order)."""
        return self.draw_window(self._generator(seed, step, rank))

    def draw_window(self, generator: torch.Generator) -> tuple[Tensor, Tensor | None]:
        """`window` from `generator` alone (default: `draw`'s positions over the window's own tokens)."""
        return self.draw(generator), None

    def _generator(self, seed: int, step: int, rank: int) -> torch.Generator:
        return torch.Generator().manual_seed(_position_seed(self.name, seed, step, rank))

    @abstractmethod
    def draw(self, generator: torch.Generator) -> Tensor:
        """The (L_tr,) int64 positions of one step, from `generator` alone."""

    def spec(self) -> str:
        return self.name


SAMPLERS: Registry[PositionSampler] = Registry("position sampler")


def _reach(sampler: str, option: str, value: int | None, train_len: int) -> int:
    """A sampler's largest length option: `value`, default DEFAULT_FACTOR x L_tr, refused below the window."""
    reach = DEFAULT_FACTOR * train_len if value is None else check_int(f"{sampler}: {option}", value, 1)
    if reach < train_len:
        raise ConfigError(
            f"{sampler}: {option} ({reach}) is below the training window L_tr ({train_len}); "
            f"set {option} >= {train_len}, e.g. --positions {sampler}:{DEFAULT_FACTOR * train_len}"
        )
    return reach


def _position_seed(name: str, seed: int, step: int, rank: int) -> int:
    """A 63-bit generator seed from (sampler, seed, step, rank) alone, unrelated to the window seeds."""
    key = f"lextra-train-positions:{name}:{seed}:{step}:{rank}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") >> 1


def _randint(generator: torch.Generator, low: int, high: int) -> int:
    """A uniform integer in [low, high] (both included, as Python's `random.randint`)."""
    return int(torch.randint(low, high + 1, (1,), generator=generator))


@SAMPLERS.register("contiguous")
class Contiguous(PositionSampler):
    """0..L_tr-1, every step: plain training."""

    summary = "positions 0..L_tr-1 (plain training)"

    @property
    def contiguous(self) -> bool:
        return True

    def draw(self, generator: torch.Generator) -> Tensor:
        return torch.arange(self.train_len)


@SAMPLERS.register("pose")
class PoSE(PositionSampler):
    """Positional skip-wise training (Zhu et al. 2023): the window in `chunks` pieces, each shifted by a skip bias.

    With 2 chunks (the default) this follows the authors' `train_preprocess_function_pose`: the first chunk holds
    r ~ U{1..(L+1)//2} tokens at positions 0..r-1, the second its tokens shifted by u ~ U{0..target-L}, so the last
    position stays below `target`. With more chunks, the paper's rule: cut points a sorted sample of distinct
    positions in 1..L-1, skip biases u_0 = 0 and u_i ~ U{u_(i-1)..target-L}. One chunk shifts the whole window
    by u ~ U{0..target-L}.

    `span` > 1 (2 chunks only) is the authors' content skip: the text is read `span` x L tokens long (their code
    truncates each document to 5 x L, so `span=5` is theirs) and chunk 2's L - r tokens end at e ~ U{L..span x L},
    drawn between r and u as they draw it; the token after chunk 2 is the last token's target (their labels drop
    it). `span=1` keeps the window contiguous. lextra reads a stream of joined documents, so every window has the
    full span (the authors' shorter documents skip less), and one draw serves every row of a step.
    """

    summary = "PoSE: chunks of the window with skipped positions up to a target length (Zhu 2023)"
    positional = "target"
    derived_defaults: ClassVar[dict[str, str]] = {"target": f"{DEFAULT_FACTOR} x L_tr"}

    def __init__(self, train_len: int, *, target: int | None = None, chunks: int = 2, span: int = 1) -> None:
        super().__init__(train_len)
        self.target = _reach("pose", "target", target, train_len)
        self.chunks = check_int("pose: chunks", chunks, 1)
        if self.chunks > train_len:
            raise ConfigError(
                f"pose: {self.chunks} chunks do not fit a window of {train_len} tokens; use chunks <= {train_len}"
            )
        self.span = check_int("pose: span", span, 1)
        if self.span > 1 and self.chunks != 2:
            raise ConfigError(
                f"pose: span={self.span} (the authors' content skip) follows their 2-chunk code; use chunks=2 or span=1"
            )

    @property
    def limit(self) -> int:
        return self.target

    @property
    def read_length(self) -> int:
        return self.span * self.train_len

    def positions(self, seed: int, step: int, rank: int = 0) -> Tensor:
        if self.span > 1:
            raise ConfigError(
                "pose with span > 1 picks the tokens too; read the step's batch with "
                "lextra.data.positions.sampled_batch, not positions alone"
            )
        return super().positions(seed, step, rank)

    def draw_window(self, generator: torch.Generator) -> tuple[Tensor, Tensor | None]:
        if self.span == 1:
            return self.draw(generator), None
        L = self.train_len
        first = _randint(generator, 1, (L + 1) // 2)  # the authors' rt1
        end = _randint(generator, L, self.span * L)  # rt2: chunk 2 is tokens end - (L - first) .. end - 1
        bias = _randint(generator, 0, self.target - L)  # rt
        positions = torch.arange(L)
        positions[first:] += bias
        index = torch.cat((torch.arange(first), torch.arange(end - (L - first), end + 1)))
        return positions, index

    def draw(self, generator: torch.Generator) -> Tensor:
        L, room = self.train_len, self.target - self.train_len
        positions = torch.arange(L)
        if self.chunks == 1:
            return positions + _randint(generator, 0, room)
        if self.chunks == 2:
            cuts = [_randint(generator, 1, (L + 1) // 2)]
        else:
            cuts = sorted((torch.randperm(L - 1, generator=generator)[: self.chunks - 1] + 1).tolist())
        bias = 0
        for cut in cuts:
            bias = _randint(generator, bias, room)
            positions[cut:] += bias - (positions[cut] - cut)
        return positions

    def spec(self) -> str:
        return f"pose,target={self.target},chunks={self.chunks}" + (f",span={self.span}" if self.span > 1 else "")


@SAMPLERS.register("randomized")
class Randomized(PositionSampler):
    """Randomized positional encodings (Ruoss et al. 2023): a sorted sample of L_tr distinct positions in [0, max)."""

    summary = "randomized positions: a sorted random subset of [0, max) (Ruoss 2023)"
    positional = "max"
    derived_defaults: ClassVar[dict[str, str]] = {"max": f"{DEFAULT_FACTOR} x L_tr"}

    def __init__(self, train_len: int, *, max: int | None = None) -> None:
        super().__init__(train_len)
        self.max = _reach("randomized", "max", max, train_len)

    @property
    def limit(self) -> int:
        return self.max

    def draw(self, generator: torch.Generator) -> Tensor:
        return torch.randperm(self.max, generator=generator)[: self.train_len].sort().values

    def spec(self) -> str:
        return f"randomized,max={self.max}"


class BatchSource(Protocol):
    """Where training batches come from (a token stream, prepared shards, a training task)."""

    def batch(
        self, step: int, batch_size: int, length: int, seed: int, rank: int = 0, world_size: int = 1
    ) -> Tensor: ...


def sampled_batch(
    sampler: PositionSampler, source: BatchSource, step: int, batch_size: int, seed: int
) -> tuple[Tensor, Tensor | None]:
    """Global batch `step`, (B, L_tr + 1) tokens, and its (L_tr,) positions (None: contiguous, the model's own):
    windows read `sampler.read_length` long, their tokens gathered where the sampler skips content."""
    positions, index = sampler.window(seed, step)
    batch = source.batch(step, batch_size, sampler.read_length, seed)
    return (batch if index is None else batch[:, index]), (None if sampler.contiguous else positions)


def build_sampler(spec: str, train_len: int, **options: Any) -> PositionSampler:
    """The sampler a spec names (`contiguous`, `pose:32768`, `pose,target=4096,chunks=3`, `randomized:2048`)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"training config: positions must be a sampler spec such as pose:4096, got {spec!r}")
    return SAMPLERS.build(spec, train_len, **options)
