"""One command set for any model: `lextra eval`, `retrieval eval`, `analyze` and `align` take a lextra run and a
Hugging Face folder alike, each loaded once through `load_model_spec`; the `lextra hf` group keeps `finetune` only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers

from lextra.cli import main
from lextra.model import GPT, GPTConfig, save_model


@pytest.fixture
def corpus(tmp_path: Path) -> str:
    folder = tmp_path / "corpus"
    folder.mkdir()
    generator = torch.Generator().manual_seed(3)
    words = ["alpha", "beta", "gamma", "delta", " ", "\n", "the", "of", "to", "12", "7", "."]
    for i in range(12):
        picks = torch.randint(0, len(words), (160,), generator=generator)
        (folder / f"doc{i}.txt").write_text(" ".join(words[int(j)] for j in picks))
    return str(folder)


def _llama(folder: Path) -> str:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=260, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=16,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).eval().save_pretrained(folder)
    return str(folder)


def _gpt(folder: Path, corpus: str) -> str:
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, d_model=16, train_len=16, layer_plan="rope")).eval()
    save_model(model, folder, extra={"train": {"corpus": corpus}, "tokenizer": {"kind": "bytes"}})
    return str(folder)


def test_eval_and_retrieval_of_a_hugging_face_model_go_to_runs_hf_name(tmp_path, corpus, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    llama = _llama(tmp_path / "llama")
    common = [llama, "--tokenizer", "bytes", "--corpus", corpus, "--quiet", "--threads", "1"]
    evaluation = ["eval", *common, "--lengths", "16,32", "--protocols", "chunks", "--documents", "2"]
    assert main(evaluation) == 0
    saved = json.loads((tmp_path / "runs/hf/llama/eval-causal/results.json").read_text())
    assert saved["label"] == "llama" and saved["model"] == llama and saved["corpus"] == corpus
    assert saved["rerun"]["arguments"]["tokenizer"] == "bytes"
    assert main([*evaluation, "--rope-scaling", "yarn:2"]) == 0  # the setup names its own folder
    scaled = json.loads((tmp_path / "runs/hf/llama/eval-yarn-2/results.json").read_text())
    assert scaled["label"] == "llama+yarn:2" and scaled["setup"] == "yarn:2"
    capsys.readouterr()
    assert main(evaluation) == 2  # results there already
    assert "already holds results" in capsys.readouterr().err
    # rerun from the file: the same numbers
    rerun = ["eval", "--from", "runs/hf/llama/eval-causal/results.json", "--out", "again", "--quiet"]
    assert main(rerun) == 0
    again = json.loads((tmp_path / "again/results.json").read_text())
    assert again["results"] == saved["results"]
    retrieval = ["retrieval", "eval", *common, "--lengths", "120", "--depths", "0.5", "--samples", "2"]
    assert main(retrieval) == 0
    cells = json.loads((tmp_path / "runs/hf/llama/retrieval-passkey/results.json").read_text())["cells"]
    assert cells["120"]["0.5"]["samples"] == 2


def test_analyses_put_a_lextra_model_beside_a_hugging_face_one(tmp_path, corpus) -> None:
    llama, gpt = _llama(tmp_path / "llama"), _gpt(tmp_path / "gpt", corpus)
    out = tmp_path / "dispersion"
    argv = ["analyze", "dispersion", gpt, llama, "--tokenizer", "bytes", "--corpus", corpus, "--lengths", "16,32"]
    assert main([*argv, "--documents", "2", "--out", str(out), "--quiet", "--threads", "1"]) == 0
    rows = json.loads((out / "dispersion.json").read_text())["rows"]
    assert set(rows) == {"rope", "llama"}
    assert rows["llama"]["checkpoint"] == llama and rows["rope"]["checkpoint"] == gpt
    for row in rows.values():  # one entropy per layer, at most ln(L) nats (uniform attention over L keys)
        entropies = row["by_length"]["32"]["entropy"]
        assert len(entropies) == 2 and all(0 < e <= torch.log(torch.tensor(32.0)).item() + 1e-5 for e in entropies)
    erf = tmp_path / "erf"
    argv = ["analyze", "receptive-field", llama, "--tokenizer", "bytes", "--corpus", corpus, "--lengths", "16"]
    assert main([*argv, "--documents", "2", "--out", str(erf), "--quiet", "--threads", "1"]) == 0
    share = json.loads((erf / "receptive_field.json").read_text())["rows"]["llama"]
    assert 1 <= share["by_length"]["16"]["erf"] <= 16


def test_a_hugging_face_decoder_runs_from_embeddings_as_from_tokens(tmp_path) -> None:
    """The receptive field's way in (embeddings, with gradients) gives the logits of the token forward."""
    from lextra.hf import load_hf

    model = load_hf(_llama(tmp_path / "llama"))
    ids = torch.randint(0, 260, (2, 12), generator=torch.Generator().manual_seed(0))
    embeddings = model.input_embeddings(ids).detach().requires_grad_(True)
    logits = model.head(model.features_from_embeddings(embeddings))
    assert torch.allclose(logits, model(ids), atol=1e-6)
    logits[:, -1].sum().backward()
    assert embeddings.grad is not None and embeddings.grad.abs().sum() > 0


def test_bad_model_options_are_one_line(tmp_path, corpus, capsys) -> None:
    gpt, llama = _gpt(tmp_path / "gpt", corpus), _llama(tmp_path / "llama")
    assert main(["eval", gpt, "--train-len", "32", "--quiet", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "lextra eval: error: --train-len applies to Hugging Face models; a lextra model's L_tr is the one it was "
        "trained at"
    ]
    assert main(["align", gpt, "--length", "32", "--rope-scaling", "yarn:2", "--out", str(tmp_path / "y")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "saves the aligned copy of a lextra model as trained" in err[0]
    assert main(["hf", "eval", llama]) == 2  # the generic command serves it
    assert "invalid choice: 'eval'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
