"""Abacus embeddings (McLeish et al. 2024, arXiv 2405.17399; code mcleish7/arithmetic): every digit token gets a
learned embedding of its 1-based place in its run of digits; in training places shift by one offset k ~
U{0..max_k} per forward pass, at inference k = 0. Non-digit tokens take row 0; runs continue across cached steps."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from lextra.errors import ConfigError

#: the authors' defaults: 1,024 rows, offsets up to 99
ABACUS_POSITIONS = 1024
ABACUS_MAX_K = 99


def digit_places(tokens: Tensor, digits: Tensor, carried: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Each token's 1-based place within its run of consecutive digit tokens, 0 for other tokens (B, L), and each
    row's place at its last token (B,), 0 when it is no digit. `carried` (B,): the places the rows' runs had
    reached before these tokens (a cached decoding step continues a number)."""
    is_digit = torch.isin(tokens, digits)
    index = torch.arange(tokens.shape[-1], device=tokens.device).expand_as(tokens)
    last_other = torch.cummax(torch.where(is_digit, -1, index), dim=-1).values  # the latest non-digit, -1: none yet
    places = index - last_other
    if carried is not None:
        places = places + torch.where(last_other < 0, carried[:, None], 0)
    places = places * is_digit
    return places, places[:, -1]


class AbacusEmbedding(nn.Module):
    """The Abacus table: `forward(tokens, carried)` -> (embeddings (B, L, d_model), each row's run place (B,))."""

    def __init__(
        self, d_model: int, digits: Sequence[int], max_k: int = ABACUS_MAX_K, positions: int = ABACUS_POSITIONS
    ) -> None:
        super().__init__()
        self.max_k, self.positions = max_k, positions
        self.table = nn.Embedding(positions, d_model)
        self.digits: Tensor
        self.register_buffer("digits", torch.tensor(list(digits), dtype=torch.long), persistent=False)

    def forward(self, tokens: Tensor, carried: Tensor | None = None, before: int = 0) -> tuple[Tensor, Tensor]:
        """`before`: how many tokens came before these (a cache's length), which bounds `carried`: the places are
        read back from the device only when that bound could pass the table."""
        places, run = digit_places(tokens, self.digits, carried)
        k = 0
        if self.training and self.max_k > 0:
            k = int(torch.randint(0, self.max_k + 1, ()))
            places = torch.where(places > 0, places + k, places)
        if before + tokens.shape[-1] + k >= self.positions and places.numel():
            longest = int(places.max())
            if longest >= self.positions:
                raise ConfigError(
                    f"abacus: a number reaches place {longest}, beyond the table's {self.positions} rows (max_k "
                    f"{self.max_k} included in training); raise abacus positions or use shorter numbers"
                )
        return self.table(places), run


def check_abacus(options: object, vocab_size: int) -> dict[str, object]:
    """A model config's `abacus` options, checked: `digits` (the ten digit tokens, 0 to 9, distinct ids inside the
    vocabulary), `max_k` (>= 0) and `positions` (the table's rows, more than max_k + 1)."""
    if not isinstance(options, dict):
        raise ConfigError(
            f"model config: abacus must be a table of options (max_k, positions, digits), got {options!r}"
        )
    unknown = sorted(set(options) - {"digits", "max_k", "positions"})
    if unknown:
        raise ConfigError(
            f"model config: abacus has no option {', '.join(unknown)}; its options: max_k, positions, digits"
        )
    max_k, positions = options.get("max_k", ABACUS_MAX_K), options.get("positions", ABACUS_POSITIONS)
    for name, value, low in (("max_k", max_k, 0), ("positions", positions, 2)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ConfigError(f"model config: abacus {name} must be an integer >= {low}, got {value!r}")
    if positions <= max_k + 1:
        raise ConfigError(f"model config: abacus positions ({positions}) must exceed max_k + 1 ({max_k} + 1)")
    digits = options.get("digits")
    if digits is None:  # found by training from the task's alphabet or the tokenizer (`abacus_digits`)
        return {"max_k": max_k, "positions": positions}
    fine = isinstance(digits, list) and len(digits) == 10 and len(set(digits)) == 10
    if not fine or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < vocab_size for d in digits):
        raise ConfigError(
            f"model config: abacus digits must be the 10 distinct token ids of '0'..'9' below vocab_size "
            f"{vocab_size}, got {digits!r}"
        )
    return {"max_k": max_k, "positions": positions, "digits": list(digits)}


def abacus_digits(symbols: Sequence[str], where: str) -> list[int]:
    """The ids of '0'..'9' in a vocabulary given as its symbols in id order (a task's alphabet), or a ConfigError
    naming `where` when a digit is missing."""
    missing = [d for d in "0123456789" if d not in symbols]
    if missing:
        raise ConfigError(
            f"abacus: {where} has no digit token for {', '.join(missing)}; Abacus embeddings number digits, so use "
            "a task or tokenizer that writes each digit as its own token, or drop --abacus"
        )
    return [list(symbols).index(d) for d in "0123456789"]


def tokenizer_digits(encode: Callable[[str], Sequence[int]], where: str) -> list[int]:
    """The ids of '0'..'9' under a tokenizer's `encode`: each digit must be one token of its own."""
    ids = [list(encode(d)) for d in "0123456789"]
    split = [d for d, one in zip("0123456789", ids, strict=True) if len(one) != 1]
    if split:
        raise ConfigError(
            f"abacus: {where} does not write {', '.join(split)} as one token; Abacus embeddings number digit tokens, "
            "so use a tokenizer that splits digits (bytes) or drop --abacus"
        )
    return [one[0] for one in ids]
