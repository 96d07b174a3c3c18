"""Evaluation windows share prefixes across lengths only where that is exact (`prefix_invariant`), and every cell
equals the definition: each window run alone, its scored positions' next-token losses summed."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lextra.attention.masks import build_mask
from lextra.data.prepare import prepare_data
from lextra.evaluate import EvalConfig, evaluate_model
from lextra.evaluate.perplexity import _windows, evaluation_documents, prefix_invariant
from lextra.extend import InferenceSetup
from lextra.model import GPT, GPTConfig

SETTINGS = {"lengths": [8, 16, 32], "documents": 1, "last_token_targets": 2, "max_batch_tokens": 64}


@pytest.fixture(scope="module")
def data():
    return prepare_data("python-code", limit_chars=40_000)


def _model(scheme: str = "rope", plan: str | None = None) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(n_layer=2, n_head=2, d_model=32, train_len=8, layer_plan=plan or scheme)).eval()


@torch.no_grad()
def _definition(model: GPT, data, config: EvalConfig) -> dict[tuple[str, int], tuple[list[float], list[int]]]:
    """Every window of every protocol and length run alone: NLL sum and tokens per cell and document."""
    span = config.resolved_span(model.config.train_len, config.lengths)
    docs, _, _ = evaluation_documents(data, "test", span + config.last_token_targets, config.documents)
    out = {}
    for L in config.lengths:
        for protocol in config.protocols:
            totals, counts = [0.0] * len(docs), [0] * len(docs)
            for i, doc in enumerate(docs):
                for _, window, target, first in _windows(protocol, doc, L, span, config):
                    logits = model(window[None], mask=config.mask)[0]
                    totals[i] += float(F.cross_entropy(logits[first:], target[first:], reduction="sum"))
                    counts[i] += window.numel() - first
            out[(protocol, L)] = (totals, counts)
    return out


def _check(model: GPT, data, config: EvalConfig) -> None:
    got = evaluate_model(model, data, config, progress=False)
    for (protocol, L), (totals, counts) in _definition(model, data, config).items():
        point = got.point(protocol, L)
        assert point.tokens == sum(counts) and point.tokens_by_document == counts
        assert point.nll == pytest.approx(sum(totals) / sum(counts), rel=1e-6)
        assert point.nll_by_document == pytest.approx(totals, rel=1e-6)  # each document's own sum


@pytest.mark.parametrize(
    ("scheme", "plan", "mask"),
    [
        ("rope", None, "causal"),
        ("t5", None, "bca"),
        ("sinusoidal", None, "causal"),
        ("rope", "rope+window:4+sinks;nope+temp_tuning,gamma=8", "causal"),
    ],
)
def test_shared_prefixes_give_each_window_alone(data, scheme: str, plan: str | None, mask: str) -> None:
    model = _model(scheme, plan)
    assert prefix_invariant(model, build_mask(mask, 8))
    _check(model, data, EvalConfig(mask=mask, **SETTINGS))


def test_the_evaluation_s_mask_reaches_the_layers_through_a_setup_and_the_model_s_own_comes_back(data) -> None:
    model = InferenceSetup(mask="window:4").apply(_model("alibi"))
    own = [block.attn.inference.mask for block in model.blocks]
    calls: list[object] = []
    features = model.features

    def spy(*args, **kwargs):
        calls.append(kwargs.get("mask"))
        assert all(block.attn.inference.mask.name == "bca" for block in model.blocks)
        return features(*args, **kwargs)

    model.features = spy  # type: ignore[method-assign]
    config = EvalConfig(mask="bca", protocols=["chunks"], **SETTINGS)
    evaluate_model(model, data, config, progress=False)
    del model.features
    assert calls and set(calls) == {None}  # no call names a mask: the layers hold it
    assert [block.attn.inference.mask for block in model.blocks] == own
    _check(model, data, config)  # the evaluation's mask, not the model's window


def test_a_short_window_runs_inside_the_long_one(data) -> None:
    """chunks of 8 and 16 at offsets 0 and 16 run inside the chunks of 32 and 16 there: 64 rows, not 3 x 32."""
    model = _model()
    rows: list[int] = []
    model.blocks[0].mlp.register_forward_hook(
        lambda module, args, out: rows.append(args[0].shape[0] * args[0].shape[1])
    )
    config = EvalConfig(protocols=["chunks"], lengths=[8, 16, 32], documents=1, max_batch_tokens=64, span=32)
    evaluate_model(model, data, config, progress=False)
    assert sum(rows) == 32 + 16 + 8 + 8  # windows from offsets 0, 16, 8 and 24


def test_length_dependent_models_are_not_shared_and_stay_exact(data) -> None:
    model = _model()
    InferenceSetup(rope_scaling="dynamic:2").apply(model)
    assert not prefix_invariant(model, build_mask("causal", 8))
    _check(model, data, EvalConfig(protocols=["chunks", "sliding"], **SETTINGS))
    assert not prefix_invariant(_model(), build_mask("full", 8))
    extended = _model()
    InferenceSetup(extension="self_extend").apply(extended)
    assert not prefix_invariant(extended, build_mask("causal", 8))
