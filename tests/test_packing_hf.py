"""Packed documents on Hugging Face models (`lextra hf finetune --pack documents`): the step equals the documents
run one at a time through the model, and a packed fine-tuning run trains and records its mode."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import transformers

from lextra.cli import main
from lextra.data.packing import PADDING
from lextra.train.packing import packed_step


def _tiny_llama() -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(
        "llama", vocab_size=260, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32,
    )  # fmt: skip
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")


def test_a_packed_step_on_a_llama_equals_its_documents_run_one_at_a_time() -> None:
    model = _tiny_llama()
    tokens = torch.randint(1, 64, (2, 21))
    ids = torch.tensor([[0] * 6 + [1] * 9 + [PADDING] * 6, [0] * 3 + [1] * 18])
    batch = torch.stack((tokens, ids), dim=1)
    loss = packed_step(model, lambda x: model(input_ids=x).logits, batch, "fp32", torch.device("cpu"))
    packed = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    total, count = torch.zeros(()), 0
    for row, document in ((0, 0), (0, 1), (1, 0), (1, 1)):
        piece = tokens[row][ids[row] == document]
        logits = model(input_ids=piece[None, :-1]).logits[0]
        total = total + torch.nn.functional.cross_entropy(logits, piece[1:], reduction="sum")
        count += piece.numel() - 1
    (total / count).backward()
    assert count == 5 + 8 + 2 + 17 and torch.allclose(loss, (total / count).detach(), rtol=1e-5)
    for name, param in model.named_parameters():
        assert torch.allclose(packed[name], param.grad, rtol=1e-4, atol=1e-6), name


def test_a_packed_finetune_trains_and_records_its_mode(tmp_path: Path) -> None:
    base = tmp_path / "llama"
    _tiny_llama().save_pretrained(base)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(12):
        (corpus / f"d{i}.txt").write_text("packed documents " * (1 + i % 5))
    out = tmp_path / "run"
    code = main(["hf", "finetune", str(base), "--corpus", str(corpus), "--tokenizer", "bytes", "--train-len", "32",
                 "--steps", "3", "--log-every", "1", "--out", str(out), "--pack", "documents", "--quiet"])  # fmt: skip
    assert code == 0
    losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 3 and all(0 < x < 10 for x in losses)
    assert json.loads((out / "config.json").read_text())["finetune"]["pack"] == "documents"
