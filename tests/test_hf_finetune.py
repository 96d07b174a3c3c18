"""`lextra hf finetune`: LoRA fine-tuning of a tiny random Llama at a new length, saved as a plain Hugging Face
folder, resumed bit-identically, and its refusals."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
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
    with pytest.raises(ConfigError, match="'lora' has no option 'rank'; its options: r, alpha, targets"):
        parse_lora("rank=8")
    with pytest.raises(ConfigError, match="r takes an integer"):
        parse_lora("r=x")
    assert parse_lora("lora:16,targets=q_proj") == parse_lora("r=16,targets=q_proj")  # the spec grammar
    with pytest.raises(ConfigError, match="unknown part 'heads'; use embed, head, norm"):
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
def run_lextra(args: list[str], processes: int = 1) -> None:
    """`lextra ARGS` in a subprocess, under torchrun with `processes` > 1 (gloo on the CPU)."""
    launcher = [sys.executable, "-m", "lextra"]
    if processes > 1:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
                    "-m", "lextra"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*launcher, *args], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


def saved_weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "model" / "model.safetensors"))


def close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


@pytest.fixture(scope="module")
def one_process_run(base, corpus, tmp_path_factory) -> tuple[list[str], Path]:
    """The common arguments of the torchrun tests and the one-process run they must reproduce."""
    args = ["hf", "finetune", str(base), "--tokenizer", "bytes", "--corpus", corpus, "--train-len", "32",
            "--steps", "2", "--batch-size", "2", "--warmup", "1", "--lr", "1e-2", "--device", "cpu",
            "--trainable", "norm", "--checkpoint-every", "1", "--quiet"]  # fmt: skip
    out = tmp_path_factory.mktemp("one") / "run"
    run_lextra([*args, "--out", str(out)])
    return args, out


SHARD_SPY = """
import json, os, sys
import lextra.train.loop as ft
from lextra.cli import main
from lextra.train.sharding import is_sharded

def spy(model, units, device, world_size):
    out = ft_shard(model, units, device, world_size)
    params = list(model.parameters())
    record = {"sharded": all(is_sharded(p) for p in params), "total": sum(p.numel() for p in params),
              "local": sum(p.to_local().numel() for p in params)}
    with open(sys.argv[1] + "." + os.environ["RANK"], "w") as handle:
        json.dump(record, handle)
    return out

ft_shard, ft.shard_model = ft.shard_model, spy
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture(scope="module")
def fsdp_run(one_process_run, tmp_path_factory) -> tuple[Path, list[dict]]:
    """The one-process run's arguments under torchrun with two processes and --fsdp, through a script that records
    what each process holds once the model is sharded: the run's folder and each process's record. Done once for
    the tests that compare it with one process and resume it in one."""
    args, _ = one_process_run
    root = tmp_path_factory.mktemp("fsdp")
    script, record = root / "spy.py", root / "shards"
    script.write_text(SHARD_SPY)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script),
         str(record), *args, "--fsdp", "--out", str(root / "two")],
        env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return root / "two", [json.loads(Path(f"{record}.{rank}").read_text()) for rank in (0, 1)]


@pytest.mark.parametrize("sharding", [[], ["--fsdp"]], ids=["ddp", "fsdp"])
def test_torchrun_with_two_processes_trains_what_one_process_does(one_process_run, request, tmp_path, sharding) -> None:
    args, one = one_process_run
    if sharding:  # the FSDP run records what each process holds once the model is sharded
        two, held = request.getfixturevalue("fsdp_run")
        assert all(h["sharded"] for h in held)
        assert sum(h["local"] for h in held) == held[0]["total"] and max(h["local"] for h in held) < held[0]["total"]
    else:
        two = tmp_path / "two"
        run_lextra([*args, "--out", str(two)], processes=2)
    a, b = saved_weights(one), saved_weights(two)
    assert close(a, b)
    name = "model.layers.1.self_attn.v_proj.weight"
    assert not torch.equal(a[name], tiny_llama().state_dict()[name])  # LoRA trained and merged
    for step in ("step_0000001", "step_0000002"):  # the checkpoints hold full tensors, sharded or not
        x = load_file(str(one / "checkpoints" / step / "optimizer.safetensors"))
        y = load_file(str(two / "checkpoints" / step / "optimizer.safetensors"))
        assert close(x, y)


def test_a_sharded_checkpoint_resumes_in_one_process_and_the_other_way(one_process_run, fsdp_run, tmp_path) -> None:
    """The first part of each run is a copy of the one-process run or of the FSDP run (the same arguments)."""
    args, one = one_process_run
    for first, then in ((2, 1), (1, 2)):
        run = tmp_path / f"{first}-then-{then}"
        shutil.copytree(fsdp_run[0] if first > 1 else one, run)
        shutil.rmtree(run / "checkpoints" / "step_0000002")  # cut after step 1's checkpoint
        shutil.rmtree(run / "model")
        (run / "checkpoints" / "LATEST").write_text("step_0000001\n")
        run_lextra([*args, *(["--fsdp"] if then > 1 else []), "--out", str(run), "--resume"], then)
        assert close(saved_weights(one), saved_weights(run)), run.name


def test_fsdp_without_torchrun_is_one_line_and_exit_2(base, corpus, tmp_path, capsys) -> None:
    args = ["hf", "finetune", str(base), "--tokenizer", "bytes", "--corpus", corpus, "--train-len", "32", "--fsdp",
            "--steps", "1", "--quiet", "--out", str(tmp_path / "run")]  # fmt: skip
    assert main(args) == 2
    assert "--fsdp shards the model over torchrun's processes; run under torchrun" in one_line_error(capsys)


# --- --positions: the sampler's position ids reach the forward --------------------------------------------------
def record_forwards(monkeypatch) -> list[dict]:
    """Every training forward's position_ids and attention_mask (at the Llama model) and what the first attention
    layer receives (its attention_mask and rotary cos/sin), captured by hooks on the model `finetune` builds."""
    import lextra.hf.finetune as ft

    calls: list[dict] = []
    original = ft.build_model

    def build(config, device):
        model, hf_config = original(config, device)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model

        def model_hook(module, args, kwargs):
            calls.append({"position_ids": kwargs.get("position_ids"), "attention_mask": kwargs.get("attention_mask"),
                          "rows": kwargs["input_ids"].shape[0], "rotary": base.model.rotary_emb})  # fmt: skip

        def attention_hook(module, args, kwargs):
            calls[-1] |= {"layer_mask": kwargs.get("attention_mask"), "cos_sin": kwargs["position_embeddings"]}

        base.model.register_forward_pre_hook(model_hook, with_kwargs=True)
        base.model.layers[0].self_attn.register_forward_pre_hook(attention_hook, with_kwargs=True)
        return model, hf_config

    monkeypatch.setattr(ft, "build_model", build)
    return calls


@pytest.mark.parametrize("s2_group", [None, 16])
def test_the_forward_runs_at_the_samplers_positions_with_full_attention(base, corpus, tmp_path, monkeypatch, s2_group):
    from lextra.data.positions import build_sampler

    calls = record_forwards(monkeypatch)
    run = config(base, corpus, positions="pose:256", steps=3, batch_size=2, s2_group=s2_group)
    final, merged = finetune(run, tmp_path / "run", progress=False)
    sampler = build_sampler("pose:256", 64)
    assert len(calls) == 3
    for step, call in enumerate(calls):
        want = sampler.positions(0, step)
        assert not torch.equal(want, torch.arange(64))  # PoSE skips
        assert call["rows"] == 2 and torch.equal(call["position_ids"], want[None].expand(2, -1))
        assert torch.equal(call["attention_mask"], torch.ones(2, 64, dtype=torch.long))
        # the layers attend causally over the whole window (no mask: SDPA's causal path), not cut at the skips as
        # transformers does for position ids that skip without an attention mask (packed sequences)
        assert call["layer_mask"] is None
        cos, sin = call["rotary"](torch.zeros(1, dtype=torch.float32), want[None].expand(2, -1))
        assert torch.equal(call["cos_sin"][0], cos) and torch.equal(call["cos_sin"][1], sin)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["finetune"]
    assert saved["positions"] == "pose:256"
    assert merged.config.max_position_embeddings == 64  # YaRN 2: factor x original (2 x 32), as its authors save
    assert transformers.AutoConfig.from_pretrained(str(final)).max_position_embeddings == 64


def test_contiguous_passes_no_positions_and_explicit_positions_compute_the_same_step(
    base, corpus, tmp_path, monkeypatch
) -> None:
    from lextra.hf.finetune import build_model, make_optimizer, train_step

    calls = record_forwards(monkeypatch)
    _, merged = finetune(config(base, corpus, positions="contiguous", steps=2), tmp_path / "run", progress=False)
    assert [(c["position_ids"], c["attention_mask"]) for c in calls] == [(None, None)] * 2  # today's forward
    assert merged.config.max_position_embeddings == 64
    # the sampler path at positions 0..L-1 (position ids and an all-ones mask) is the default forward exactly
    batch = torch.randint(0, VOCAB, (2, 65), generator=torch.Generator().manual_seed(7))
    results = []
    for positions in (None, torch.arange(64)):
        model, _ = build_model(config(base, corpus), torch.device("cpu"))
        optimizer = make_optimizer(model, config(base, corpus))
        loss, grad_norm = train_step(model.train(), optimizer, batch, 1.0, "fp32", positions)
        results.append((loss, grad_norm, [p.grad for p in model.parameters() if p.requires_grad]))
    (loss_a, norm_a, grads_a), (loss_b, norm_b, grads_b) = results
    assert torch.equal(loss_a, loss_b) and torch.equal(norm_a, norm_b)
    assert all(torch.equal(a, b) for a, b in zip(grads_a, grads_b, strict=True))


def test_a_pose_run_resumes_bit_identically(base, corpus, tmp_path) -> None:
    pose = config(base, corpus, positions="pose:256,chunks=3")
    _, whole = finetune(pose, tmp_path / "whole", progress=False)

    def stop(done: int) -> None:
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        finetune(pose, tmp_path / "cut", progress=False, on_step=stop)
    respelled = config(base, corpus, positions="pose,target=256,chunks=3")  # the same sampler, spelled otherwise
    _, resumed = finetune(respelled, tmp_path / "cut", resume=True, progress=False)
    want, got = whole.state_dict(), resumed.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    _, plain = finetune(config(base, corpus), tmp_path / "plain", progress=False)
    name = "model.embed_tokens.weight"
    assert not torch.equal(plain.state_dict()[name], whole.state_dict()[name])  # the positions changed the training


def test_position_refusals_are_one_line_and_exit_2(base, corpus, tmp_path, capsys) -> None:
    common = ["hf", "finetune", str(base), "--tokenizer", "bytes", "--corpus", corpus, "--steps", "2", "--quiet",
              "--train-len", "64"]  # fmt: skip
    assert main([*common, "--out", str(tmp_path / "a"), "--positions", "pose:32"]) == 2
    assert "pose: target (32) is below the training window L_tr (64); set target >= 64" in one_line_error(capsys)
    assert not (tmp_path / "a" / "config.json").exists()
    assert main([*common, "--out", str(tmp_path / "b"), "--positions", "shuffled"]) == 2
    assert "shuffled" in one_line_error(capsys)
    assert main([*common, "--out", str(tmp_path / "c"), "--positions", "pose:256", "--checkpoint-every", "1"]) == 0
    capsys.readouterr()
    assert main([*common, "--out", str(tmp_path / "c"), "--positions", "randomized:256", "--resume"]) == 2
    line = one_line_error(capsys)
    assert "cannot resume" in line and "positions: saved 'pose:256', now 'randomized:256'" in line
    assert main([*common, "--out", str(tmp_path / "c"), "--resume"]) == 2  # the default is another sampler too
    assert "positions: saved 'pose:256', now 'contiguous'" in one_line_error(capsys)


def test_a_run_saved_without_positions_resumes_as_contiguous(base, corpus, tmp_path) -> None:
    _, whole = finetune(config(base, corpus), tmp_path / "whole", progress=False)

    def stop(done: int) -> None:
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        finetune(config(base, corpus), tmp_path / "cut", progress=False, on_step=stop)
    saved_path = tmp_path / "cut" / "config.json"
    saved = json.loads(saved_path.read_text())
    del saved["finetune"]["positions"]  # a run folder written before --positions existed
    saved_path.write_text(json.dumps(saved))
    _, resumed = finetune(config(base, corpus), tmp_path / "cut", resume=True, progress=False)
    want, got = whole.state_dict(), resumed.state_dict()
    assert all(torch.equal(want[k], got[k]) for k in want)


def test_a_model_loaded_from_gguf_saves_as_the_plain_model_it_is(tmp_path) -> None:
    """transformers dequantises GGUF weights into ordinary tensors but keeps its quantizer, so save_pretrained
    refuses; `as_plain_model` (what finetune applies to a GGUF base) drops it and the folder reloads equal."""
    from types import SimpleNamespace

    from lextra.hf.load import as_plain_model

    def loaded_from_gguf(method: str = "gguf"):
        model = tiny_llama()
        model.hf_quantizer = SimpleNamespace(quantization_config=SimpleNamespace(quant_method=method))
        model.is_quantized = True
        return model

    with pytest.raises(ValueError, match="not serializable"):
        loaded_from_gguf().save_pretrained(tmp_path / "refused")
    as_plain_model(loaded_from_gguf()).save_pretrained(tmp_path / "plain")
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "plain")
    want, got = tiny_llama().state_dict(), reloaded.state_dict()
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    with pytest.raises(ConfigError, match=r"is quantized \(bitsandbytes\); give a floating-point model"):
        as_plain_model(loaded_from_gguf("bitsandbytes"))
    still = loaded_from_gguf()
    still.lm_head.weight = torch.nn.Parameter(torch.zeros(VOCAB, 32, dtype=torch.int8), requires_grad=False)
    with pytest.raises(ConfigError, match="still quantized"):
        as_plain_model(still)


def test_pose_windows_below_the_model_window_may_train_a_rope_scaling_that_reaches_the_target(
    base, corpus, tmp_path
) -> None:
    """A 16-token window with PoSE positions up to 128 trains YaRN 4 on a 32-token model (the refusal is for
    windows whose positions stay below the window the scaling stretches)."""
    run = config(base, corpus, train_len=16, positions="pose:128", rope_scaling="yarn:4", steps=1, checkpoint_every=0)
    final, _ = finetune(run, tmp_path / "run", progress=False)
    saved = json.loads((final / "config.json").read_text())
    assert saved["max_position_embeddings"] == 128
    assert (
        saved["rope_parameters"]["factor"] == 4.0 and saved["rope_parameters"]["original_max_position_embeddings"] == 32
    )
    with pytest.raises(ConfigError, match="reach past it with --positions pose:TARGET"):
        finetune(config(base, corpus, train_len=16, positions="pose:24", rope_scaling="yarn:4"), tmp_path / "b")


# --- the one Trainer: what `lextra train` has, fine-tuning has too ------------------------------------------------
def test_epoch_order_and_tensorboard_resume_to_the_straight_runs_weights_optimizer_and_losses(
    base, corpus, tmp_path
) -> None:
    run = config(base, corpus, order="epoch", tensorboard=True, batch_size=2)
    _, whole = finetune(run, tmp_path / "whole", progress=False)

    def stop(done: int) -> None:
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        finetune(run, tmp_path / "cut", progress=False, on_step=stop)
    state = json.loads((tmp_path / "cut" / "checkpoints" / "step_0000002" / "state.json").read_text())
    assert state["data_position"]["window"] == 4 and state["data_position"]["epoch"] == 0  # 2 steps x 2 windows
    _, resumed = finetune(run, tmp_path / "cut", resume=True, progress=False)
    want, got = whole.state_dict(), resumed.state_dict()
    assert all(torch.equal(want[k], got[k]) for k in want)
    for name in ("trainable.safetensors", "optimizer.safetensors"):
        a, b = (load_file(str(tmp_path / r / "checkpoints" / "step_0000004" / name)) for r in ("whole", "cut"))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name

    def records(name: str) -> list[dict]:
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(line).items() if k != "tokens_per_s"} for line in lines]

    assert records("cut") == records("whole") and all("epoch" in r for r in records("cut"))
    assert list((tmp_path / "cut" / "tb").glob("events.out.tfevents.*"))


def test_a_diverging_finetune_stops_before_saving_and_names_the_last_good_checkpoint(
    base, corpus, tmp_path, monkeypatch
) -> None:
    import lextra.hf.finetune as ft
    from lextra.errors import TrainingDivergedError

    seen: dict = {}
    original = ft.build_model

    def build(config, device):
        seen["model"], hf_config = original(config, device)
        return seen["model"], hf_config

    def poison(done: int) -> None:
        if done == 2:  # a non-finite LoRA weight: step 3's loss and gradient go non-finite
            with torch.no_grad():
                next(p for n, p in seen["model"].named_parameters() if "lora_B" in n).fill_(float("nan"))

    monkeypatch.setattr(ft, "build_model", build)
    with pytest.raises(TrainingDivergedError, match="training diverged at step 3 of 4") as caught:
        finetune(config(base, corpus), tmp_path / "run", progress=False, on_step=poison)
    assert "step 2" in str(caught.value) and "--resume and a lower learning rate, e.g. --lr 0.001" in str(caught.value)
    assert (tmp_path / "run" / "checkpoints" / "LATEST").read_text().strip() == "step_0000002"
    assert not (tmp_path / "run" / "model").exists()


def test_finetune_reads_a_config_file_then_set_then_flags(base, corpus, tmp_path, capsys) -> None:
    from lextra.cli.app import build_parser
    from lextra.cli.hf import finetune_config_from

    file = tmp_path / "ft.toml"
    file.write_text(f'train_len = 64\nsteps = 7\nlr = 1e-3\ncorpus = "{corpus}"\n[finetune]\nwarmup = 2\n')
    argv = ["hf", "finetune", str(base), "--config", str(file), "--out", "o", "--set", "lr=5e-4", "--steps", "3",
            "--no-gradient-checkpointing", "--s2-attn", "--order", "epoch", "--tokenizer", "bytes"]  # fmt: skip
    resolved = finetune_config_from(build_parser().parse_args(argv))
    assert (resolved.train_len, resolved.steps, resolved.lr, resolved.warmup) == (64, 3, 5e-4, 2)
    assert (resolved.gradient_checkpointing, resolved.s2_group, resolved.order) == (False, 16, "epoch")
    assert (resolved.batch_size, resolved.lora, resolved.corpus) == (1, "r=8,alpha=16", corpus)  # file, defaults
    example = Path(__file__).parents[1] / "experiments" / "finetune.toml"  # the example the help names
    shipped = finetune_config_from(build_parser().parse_args(["hf", "finetune", "m", "--config", str(example)]))
    assert (shipped.train_len, shipped.rope_scaling, shipped.trainable, shipped.steps) == (
        8192,
        "yarn:4",
        "embed,norm",
        400,
    )
    file.write_text("train_len = 64\nstepz = 3\n")
    assert main(["hf", "finetune", str(base), "--config", str(file), "--out", str(tmp_path / "r")]) == 2
    line = one_line_error(capsys)
    assert f"--config {file}: fine-tuning config: unknown field(s) stepz" in line
