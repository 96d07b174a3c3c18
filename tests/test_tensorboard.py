"""TensorBoard event files hold exactly what metrics.jsonl and the evaluations hold; without the package, one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from lextra.cli import main
from lextra.errors import ConfigError
from lextra.evaluate import EvalConfig
from lextra.model import GPTConfig
from lextra.pipelines.compare import compare
from lextra.pipelines.study.config import parse_study
from lextra.pipelines.study.run import train_config
from lextra.tensorboard import Board, tag
from lextra.train import TrainConfig, train

LIMIT = 400_000  # characters of the built-in corpus: enough documents for every split
TRAIN_TAGS = {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "validation/loss"}


def tiny_config(scheme: str = "alibi", steps: int = 6, **kwargs) -> TrainConfig:
    model = GPTConfig(n_layer=1, n_head=2, d_model=32, train_len=32, layer_plan=scheme)
    return TrainConfig(
        limit_chars=LIMIT,
        model=model,
        batch_size=4,
        steps=steps,
        warmup=2,
        checkpoint_every=5,
        log_every=2,
        eval_every=3,
        eval_sequences=2,
        **kwargs,
    )


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] as TensorBoard shows them (what a later writer purged left out)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    return {name: [(e.step, e.value) for e in events.Scalars(name)] for name in events.Tags()["scalars"]}


def f32(value: float) -> float:
    """A scalar as an event file stores it (float32)."""
    return float(np.float32(value))


def metrics_as_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    expected: dict[str, list[tuple[int, float]]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for field, value in record.items():
            if field != "step":
                expected.setdefault(tag(field), []).append((record["step"], f32(value)))
    return expected


def test_training_curves_equal_metrics_jsonl(tmp_path) -> None:
    train(tiny_config(tensorboard=True), tmp_path, progress=False)
    written = scalars(tmp_path / "tb")
    assert set(written) == TRAIN_TAGS
    assert [step for step, _ in written["train/loss"]] == [2, 4, 6]
    assert [step for step, _ in written["validation/loss"]] == [3, 6]
    assert written == metrics_as_scalars(tmp_path)


def test_a_resumed_run_shows_each_step_once(tmp_path) -> None:
    class InterruptError(Exception):
        pass

    def stop_at_8(done: int) -> None:
        if done == 8:
            raise InterruptError

    with pytest.raises(InterruptError):  # logged 2..8, checkpointed at 5
        train(tiny_config(steps=12, tensorboard=True), tmp_path, progress=False, on_step=stop_at_8)
    train(tiny_config(steps=12, tensorboard=True), tmp_path, resume=True, progress=False)
    written = scalars(tmp_path / "tb")
    assert [step for step, _ in written["train/loss"]] == [2, 4, 6, 8, 10, 12]
    assert written == metrics_as_scalars(tmp_path)


def test_log_dir_turns_tensorboard_on_and_places_the_files(tmp_path) -> None:
    config = tiny_config(steps=2, log_dir=str(tmp_path / "board"))
    assert config.validate().tensorboard is True
    train(config, tmp_path / "run", progress=False)
    assert not (tmp_path / "run" / "tb").exists()
    assert scalars(tmp_path / "board") == metrics_as_scalars(tmp_path / "run")


def test_logging_settings_stay_out_of_the_saved_config() -> None:
    """Saved configs, study cells and reused models compare equal with TensorBoard on or off."""
    plain, logged = tiny_config(), tiny_config(tensorboard=True, log_dir="somewhere")
    assert logged.to_dict() == plain.to_dict()
    assert "tensorboard" not in plain.to_dict() and "log_dir" not in plain.to_dict()
    data = {**plain.to_dict(), "tensorboard": True, "log_dir": "tb-here"}
    restored = TrainConfig.from_dict(data)
    assert (restored.tensorboard, restored.log_dir) == (True, "tb-here")
    assert TrainConfig.from_dict(plain.to_dict()).tensorboard is False  # saved before the fields existed


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tensorboard": "yes"}, "training config: tensorboard must be true or false, got 'yes'"),
        ({"log_dir": ""}, "training config: log_dir must be a folder path, got ''"),
        ({"log_dir": 3}, "training config: log_dir must be a folder path, got 3"),
    ],
)
def test_bad_logging_settings_are_refused(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        tiny_config(**changes).validate()
    assert str(info.value) == message


def test_without_the_package_one_line_names_the_extra(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # `import tensorboard` now fails
    with pytest.raises(ConfigError) as info:
        tiny_config(tensorboard=True).validate()
    message = str(info.value)
    assert "\n" not in message
    assert "needs the tensorboard package" in message and "pip install 'lextra[tensorboard]'" in message
    tiny_config().validate()  # off: nothing is imported
    argv = ["train", "--out", str(tmp_path / "r"), "--steps", "1", "--limit-chars", "1000", "--log-dir", "tb"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lextra train: error: ") and "lextra[tensorboard]" in err[0]
    assert not (tmp_path / "r").exists()  # refused before any work
    assert main(["eval", str(tmp_path / "nothing"), "--log-dir", "tb"]) == 2  # before it looks for the model
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lextra[tensorboard]" in err[0]


def test_study_train_section_turns_it_on_per_model_and_seed(tmp_path) -> None:
    study = parse_study(
        {
            "seeds": [0, 1],
            "train": {"tensorboard": True, "log_dir": str(tmp_path / "tb")},
            "models": [{"label": "rope", "scheme": "rope"}, {"label": "alibi", "scheme": "alibi"}],
        }
    )
    assert study.train.tensorboard is True
    config = train_config(study, study.model("alibi"), 1)
    assert config.log_dir == str(tmp_path / "tb" / "alibi" / "seed1") and config.tensorboard is True
    assert (
        parse_study({"train": {"tensorboard": True}, "models": [{"label": "r", "scheme": "rope"}]}).train.log_dir
        is None
    )


def test_compare_writes_each_variants_perplexity_over_lengths(tmp_path, capsys) -> None:
    base = tiny_config("nope", steps=2, tensorboard=True)
    evaluation = EvalConfig(lengths=[32, 64], documents=2, last_token_targets=2)
    result = compare(["alibi", "alibi+bca"], base, evaluation, tmp_path, progress=False)
    written = scalars(tmp_path / "models" / "alibi" / "tb")
    protocols = result.variants["alibi"].evaluation.protocols
    perplexity_tags = {f"perplexity_{mask}/{p}" for mask in ("causal", "bca") for p in protocols}
    assert set(written) == TRAIN_TAGS | perplexity_tags
    for label, mask in (("alibi", "causal"), ("alibi+bca", "bca")):
        for protocol in protocols:
            curve = result.variants[label].evaluation.curve(protocol)
            assert written[f"perplexity_{mask}/{protocol}"] == [(n, f32(curve[n])) for n in (32, 64)]
    capsys.readouterr()
    plain = tiny_config("nope", steps=2)  # the same run without TensorBoard reuses every cell
    again = compare(["alibi", "alibi+bca"], plain, evaluation, tmp_path, progress=False)
    assert capsys.readouterr().err.count("reusing") == 2
    assert again.to_dict() == result.to_dict()


def test_eval_log_dir_writes_the_curves_of_results_json(tmp_path, capsys) -> None:
    final = train(tiny_config("rope", steps=2), tmp_path / "run", progress=False)
    argv = ["eval", str(final), "--lengths", "32,64", "--documents", "2", "--mask", "bca"]
    assert main([*argv, "--log-dir", str(tmp_path / "tb")]) == 0
    capsys.readouterr()
    results = json.loads((tmp_path / "run" / "eval-bca" / "results.json").read_text())
    written = scalars(tmp_path / "tb")
    assert set(written) == {f"perplexity_bca/{p}" for p in results["results"]}
    for protocol, points in results["results"].items():
        assert written[f"perplexity_bca/{protocol}"] == [(n, f32(points[str(n)]["ppl"])) for n in (32, 64)]


def test_board_records_every_field_but_step(tmp_path) -> None:
    board = Board(tmp_path)
    board.record({"step": 3, "loss": 2.5, "lr": 1e-3, "custom": 7})
    board.close()
    assert scalars(tmp_path) == {"train/loss": [(3, 2.5)], "train/lr": [(3, f32(1e-3))], "train/custom": [(3, 7.0)]}
