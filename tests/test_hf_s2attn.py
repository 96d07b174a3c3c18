"""S2-Attn (LongLoRA) on Hugging Face Llama models: the grouped attention equals the authors' training path
(`forward_flashattn`, no wrap-around) by default and their rolling `forward_noflashattn` with `roll`, and the per-head
masks, training runs it, evaluation runs full causal attention, and bad groups are refused."""

from __future__ import annotations

import copy
import itertools
import math
from types import SimpleNamespace

import pytest
import torch
import transformers

from lextra.attention.s2 import s2_visible
from lextra.errors import ConfigError
from lextra.hf.s2attn import check_group, disable_s2, enable_s2, s2_attention


def authors_s2(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: int) -> torch.Tensor:
    """dvlab-research/LongLoRA `forward_noflashattn`'s S2-Attn, transcribed: (B, H, L, D) -> (B, L, H, D)."""
    bsz, num_heads, q_len, head_dim = q.shape

    def shift(qkv):
        qkv = qkv.clone()
        qkv[:, num_heads // 2 :] = qkv[:, num_heads // 2 :].roll(-group // 2, dims=2)
        return qkv.transpose(1, 2).reshape(bsz * (q_len // group), group, num_heads, head_dim).transpose(1, 2)

    q, k, v = shift(q), shift(k), shift(v)
    weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(head_dim)
    causal = torch.full((group, group), float("-inf")).triu(1)
    weights = torch.softmax(weights + causal, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(weights, v).transpose(1, 2).contiguous().reshape(bsz, q_len, num_heads, head_dim)
    out[:, :, num_heads // 2 :] = out[:, :, num_heads // 2 :].roll(group // 2, dims=1)
    return out


def varlen_causal(qkv: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """flash_attn's `flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, 0.0, causal=True)` written out:
    qkv (total, 3, h, d) -> (total, h, d), causal attention within each [cu_seqlens[i], cu_seqlens[i + 1])."""
    out = torch.empty_like(qkv[:, 0])
    bounds = cu_seqlens.tolist()
    for start, end in itertools.pairwise(bounds):
        q, k, v = (qkv[start:end, i].transpose(0, 1) for i in range(3))  # (h, n, d)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        causal = torch.ones(end - start, end - start, dtype=torch.bool).tril()
        out[start:end] = (torch.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ v).transpose(0, 1)
    return out


def authors_s2_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: int) -> torch.Tensor:
    """dvlab-research/LongLoRA `forward_flashattn`'s S2-Attn (their training default), transcribed for an unpadded
    batch (`unpad_input` of an all-ones mask is a reshape, `pad_input` its inverse): (B, H, L, D) -> (B, L, H, D)."""
    bsz, nheads, q_len, head_dim = q.shape
    qkv = torch.stack([q, k, v], dim=2).transpose(1, 3)  # [bsz, q_len, 3, nh, hd]
    qkv = qkv.reshape(bsz, q_len, 3, 2, nheads // 2, head_dim).permute(0, 3, 1, 2, 4, 5)
    qkv = qkv.reshape(bsz * 2, q_len, 3, nheads // 2, head_dim)
    x_unpad = qkv.reshape(bsz * 2 * q_len, 3, nheads // 2, head_dim)
    cu_q_lens = torch.arange(0, (bsz * 2 + 1) * q_len, q_len, dtype=torch.int32)
    cu_q_len_tmp = torch.arange(0, q_len, group, dtype=cu_q_lens.dtype)
    cu_q_len_tmp = torch.stack([cu_q_len_tmp, cu_q_len_tmp + group // 2]).repeat(bsz, 1) + cu_q_lens[:-1].unsqueeze(-1)
    cu_q_lens = torch.cat([cu_q_len_tmp, cu_q_lens[1:].unsqueeze(-1)], dim=-1).view(-1)
    output = varlen_causal(x_unpad, cu_q_lens).reshape(bsz * 2, q_len, nheads // 2, head_dim)
    return output.reshape(bsz, 2, q_len, nheads // 2, head_dim).transpose(1, 2).reshape(bsz, q_len, nheads, head_dim)


def _register_authors(group: int, authors=authors_s2_flash) -> str:
    """The authors' S2-Attn as a transformers attention implementation (the key/value heads repeated, as they do)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        repeat = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(repeat, dim=1), value.repeat_interleave(repeat, dim=1)
        return authors(query, key, value, group), None

    AttentionInterface.register("authors_s2", attention)
    AttentionMaskInterface.register("authors_s2", sdpa_mask)
    return "authors_s2"


@pytest.mark.parametrize(("length", "group"), [(32, 8), (48, 16), (64, 32)])
def test_s2_attention_equals_the_authors_training_path_and_the_mask(length: int, group: int) -> None:
    g = torch.Generator().manual_seed(length + group)
    q, k, v = (torch.randn(2, 4, length, 8, generator=g, dtype=torch.float64) for _ in range(3))
    ours, _ = s2_attention(SimpleNamespace(training=True, lextra_s2_group=group), q, k, v, None)
    assert torch.allclose(ours, authors_s2_flash(q, k, v, group), atol=1e-12)
    mask = s2_visible(length, 4, group)
    dense = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2)
    assert torch.allclose(ours, dense, atol=1e-12)
    # the shifted heads: half groups at both ends, nothing wraps around
    shift = group // 2
    assert not mask[-1, 0, length - shift] and not mask[-1, shift, shift - 1] and mask[-1, shift - 1, 0]
    assert int(mask[-1].sum()) == (length // group - 1) * group * (group + 1) // 2 + shift * (shift + 1)
    # the roll leaks the window's last tokens into the first ones: far from the authors' training path there
    rolled = authors_s2(q, k, v, group)
    assert (rolled - ours)[:, :shift, 2:].abs().max() > 0.5 and torch.allclose(
        rolled[:, :, :2], ours[:, :, :2], atol=1e-6
    )


@pytest.mark.parametrize(("length", "group"), [(32, 8), (48, 16), (64, 32)])
def test_s2_roll_equals_the_authors_noflash_code_and_the_wrapping_mask(length: int, group: int) -> None:
    g = torch.Generator().manual_seed(length + group)
    q, k, v = (torch.randn(2, 4, length, 8, generator=g, dtype=torch.float64) for _ in range(3))
    module = SimpleNamespace(training=True, lextra_s2_group=group, lextra_s2_roll=True)
    ours, _ = s2_attention(module, q, k, v, None)
    assert torch.allclose(ours, authors_s2(q, k, v, group), atol=1e-6)  # the authors take the softmax in fp32
    mask = s2_visible(length, 4, group, wrap=True)
    dense = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2)
    assert torch.allclose(ours, dense, atol=1e-12)
    # the first half of the heads stays within its groups; the shifted half's last group wraps around
    assert not mask[0, group, group - 1] and mask[0, group - 1, 0]
    assert mask[-1, 0, length - group // 2] and not mask[-1, group // 2, group // 2 - 1]
    assert int(mask[0].sum()) == int(mask[-1].sum()) == (length // group) * group * (group + 1) // 2


def test_grouped_kv_heads_are_repeated_and_evaluation_is_full_causal() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, 4, 16, 8, generator=g),
        torch.randn(1, 2, 16, 8, generator=g),
        torch.randn(1, 2, 16, 8, generator=g),
    )
    k4, v4 = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    trained, _ = s2_attention(SimpleNamespace(training=True, lextra_s2_group=4), q, k, v, None)
    assert torch.allclose(trained, authors_s2_flash(q, k4, v4, 4), atol=1e-6)
    evaluated, _ = s2_attention(SimpleNamespace(training=False, lextra_s2_group=4), q, k, v, None)
    full = torch.nn.functional.scaled_dot_product_attention(q, k4, v4, is_causal=True).transpose(1, 2)
    assert torch.allclose(evaluated, full, atol=1e-6)


def test_a_llama_trains_with_s2_and_evaluates_as_before() -> None:
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model("llama", vocab_size=64, hidden_size=32, intermediate_size=48,
                                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                               max_position_embeddings=64, rope_theta=10000.0)  # fmt: skip
    reference = transformers.AutoModelForCausalLM.from_config(config)
    model = copy.deepcopy(reference)
    enable_s2(model, 8)
    ids = torch.randint(0, 64, (1, 32), generator=torch.Generator().manual_seed(1))
    reference.eval(), model.eval()
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, reference(ids).logits, atol=1e-5)  # evaluation: full attention
        model.train(), reference.train()
        trained = model(ids).logits
        assert not torch.allclose(trained, reference(ids).logits, atol=1e-3)  # training: groups of 8
        authors = copy.deepcopy(reference)
        authors.set_attn_implementation(_register_authors(8))
        assert torch.allclose(trained, authors(ids).logits, atol=1e-5)  # every layer: the authors' S2-Attn
        enable_s2(model, 8, roll=True)
        model.train()
        authors.set_attn_implementation(_register_authors(8, authors_s2))
        assert torch.allclose(model(ids).logits, authors(ids).logits, atol=1e-5)  # and their rolling one
    disable_s2(model)
    assert model.config._attn_implementation == "sdpa"


def test_groups_that_do_not_divide_the_window_are_refused() -> None:
    assert check_group(16, 64) == 16
    with pytest.raises(ConfigError, match=r"--s2-attn 24 does not divide the 64-token window .* such as 16"):
        check_group(24, 64)
    with pytest.raises(ConfigError, match="must be an even integer"):
        check_group(7, 63)
    with pytest.raises(ConfigError, match="two or more groups"):
        check_group(64, 64)
