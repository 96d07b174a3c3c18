"""Commands that build text prompts (`retrieval`, `ruler`) or evaluate (`eval`, `align`, `analyze`) on a prepared
folder (`--data DIR`), with lextra and Hugging Face models: the same numbers as on the raw corpus with the same
tokenizer, and a folder of another tokenizer refused in one line."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from lextra.cli import main
from lextra.data import PreparedShards, prepare_data, prepare_shards
from lextra.data.shards import DecodedDocuments, text_data_for_model
from lextra.data.tokenizers import ByteTokenizer
from lextra.model import GPTConfig, load_model, read_model_meta
from lextra.pipelines.ruler import RulerSettings
from lextra.tasks.ruler import haystack_documents
from lextra.train import TrainConfig, train

BYTES = ByteTokenizer()

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "seven", "wizards", "hex", "kings"]


@pytest.fixture(autouse=True)
def _caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trained BPE tokenizers and cache entries go to this test's folder."""
    monkeypatch.setenv("LEXTRA_CACHE", str(tmp_path / "cache"))


def _write_corpus(root: Path, documents: int = 30) -> str:
    """Text files of 100-600 words (some non-ASCII, one of them empty and dropped)."""
    rng = random.Random(0)
    root.mkdir(parents=True)
    for index in range(documents):
        words = [rng.choice(WORDS) for _ in range(rng.randint(100, 600))]
        if index % 5 == 0:
            words.append("caf\u00e9 \u00fcber \U0001f600")
        (root / f"doc{index:03d}.txt").write_text(" ".join(words) + "\n", encoding="utf-8")
    (root / "empty.txt").write_text(" \n", encoding="utf-8")
    return str(root)


def _tiny_model(source: str, out: Path) -> Path:
    model = GPTConfig(n_layer=1, n_head=2, d_model=32, train_len=32, layer_plan="alibi")
    config = TrainConfig(corpus=source, model=model, batch_size=4, steps=2, warmup=1, checkpoint_every=2, log_every=1)
    return train(config, out, progress=False, device="cpu")


@pytest.mark.parametrize("tokenizer", ["bytes", "bpe:300"])
def test_decoded_texts_are_the_raw_documents(tmp_path: Path, tokenizer: str) -> None:
    source = _write_corpus(tmp_path / "corpus")
    prepare_shards(source, tokenizer, tmp_path / "prepared", shard_chars=20_000, progress=False)
    shards = PreparedShards.open(tmp_path / "prepared")
    raw = prepare_data(source, tokenizer)
    data = shards.prepared_data()
    assert data.corpus == raw.corpus and data.tokenizer.to_config() == raw.tokenizer.to_config()
    for split, documents in raw.splits.items():
        texts = shards.texts(split)
        assert isinstance(texts, DecodedDocuments) and len(texts) == len(documents) > 0
        assert [d.text for d in texts] == [d.text for d in documents]
        assert [d.text for d in data.splits[split]] == [d.text for d in documents]
        assert [d.id for d in texts[:]] == [f"{split}/{i}" for i in range(len(texts))] == [d.id for d in texts]
        assert texts[-1].text == documents[-1].text
    with pytest.raises(IndexError):
        shards.texts("test")[len(raw.splits["test"])]


def _retrieval(model_dir: Path, out: Path, *extra: str) -> int:
    argv = ["retrieval", "eval", str(model_dir), "--task", "code-key", "--lengths", "96", "--samples", "2"]
    return main([*argv, "--depths", "0.5", "--out", str(out), "--device", "cpu", "--quiet", *extra])


def test_retrieval_eval_on_a_prepared_folder_equals_the_raw_corpus(tmp_path: Path, capsys) -> None:
    source = _write_corpus(tmp_path / "corpus")
    model_dir = _tiny_model(source, tmp_path / "run")
    prepare_shards(source, "bytes", tmp_path / "prepared", progress=False)
    assert _retrieval(model_dir, tmp_path / "raw") == 0
    assert _retrieval(model_dir, tmp_path / "given", "--data", str(tmp_path / "prepared")) == 0
    files = sorted(p.name for p in (tmp_path / "raw").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "given").iterdir())
    for name in files:
        if name.endswith((".md", ".json", ".csv")):
            assert (tmp_path / "raw" / name).read_text() == (tmp_path / "given" / name).read_text(), name
    meta = read_model_meta(model_dir)
    assert [d.text for d in text_data_for_model(meta, tmp_path / "prepared").splits["test"]] == [
        d.text for d in prepare_data(source).splits["test"]
    ]
    other = tmp_path / "bpe"
    prepare_shards(source, "bpe:300", other, progress=False)
    capsys.readouterr()
    assert _retrieval(model_dir, tmp_path / "other", "--data", str(other)) == 2
    assert capsys.readouterr().err.strip() == (
        f"lextra retrieval: error: the prepared data {other} was tokenized with bpe:300, not with the model's "
        "tokenizer (bytes, trained on its own corpus); prepare the data with the model's tokenizer, or drop --data "
        "to read the model's corpus"
    )


def _compare(out: Path, *extra: str) -> int:
    argv = ["retrieval", "compare", "--out", str(out), "--schemes", "alibi", "--task", "code-key", "--steps", "2"]
    shape = ["--n-layer", "1", "--d-model", "32", "--n-head", "2", "--train-len", "96", "--batch-size", "2"]
    budget = ["--warmup", "1", "--lengths", "96", "--samples", "2", "--depths", "0.5", "--device", "cpu", "--quiet"]
    return main([*argv, *shape, *budget, *extra])


def test_retrieval_compare_trains_and_evaluates_on_a_prepared_folder_as_on_the_raw_corpus(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _write_corpus(tmp_path / "corpus")
    prepare_shards(source, "bytes", tmp_path / "prepared", progress=False)
    assert _compare(tmp_path / "raw", "--corpus", source) == 0
    assert _compare(tmp_path / "given", "--data", str(tmp_path / "prepared")) == 0
    raw, given = (load_model(tmp_path / name / "models" / "alibi" / "model").state_dict() for name in ("raw", "given"))
    assert raw.keys() == given.keys() and all(torch.equal(raw[k], given[k]) for k in raw)
    assert (tmp_path / "raw" / "table.md").read_text() == (tmp_path / "given" / "table.md").read_text()
    saved = json.loads((tmp_path / "given" / "models" / "alibi" / "config.json").read_text())
    assert saved["data"]["path"] == str(tmp_path / "prepared")
    shape = ["--task", "code-key", "--steps", "2", "--n-layer", "1", "--d-model", "32", "--n-head", "2"]
    shape += ["--train-len", "96", "--batch-size", "2", "--warmup", "1", "--scheme", "alibi", "--quiet"]
    for name, extra in (("train-raw", ["--corpus", source]), ("train-given", ["--data", str(tmp_path / "prepared")])):
        assert main(["retrieval", "train", "--out", str(tmp_path / name), *shape, *extra]) == 0
        trained = load_model(tmp_path / name / "model").state_dict()
        assert trained.keys() == raw.keys() and all(torch.equal(raw[k], trained[k]) for k in raw)
    # passkey+lm: half the rows language modelling, drawn from the folder's tokens without encoding them again
    shape = [{"code-key": "passkey+lm", "96": "128"}.get(word, word) for word in shape]
    assert main(["retrieval", "train", "--out", str(tmp_path / "lm-raw"), *shape, "--corpus", source]) == 0
    import lextra.data.prepare as sources

    monkeypatch.setattr(sources.TrainStream, "from_documents", lambda *a, **k: pytest.fail("encoded again"))
    assert (
        main(["retrieval", "train", "--out", str(tmp_path / "lm-given"), *shape, "--data", str(tmp_path / "prepared")])
        == 0
    )
    want, got = (load_model(tmp_path / name / "model").state_dict() for name in ("lm-raw", "lm-given"))
    assert all(torch.equal(want[k], got[k]) for k in want)
    capsys.readouterr()
    assert _compare(tmp_path / "both", "--data", str(tmp_path / "prepared"), "--corpus", source) == 2
    assert capsys.readouterr().err.strip() == (
        "lextra retrieval: error: --data replaces --corpus and --limit-chars (the folder holds its corpus); drop one"
    )
    assert _compare(tmp_path / "other", "--data", str(tmp_path / "prepared"), "--tokenizer", "bpe:300") == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "lextra retrieval: training alibi",
        f"lextra retrieval: error: the prepared data {tmp_path / 'prepared'} was tokenized with bytes, the run asks "
        "for bpe:300; pass --tokenizer bytes, or prepare the source again with --tokenizer bpe:300",
    ]


# ----------------------------------------------------------------------------- Hugging Face models
def _tiny_llama(folder: Path) -> Path:
    """A random two-layer Llama over 260 ids (bytes), saved without a tokenizer."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(
        "llama",
        vocab_size=260,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
    )
    transformers.AutoModelForCausalLM.from_config(config).eval().save_pretrained(folder)
    return folder


def test_hf_commands_on_a_prepared_folder_equal_the_raw_corpus(tmp_path: Path, capsys) -> None:
    source = _write_corpus(tmp_path / "corpus")
    model = str(_tiny_llama(tmp_path / "llama"))
    prepared = tmp_path / "prepared"
    prepare_shards(source, "bytes", prepared, shard_chars=20_000, progress=False)
    common = [model, "--tokenizer", "bytes", "--quiet", "--threads", "1", "--device", "cpu"]
    actions = {
        "eval": ["--lengths", "16,64", "--protocols", "chunks,sliding", "--documents", "2"],
        "retrieval": ["--task", "code-key", "--lengths", "96", "--depths", "0.5", "--samples", "2"],
        "align": ["--length", "64", "--windows", "1", "--max-rows", "16"],
        "dispersion": ["--lengths", "32", "--documents", "2"],
    }
    words = {
        "eval": ["eval"],
        "retrieval": ["retrieval", "eval"],
        "align": ["align"],
        "dispersion": ["analyze", "dispersion"],
    }
    for action, extra in actions.items():
        raw = ["--corpus", source, "--out", str(tmp_path / "raw" / action)]
        assert main([*words[action], *common, *extra, *raw]) == 0
        given = ["--data", str(prepared), "--out", str(tmp_path / "given" / action)]
        assert main([*words[action], *common, *extra, *given]) == 0
        for file in sorted((tmp_path / "raw" / action).iterdir()):
            if file.suffix in (".json", ".md", ".csv"):
                want, got = file.read_text(), (tmp_path / "given" / action / file.name).read_text()
                if action == "eval" and file.name == "results.json":
                    got_json = json.loads(got)
                    assert got_json.pop("data") == {
                        "path": str(prepared),
                        "manifest_sha256": PreparedShards.open(prepared).sha256,
                    }
                    want_json = json.loads(want)  # the rerun records differ by the flags: --data, --corpus
                    assert got_json.pop("rerun")["arguments"]["data"] == str(prepared)
                    assert want_json.pop("rerun")["arguments"]["corpus"] == source
                    assert got_json == want_json
                else:
                    assert got == want, (action, file.name)
    assert set(json.loads((tmp_path / "given" / "eval" / "results.json").read_text())["results"]) == {
        "chunks",
        "sliding",
    }
    other = tmp_path / "bpe"
    prepare_shards(source, "bpe:300", other, progress=False)
    capsys.readouterr()
    for action in ("eval", "retrieval"):
        wrong = ["--data", str(other), "--out", str(tmp_path / "x")]
        assert main([*words[action], *common, *actions[action], *wrong]) == 2
        assert capsys.readouterr().err.strip() == (
            f"lextra {words[action][0]}: error: the prepared data {other} was tokenized with bpe:300, the run asks "
            "for bytes; pass --tokenizer bpe:300, or prepare the source again with --tokenizer bytes"
        )
    own = Path(model).resolve()
    assert main(["eval", model, "--quiet", "--data", str(prepared), "--out", str(tmp_path / "y")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"lextra eval: error: the prepared data {prepared} was tokenized with bytes, not the model's own tokenizer "
        f"({own}); prepare it with --tokenizer hf:{own}, or pass --tokenizer bytes"
    )
    assert main(["eval", *common, "--data", str(prepared), "--corpus", source]) == 2
    assert capsys.readouterr().err.strip() == (
        "lextra eval: error: --data replaces --corpus and --limit-chars (the folder holds its corpus); drop one"
    )


# ----------------------------------------------------------------------------- RULER
def _ruler(model_dir: Path, out: Path, *extra: str) -> dict:
    argv = ["ruler", "run", str(model_dir), "--tasks", "niah_single_2", "--lengths", "700", "--samples", "2"]
    assert main([*argv, "--out", str(out), "--quiet", "--threads", "1", "--device", "cpu", *extra]) == 0
    result = json.loads((out / "results.json").read_text())
    for cells in result["cells"].values():
        for cell in cells.values():
            cell.pop("seconds"), cell.pop("prefill_seconds", None)
    result.pop("seconds", None)
    return result


def test_ruler_takes_its_haystack_from_a_prepared_folder_as_from_the_corpus(tmp_path: Path, capsys) -> None:
    source = _write_corpus(tmp_path / "corpus")
    model_dir = _tiny_model(source, tmp_path / "run")
    raw = _ruler(model_dir, tmp_path / "raw", "--haystack", source)
    assert raw["cells"]["niah_single_2"]["700"]["samples"] == 2
    for tokenizer in ("bytes", "bpe:300"):  # the haystack is text, encoded again with the model's tokenizer
        prepare_shards(source, tokenizer, tmp_path / tokenizer, progress=False)
        given = _ruler(model_dir, tmp_path / f"given-{tokenizer}", "--data", str(tmp_path / tokenizer))
        assert given == raw
    key = json.loads((tmp_path / "given-bytes" / "cells" / "niah_single_2-700.json").read_text())["key"]
    assert key["haystack"] == source  # named as --haystack names it, so the cells are shared
    settings = RulerSettings(tasks=["niah_single_2"], haystack=source)
    want = settings.build(BYTES, None, None)["niah_single_2"]
    got = settings.build(BYTES, PreparedShards.open(tmp_path / "bpe:300").texts("test"), None)["niah_single_2"]
    other = settings.build(BYTES, haystack_documents(), None)["niah_single_2"]  # the built-in essays differ
    prompts = [task.sample(task.prompt_tokens(700, "ruler"), 0, 0).prompt_ids for task in (want, got, other)]
    assert prompts[0] == prompts[1] != prompts[2]
    capsys.readouterr()
    argv = ["ruler", "run", str(model_dir), "--out", str(tmp_path / "x"), "--data", str(tmp_path / "bytes")]
    assert main([*argv, "--haystack", source]) == 2
    assert capsys.readouterr().err.strip() == (
        "lextra ruler: error: --data replaces --haystack (the folder's test split is the haystack); drop one"
    )


# ----------------------------------------------------------------------------- studies
STUDY = """
name = "tiny"
multiples = [1, 2]
protocols = ["chunks", "sliding"]
masks = ["causal"]
documents = 1
{data}
[train]
{train}
steps = 2
batch_size = 2
checkpoint_every = 0
eval_sequences = 2
[train.model]
train_len = 128
n_layer = 1
d_model = 32
n_head = 2
[[models]]
label = "rope"
scheme = "rope"
[analysis]
documents = 1
[retrieval]
task = "code-key"
variants = ["rope"]
steps = 1
samples = 1
depths = [0.5]
"""


def _study(tmp_path: Path, name: str, data: str = "", train: str = "") -> dict:
    config = tmp_path / f"{name}.toml"
    config.write_text(STUDY.format(data=data, train=train))
    assert main(["study", str(config), "--out", str(tmp_path / name), "--quiet", "--threads", "1"]) == 0
    results = json.loads((tmp_path / name / "study.json").read_text())
    for key in ("config", "compute_minutes"):
        results.pop(key)
    return results


def test_a_study_on_a_prepared_folder_equals_the_study_on_the_raw_corpus(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _write_corpus(tmp_path / "corpus")
    prepared = tmp_path / "prepared"
    prepare_shards(source, "bytes", prepared, shard_chars=20_000, progress=False)
    raw = _study(tmp_path, "raw", train=f'corpus = "{source}"')
    assert set(raw["perplexity"]["causal"]["rope"]["0"]["results"]) == {"chunks", "sliding"}
    assert raw["analysis"] and raw["retrieval"]
    import lextra.data.prepare

    monkeypatch.setattr(lextra.data.prepare, "load_corpus", lambda *a, **k: pytest.fail("read the raw corpus"))
    assert _study(tmp_path, "section", data=f'[data]\npath = "{prepared}"') == raw
    assert _study(tmp_path, "train-data", train=f'data = "{prepared}"') == raw
    saved = json.loads((tmp_path / "section" / "models" / "rope" / "seed0" / "config.json").read_text())
    assert saved["data"]["path"] == str(prepared)
    other = tmp_path / "bpe"
    prepare_shards(source, "bpe:300", other, progress=False)
    capsys.readouterr()
    config = tmp_path / "other.toml"
    config.write_text(STUDY.format(data=f'[data]\npath = "{other}"', train=""))
    assert main(["study", str(config), "--out", str(tmp_path / "other"), "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"lextra study: error: the prepared data {other} was tokenized with bpe:300, the run asks for bytes; pass "
        "--tokenizer bpe:300, or prepare the source again with --tokenizer bytes"
    )
    config.write_text(STUDY.format(data=f'[data]\npath = "{other}"', train=f'data = "{prepared}"'))
    assert main(["study", str(config), "--out", str(tmp_path / "other"), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"lextra study: error: {config}: [data] path = '{other}' and [train] data = '{prepared}' name two folders; "
        "keep one"
    )
