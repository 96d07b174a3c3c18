"""Training resumes exactly, checkpoints are safe, evaluation protocols score the tokens they claim."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from conftest import json_shape, with_intervals

from lextra.cli import main
from lextra.data.prepare import prepare_data
from lextra.errors import ConfigError
from lextra.evaluate import EvalConfig, evaluate_model
from lextra.evaluate.perplexity import _chunks, _last_token, _sliding
from lextra.model import GPTConfig, load_model, read_model_meta
from lextra.pipelines.compare import compare, parse_variant
from lextra.train import TrainConfig, learning_rate, train
from lextra.train.checkpoints import refuse_changes

LIMIT = 400_000  # characters of the built-in corpus: enough documents for every split


def tiny_config(scheme: str = "alibi", steps: int = 12, **kwargs) -> TrainConfig:
    model = GPTConfig(n_layer=2, n_head=2, d_model=32, train_len=32, layer_plan=scheme)
    return TrainConfig(
        limit_chars=LIMIT,
        model=model,
        batch_size=4,
        steps=steps,
        warmup=3,
        checkpoint_every=5,
        log_every=2,
        eval_sequences=4,
        **kwargs,
    )


class InterruptError(Exception):
    pass


def _stop_at(step: int):
    def hook(done: int) -> None:
        if done == step:
            raise InterruptError

    return hook


@pytest.mark.parametrize("scheme", ["kerple_log", "fire"])
def test_resume_after_an_interruption_ends_with_identical_weights(tmp_path, scheme: str) -> None:
    whole = load_model(train(tiny_config(scheme), tmp_path / "whole", progress=False))
    with pytest.raises(InterruptError):
        train(tiny_config(scheme), tmp_path / "cut", progress=False, on_step=_stop_at(8))
    resumed = load_model(train(tiny_config(scheme), tmp_path / "cut", resume=True, progress=False))
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    steps = [json.loads(line)["step"] for line in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == 12  # no duplicated or lost log lines
    record = json.loads((tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["tokens_per_s"] > 0 and "val_loss" in record


def test_resume_falls_back_past_a_corrupt_checkpoint(tmp_path, capsys) -> None:
    with pytest.raises(InterruptError):
        train(tiny_config(), tmp_path, progress=False, on_step=_stop_at(11))
    newest = tmp_path / "checkpoints" / "step_0000010" / "model.safetensors"
    newest.write_bytes(newest.read_bytes()[:100])
    final = train(tiny_config(), tmp_path, resume=True, progress=False)
    assert "skipping unusable checkpoint" in capsys.readouterr().err
    assert load_model(final) is not None


def test_resume_refuses_an_incompatible_config(tmp_path) -> None:
    with pytest.raises(InterruptError):
        train(tiny_config(), tmp_path, progress=False, on_step=_stop_at(6))
    changed = tiny_config(weight_decay=0.2)
    with pytest.raises(ConfigError, match=r"cannot resume .* incompatible config \(weight_decay: saved 0.1, now 0.2\)"):
        train(changed, tmp_path, resume=True, progress=False)
    with pytest.raises(ConfigError, match="already holds a training run; pass --resume"):
        train(tiny_config(), tmp_path, progress=False)


def test_resume_reads_one_init_from_written_relative_or_absolute(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base").mkdir()
    saved = {"init_from": "base", "lr": 0.1}
    refuse_changes(tmp_path, saved, {"init_from": str(tmp_path / "base"), "lr": 0.1}, frozenset())
    with pytest.raises(ConfigError, match=r"init_from: saved 'base', now 'other'"):
        refuse_changes(tmp_path, saved, {"init_from": "other", "lr": 0.1}, frozenset())


def test_learning_rate_schedule() -> None:
    config = TrainConfig(lr=1.0, warmup=10, steps=110, min_lr_ratio=0.1)
    assert learning_rate(config, 0) == pytest.approx(0.1)
    assert learning_rate(config, 9) == pytest.approx(1.0)
    assert learning_rate(config, 60) == pytest.approx(0.55)
    assert learning_rate(config, 110) == pytest.approx(0.1)


# ------------------------------------------------------------------ protocols
def _scored(pieces, offset_of) -> list[int]:
    """Absolute target indices each protocol scores."""
    out = []
    for window, _target, first in pieces:
        start = offset_of(window)
        out.extend(range(start + first, start + window.numel()))
    return out


@pytest.mark.parametrize(("L", "stride"), [(8, 4), (8, 3), (8, 8), (64, 32), (5, 1)])
def test_chunks_and_sliding_score_every_target_once(L: int, stride: int) -> None:
    span = 64
    doc = torch.arange(span + 10)
    offset = lambda w: int(w[0])  # noqa: E731  (token ids equal their positions)
    assert _scored(_sliding(doc, L, span, stride), offset) == list(range(span))
    assert sorted(_scored(_chunks(doc, L, span), offset)) == list(range(span // L * L))
    for window, target, first in _sliding(doc, L, span, stride):
        assert window.numel() <= L and torch.equal(target, window + 1)
        if int(window[0]) > 0:
            assert window.numel() - first <= stride  # later windows score only their newest tokens


def test_last_token_scores_the_same_targets_with_exactly_l_context() -> None:
    doc = torch.arange(100)
    for L in (4, 16, 90):
        pieces = list(_last_token(doc, L, span=90, targets=10))
        assert [int(t[-1]) for _, t, _ in pieces] == list(range(90, 100))
        assert all(w.numel() == L and first == L - 1 for w, _, first in pieces)


def test_perplexity_equals_a_direct_computation(tmp_path) -> None:
    final = train(tiny_config("rope", steps=3), tmp_path, progress=False)
    model = load_model(final).eval()
    data = prepare_data("python-code", limit_chars=LIMIT)
    result = evaluate_model(
        model, data, EvalConfig(lengths=[32, 64], documents=2, last_token_targets=3, span=64), progress=False
    )
    from lextra.evaluate import evaluation_documents

    docs, stitched, _ = evaluation_documents(data, "test", 64 + 3, 2)
    assert not stitched
    with torch.no_grad():
        direct = torch.stack([model.loss(d[None, :65]) for d in docs]).mean()
        last = [
            model.loss(d[None, t - 32 : t + 1])[None] * 0
            + torch.nn.functional.cross_entropy(model(d[None, t - 32 : t])[0, -1:], d[t : t + 1])
            for d in docs
            for t in range(64, 67)
        ]
    assert result.point("chunks", 64).nll == pytest.approx(float(direct), rel=1e-5)
    assert result.point("chunks", 64).tokens == len(docs) * 64
    assert result.point("last-token", 32).nll == pytest.approx(float(torch.cat(last).mean()), rel=1e-5)
    assert result.point("last-token", 64).tokens == len(docs) * 3


def test_logits_scored_in_slices_give_the_same_perplexity(tmp_path, monkeypatch) -> None:
    final = train(tiny_config("alibi", steps=2), tmp_path, progress=False)
    model = load_model(final).eval()
    data = prepare_data("python-code", limit_chars=LIMIT)
    config = EvalConfig(lengths=[32, 64], protocols=["chunks", "sliding"], documents=2)
    whole = evaluate_model(model, data, config, progress=False)
    seen: list[int] = []
    model.head.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[1]))
    monkeypatch.setattr("lextra.evaluate.perplexity.LOGIT_BUDGET", 7 * model.config.vocab_size)
    sliced = evaluate_model(model, data, config, progress=False)
    assert max(seen) < 32  # no window's logits were built whole
    for protocol in ("chunks", "sliding"):
        for n in (32, 64):
            assert sliced.point(protocol, n).tokens == whole.point(protocol, n).tokens
            assert sliced.point(protocol, n).nll == pytest.approx(whole.point(protocol, n).nll, rel=1e-6)


def test_compare_reuses_finished_cells(tmp_path, capsys) -> None:
    base = tiny_config("nope", steps=3)
    evaluation = EvalConfig(lengths=[32, 64], documents=2, last_token_targets=2)
    first = compare(["alibi", "alibi+bca", "rope"], base, evaluation, tmp_path, progress=False)
    assert set(first.variants) == {"alibi", "alibi+bca", "rope"}
    assert (tmp_path / "perplexity.png").stat().st_size > 10_000
    table = (tmp_path / "table.md").read_text()
    assert "| alibi+bca |" in table and "| 32 | 64 |" in table
    old = Path(__file__).parent / "data" / "results_v0"  # written by the untyped compare for the same variants
    for new_file, old_file in (("summary.json", "compare_summary.json"), ("results/rope.json", "compare_cell.json")):
        new_shape = json_shape(json.loads((tmp_path / new_file).read_text()))
        assert new_shape == with_intervals(json_shape(json.loads((old / old_file).read_text())))
    capsys.readouterr()
    second = compare(["alibi", "alibi+bca", "rope"], base, evaluation, tmp_path, progress=False)
    assert capsys.readouterr().err.count("reusing") == 3
    assert second.variants["rope"].evaluation.results == first.variants["rope"].evaluation.results
    assert second.to_dict() == first.to_dict()
    with pytest.raises(ConfigError, match="holds a model trained with other settings"):
        compare(["alibi"], tiny_config("nope", steps=4), evaluation, tmp_path, progress=False)


def test_variants_parse_and_validate() -> None:
    assert parse_variant("rope+bca").mask == "bca"
    assert parse_variant("alibi+window:64").mask == "window:64"
    assert parse_variant("t5").mask == "causal"
    with pytest.raises(ConfigError, match="unknown position scheme 'ropey'"):
        parse_variant("ropey+bca")
    with pytest.raises(ConfigError, match="unknown mask 'bcx'"):
        parse_variant("rope+bcx")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--out", "{tmp}/r", "--scheme", "nope2"], "unknown position scheme 'nope2'"),
        (["train", "--out", "{tmp}/r", "--corpus", "{tmp}/missing"], "does not exist"),
        (["train", "--out", "{tmp}/r", "--scheme", "rope", "--d-model", "30", "--n-head", "2"], "even head dimension"),
        (["train", "--out", "{tmp}/r", "--scheme-option", "base"], "must look like KEY=VALUE"),
        (["eval", "{tmp}/nothing"], "no checkpoint at"),
        (["compare", "--out", "{tmp}/c", "--lengths", "1,x"], "comma-separated integers"),
    ],
)
def test_user_mistakes_exit_2_with_one_clear_line(tmp_path, capsys, argv: list[str], message: str) -> None:
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and err[0].startswith("lextra ")


def test_eval_applies_a_rope_scaling_only_where_it_should(tmp_path, capsys) -> None:
    train(tiny_config("rope", steps=20), tmp_path / "run", progress=False)  # enough that positions matter
    results = {}
    for spec in (None, "dynamic:2"):
        out = tmp_path / f"eval-{spec}"
        argv = [
            "eval",
            str(tmp_path / "run"),
            "--out",
            str(out),
            "--lengths",
            "32,64",
            "--documents",
            "2",
            "--protocols",
            "chunks",
        ] + (["--rope-scaling", spec] if spec else [])
        assert main(argv) == 0
        results[spec] = json.loads((out / "results.json").read_text())["results"]["chunks"]
    # dynamic NTK leaves lengths <= L_tr untouched and changes longer ones
    assert results[None]["32"]["nll"] == pytest.approx(results["dynamic:2"]["32"]["nll"], abs=1e-6)
    assert results[None]["64"]["nll"] != pytest.approx(results["dynamic:2"]["64"]["nll"], abs=1e-6)
    train(tiny_config("alibi", steps=2), tmp_path / "alibi", progress=False)
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "alibi"), "--rope-scaling", "yarn:2"]) == 2
    assert "applies to rope, xpos and coca models" in capsys.readouterr().err


def test_bf16_training_runs_and_learns(tmp_path) -> None:
    config = tiny_config("xpos", steps=6, precision="bf16")
    final = train(config, tmp_path, progress=False)
    losses = [json.loads(line)["loss"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    assert load_model(final).config.plan()[0].scheme == "xpos"
    with pytest.raises(ConfigError, match="precision must be fp32 or bf16"):
        tiny_config(precision="fp16").validate()


def test_init_from_starts_at_the_saved_weights(tmp_path) -> None:
    first = train(tiny_config("alibi", steps=3), tmp_path / "first", progress=False)
    config = tiny_config("alibi", steps=1, lr=1e-9)
    config.init_from = str(first)
    second = train(config, tmp_path / "second", progress=False)
    a, b = load_model(first).state_dict(), load_model(second).state_dict()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)  # one step at lr 1e-9 leaves them in place
    wrong = tiny_config("rope", steps=1)
    wrong.init_from = str(first)
    with pytest.raises(ConfigError, match="model config differs"):
        train(wrong, tmp_path / "third", progress=False)


def test_eval_and_retrieval_eval_take_an_extension_method(tmp_path, capsys) -> None:
    from lextra.extend import InferenceSetup
    from lextra.methods import apply_rope_scaling

    train(tiny_config("rope", steps=20), tmp_path / "run", progress=False)  # enough that positions matter
    common = ["--lengths", "32,96", "--documents", "2", "--protocols", "chunks"]
    assert main(["eval", str(tmp_path / "run"), "--extend", "rerope", *common]) == 0
    saved = json.loads((tmp_path / "run" / "eval-rerope" / "results.json").read_text())
    assert "| rope+rerope |" in (tmp_path / "run" / "eval-rerope" / "table.md").read_text()
    out = tmp_path / "both"
    assert main(["eval", str(tmp_path / "run"), "--rope-scaling", "yarn:2", "--extend", "dca:local=4", *common,
                 "--out", str(out)]) == 0  # fmt: skip
    both = json.loads((out / "results.json").read_text())
    assert "| rope+yarn:2+dca:local=4 |" in (out / "table.md").read_text()
    model = load_model(tmp_path / "run" / "model")
    data = prepare_data("python-code", limit_chars=LIMIT)
    config = EvalConfig(lengths=[32, 96], protocols=["chunks"], documents=2)
    InferenceSetup(extension="dca:local=4").apply(apply_rope_scaling(model, "yarn:2"))
    direct = evaluate_model(model, data, config, progress=False)
    assert both["results"]["chunks"]["96"]["nll"] == pytest.approx(direct.point("chunks", 96).nll, abs=1e-6)
    assert both["results"]["chunks"]["96"]["nll"] != pytest.approx(saved["results"]["chunks"]["96"]["nll"])
    out = tmp_path / "passkey"
    retrieval = ["--lengths", "120", "--depths", "0.5", "--samples", "1", "--quiet", "--out", str(out)]
    assert main(["retrieval", "eval", str(tmp_path / "run"), "--extend", "sinks", *retrieval]) == 0
    assert json.loads((out / "results.json").read_text())["label"] == "rope+sinks"
    train(tiny_config("alibi", steps=2), tmp_path / "alibi", progress=False)
    capsys.readouterr()
    bad = [
        (["eval", "run", "--extend", "rerope", "--mask", "bca"], "drop --mask bca"),
        (["eval", "alibi", "--extend", "rerope"], "use it with a rope, xpos or coca model"),
        (["eval", "run", "--extend", "self_extend", "--lengths", "1024"], "valid up to 200 tokens, got 1024"),
        (["eval", "run", "--extend", "rerope:window=-1"], "rerope: window"),
        (["eval", "run", "--extend", "streaming"], "unknown extension method 'streaming'"),
        (["retrieval", "eval", "run", "--extend", "lm_infinite:local"], "set options as lm_infinite,key=value"),
    ]
    for argv, message in bad:
        argv = [str(tmp_path / a) if a in ("run", "alibi") else a for a in argv]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_evaluations_with_other_setups_keep_their_own_folders_and_rerun_from_their_file(tmp_path, capsys) -> None:
    train(tiny_config("rope", steps=2), tmp_path / "run", progress=False)
    run, common = tmp_path / "run", ["--lengths", "32,64", "--documents", "2", "--protocols", "chunks", "--quiet"]
    assert main(["eval", str(run), *common]) == 0
    assert main(["eval", str(run), "--rope-scaling", "yarn:2", *common]) == 0
    assert main(["eval", str(run), "--temperature", "log-length", *common]) == 0
    assert json.loads((run / "eval-tau-log-length" / "results.json").read_text())["label"] == "rope+tau-log-length"
    plain, yarn = (json.loads((run / name / "results.json").read_text()) for name in ("eval-causal", "eval-yarn-2"))
    assert plain["setup"] == "causal" and yarn["setup"] == "yarn:2" and yarn["label"] == "rope+yarn:2"
    assert yarn["rerun"]["arguments"]["rope_scaling"] == "yarn:2" and yarn["rerun"]["commit"]
    capsys.readouterr()
    assert main(["eval", str(run), *common]) == 2  # the plain folder exists: nothing overwritten
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pass --overwrite" in err[0]
    again = tmp_path / "again"
    assert main(["eval", "--from", str(run / "eval-yarn-2" / "results.json"), "--out", str(again), "--quiet"]) == 0
    rerun = json.loads((again / "results.json").read_text())
    assert rerun["results"] == yarn["results"] and rerun["label"] == yarn["label"]  # the same numbers
    assert rerun["sources"] == yarn["sources"] and rerun["span"] == yarn["span"] == 16 * 32  # the same tokens
    older = tmp_path / "older.json"  # written before the span was recorded: it scored max(lengths) per document
    older.write_text(json.dumps({k: v for k, v in yarn.items() if k != "span"}))
    assert main(["eval", "--from", str(older), "--out", str(tmp_path / "older"), "--quiet"]) == 0
    assert json.loads((tmp_path / "older" / "results.json").read_text())["span"] == 64
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**plain, "rerun": {"lextra": "0.0.1", "arguments": {}}}))
    assert main(["eval", "--from", str(old)]) == 2
    assert "lacks commit" in capsys.readouterr().err


def test_a_quiet_evaluation_that_will_take_minutes_says_so_once(monkeypatch, capsys) -> None:
    import lextra.evaluate.perplexity as perplexity
    from lextra.model import GPT

    monkeypatch.setattr(perplexity, "ESTIMATE_AFTER_S", -1.0)  # every evaluation counts as long
    monkeypatch.setattr(perplexity, "ESTIMATE_WARMUP_S", 0.0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, d_model=16, train_len=16, layer_plan="rope"))
    data = prepare_data("python-code", "bytes", LIMIT)
    config = EvalConfig(lengths=[16, 32], protocols=["chunks"], documents=2, max_batch_tokens=16)
    evaluate_model(model, data, config, progress=False, label="rope")
    lines = [line for line in capsys.readouterr().err.splitlines() if "tokens to score" in line]
    assert len(lines) == 1 and lines[0].startswith("lextra eval: rope: ") and "min more at the" in lines[0], lines
    evaluate_model(model, data, config, progress=True, label="rope")  # a progress bar shows its own ETA instead
    assert "tokens to score" not in capsys.readouterr().err


def test_compare_over_seeds_pools_each_variant_into_a_mean_with_its_t_interval(tmp_path, capsys) -> None:
    base = tiny_config("nope", steps=2)
    evaluation = EvalConfig(lengths=[32, 64], protocols=["chunks"], documents=2, span=64)
    summary = compare(["rope", "rope+bca"], base, evaluation, tmp_path, seeds=[0, 1], progress=False)
    assert set(summary.variants) == {"rope-seed0", "rope-seed1", "rope+bca-seed0", "rope+bca-seed1"}
    assert {summary.variants[f"rope-seed{k}"].seed for k in (0, 1)} == {0, 1}
    trained = [load_model(tmp_path / "models" / "rope" / f"seed{k}" / "model") for k in (0, 1)]
    assert not torch.equal(trained[0].blocks[0].attn.q_proj.weight, trained[1].blocks[0].attn.q_proj.weight)
    table = (tmp_path / "table.md").read_text()
    ppl = [summary.variants[f"rope-seed{k}"].evaluation.ppl("chunks", 64) for k in (0, 1)]
    mean, half = (ppl[0] + ppl[1]) / 2, 12.706 * abs(ppl[0] - ppl[1]) / 2  # t(0.975, 1) x sd / sqrt(2)
    assert "| rope | " in table and f"| {mean:.2f} ± {half:.2f} |" in table
    assert "95% t-interval (2 seeds)" in table
    capsys.readouterr()
    compare(["rope", "rope+bca"], base, evaluation, tmp_path, seeds=[0, 1], progress=False)
    assert capsys.readouterr().err.count("reusing") == 4


def test_report_sets_evaluated_models_side_by_side_with_a_summary_column(tmp_path, capsys) -> None:
    common = ["--lengths", "32,64,128", "--span", "128", "--documents", "2", "--protocols", "chunks", "--quiet"]
    for scheme in ("rope", "alibi"):
        train(tiny_config(scheme, steps=2), tmp_path / scheme, progress=False)
        assert main(["eval", str(tmp_path / scheme), *common]) == 0
    folders = [str(tmp_path / scheme / "eval-causal") for scheme in ("rope", "alibi")]
    assert main(["report", *folders, "--out", str(tmp_path / "report")]) == 0
    table = (tmp_path / "report" / "table.md").read_text()
    ppl = {
        s: json.loads((tmp_path / s / "eval-causal" / "results.json").read_text())["results"]["chunks"]
        for s in ("rope", "alibi")
    }
    for scheme in ("rope", "alibi"):
        ratio = ppl[scheme]["128"]["ppl"] / ppl[scheme]["32"]["ppl"]
        half = (ppl[scheme]["32"]["high"] - ppl[scheme]["32"]["low"]) / 2
        assert f"| {scheme} | {ppl[scheme]['32']['ppl']:.2f} ± {half:.2f} |" in table and f"| {ratio:.3f} ± " in table
    assert "4x / 1x" in table and "bootstrap interval over documents" in table and "below next" in table
    rows = [
        line.split("|")[1].strip()
        for line in table.splitlines()
        if line.startswith("| rope") or line.startswith("| alibi")
    ]
    ratios = {s: ppl[s]["128"]["ppl"] / ppl[s]["32"]["ppl"] for s in ("rope", "alibi")}
    assert rows == sorted(ratios, key=ratios.__getitem__)  # ranked by the summary column
    capsys.readouterr()
    assert main(["report", str(tmp_path / "rope"), "--out", str(tmp_path / "x")]) == 2
    assert "holds no lextra eval results.json" in capsys.readouterr().err


def test_init_optimizer_continues_the_moments_the_source_run_ended_with(tmp_path) -> None:
    """`init_optimizer` loads the final checkpoint's AdamW state (moments and step counts) of the run that saved
    `init_from`; without it the optimizer starts fresh; a model folder without its run's checkpoints is refused."""
    from safetensors.torch import load_file

    from lextra.train.checkpoints import continue_optimizer
    from lextra.train.gpt import make_optimizer

    first = train(tiny_config("alibi", steps=4), tmp_path / "first", progress=False)
    saved = load_file(str(tmp_path / "first" / "checkpoints" / "step_0000004" / "optimizer.safetensors"))
    model = load_model(first)
    optimizer = make_optimizer(model, tiny_config("alibi"))
    continue_optimizer(optimizer, first)
    state = optimizer.state_dict()["state"]
    assert saved and all(torch.equal(state[int(k.split(".")[0])][k.split(".")[1]], v) for k, v in saved.items())
    config = tiny_config("alibi", steps=2, init_from=str(first), init_optimizer=True).validate()
    second = train(config, tmp_path / "second", progress=False)
    ended = load_file(str(tmp_path / "second" / "checkpoints" / "step_0000002" / "optimizer.safetensors"))
    assert {float(v) for k, v in ended.items() if k.endswith(".step")} == {6.0}  # 4 steps, then 2 more
    fresh = train(tiny_config("alibi", steps=2, init_from=str(first)), tmp_path / "fresh", progress=False)
    restarted = load_file(str(tmp_path / "fresh" / "checkpoints" / "step_0000002" / "optimizer.safetensors"))
    assert {float(v) for k, v in restarted.items() if k.endswith(".step")} == {2.0}
    continued, restarted_weights = load_model(second).state_dict(), load_model(fresh).state_dict()
    assert not torch.equal(continued["head.weight"], restarted_weights["head.weight"])
    assert "init_optimizer" not in read_model_meta(fresh)["train"]  # left out of saved configs unless set
    assert read_model_meta(second)["train"]["init_optimizer"] is True
    with pytest.raises(ConfigError, match="init_optimizer continues the optimizer of the run that saved init_from"):
        tiny_config("alibi", init_optimizer=True).validate()
    shutil.copytree(first, tmp_path / "alone" / "model")
    alone = tiny_config("alibi", steps=1, init_from=str(tmp_path / "alone" / "model"), init_optimizer=True)
    with pytest.raises(ConfigError, match="holds no checkpoint to take the optimizer from"):
        train(alone, tmp_path / "third", progress=False)
