"""The attention weight on the first token per layer (`lextra.analysis.sinks.first_token_mass`)."""

from __future__ import annotations

import math

import pytest
import torch

from lextra.analysis.sinks import first_token_mass
from lextra.model import GPT, GPTConfig


def _flat(plan: str, L: int = 12) -> tuple[GPT, torch.Tensor]:
    """A model whose queries are zero: every logit is 0, so each row is uniform over its visible keys."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=31, n_layer=2, n_head=2, d_model=16, train_len=8, layer_plan=plan))
    with torch.no_grad():
        for block in model.blocks:
            block.attn.q_proj.weight.zero_()
    return model, torch.randint(0, 31, (3, L))


def test_uniform_rows_put_one_over_k_on_the_first_token() -> None:
    model, texts = _flat("nope")
    result = first_token_mass(model, texts)
    expected = sum(1 / (m + 1) for m in range(1, 12)) / 11
    assert result.rows == 3 * 11
    assert result.per_layer == pytest.approx([expected, expected], rel=1e-6)
    assert result.uniform == pytest.approx([expected, expected], rel=1e-9)
    assert len(result.per_head) == 2 and len(result.per_head[0]) == 2


def test_a_window_layer_puts_nothing_on_a_first_token_it_cannot_see() -> None:
    model, texts = _flat("nope+window:4;nope")
    result = first_token_mass(model, texts)
    # a window of 4 keys: rows 1..3 see key 0 among m + 1 keys, rows 4..11 do not see it
    windowed = sum(1 / (m + 1) for m in range(1, 4)) / 11
    assert result.per_layer[0] == pytest.approx(windowed, rel=1e-6)
    assert result.uniform[0] == pytest.approx(windowed, rel=1e-9)
    assert result.per_layer[1] == pytest.approx(sum(1 / (m + 1) for m in range(1, 12)) / 11, rel=1e-6)


def test_a_learned_sink_takes_its_share_of_each_row() -> None:
    model, texts = _flat("nope+sinks")
    with torch.no_grad():
        for block in model.blocks:
            block.attn.sinks.logits.fill_(math.log(3.0))  # the sink weighs as much as three keys
    result = first_token_mass(model, texts)
    expected = sum(1 / (m + 1 + 3) for m in range(1, 12)) / 11
    assert result.per_layer == pytest.approx([expected, expected], rel=1e-6)


def test_refuses_texts_of_one_token() -> None:
    model, _ = _flat("nope")
    with pytest.raises(ValueError, match="L >= 2"):
        first_token_mass(model, torch.zeros(2, 1, dtype=torch.long))
