"""The library's CUDA branches on a virtual device (`virtual_device.py`): CPU tensors that report `cuda:0`, so
`backend="auto"` takes CUDA's path (flash SDPA, FlexAttention emulated densely, chunked) and any CPU tensor that
meets a device tensor raises. Every scheme x mask x backend choice (forward and gradients), a training step and
`train()` with resume, cached decoding, every extension method, the Hugging Face adapter and every evaluation and
analysis compute the CPU path's numbers with no device mix; planted bugs are caught; syncs per layer are counted."""

from __future__ import annotations

import copy
import json

import pytest
import torch
import virtual_device as vd
from conftest import ALL_SCHEMES, make_scheme, qkv
from test_hf import tiny_causal
from test_hf import tokens as hf_tokens

import lextra.attention.context as context
import lextra.attention.flex as flex
from lextra.analysis import layer_attention
from lextra.attention import attention, attention_logits, build_mask
from lextra.attention.backends import AttentionContext, attention_path
from lextra.extend import EXTENSIONS, InferenceSetup
from lextra.hf import adapt
from lextra.model import GPT, GPTConfig
from lextra.positions.bias import FLEX_MAX_HIDDEN

TOL = 1e-5
MASKS = ("causal", "window:7", "bca:16")


@pytest.fixture
def virtual_cuda():
    """The virtual device for one test: yields the `VirtualCuda` mode with its counters."""
    with vd.virtual_cuda() as mode:
        yield mode


def _max_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((vd.plain(got).detach().double() - vd.plain(want).detach().double()).abs().max())


# ------------------------------------------------------------------------------------------------------------
# the harness itself
# ------------------------------------------------------------------------------------------------------------


def test_the_virtual_device_reports_cuda_refuses_mixes_and_counts_syncs(virtual_cuda) -> None:
    x = torch.arange(6.0, device="cuda")
    assert isinstance(x, vd.VirtualTensor) and x.device == torch.device("cuda", 0) and x.is_cuda
    assert torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
    assert isinstance(torch.zeros(3).to("cuda"), vd.VirtualTensor) and isinstance(
        torch.ones(2).cuda(), vd.VirtualTensor
    )
    assert not isinstance(torch.zeros(3), vd.VirtualTensor)  # no device: the CPU
    assert (x * 2 + torch.tensor(1.0)).tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]  # a 0-dim CPU scalar is fine
    assert x[torch.tensor([0, 2])].device.type == "cuda"  # a CPU index into a device tensor, as CUDA allows
    with pytest.raises(vd.DeviceMixError, match=r"device mix in .*add.*shape \(6,\)"):
        x + torch.ones(6)
    with pytest.raises(vd.DeviceMixError, match="CPU tensor indexed with a cuda:0 index"):
        torch.arange(6)[torch.tensor([1], device="cuda")]
    with pytest.raises(TypeError, match="can't convert cuda:0"):
        x.numpy()
    virtual_cuda.clear()
    [int(x[1]), float(x[2]), bool(x[3] > 0), x[0].item(), x.tolist(), x.nonzero(), torch.equal(x, x), x[x > 2]]
    on_cpu = x.cpu()
    expected = {"int": 1, "float": 1, "bool": 1, "item": 1, "tolist": 1, "nonzero": 1, "equal": 1}
    assert virtual_cuda.syncs == {**expected, "boolean index": 1, "cpu": 1}
    assert type(on_cpu) is torch.Tensor and on_cpu.device.type == "cpu" and torch.equal(on_cpu, vd.plain(x))
    w = torch.randn(3, device="cuda", requires_grad=True)
    (w * w).sum().backward()
    assert isinstance(w.grad, vd.VirtualTensor) and torch.equal(vd.plain(w.grad), 2 * vd.plain(w.detach()))


def test_a_module_moved_to_cuda_holds_virtual_parameters_and_buffers(virtual_cuda) -> None:
    model = GPT(GPTConfig(vocab_size=31, n_layer=1, n_head=2, d_model=32, train_len=16, layer_plan="alibi"))
    model.to("cuda")
    assert all(isinstance(p, vd.VirtualTensor) and isinstance(p, torch.nn.Parameter) for p in model.parameters())
    assert all(isinstance(b, vd.VirtualTensor) for b in model.buffers())
    assert model.head.weight is model.embed.weight  # tied weights stay tied


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")  # eager flex on purpose
def test_emulated_flex_equals_eager_flex_and_refuses_captured_cpu_tensors(monkeypatch) -> None:
    """The emulation is FlexAttention: on plain CPU tensors it gives eager `flex_attention`'s numbers (scores,
    modifier, BlockMask and its partial / full blocks); under the harness a captured CPU table is refused."""
    from torch.nn.attention.flex_attention import AuxRequest, flex_attention

    scheme = make_scheme("alibi", n_heads=2)
    q, k, v = qkv(scheme, 300, batch=1)
    pos = torch.arange(300)
    captured: dict = {}

    def spy(qp, kp, vp, **kwargs):
        captured.update(kwargs)
        return flex_attention(qp, kp, vp, **kwargs)

    monkeypatch.setattr(flex, "_run_compiled", spy)
    with torch.no_grad():
        flex.flex_attention_forward(q, k, v, AttentionContext.build(q, k, scheme=scheme, scale=0.25))
        blocks = captured["block_mask"]  # 3 x 3 blocks of 128: hidden, partial and full ones
        assert int(blocks.kv_num_blocks.sum()) > 0 and int(blocks.full_kv_num_blocks.sum()) > 0
        assert int(blocks.kv_num_blocks.sum() + blocks.full_kv_num_blocks.sum()) < 9
        padded = [flex._pad_rows(t, 384) for t in (q, k, v)]
        want = flex_attention(*padded, **captured)
        assert _max_error(vd.dense_flex(*padded, **captured), want) < TOL
        # the log-sum-exp, as merging passes by it needs (padded query rows see no key: -inf); torch's CPU flex
        # gives no max_scores, so those are held to the reference's masked logits
        out, aux = flex_attention(*padded, **captured, return_aux=AuxRequest(lse=True))
        dense_out, dense_aux = vd.dense_flex(*padded, **captured, return_aux=AuxRequest(lse=True, max_scores=True))
        assert _max_error(dense_out, out) < TOL and _max_error(dense_aux.lse[..., :300], aux.lse[..., :300]) < TOL
        assert torch.isneginf(dense_aux.lse[..., 300:]).all() and torch.isneginf(aux.lse[..., 300:]).all()
        logits = attention_logits(q, k, scheme, pos, pos, 0.25).masked_fill(
            ~build_mask("causal").allowed(pos, pos), -1e30
        )
        assert _max_error(dense_aux.max_scores[..., :300], logits.amax(-1)) < TOL
        legacy = vd.dense_flex(*padded, **captured, return_lse=True)
        assert torch.equal(legacy[1], dense_aux.lse) and torch.equal(legacy[0], dense_out)
    with pytest.raises(vd.DeviceMixError, match=r"flex inputs\['q'\]: a CPU tensor of shape \(1, 2, 384, 16\)"):
        vd.emulated_flex(*padded, **captured)  # plain q: not on the device
    with pytest.raises(
        vd.DeviceMixError, match=r"score_mod\.bias\.k_rows: a CPU tensor of shape \(384,\) captured by FlexAttention"
    ):
        vd.emulated_flex(*(vd.virtual(t) for t in padded), **captured)
    narrow = [vd.virtual(t[..., :8]) for t in padded]  # head dim 8: CUDA's kernel refuses it at compile time
    with pytest.raises(vd.FlexCompileError, match="must be at least 16 but got E=8 and Ev=8"):
        vd.emulated_flex(*narrow, **captured)


# ------------------------------------------------------------------------------------------------------------
# every scheme x mask x backend choice
# ------------------------------------------------------------------------------------------------------------


def _expected_label(mask: str, offset: bool, scheme) -> str:
    """What CUDA runs: flash SDPA for one exact fused call, flex for biases, windows, BCA and offset queries,
    chunked where flex refuses (xPos past its rotate span, FIRE wider than flex unrolls)."""
    if scheme.rotate_span is not None and scheme.rotate_span < 40:
        return "chunked"
    if scheme.content_dependent:  # CoPE: its tiled path, on any device
        return "chunked"
    if scheme.name == "fire" and scheme.mlp[0].out_features > FLEX_MAX_HIDDEN:
        return "chunked"
    fused = not scheme.has_bias and mask == "causal" and not offset
    return "sdpa" if fused else "flex"


#: (scheme, mask, queries offset from the keys, scheme options); xPos with a 32-position span and FIRE with a
#: wide MLP take chunked
CASES = [(name, mask, offset, {}) for name in ALL_SCHEMES for mask in MASKS for offset in (False, True)]
CASES += [("xpos", "causal", False, {"scale_base": 2.0}), ("xpos", "window:7", True, {"scale_base": 2.0})]
CASES += [("fire", "causal", False, {"hidden": FLEX_MAX_HIDDEN + 1})]  # wider than flex unrolls: chunked


@pytest.mark.parametrize(("name", "mask", "offset", "options"), CASES)
def test_every_scheme_and_mask_takes_cudas_path_with_the_cpu_numbers(
    name: str, mask: str, offset: bool, options: dict
) -> None:
    scheme = make_scheme(name, n_heads=2, head_dim=16, train_len=32, **options)
    q, k, v = qkv(scheme, 40)
    k_pos = torch.arange(40)
    q_pos = k_pos[25:] if offset else k_pos
    q = q[..., 25:, :] if offset else q
    with torch.no_grad():
        want = attention(q, k, v, scheme=scheme, mask=mask, q_pos=q_pos, k_pos=k_pos, backend="reference")
        with vd.virtual_cuda() as mode:
            scheme.to("cuda")
            qv, kv, vv, qp, kp = (vd.virtual(t) for t in (q, k, v, q_pos, k_pos))
            label = attention_path(scheme, build_mask(mask), qp, kp, device=qv.device)
            got = attention(qv, kv, vv, scheme=scheme, mask=mask, q_pos=qp, k_pos=kp, backend="auto")
            flex_calls = mode.flex_calls
            chunked = attention(qv, kv, vv, scheme=scheme, mask=mask, q_pos=qp, k_pos=kp, backend="chunked")
    assert isinstance(got, vd.VirtualTensor) and isinstance(chunked, vd.VirtualTensor)
    assert label.partition("/")[0] == _expected_label(mask, offset, scheme)  # chunked/strided, .../gathered
    assert flex_calls == (label == "flex")
    assert _max_error(got, want) < TOL and _max_error(chunked, want) < TOL


@pytest.mark.parametrize(("name", "mask", "offset", "options"), CASES)
def test_every_scheme_and_mask_trains_on_cudas_path_with_the_cpu_gradients(
    name: str, mask: str, offset: bool, options: dict
) -> None:
    """Under autograd CUDA's `auto` path (flash SDPA, flex's backward, chunked) gives the reference's gradients
    for q, k, v and the scheme's parameters."""
    scheme = make_scheme(name, n_heads=2, head_dim=16, train_len=32, **options)
    q, k, v = qkv(scheme, 40, grad=True)
    k_pos = torch.arange(40)
    q_pos = k_pos[25:] if offset else k_pos
    weight = torch.randn(2, 2, q_pos.numel(), 16)

    def gradients(backend: str, *tensors: torch.Tensor) -> list[torch.Tensor]:
        qs, ks, vs, qp, kp, w = tensors
        qs = qs[..., 25:, :] if offset else qs
        out = attention(qs, ks, vs, scheme=scheme, mask=mask, q_pos=qp, k_pos=kp, backend=backend)
        leaves = [tensors[0], tensors[1], tensors[2], *scheme.parameters()]
        return list(torch.autograd.grad((out * w).sum(), leaves, allow_unused=True))

    want = gradients("reference", q, k, v, q_pos, k_pos, weight)
    with vd.virtual_cuda():
        scheme.to("cuda")
        got = gradients("auto", *(vd.virtual(t) for t in (q, k, v, q_pos, k_pos, weight)))
    assert len(got) == len(want)
    for mine, theirs in zip(got, want, strict=True):
        assert (mine is None) == (theirs is None)
        if mine is not None:
            assert isinstance(mine, vd.VirtualTensor)
            assert _max_error(mine, theirs) <= TOL * (1.0 + float(theirs.abs().max()))  # KERPLE's are large


def test_the_label_table_is_what_cuda_chooses() -> None:
    """`python tests/virtual_device.py` prints this table: every scheme x mask, each label CUDA's choice."""
    rows = vd.label_table()
    print("\nbackend='auto' on cuda:0, 256 positions:\n" + vd.format_table(rows))  # -s shows it
    assert rows[0] == ["scheme", "causal", "window:64", "bca:128"]
    assert [row[0] for row in rows[1:]] == ALL_SCHEMES
    for name, causal, window, bca in rows[1:]:
        scheme = make_scheme(name)
        if scheme.content_dependent:  # CoPE: its own tiled path on every device
            assert (causal, window, bca) == ("chunked", "chunked", "chunked")
            continue
        assert (causal, window, bca) == ("flex" if scheme.has_bias else "sdpa", "flex", "flex")
    assert "fire" in vd.format_table(rows) and vd.format_table(rows).count("\n") == len(ALL_SCHEMES)


# ------------------------------------------------------------------------------------------------------------
# models: training, decoding, extension methods, Hugging Face
# ------------------------------------------------------------------------------------------------------------


_tiny = vd.tiny_gpt


@pytest.mark.parametrize(("name", "mask"), [("rope", "causal"), ("alibi", "causal"), ("fire", "causal"),
                                            ("kerple_log", "window:5"), ("t5", "bca")])  # fmt: skip
def test_a_training_step_on_cuda_equals_the_cpu_step(name: str, mask: str) -> None:
    model = _tiny(name).train()
    twin = copy.deepcopy(model)
    tokens = torch.randint(0, 61, (2, 24))
    loss = model.loss(tokens, mask=mask)
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9).step()
    with vd.virtual_cuda() as mode:
        twin.to("cuda")
        optimizer = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
        twin_loss = twin.loss(vd.virtual(tokens), mask=mask)
        twin_loss.backward()
        grads = {n: p.grad for n, p in twin.named_parameters()}
        optimizer.step()
    assert abs(vd.plain(twin_loss).item() - loss.item()) < TOL
    assert mode.flex_calls == (0 if name == "rope" else 2)  # flex in both layers where CUDA takes it
    for (key, param), (_, moved) in zip(model.named_parameters(), twin.named_parameters(), strict=True):
        assert isinstance(grads[key], vd.VirtualTensor)
        scale = float(param.grad.abs().max()) + 1e-3  # KERPLE's gradients are large: relative to the largest
        assert _max_error(grads[key], param.grad) <= 1e-5 * scale, key
        assert isinstance(moved, vd.VirtualTensor) and _max_error(moved.detach(), param.detach()) < 1e-5, key


@pytest.mark.parametrize(("name", "mask"), [("rope", "causal"), ("alibi", "window:5"), ("fire", "causal"),
                                            ("xpos", "bca"), ("coca", "causal"), ("t5", "causal")])  # fmt: skip
def test_cached_decoding_on_cuda_equals_the_cpu_decoding(name: str, mask: str) -> None:
    model = _tiny(name).eval()
    tokens = torch.randint(0, 61, (1, 30))

    def decode(net: GPT, ids: torch.Tensor) -> torch.Tensor:
        cache = net.new_cache()
        pieces = [net(ids[:, :6], cache=cache, mask=mask)]
        pieces += [net(ids[:, t : t + 1], cache=cache, mask=mask) for t in range(6, ids.shape[1])]
        return torch.cat(pieces, dim=1)

    with torch.no_grad():
        want = decode(model, tokens)
        full = model(tokens, mask=mask)
        with vd.virtual_cuda():
            model.to("cuda")
            got = decode(model, vd.virtual(tokens))
    assert isinstance(got, vd.VirtualTensor)
    assert _max_error(got, want) < TOL and _max_error(want, full) < TOL


@pytest.mark.parametrize("method", EXTENSIONS.names())
def test_every_extension_method_on_cuda_equals_the_cpu_path(method: str) -> None:
    model = _tiny("rope").eval()
    InferenceSetup(extension=method).apply(model)
    tokens = torch.randint(0, 61, (1, 40))  # 2.5 x train_len: the method is active
    with torch.no_grad():
        want = model(tokens)
        cache = model.new_cache()
        want_steps = [model(tokens[:, :30], cache=cache)] + [model(tokens[:, t : t + 1], cache=cache) for t in (30, 31)]
        with vd.virtual_cuda():
            model.to("cuda")
            ids = vd.virtual(tokens)
            got = model(ids)
            cache = model.new_cache()
            steps = [model(ids[:, :30], cache=cache)] + [model(ids[:, t : t + 1], cache=cache) for t in (30, 31)]
    assert _max_error(got, want) < TOL
    for mine, theirs in zip(steps, want_steps, strict=True):
        assert isinstance(mine, vd.VirtualTensor) and _max_error(mine, theirs) < TOL


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2"])
def test_the_hugging_face_adapter_on_cuda_equals_the_cpu_path(model_type: str) -> None:
    """A tiny random causal LM through lextra's attention: a forward past its 32 positions and cached decoding."""
    model = adapt(tiny_causal(model_type))
    ids = hf_tokens(length=40)
    with torch.no_grad():
        want = model(ids)
        cache = model.new_cache()
        want_steps = [model(ids[:, :36], cache=cache)] + [model(ids[:, t : t + 1], cache=cache) for t in range(36, 40)]
        with vd.virtual_cuda():
            model.to("cuda")
            on = vd.virtual(ids)
            got = model(on)
            cache = model.new_cache()
            steps = [model(on[:, :36], cache=cache)] + [model(on[:, t : t + 1], cache=cache) for t in range(36, 40)]
    assert isinstance(got, vd.VirtualTensor) and _max_error(got, want) < TOL
    for mine, theirs in zip(steps, want_steps, strict=True):
        assert isinstance(mine, vd.VirtualTensor) and _max_error(mine, theirs) < TOL


def test_a_t5_encoder_decoder_through_the_adapter_on_cuda_equals_the_cpu_path() -> None:
    """T5's relative bias (bucketed distances) and its encoder's full mask on the device."""
    from test_hf import tiny_t5

    model = adapt(tiny_t5())
    ids, decoder = hf_tokens(length=40), hf_tokens(length=6, seed=2)
    with torch.no_grad():
        want = model.model(input_ids=ids, decoder_input_ids=decoder).logits
        with vd.virtual_cuda():
            model.to("cuda")
            got = model.model(input_ids=vd.virtual(ids), decoder_input_ids=vd.virtual(decoder)).logits
    assert isinstance(got, vd.VirtualTensor) and _max_error(got, want) < TOL


@pytest.mark.parametrize("method", EXTENSIONS.names())
def test_every_extension_method_on_the_hugging_face_adapter_on_cuda_equals_the_cpu_path(method: str) -> None:
    model = adapt(tiny_causal(layers=1))
    InferenceSetup(extension=method).apply(model)
    ids = hf_tokens(length=40)
    with torch.no_grad():
        want = model(ids)
        cache = model.new_cache()
        want_steps = [model(ids[:, :38], cache=cache)] + [model(ids[:, t : t + 1], cache=cache) for t in (38, 39)]
        with vd.virtual_cuda():
            model.to("cuda")
            on = vd.virtual(ids)
            got = model(on)
            cache = model.new_cache()
            steps = [model(on[:, :38], cache=cache)] + [model(on[:, t : t + 1], cache=cache) for t in (38, 39)]
    assert _max_error(got, want) < TOL
    for mine, theirs in zip(steps, want_steps, strict=True):
        assert isinstance(mine, vd.VirtualTensor) and _max_error(mine, theirs) < TOL


def _captured_weights(model, ids: torch.Tensor, mask: str) -> list[tuple[int, torch.Tensor]]:
    """(layer, weights) of every block of every layer, as `lextra.analysis.layer_attention` captures them."""
    views = layer_attention(model, ids, mask, block_size=16)
    return [(view.layer, block.weights()) for view in views for block in view.blocks()]


@pytest.mark.parametrize("which", ["gpt", "hf"])
def test_captured_attention_on_cuda_equals_the_cpu_capture(which: str) -> None:
    """The analyses' view of each layer (q, k, scheme, temperatures; weights block by block) on the device."""
    if which == "gpt":
        model, ids, mask = _tiny("fire+logn:qwen").eval(), torch.randint(0, 61, (1, 40)), "window:9"
        InferenceSetup(temperatures=[[0.5, 2.0], [1.5, 1.0]]).apply(model)
    else:
        model, ids, mask = adapt(tiny_causal()), hf_tokens(length=40), "causal"
        InferenceSetup(temperatures=torch.tensor([[0.5, 1.0, 2.0, 3.0], [1.0, 1.0, 0.7, 1.3]])).apply(model)
    with torch.no_grad():
        want = _captured_weights(model, ids, mask)
        with vd.virtual_cuda():
            model.to("cuda")
            got = _captured_weights(model, vd.virtual(ids), mask)
    assert [layer for layer, _ in got] == [layer for layer, _ in want] and {layer for layer, _ in got} == {0, 1}
    for (_, mine), (_, theirs) in zip(got, want, strict=True):
        assert isinstance(mine, vd.VirtualTensor) and _max_error(mine, theirs) < TOL


def _assert_close(got, want, path: str = "") -> None:
    """Equal structure and values: numbers to 1e-5 relative (1e-8 absolute near 0), everything else exactly."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), path
        for key in want:
            _assert_close(got[key], want[key], f"{path}/{key}")
    elif isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), path
        for i, (mine, theirs) in enumerate(zip(got, want, strict=True)):
            _assert_close(mine, theirs, f"{path}[{i}]")
    elif isinstance(want, float):
        assert abs(got - want) <= 1e-5 * abs(want) + 1e-8, f"{path}: {got} != {want}"
    else:
        assert got == want, path


@pytest.fixture(scope="module")
def corpus():
    from test_devices import LIMIT

    from lextra.data.prepare import prepare_data

    return prepare_data("python-code", limit_chars=LIMIT)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["rope", "alibi", "t5", "fire", "xpos", "coca", "kerple_log", "learned"])
def test_every_evaluation_analysis_and_retrieval_path_on_cuda_equals_the_cpu_path(scheme: str, corpus) -> None:
    """What `tests/test_devices.py` runs on a real GPU (`make test-gpu`): perplexity under three masks, prompt
    scoring, dispersion, resolution, theory, receptive field, capture, completion, temperature alignment."""
    from test_devices import _everything, _model

    from lextra.methods.align import calibration_windows

    model = _model(scheme)
    texts = calibration_windows(corpus, 40, 2, "validation")
    want = _everything(model, corpus, texts)
    with vd.virtual_cuda():
        model.to("cuda")
        got = _everything(model, corpus, texts)
    _assert_close(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["alibi", "fire"])
def test_train_on_cuda_resumes_exactly_and_equals_the_cpu_run(scheme: str, tmp_path, monkeypatch) -> None:
    """`train(device="cuda")` as `make test-gpu` runs it (tests/test_devices.py): the same weights as the CPU run,
    a resumed run the uninterrupted one's, the GPU generator saved with the checkpoint, evaluation on cuda."""
    from lextra.devices import DEVICE_ENV

    monkeypatch.delenv(DEVICE_ENV)  # the machine as it is: here, the virtual GPU
    # the 1e-3 bound below holds at make test's 2 threads; a test before this one may have left torch at 1 (a CLI
    # test's --threads 1), where FIRE's CPU sums round otherwise (1.02e-3 measured)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _train_on_cuda_and_cpu(scheme, tmp_path)
    finally:
        torch.set_num_threads(threads)


def _train_on_cuda_and_cpu(scheme: str, tmp_path) -> None:
    from safetensors.torch import load_file
    from test_devices import _stop_at, _StopError, _tiny

    from lextra.model import load_model
    from lextra.train import train

    cpu = train(_tiny(scheme, steps=6), tmp_path / "cpu", progress=False, device="cpu")
    with vd.virtual_cuda():
        whole = train(_tiny(scheme, steps=6), tmp_path / "whole", progress=False)
        with pytest.raises(_StopError):
            train(_tiny(scheme, steps=6), tmp_path / "cut", progress=False, device="cuda", on_step=_stop_at(3))
        resumed = train(_tiny(scheme, steps=6), tmp_path / "cut", resume=True, progress=False, device="cuda")
        model = load_model(whole, map_location="cuda").eval()
        assert all(isinstance(p, vd.VirtualTensor) for p in model.parameters())
        logits = model(torch.arange(20, device="cuda")[None])
    state = json.loads((tmp_path / "cut" / "checkpoints" / "step_0000005" / "state.json").read_text())
    assert "cuda_rng_state" in state
    want, got, again = (load_file(str(run / "model.safetensors")) for run in (cpu, whole, resumed))
    assert got.keys() == want.keys() == again.keys()
    logged = [
        [json.loads(line) for line in (run.parent / "metrics.jsonl").read_text().splitlines()] for run in (cpu, whole)
    ]
    assert [m["step"] for m in logged[0]] == [m["step"] for m in logged[1]] == [5, 6]
    for theirs, mine in zip(*logged, strict=True):
        for key in ("loss", "grad_norm", "val_loss"):
            if key in theirs:
                assert mine[key] == pytest.approx(theirs[key], rel=1e-5), key
    for name in want:
        assert torch.equal(again[name], got[name]), name
        # flex's and the CPU path's fp32 sums differ in their last bits: an Adam step moves a weight whose gradient
        # is about 0 by up to lr (2e-3 at most here) in a direction those bits decide; 1e-3 bounds six such steps
        assert _max_error(got[name], want[name]) < 1e-3, name
    assert _max_error(logits, load_model(cpu).eval()(torch.arange(20)[None])) < 1e-3


@pytest.mark.slow
def test_the_gpu_benchmark_runs_its_cuda_branch_with_cudas_labels(tmp_path) -> None:
    """`benchmarks/gpu.py --device cuda --smoke` end to end: correctness checks, cells labelled with CUDA's path
    (the labels of FIRE's cells compare positions with its parameters, on the device), timers, training cells."""
    from test_gpu_benchmark import _load

    out = tmp_path / "gpu.json"
    with vd.virtual_cuda() as mode:
        code = _load().main(["--device", "cuda", "--smoke", "--schemes", "nope,alibi,fire", "--out", str(out)])
    data = json.loads(out.read_text())
    assert code == 0 and mode.flex_calls > 0
    assert len(data["checks"]) == 9 and all(c["ok"] for c in data["checks"])
    assert data["meta"]["device_name"] == "virtual H200"
    cells = [c for c in data["attention"] if c["kind"] == "scheme"]
    assert {c["length"] for c in cells} == {256, 512} and len(cells) == 18
    for c in cells:
        expected = "sdpa" if (c["scheme"], c["mask"]) == ("nope", "causal") else "flex"
        assert (c["path"], c["path_bwd"]) == (expected, expected) and "error" not in c, c
    assert all("error" not in c and c["fwd_ms"] > 0 for c in data["attention"] if c["kind"] == "sdpa")
    # --smoke trains at head dim 8: a scheme that CUDA's auto sends to flex records flex's refusal (issue 25 item
    # 5) unless auto falls back for it; nope (SDPA) trains
    assert [c["scheme"] for c in data["training"]] == ["nope", "alibi", "fire"] and "error" not in data["training"][0]
    for c in data["training"][1:]:
        assert "error" not in c or "must be at least 16" in c["error"], c


# ------------------------------------------------------------------------------------------------------------
# planted bugs: the harness catches them
# ------------------------------------------------------------------------------------------------------------


def test_a_key_index_table_built_without_its_device_is_caught(monkeypatch) -> None:
    """FlexAttention's bias modifier given a CPU copy of the key positions (as code that builds an index table
    without `device=` does): the compiled CUDA kernel could not read it; the harness names the captured tensor."""
    scheme = make_scheme("alibi", n_heads=2)
    q, k, v = qkv(scheme, 40)
    real = flex._table_bias
    with torch.no_grad(), vd.virtual_cuda():
        scheme.to("cuda")
        qv, kv, vv = (vd.virtual(t) for t in (q, k, v))
        attention(qv, kv, vv, scheme=scheme, mask="causal")  # the real code: no mix
        monkeypatch.setattr(flex, "_table_bias", lambda table, shift, rows: real(table, shift, vd.plain(rows)))
        with pytest.raises(vd.DeviceMixError, match=r"^score_mod\.bias\.k_rows: a CPU tensor of shape \(128,\)"):
            attention(qv, kv, vv, scheme=scheme, mask="causal")


def test_a_temperature_left_on_the_cpu_is_caught(monkeypatch) -> None:
    """`attention`'s temperature made without `device=`: SDPA's query division mixes devices."""
    scheme = make_scheme("rope", n_heads=2)
    real = context._temperature
    q, k, v = qkv(scheme, 40)
    tau = torch.tensor([0.5, 2.0])
    with torch.no_grad(), vd.virtual_cuda():
        scheme.to("cuda")
        qv, kv, vv = (vd.virtual(t) for t in (q, k, v))
        attention(qv, kv, vv, scheme=scheme, temperature=tau.to("cuda"))  # the real code: no mix
        monkeypatch.setattr(context, "_temperature", lambda t, q: None if t is None else vd.plain(real(t, q)))
        with pytest.raises(
            vd.DeviceMixError,
            match=r"^device mix in TensorBase.div: CPU tensor\(s\) of shape \(2, 1, 1\) next to cuda:0",
        ):
            attention(qv, kv, vv, scheme=scheme, temperature=tau.to("cuda"))


# ------------------------------------------------------------------------------------------------------------
# device-to-host syncs per layer (issue 25, item 7)
# ------------------------------------------------------------------------------------------------------------

#: device-to-host syncs on CUDA, measured: (per layer forward, extra ones to build a BlockMask). The model's forward
#: knows its positions' layout on the host (`PositionLayout.ranges`), so no layer reads positions; FIRE's
#: `distance_only` compares its learned threshold with the positions (5). A ceiling, so that a change that adds
#: syncs fails here.
SYNC_CEILING = {("rope", "causal"): (0, 0), ("alibi", "window:5"): (0, 6), ("fire", "causal"): (5, 5)}


@pytest.mark.parametrize(("name", "mask"), vd.SYNC_CASES)
def test_syncs_per_layer_forward_stay_under_their_count(name: str, mask: str) -> None:
    per_layer, build, sites, total = vd.layer_syncs(name, mask)
    print(f"\n{name} + {mask}: {per_layer} syncs per layer forward, {build} more to build a BlockMask")  # -s shows it
    ceiling, build_ceiling = SYNC_CEILING[(name, mask)]
    assert per_layer <= ceiling and build <= build_ceiling
    assert sum(sites.values()) == total  # every sync is traced to the lextra line that asked for it
    if name == "rope":  # flash SDPA: no BlockMask
        assert build == 0 and not any("flex.py" in site for site in sites)


#: per one-token decoding step of a 2-layer model on CUDA, measured: causal steps run SDPA, biased or windowed ones
#: the chunked path (no flex kernel per key bucket, no BlockMask per step), whose block planning reads positions
#: (the syncs). A ceiling, so that a change that adds flex calls, BlockMasks or syncs fails here.
DECODING_CEILING = {
    ("rope", "causal"): {"flex calls": 0, "block masks": 0, "syncs": 8},
    ("alibi", "window:5"): {"flex calls": 0, "block masks": 0, "syncs": 46},
    ("fire", "causal"): {"flex calls": 0, "block masks": 0, "syncs": 51},
}


@pytest.mark.parametrize(("name", "mask"), vd.SYNC_CASES)
def test_decoding_steps_stay_under_their_flex_calls_block_masks_and_syncs(name: str, mask: str) -> None:
    counts = vd.decoding_counts(name, mask)
    print(f"\n{name} + {mask} per decoding step: {counts}")  # -s shows it
    assert counts.keys() == DECODING_CEILING[(name, mask)].keys()
    for key, ceiling in DECODING_CEILING[(name, mask)].items():
        assert counts[key] <= ceiling, key
