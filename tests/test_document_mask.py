"""The document mask of one packed row (`lextra.attention.documents.DocumentMask`): attention-gym's document
causal mask, ported as a float64 reference, held against the dense reference, the chunked/tiled path and eager
flex (its `mask_mod` and BlockMask), for the schemes whose scores depend on m - n alone."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from conftest import make_scheme

import lextra.attention.flex as flex
from lextra.attention import attention
from lextra.attention.backends import AttentionContext
from lextra.attention.documents import DocumentMask
from lextra.attention.masks import UNBOUNDED, CausalMask

LENGTHS = [70, 1, 150, 33, 146]  # 400 positions: documents across flex's 128-blocks and the chunked query blocks


def _offsets_to_document_ids(offsets: torch.Tensor) -> torch.Tensor:
    """attention-gym's `_offsets_to_doc_ids_tensor` (attn_gym/masks/document_mask.py)."""
    counts = offsets[1:] - offsets[:-1]
    return torch.repeat_interleave(torch.arange(len(counts)), counts)


def _document_causal(offsets: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
    """attention-gym's `generate_doc_mask_mod(causal_mask, offsets)`: same document, causal in logical indices."""
    document = _offsets_to_document_ids(offsets)
    same = document[q_idx] == document[kv_idx]
    return same & (q_idx - offsets[document[q_idx]] >= kv_idx - offsets[document[kv_idx]])


def _offsets() -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()])


def test_the_mask_is_attention_gyms_document_causal_mask() -> None:
    offsets = _offsets()
    L = int(offsets[-1])
    mask = DocumentMask(_offsets_to_document_ids(offsets))
    idx = torch.arange(L)
    assert torch.equal(mask.allowed(idx, idx), _document_causal(offsets, idx[:, None], idx[None, :]))
    assert torch.equal(mask.visible_keys(idx, 0, L - 1), mask.allowed(idx, idx).sum(-1))
    assert mask.key_range(75, 200) == (71, 200)  # the first query's document starts at 71: keys before skipped
    assert isinstance(mask.within(80, 200), CausalMask) and mask.within(60, 80) is mask
    assert mask.band(80, 200) == ((71, UNBOUNDED), (0, UNBOUNDED)) and mask.band(60, 80) is None
    other = DocumentMask(_offsets_to_document_ids(torch.tensor([0, 200, 400])))
    assert repr(mask) != repr(other)  # cached BlockMasks are keyed by the mask's repr


def test_flex_block_mask_skips_every_block_across_documents() -> None:
    ids = torch.repeat_interleave(torch.arange(2), 256)  # two documents of two 128-blocks each
    pos = torch.arange(512)
    mask = DocumentMask(ids)
    ours = flex.flex_block_mask(mask, pos, pos)
    tiles = mask.allowed(pos, pos).view(4, 128, 4, 128).transpose(1, 2)  # (query block, key block, 128, 128)
    some, every = tiles.any(-1).any(-1), tiles.all(-1).all(-1)
    assert torch.equal(ours.to_dense()[0, 0].bool(), some)
    assert torch.equal(ours.kv_num_blocks[0, 0] + ours.full_kv_num_blocks[0, 0], some.sum(-1).int())
    assert torch.equal(ours.full_kv_num_blocks[0, 0], every.sum(-1).int())
    assert int(ours.kv_num_blocks.sum()) == 4 and int(ours.full_kv_num_blocks.sum()) == 2  # diagonal; one below
    q_idx, kv_idx = pos[:, None], pos[None, :]
    assert torch.equal(ours.mask_mod(0, 0, q_idx, kv_idx), mask.allowed(pos, pos))


@pytest.mark.parametrize("scheme", ["nope", "rope", "alibi", "t5", "kerple_log", "sandwich"])
def test_every_backend_equals_the_document_mask_with_restarted_positions_in_float64(scheme: str) -> None:
    """Scores that depend on m - n alone are the same at the row's indices as at positions restarted per document:
    every backend under the mask equals attention-gym's mask over restarted positions, computed densely in
    float64 from the scheme's own rotation and bias."""
    offsets = _offsets()
    L = int(offsets[-1])
    ids = _offsets_to_document_ids(offsets)
    fast = make_scheme(scheme, n_heads=2, head_dim=16, train_len=64)
    s = copy.deepcopy(fast).double()
    q, k, v = (torch.randn(1, 2, L, 16, dtype=torch.float64) for _ in range(3))
    positions = torch.arange(L) - offsets[ids]
    qr, kr = s.rotate(q, k, positions, positions)
    scores = qr @ kr.transpose(-1, -2) / 4.0
    if s.has_bias:
        scores = scores + s.bias(positions, positions)
    idx = torch.arange(L)
    scores = scores.masked_fill(~_document_causal(offsets, idx[:, None], idx[None, :]), -math.inf)
    expected = torch.softmax(scores, -1) @ v
    mask = DocumentMask(ids)
    q32, k32, v32 = q.float(), k.float(), v.float()
    with torch.no_grad():
        for backend in ("reference", "chunked"):
            got = attention(q32, k32, v32, scheme=fast, mask=mask, backend=backend)
            assert (got.double() - expected).abs().max() <= 1e-5, backend
        ctx = AttentionContext.build(q32, k32, scheme=fast, mask=mask)
        got = flex.flex_attention_forward(q32, k32, v32, ctx, eager=True)
        assert (got.double() - expected).abs().max() <= 1e-5, "flex"


@pytest.mark.parametrize("scheme", ["rope", "alibi"])
def test_the_chunked_path_under_the_mask_has_the_reference_gradients(scheme: str) -> None:
    ids = _offsets_to_document_ids(_offsets())
    s = make_scheme(scheme, n_heads=2, head_dim=16, train_len=64)
    mask = DocumentMask(ids)
    grads = []
    for backend in ("reference", "chunked"):
        torch.manual_seed(1)
        q, k, v = (torch.randn(1, 2, ids.numel(), 16, requires_grad=True) for _ in range(3))
        out = attention(q, k, v, scheme=s, mask=mask, backend=backend)
        (out * torch.linspace(-1, 1, 16)).sum().backward()
        grads.append([t.grad for t in (q, k, v)])
    for ref, got in zip(*grads, strict=True):
        assert (ref - got).abs().max() <= 1e-5
