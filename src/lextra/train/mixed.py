"""Mixed context-window training (Shang et al. 2025, LongRoPE2, arXiv 2502.20082): rows at the original length
under the original RoPE and rows at the new length under the rescaled one, in one run.

A step is short with probability `share` (drawn from the seed and step alone, so `--resume` is exact); a short
step's windows of LONG tokens are cut into LONG / SHORT windows of SHORT tokens, positions from 0. The model's
scaling is LongRoPE's (short factors within the original length, long ones beyond); a scaling of another
length-independent type becomes LongRoPE with ones as short factors and its own frequencies as long ones."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from lextra.attention.plan import with_scheme_options
from lextra.errors import ConfigError
from lextra.positions.scaling import TRAIN_LENGTH, RopeScaling, depends_on_length, frequencies, rope_inv_freq

#: what --mixed-window reads
SPEC_HELP = "SHORT:LONG (e.g. 128:1024; LONG is --train-len)"


@dataclass(frozen=True)
class MixedWindow:
    """Steps at `short` tokens (a share `share` of them) among steps at `long` tokens (the run's L_tr)."""

    short: int
    long: int
    share: float

    @classmethod
    def parse(cls, spec: str, share: float, train_len: int) -> MixedWindow:
        """`SHORT:LONG` checked against the run: SHORT < LONG, LONG = L_tr, SHORT divides LONG, 0 < share < 1."""
        where = f"mixed_window {spec!r}"
        parts = str(spec).split(":")
        if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
            raise ConfigError(f"{where}: write it as {SPEC_HELP}")
        short, long = (int(p) for p in parts)
        if long <= short:
            raise ConfigError(f"{where}: the long window must be longer than the short one; write {SPEC_HELP}")
        if long != train_len:
            raise ConfigError(f"{where}: the long window is the run's training length; set --train-len {long}")
        if long % short:
            raise ConfigError(f"{where}: a short step cuts each {long}-token window into pieces of {short}; use a "
                              f"short window that divides {long}")  # fmt: skip
        if not 0.0 < share < 1.0:
            raise ConfigError(f"mixed_share must lie strictly between 0 and 1 (a share of short steps), got {share!r}")
        return cls(short, long, float(share))

    def is_short(self, seed: int, step: int) -> bool:
        """Whether global step `step` is a short one: a draw from (seed, step) alone."""
        return random.Random(f"mixed-window:{seed}:{step}").random() < self.share

    def cut(self, batch: Tensor) -> Tensor:
        """(B, LONG + 1) next-token windows -> (B LONG / SHORT, SHORT + 1): piece k is tokens k S .. (k + 1) S, so
        every target of the long window is predicted once, from within its piece."""
        B, width = batch.shape
        if width != self.long + 1:
            raise ConfigError(f"a mixed-window batch has windows of {width - 1} tokens, not {self.long}")
        pieces = self.long // self.short
        body = batch[:, :-1].reshape(B, pieces, self.short)
        last = batch[:, self.short :: self.short].reshape(B, pieces, 1)  # each piece's next token
        return torch.cat([body, last], dim=-1).flatten(0, 1)

    def to_dict(self) -> dict[str, Any]:
        return {"short": self.short, "long": self.long, "share": self.share}


def check_mixed_run(config: Any, mixed: MixedWindow) -> None:
    """Refuse a task, a position sampler, a layer plan or a model without a RoPE scaling for mixed windows."""
    where = f"mixed_window {mixed.short}:{mixed.long}"
    if config.task is not None:
        raise ConfigError(f"{where} cuts text windows, but the task {config.task!r} builds its own rows; drop one")
    if config.pack != "none":
        raise ConfigError(f"{where} cuts windows into fixed pieces; drop --pack {config.pack} or the mixed window")
    if config.positions != "contiguous":
        raise ConfigError(f"{where} numbers each piece from 0; drop --positions {config.positions}")
    variants = config.model.plan()
    if len({v.spec() for v in variants}) > 1:
        raise ConfigError(f"{where} rescales the model scheme's RoPE; use --scheme rope, not a plan of several kinds")
    if not variants[0].scheme_options.get("scaling"):
        raise ConfigError(
            f"{where} runs the long rows under a RoPE scaling and the short rows under the original RoPE; give "
            "--rope-scaling (e.g. yarn:8, or longrope with its short and long factors)"
        )


def resolve_mixed_scaling(config: Any, mixed: MixedWindow) -> None:
    """Set the model's scaling to LongRoPE's form (`as_longrope`); refuse windows on the wrong side of its original
    length."""
    from lextra.positions.base import SCHEMES
    from lextra.positions.rotary import RotaryFrequencies, build_rope_scaling

    model = config.model
    variant = model.plan()[0]  # one variant on every layer (`check_mixed_run`)
    options = dict(variant.scheme_options)
    given = build_rope_scaling(options.pop("scaling"), model.train_len)
    scheme = SCHEMES.build(variant.scheme, model.head_dims(), **options)
    original = int(given.get(TRAIN_LENGTH) or mixed.short)
    assert isinstance(scheme, RotaryFrequencies)  # a scaling is refused on other schemes when the config is read
    scaling = as_longrope(given, scheme.rotary_dim, scheme.base, original)
    original = scaling[TRAIN_LENGTH]
    if not mixed.short <= original < mixed.long:
        raise ConfigError(
            f"mixed_window {mixed.short}:{mixed.long}: the scaling's original length {original} must lie between "
            "the short window (inclusive) and the long one, so that short rows take the short factors and long "
            "rows the long ones; set original_max_position_embeddings or the windows accordingly"
        )
    layers = list(range(model.n_layer))
    model.set_variants(with_scheme_options(model.plan(), layers, {"scaling": dict(scaling)}))
    model.validate()


def as_longrope(scaling: RopeScaling, head_dim: int, base: float, original: int) -> RopeScaling:
    """`scaling` as a LongRoPE scaling: itself if it is one; else ones up to its original length and its own
    frequencies beyond (a length-dependent type is refused)."""
    if scaling.rope_type == "longrope":
        return scaling
    if depends_on_length(scaling):
        raise ConfigError(
            f"mixed-window training needs a RoPE scaling with fixed long frequencies; {scaling.rope_type!r} changes "
            "them with the length: use longrope, yarn, linear, llama3 or ntk-by-parts"
        )
    scaled, attention = frequencies(scaling, head_dim, base, None)
    plain = rope_inv_freq(head_dim, base).float()
    long_factor = tuple(float(v) for v in (plain / scaled.float()).tolist())
    return RopeScaling(
        "longrope",
        factor=float(scaling["factor"]),
        original_max_position_embeddings=int(scaling.get(TRAIN_LENGTH) or original),
        attention_factor=float(attention),
        short_factor=(1.0,) * len(long_factor),
        long_factor=long_factor,
    )
