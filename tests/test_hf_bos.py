"""Hugging Face evaluation parity: documents and prompts of a Hugging Face model start with the BOS its tokenizer
adds by default (none where it adds none), lextra's own models and training streams are unchanged, and RULER's
prompts leave the answer budget (`--prompt-length exact` keeps the whole length)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import transformers

from lextra.cli import main
from lextra.data import ByteTokenizer, TrainStream, build_tokenizer
from lextra.data.prepare import prepare_data
from lextra.errors import ConfigError
from lextra.evaluate import EvalConfig, evaluate_model, evaluation_documents
from lextra.evaluate.prefix import evaluation_prefix
from lextra.evaluate.retrieval import evaluate_retrieval
from lextra.evaluate.ruler import answer_samples
from lextra.hf import adapt
from lextra.model import GPT, GPTConfig, save_model
from lextra.pipelines.ruler import RulerSettings, settings_from_section
from lextra.tasks.retrieval import PasskeyTask
from lextra.tasks.rows import row_seed
from lextra.tasks.ruler import build_ruler_task

VOCAB = 260
BOS, EOS = "<s>", "</s>"


def save_tokenizer(folder: Path, *, bos: bool) -> Path:
    """A byte-level tokenizer (256 byte tokens, then <s> = 256 and </s> = 257) that starts every text with <s>
    by default when `bos` (as Llama's does), or adds nothing (as GPT-2's)."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers, processors

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    backend = Backend(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([BOS, EOS])
    if bos:
        backend.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, 256)])
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=BOS, eos_token=EOS)
    tok.save_pretrained(folder)
    return folder


def tiny_llama(seed: int = 0, max_pos: int = 64):
    torch.manual_seed(seed)
    config = transformers.AutoConfig.for_model(
        "llama",
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_pos,
        rope_theta=10000.0,
    )
    return transformers.AutoModelForCausalLM.from_config(config).eval()


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tokenizers")
    return {"bos": save_tokenizer(root / "bos", bos=True), "plain": save_tokenizer(root / "plain", bos=False)}


def corpus(tmp_path: Path) -> str:
    folder = tmp_path / "corpus"
    folder.mkdir()
    text = "the quick brown fox jumps over the lazy dog; " * 40
    for i in range(24):
        (folder / f"doc{i}.txt").write_text(f"{i} " + text[i:] + text[: i * 3])
    return str(folder)


def test_the_prefix_is_the_bos_the_tokenizer_adds_by_default_and_encode_never_adds_it(tokenizers) -> None:
    with_bos, plain = build_tokenizer(f"hf:{tokenizers['bos']}"), build_tokenizer(f"hf:{tokenizers['plain']}")
    reference = transformers.AutoTokenizer.from_pretrained(str(tokenizers["bos"]))
    assert reference("a b")["input_ids"][0] == 256  # the tokenizer itself adds <s>
    assert with_bos.bos_prefix == [256] and plain.bos_prefix == [] and ByteTokenizer().bos_prefix == []
    assert with_bos.encode("a b") == plain.encode("a b") == reference("a b", add_special_tokens=False)["input_ids"]
    model = adapt(tiny_llama())
    assert evaluation_prefix(model, with_bos) == [256] and evaluation_prefix(model, plain) == []
    gpt = GPT(GPTConfig(vocab_size=VOCAB, n_layer=1, n_head=2, d_model=16, train_len=32))
    assert evaluation_prefix(gpt, with_bos) == []  # a lextra model was trained without one


def test_training_streams_of_an_hf_tokenizer_are_unchanged_by_its_bos(tokenizers, tmp_path: Path) -> None:
    spec = corpus(tmp_path)
    with_bos = prepare_data(spec, tokenizer=f"hf:{tokenizers['bos']}")
    plain = prepare_data(spec, tokenizer=f"hf:{tokenizers['plain']}")
    a = TrainStream.from_documents(with_bos.splits["train"], with_bos.tokenizer)
    b = TrainStream.from_documents(plain.splits["train"], plain.tokenizer)
    assert torch.equal(a.tokens, b.tokens) and 256 not in set(a.tokens.tolist())
    docs = with_bos.splits["train"]
    assert len(a.tokens) == sum(len(d.text) for d in docs) + len(docs) - 1  # one token a character, joined by </s>
    assert a.tokens.tolist().count(257) == len(docs) - 1


@torch.no_grad()
@pytest.mark.parametrize("kind", ["bos", "plain"])
def test_perplexity_scores_the_documents_as_the_tokenizer_encodes_them(tokenizers, tmp_path: Path, kind) -> None:
    data = prepare_data(corpus(tmp_path), tokenizer=f"hf:{tokenizers[kind]}")
    reference = transformers.AutoTokenizer.from_pretrained(str(tokenizers[kind]))
    model = adapt(tiny_llama())
    config = EvalConfig(lengths=[32], protocols=["chunks"], documents=2, last_token_targets=1, span=32)
    result = evaluate_model(model, data, config, progress=False)
    picked, stitched, _ = evaluation_documents(data, "test", 33, 2, evaluation_prefix(model, data.tokenizer))
    head = [256] if kind == "bos" else []
    bodies = [ids[len(head) :] for ids in (reference(d.text)["input_ids"] for d in data.splits["test"])]
    size = 33 - len(head)  # the opening piece of each long document, then their second pieces (BOS before each)
    expected = [head + b[r * size : (r + 1) * size] for r in range(2) for b in bodies if len(b) >= (r + 1) * size][:2]
    assert not stitched and [p.tolist() for p in picked] == expected
    assert (picked[0][0] == 256) == (kind == "bos")
    nll = 0.0
    for doc in picked:  # the model reads the tokenizer's own encoding, BOS first where it adds one
        logits = model.model(doc[None, :32]).logits[0]
        nll += float(F.cross_entropy(logits, doc[1:33], reduction="sum"))
    cell = result.point("chunks", 32)
    count = 32 * len(picked)
    assert cell.tokens == count > 0 and math.isclose(cell.ppl, math.exp(nll / count), rel_tol=1e-5)


@torch.no_grad()
def test_retrieval_prompts_of_an_hf_model_start_with_its_bos(tokenizers, monkeypatch) -> None:
    seen: list[list[int]] = []

    def spy(model, prompts, answers, distractors):
        seen.extend(list(p) for p in prompts)
        n = len(prompts)
        return {"exact": [True] * n, "rank": [1] * n, "loglik": [[0.0]] * n, "generated": [[]] * n}

    monkeypatch.setattr("lextra.evaluate.retrieval.evaluate.score_prompts", spy)
    model = adapt(tiny_llama())
    for kind, prefix in (("bos", [256]), ("plain", [])):
        seen.clear()
        task = PasskeyTask(build_tokenizer(f"hf:{tokenizers[kind]}"))
        evaluate_retrieval(model, task, [150], [0.5], samples=2)
        rng = random.Random(row_seed("eval", task.name, 0, 150, 0.5))
        want = [prefix + task.sample(150 - len(prefix), 0.5, rng).prompt_ids for _ in range(2)]
        assert seen == want and all(len(p) == 150 for p in seen)


def test_ruler_prompts_leave_the_answer_budget_and_start_with_the_bos(tokenizers, monkeypatch) -> None:
    seen: list[list[int]] = []

    def silent(model, prompts, references, tokenizer, budget, **kwargs):
        seen.extend(list(p) for p in prompts)
        kwargs["timings"]["prefill"] = 0.0
        return [""] * len(prompts)

    monkeypatch.setattr("lextra.evaluate.ruler.evaluate.generate", silent)
    hf_model = adapt(tiny_llama())
    gpt = GPT(GPTConfig(vocab_size=VOCAB, n_layer=1, n_head=2, d_model=16, train_len=32))
    with_bos = build_tokenizer(f"hf:{tokenizers['bos']}")
    plain = build_tokenizer(f"hf:{tokenizers['plain']}")
    cases = [(hf_model, with_bos, "ruler", [256]), (hf_model, plain, "ruler", []),
             (hf_model, with_bos, "exact", [256]), (gpt, with_bos, "ruler", [])]  # fmt: skip
    for model, tokenizer, rule, prefix in cases:
        seen.clear()
        tasks = [build_ruler_task("niah_single_1", tokenizer), build_ruler_task("fwe", tokenizer)]
        indices = {"niah_single_1": [0, 1], "fwe": [0]}
        batches = list(answer_samples(model, tasks, 900, indices, prompt_length=rule))
        # fwe (a 50-token budget) first; under RULER's rule its prompts are longer than niah's: not batched together
        assert [len(b) for b in batches] == ([1, 2] if rule == "ruler" else [3])
        want = []
        for task, index in ((tasks[1], 0), (tasks[0], 0), (tasks[0], 1)):
            length = 900 - task.budget if rule == "ruler" else 900
            want.append(task.sample(length, index, prefix=prefix).prompt_ids)
            assert len(want[-1]) == length
        assert seen == want and all(p[: len(prefix)] == prefix for p in seen)
        assert all(256 not in p[len(prefix) :] for p in seen)  # the BOS opens the prompt, nowhere else


def test_ruler_prompt_length_option_reaches_the_cells_and_refuses_unknown_rules(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "run"
    config = GPTConfig(vocab_size=256, n_layer=1, n_head=2, d_model=16, train_len=64)
    save_model(GPT(config), folder / "model", extra={"tokenizer": {"kind": "bytes"}})
    common = ["ruler", str(folder), "--tasks", "niah_single_1", "--lengths", "900", "--samples", "1", "--quiet"]
    for rule in ("ruler", "exact"):
        assert (
            main([*common, "--out", str(tmp_path / rule), *(["--prompt-length", rule] if rule == "exact" else [])]) == 0
        )
        cell = json.loads((tmp_path / rule / "cells" / "niah_single_1-900.json").read_text())
        assert cell["key"]["prompt_length"] == rule and cell["key"]["bos"] == []
    capsys.readouterr()
    assert main([*common, "--out", str(tmp_path / "x"), "--prompt-length", "half"]) == 2
    assert "argument --prompt-length: invalid choice: 'half'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="unknown RULER prompt length 'half'; use ruler or exact"):
        RulerSettings(prompt_length="half").validate()
    assert settings_from_section({"prompt_length": "exact"}).prompt_length == "exact"  # a study's [ruler] section
    assert settings_from_section({}).prompt_length == "ruler"
    with pytest.raises(ConfigError, match="unknown RULER prompt length 'all'"):
        settings_from_section({"prompt_length": "all"})
    with pytest.raises(ConfigError, match="leaves no prompt after its 128-token answer budget"):
        build_ruler_task("niah_single_1", ByteTokenizer()).prompt_tokens(100)
