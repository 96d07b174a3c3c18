"""LongLoRA's S2-Attn (`lextra train --s2-attn G`): equal to the authors' training path (no wrap-around) and, with
`wrap`, to their shift-and-reshape pseudo-code; training only, full causal attention at evaluation, and one clear
error for a group that does not fit."""

from __future__ import annotations

import json
import math

import pytest
import torch
from test_hf_s2attn import authors_s2_flash

from lextra.attention import build_mask, s2_visible, shifted_sparse_attention
from lextra.cli import main
from lextra.errors import ConfigError
from lextra.layer_inputs import LayerInputs
from lextra.model import GPT, GPTConfig, load_model
from lextra.positions import build_scheme
from lextra.positions.base import HeadDims
from lextra.train import TrainConfig, train

LIMIT = 400_000


def authors_s2_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: int) -> torch.Tensor:
    """The paper's pseudo-code (Chen et al. 2023, Algorithm 1) on (B, H, N, D) inputs already position-rotated:

    qkv = cat((qkv.chunk(2, 3)[0], qkv.chunk(2, 3)[1].roll(-G/2, 1)), 3).view(B*N/G, G, 3, H, D)
    out = self_attn(qkv)   # causal within each group
    out = cat((out.chunk(2, 2)[0], out.chunk(2, 2)[1].roll(G/2, 1)), 2)
    """
    B, H, N, D = q.shape
    qkv = torch.stack((q, k, v), dim=2).permute(0, 3, 2, 1, 4)  # (B, N, 3, H, D)
    half = H // 2
    qkv = torch.cat((qkv[:, :, :, :half], qkv[:, :, :, half:].roll(-group // 2, 1)), 3)
    qkv = qkv.reshape(B * N // group, group, 3, H, D)
    gq, gk, gv = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (B N/G, H, G, D)
    causal = torch.ones(group, group, dtype=torch.bool).tril()
    scores = (gq @ gk.transpose(-1, -2)) / math.sqrt(D)
    out = torch.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ gv  # (B N/G, H, G, D)
    out = out.transpose(1, 2).reshape(B, N, H, D)
    out = torch.cat((out[:, :, :half], out[:, :, half:].roll(group // 2, 1)), 2)
    return out.permute(0, 2, 1, 3)


@pytest.mark.parametrize(("heads", "length", "group"), [(4, 32, 8), (2, 16, 16), (3, 24, 4)])
def test_s2_attn_equals_the_authors_shift_and_reshape(heads: int, length: int, group: int) -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, heads, length, 8, dtype=torch.float64) for _ in range(3))
    rope = build_scheme("rope", HeadDims(heads, 8, 8 * heads, length))
    positions = torch.arange(length)
    qr, kr = rope.rotate(q, k, positions, positions)  # the authors rotate before they shift
    expected = authors_s2_attn(qr, kr, v, group)
    got = shifted_sparse_attention(q, k, v, group, rope, positions, positions, wrap=True)
    torch.testing.assert_close(got.double(), expected, atol=1e-6, rtol=1e-5)
    plain = shifted_sparse_attention(q, k, v, group, None, positions, positions, wrap=True)
    torch.testing.assert_close(plain.double(), authors_s2_attn(q, k, v, group), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(("heads", "length", "group"), [(4, 32, 8), (2, 16, 16), (4, 24, 4)])
def test_s2_attn_defaults_to_the_authors_training_path_without_wrap_around(heads: int, length: int, group: int) -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, heads, length, 8, dtype=torch.float64) for _ in range(3))
    rope = build_scheme("rope", HeadDims(heads, 8, 8 * heads, length))
    positions = torch.arange(length)
    qr, kr = rope.rotate(q, k, positions, positions)
    got = shifted_sparse_attention(q, k, v, group, rope, positions, positions)
    torch.testing.assert_close(got.double(), authors_s2_flash(qr, kr, v, group).transpose(1, 2), atol=1e-6, rtol=1e-5)


def test_the_mask_groups_half_the_heads_and_shifts_the_rest() -> None:
    visible, wrapped = s2_visible(8, 2, 4), s2_visible(8, 2, 4, wrap=True)
    plain = torch.zeros(8, 8, dtype=torch.bool)
    plain[:4, :4] = plain[4:, 4:] = True
    assert torch.equal(visible[0], plain.tril()) and torch.equal(wrapped[0], plain.tril())
    # shifted head: groups {0, 1}, {2..5}, {6, 7}, as the authors' training path (forward_flashattn)
    assert visible[1, 5].tolist() == [False, False, True, True, True, True, False, False]
    assert visible[1, 1].tolist() == [True, True] + [False] * 6
    assert visible[1, 7].tolist() == [False] * 6 + [True, True]
    # with wrap: {2..5} and, as the authors' roll (forward_noflashattn) does, {6, 7, 0, 1}
    assert wrapped[1, 5].tolist() == [False, False, True, True, True, True, False, False]
    assert wrapped[1, 1].tolist() == [True, True, False, False, False, False, True, True]
    assert wrapped[1, 7].tolist() == [False] * 6 + [True, True]


def test_s2_attn_applies_in_training_only() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=4, d_model=32, train_len=32, layer_plan="alibi"))
    tokens = torch.randint(0, 256, (2, 32))
    model.eval()
    full = model(tokens)
    model.set_s2_attn(8)
    torch.testing.assert_close(model(tokens), full, atol=0, rtol=0)  # eval: full causal attention
    model.train()
    sparse = model(tokens)
    assert (sparse - full).abs().max() > 1e-3
    # no wrap-around: the window's first token sees itself only, in every layer, as under full causal attention
    torch.testing.assert_close(sparse[:, 0], full[:, 0], atol=1e-6, rtol=1e-6)
    model.eval()
    torch.testing.assert_close(model(tokens), full, atol=0, rtol=0)
    model.set_s2_attn(0)
    model.train()
    torch.testing.assert_close(model(tokens), full, atol=1e-6, rtol=1e-6)  # no dropout: training mode is eval's


def tiny_config(**kwargs) -> TrainConfig:
    model = GPTConfig(n_layer=2, n_head=2, d_model=32, train_len=32, layer_plan="rope")
    options = {"warmup": 2, "checkpoint_every": 3, "log_every": 2, "eval_sequences": 2, **kwargs}
    return TrainConfig(limit_chars=LIMIT, model=model, batch_size=4, steps=5, **options)


def test_training_with_s2_attn_resumes_exactly_and_saves_a_full_attention_model(tmp_path) -> None:
    def hook(done: int) -> None:
        if done == 4:
            raise KeyboardInterrupt

    whole = load_model(train(tiny_config(s2_attn=8), tmp_path / "whole", progress=False))
    with pytest.raises(KeyboardInterrupt):
        train(tiny_config(s2_attn=8), tmp_path / "cut", progress=False, on_step=hook)
    resumed = load_model(train(tiny_config(s2_attn=8), tmp_path / "cut", resume=True, progress=False))
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert json.loads((tmp_path / "whole" / "config.json").read_text())["train"]["s2_attn"] == 8
    assert all(block.attn.s2_group == 0 for block in whole.blocks)  # a loaded model attends fully
    plain = load_model(train(tiny_config(), tmp_path / "plain", progress=False))
    assert not torch.equal(plain.embed.weight, whole.embed.weight)


def test_s2_attn_with_pose_positions_scores_at_the_sampled_positions() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, d_model=16, train_len=16, layer_plan="t5"))
    model.set_s2_attn(4)
    positions = torch.cat((torch.arange(5), torch.arange(5, 16) + 100))
    x = model.embed(torch.randint(0, 256, (1, 16)))
    attn = model.blocks[0].attn
    h = model.blocks[0].ln_attn(x)
    q, k, v = attn.project(h)
    expected = shifted_sparse_attention(q, k, v, 4, model.scheme_for(0), positions, positions)
    logits = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + model.scheme_for(0).bias(positions, positions)
    direct = torch.softmax(logits.masked_fill(~s2_visible(16, 2, 4), float("-inf")), -1) @ v
    torch.testing.assert_close(expected, direct, atol=1e-5, rtol=1e-5)
    out = attn(h, LayerInputs(model.scheme_for(0), positions, build_mask("causal"), "auto"))
    torch.testing.assert_close(out, attn.o_proj(expected.transpose(1, 2).reshape(1, 16, -1)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("group", [5, 12, 64, 1, 32])
def test_a_group_that_does_not_divide_the_window_is_refused(group: int) -> None:
    with pytest.raises(ConfigError, match=r"--s2-attn \d+: the group must be even and divide the training window"):
        tiny_config(s2_attn=group).validate()


def test_s2_attn_refuses_what_it_cannot_serve() -> None:
    config = tiny_config(s2_attn=8)
    config.model.n_head = 1
    with pytest.raises(ConfigError, match="--s2-attn shifts half the heads, but the model has 1; use n_head >= 2"):
        config.validate()
    config = tiny_config(s2_attn=8)
    config.model.layer_plan = "rope+logn:ssmax"
    with pytest.raises(ConfigError, match="hides keys that log_scaling ssmax counts"):
        config.validate()


def test_the_cli_refuses_a_bad_group_in_one_line(tmp_path, capsys) -> None:
    assert main(["train", "--out", str(tmp_path), "--train-len", "32", "--s2-attn", "12"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--s2-attn 12: the group must be even and divide the training window L_tr (32)" in err[0]
