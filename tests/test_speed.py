"""The main job's speed levers keep results exact: fused AdamW, the compiled step (and its fallback), the last block
computing only scored rows, windows shared across protocols, and `compare`'s phase clock."""

from __future__ import annotations

import pytest
import torch

from lextra.compile import StepLoss
from lextra.data.prepare import prepare_data
from lextra.errors import ConfigError
from lextra.evaluate import EvalConfig, evaluate_model
from lextra.extend import EXTENSIONS, InferenceSetup
from lextra.model import GPT, GPTConfig
from lextra.pipelines.compare import PhaseClock
from lextra.train import TrainConfig, make_optimizer, train

LIMIT = 400_000


def tiny(scheme: str = "rope", **kwargs) -> GPTConfig:
    return GPTConfig(n_layer=2, n_head=2, d_model=32, train_len=32, layer_plan=scheme, **kwargs)


@pytest.mark.parametrize("scheme", ["rope", "alibi", "t5", "xpos", "fire", "coca", "sinusoidal", "kerple_log"])
def test_last_rows_equal_the_full_forward_sliced(scheme: str) -> None:
    torch.manual_seed(0)
    model = GPT(tiny(scheme)).eval()
    tokens = torch.randint(0, 256, (3, 40))
    with torch.no_grad():
        full = model.features(tokens)
        for last in (1, 7, 40):
            rows = model.features(tokens, last=last)
            assert rows.shape == (3, last, 32)
            torch.testing.assert_close(rows, full[:, -last:], rtol=1e-6, atol=1e-6)
        with pytest.raises(ValueError, match="last=41"):
            model.features(tokens, last=41)


@pytest.mark.parametrize(
    "plan",
    ["rope+window:8+qknorm+gate;nope+sinks+softcap:30+temp_tuning,gamma=4", "rope+chunk:16+gate:headwise;alibi"],
)
def test_last_rows_of_a_layer_plan_equal_the_full_forward_sliced(plan: str) -> None:
    """A plan's last layer computes its last rows alone through its own pieces (the gate reads those rows' input)."""
    torch.manual_seed(0)
    model = GPT(tiny(plan)).eval()
    tokens = torch.randint(0, 256, (2, 40))
    with torch.no_grad():
        full = model.features(tokens)
        for last in (1, 9):
            torch.testing.assert_close(model.features(tokens, last=last), full[:, -last:], rtol=1e-6, atol=1e-6)


def test_last_rows_under_a_mask_and_temperatures() -> None:
    torch.manual_seed(1)
    model = GPT(tiny("rope+logn:qwen", temperatures=[[0.7, 1.3], [1.1, 0.9]])).eval()
    tokens = torch.randint(0, 256, (2, 80))
    with torch.no_grad():
        full = model.features(tokens, mask="bca:16")
        torch.testing.assert_close(model.features(tokens, mask="bca:16", last=5), full[:, -5:], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("method", EXTENSIONS.names())
def test_last_rows_under_every_extension_method(method: str) -> None:
    torch.manual_seed(0)
    model = GPT(tiny()).eval()
    InferenceSetup(extension=method).apply(model)
    tokens = torch.randint(0, 256, (2, 100))
    with torch.no_grad():
        full = model.features(tokens)
        for last in (1, 37):
            torch.testing.assert_close(model.features(tokens, last=last), full[:, -last:], rtol=1e-5, atol=2e-6)


@pytest.fixture(scope="module")
def data():
    return prepare_data("python-code", limit_chars=LIMIT)


@pytest.mark.parametrize("scheme", ["rope", "alibi"])
def test_protocols_evaluated_together_equal_each_alone(data, scheme: str) -> None:
    """Windows shared across protocols (every chunk is a sliding window) run once, with the same sums."""
    torch.manual_seed(0)
    model = GPT(tiny(scheme))
    settings = {"lengths": [16, 32, 64], "documents": 3, "last_token_targets": 4, "max_batch_tokens": 100}
    together = evaluate_model(model, data, EvalConfig(**settings), progress=False)
    for protocol in ("chunks", "sliding", "last-token"):
        alone = evaluate_model(model, data, EvalConfig(protocols=[protocol], **settings), progress=False)
        for n in (16, 32, 64):
            assert together.point(protocol, n).tokens == alone.point(protocol, n).tokens
            assert together.point(protocol, n).nll == pytest.approx(alone.point(protocol, n).nll, rel=1e-6)
    assert list(together.results) == ["chunks", "sliding", "last-token"]


def test_scored_rows_only_reach_the_head(data) -> None:
    """last-token runs the head (and the final block) on one row per window."""
    torch.manual_seed(0)
    model = GPT(tiny())
    seen: list[int] = []
    model.blocks[-1].mlp.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[1]))
    evaluate_model(
        model,
        data,
        EvalConfig(lengths=[32], protocols=["last-token"], documents=2, last_token_targets=3),
        progress=False,
    )
    assert seen == [1]


def test_make_optimizer_is_fused_and_matches_the_tensor_loop() -> None:
    config = TrainConfig(model=tiny("t5"))

    def run(fused: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = GPT(config.model)
        optimizer = make_optimizer(model, config)
        assert all(group["fused"] for group in optimizer.param_groups)
        if not fused:
            optimizer = torch.optim.AdamW(optimizer.param_groups, lr=config.lr, betas=(config.beta1, config.beta2))
        tokens = torch.randint(0, 256, (4, 33))
        for _ in range(3):
            optimizer.zero_grad()
            model.loss(tokens).backward()
            optimizer.step()
        return [p.detach().clone() for p in model.parameters()]

    for a, b in zip(run(True), run(False), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_compile_is_a_runtime_choice_left_out_of_saved_configs() -> None:
    config = TrainConfig(compile=True).validate()
    assert "compile" not in config.to_dict()
    with pytest.raises(ConfigError, match="compile"):
        TrainConfig(compile="yes").validate()  # type: ignore[arg-type]


def test_a_compile_failure_trains_eagerly_with_its_reason(tmp_path, monkeypatch, capsys) -> None:
    def broken(fn, **kwargs):
        def call(*args):
            raise RuntimeError("InductorError: no working C++ compiler\nsecond line")

        return call

    monkeypatch.setattr(torch, "compile", broken)
    model = tiny()
    config = {"limit_chars": LIMIT, "batch_size": 4, "steps": 3, "warmup": 1, "checkpoint_every": 0}
    eager = train(TrainConfig(model=model, **config), tmp_path / "eager", progress=False)
    failed = train(TrainConfig(model=tiny(), compile=True, **config), tmp_path / "failed", progress=False)
    err = capsys.readouterr().err
    assert (
        "torch.compile failed for rope (RuntimeError: InductorError: no working C++ compiler); training eagerly" in err
    )
    assert err.count("torch.compile failed") == 1
    assert (eager / "model.safetensors").read_bytes() == (failed / "model.safetensors").read_bytes()


@pytest.mark.slow
def test_compiled_step_equals_the_eager_step() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, d_model=16, train_len=16))
    batch = torch.randint(0, 256, (2, 17))
    eager = StepLoss(model, "fp32", torch.device("cpu"))
    loss = eager(batch)
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    compiled = StepLoss(model, "fp32", torch.device("cpu"), compile=True, label="rope")
    compiled_loss = compiled(batch)
    assert compiled.fallback is None and compiled.graphs >= 1 and compiled.compile_s > 0
    torch.testing.assert_close(compiled_loss, loss, rtol=1e-5, atol=1e-6)
    for p, g in zip(model.parameters(), grads, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6)
    graphs = compiled.graphs
    model.zero_grad(set_to_none=True)
    compiled(batch)  # same shapes: nothing recompiles
    assert compiled.graphs == graphs
    assert compiled.summary().startswith(f"compiled {graphs} graph(s) in ")


def test_phase_clock_sums_each_phase() -> None:
    clock = PhaseClock()
    for _ in range(2):
        with clock.phase("training"):
            pass
    with pytest.raises(KeyError), clock.phase("evaluation"):
        raise KeyError("a failing phase is still timed")
    assert clock.counts == {"training": 2, "evaluation": 1}
    report = clock.report()
    assert report.startswith("wall time ") and "training 0 s (2 runs), evaluation 0 s (1 runs)" in report
