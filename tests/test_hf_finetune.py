"""`lextra hf finetune`: LoRA fine-tuning of a tiny random Llama at a new length, saved as a plain Hugging Face
folder, resumed bit-identically, and its refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file

from lextra.cli import main
from lextra.errors import ConfigError
from lextra.hf.finetune import FinetuneConfig, finetune, parse_lora, parse_trainable

VOCAB = 260


def tiny_llama(seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.AutoConfig.for_model(
        "llama",
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        rope_theta=10000.0,
    )
    return transformers.AutoModelForCausalLM.from_config(config).eval()


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("base") / "llama"
    tiny_llama().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("corpus")
    text = "the quick brown fox jumps over the lazy dog; " * 40
    for i in range(24):
        (folder / f"doc{i}.txt").write_text(f"{i} " + text[i:] + text[: i * 3])
    return str(folder)


def config(base: Path, corpus: str, **changes) -> FinetuneConfig:
    settings = dict(model=str(base), train_len=64, corpus=corpus, tokenizer="bytes", rope_scaling="yarn:2",
                    trainable="embed,norm", steps=4, warmup=1, lr=1e-2, checkpoint_every=2, log_every=1)  # fmt: skip
    return FinetuneConfig(**(settings | changes))


def test_the_saved_folder_is_plain_hugging_face_with_the_trained_rope_and_length(base, corpus, tmp_path) -> None:
    final, merged = finetune(config(base, corpus), tmp_path / "run", progress=False)
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(final)).eval()
    assert loaded.config.max_position_embeddings == 64
    rope = loaded.config.rope_parameters
    assert rope["rope_type"] == "yarn" and rope["factor"] == 2.0 and rope["original_max_position_embeddings"] == 32
    assert not any("lora" in name for name in loaded.state_dict())  # LoRA merged into the weights
    ids = torch.randint(0, VOCAB, (2, 64), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, merged(ids).logits, atol=1e-5)
    before = tiny_llama().state_dict()
    after = loaded.state_dict()
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.embed_tokens.weight", "model.norm.weight"):
        assert not torch.equal(before[name], after[name]), name  # LoRA, embeddings and norms trained
    assert torch.equal(before["model.layers.0.mlp.up_proj.weight"], after["model.layers.0.mlp.up_proj.weight"])
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert all(set(r) == {"step", "loss", "lr", "grad_norm", "tokens_per_s"} for r in records)
    assert (tmp_path / "run" / "checkpoints" / "LATEST").read_text().strip() == "step_0000004"
    last = load_file(str(tmp_path / "run" / "checkpoints" / "step_0000004" / "trainable.safetensors"))
    assert any("lora_A" in name for name in last) and any("embed_tokens" in name for name in last)


def test_an_interrupted_run_resumes_bit_identically(base, corpus, tmp_path) -> None:
    _, whole = finetune(config(base, corpus), tmp_path / "whole", progress=False)

    def stop(done: int) -> None:
        if done == 3:  # after the checkpoint of step 2, before that of step 4
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        finetune(config(base, corpus), tmp_path / "cut", progress=False, on_step=stop)
    assert (tmp_path / "cut" / "checkpoints" / "LATEST").read_text().strip() == "step_0000002"
    _, resumed = finetune(config(base, corpus), tmp_path / "cut", resume=True, progress=False)
    want, got = whole.state_dict(), resumed.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)

    def losses(run: str) -> list[float]:
        return [json.loads(line)["loss"] for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]

    assert losses("cut") == losses("whole") and len(losses("cut")) == 4


def test_lora_and_trainable_specs() -> None:
    lora = parse_lora("r=4,alpha=8,targets=q_proj+v_proj")
    assert lora is not None and (lora.r, lora.alpha, lora.targets) == (4, 8.0, ["q_proj", "v_proj"])
    assert parse_lora("none") is None and parse_trainable("embed, norm") == ["embed", "norm"]
    with pytest.raises(ConfigError, match="unknown option 'rank'"):
        parse_lora("rank=8")
    with pytest.raises(ConfigError, match="'r=x' is not KEY=NUMBER"):
        parse_lora("r=x")
    with pytest.raises(ConfigError, match="unknown part 'heads'; use embed, norm"):
        parse_trainable("heads")


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_bad_input_is_one_line_and_exit_2(base, corpus, tmp_path, capsys) -> None:
    common = ["hf", "finetune", str(base), "--tokenizer", "bytes", "--corpus", corpus, "--steps", "2", "--quiet"]
    assert main([*common, "--out", str(tmp_path / "a"), "--train-len", "64", "--lora", "r=8,targets=w_q+q_proj"]) == 2
    line = one_line_error(capsys)
    assert "--lora: llama has no linear modules named w_q; give targets=A+B from: " in line and "q_proj" in line
    assert main([*common, "--out", str(tmp_path / "b"), "--train-len", "16", "--rope-scaling", "yarn:2"]) == 2
    assert "--train-len 16 is below the model's window (32 tokens) that --rope-scaling stretches" in one_line_error(
        capsys
    )
    assert main([*common, "--out", str(tmp_path / "c")]) == 2
    assert "needs --train-len L" in one_line_error(capsys)
    assert main([*common, "--out", str(tmp_path / "d"), "--train-len", "32", "--checkpoint-every", "1"]) == 0
    capsys.readouterr()
    assert main([*common, "--out", str(tmp_path / "d"), "--train-len", "32"]) == 2
    assert "already holds a fine-tuning run; pass --resume" in one_line_error(capsys)
    assert main([*common, "--out", str(tmp_path / "d"), "--train-len", "48", "--resume"]) == 2
    assert "cannot resume" in one_line_error(capsys)


def test_prepared_shards_train_exactly_as_the_corpus_does(base, corpus, tmp_path, capsys) -> None:
    shards = tmp_path / "shards"
    assert main(["data", "prepare", corpus, "--tokenizer", "bytes", "--out", str(shards), "--quiet"]) == 0
    _, from_corpus = finetune(config(base, corpus, steps=2), tmp_path / "corpus-run", progress=False)
    _, from_shards = finetune(config(base, corpus, steps=2, data=str(shards)), tmp_path / "data-run", progress=False)
    want, got = from_corpus.state_dict(), from_shards.state_dict()
    assert all(torch.equal(want[k], got[k]) for k in want)
    capsys.readouterr()
    common = ["hf", "finetune", str(base), "--data", str(shards), "--train-len", "32", "--quiet"]
    assert main([*common, "--out", str(tmp_path / "x")]) == 2  # the model's own tokenizer was asked for
    line = one_line_error(capsys)
    assert f"was tokenized with bytes, not the model's own tokenizer ({base.resolve()})" in line


def test_s2_attn_trains_in_groups_and_saves_a_full_attention_model(base, corpus, tmp_path, capsys) -> None:
    _, full = finetune(config(base, corpus, steps=2), tmp_path / "full", progress=False)
    final, s2 = finetune(config(base, corpus, steps=2, s2_group=16), tmp_path / "s2", progress=False)
    assert s2.config._attn_implementation == "sdpa"  # evaluation and the saved model: full causal attention
    assert not torch.equal(full.state_dict()["model.embed_tokens.weight"], s2.state_dict()["model.embed_tokens.weight"])
    loaded = transformers.AutoModelForCausalLM.from_pretrained(str(final)).eval()
    ids = torch.randint(0, VOCAB, (1, 64), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, s2(ids).logits, atol=1e-5)
    common = ["hf", "finetune", str(base), "--tokenizer", "bytes", "--corpus", corpus, "--steps", "1", "--quiet"]
    assert main([*common, "--out", str(tmp_path / "x"), "--train-len", "64", "--s2-attn", "24"]) == 2
    assert "--s2-attn 24 does not divide the 64-token window into two or more groups" in one_line_error(capsys)
    assert main([*common, "--out", str(tmp_path / "y"), "--train-len", "64", "--s2-attn"]) == 0  # G = 64 / 4
    saved = json.loads((tmp_path / "y" / "config.json").read_text())["finetune"]
    assert saved["s2_group"] == 16


def test_the_models_own_tokenizer_reads_the_corpus_and_is_saved_beside_the_weights(base, corpus, tmp_path) -> None:
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers

    folder = tmp_path / "llama"
    shutil.copytree(base, folder)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Backend(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(["</s>"])
    transformers.PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>").save_pretrained(folder)
    final, _ = finetune(config(folder, corpus, tokenizer=None, steps=1), tmp_path / "run", progress=False)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["tokenizer"]
    assert saved == {"kind": "hf", "path": str(folder.resolve())}
    tok = transformers.AutoTokenizer.from_pretrained(str(final))
    assert tok("fox", add_special_tokens=False)["input_ids"] == [alphabet.index(c) for c in "fox"]
    assert tok.eos_token == "</s>"


@pytest.mark.slow
def test_torchrun_with_two_processes_trains_what_one_process_does(base, corpus, tmp_path) -> None:
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file as read

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = ["hf", "finetune", str(base), "--tokenizer", "bytes", "--corpus", corpus, "--train-len", "32",
            "--steps", "2", "--batch-size", "2", "--warmup", "1", "--lr", "1e-2", "--device", "cpu",
            "--quiet"]  # fmt: skip
    one = [sys.executable, "-m", "lextra", *args, "--out", str(tmp_path / "one")]
    two = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "lextra",
           *args, "--out", str(tmp_path / "two")]  # fmt: skip
    for command in (one, two):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
    a = read(str(tmp_path / "one" / "model" / "model.safetensors"))
    b = read(str(tmp_path / "two" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    name = "model.layers.1.self_attn.v_proj.weight"
    assert not torch.equal(a[name], tiny_llama().state_dict()[name])  # LoRA trained and merged
