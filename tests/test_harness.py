"""lm-evaluation-harness's `lextra` model: offline local tasks (jsonl files) whose numbers equal lextra's own
evaluation of the same text and prompts, on a lextra run and a tiny Hugging Face llama under Self-Extend."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch
import transformers
from test_hf_bos import save_tokenizer

from lextra.cli import main
from lextra.data import ByteTokenizer, Document
from lextra.data.prepare import PreparedData
from lextra.errors import ConfigError, LengthError
from lextra.evaluate import EvalConfig, evaluate_model
from lextra.evaluate.retrieval.scoring import score_prompts
from lextra.model import GPT, GPTConfig, save_model
from lextra.pipelines.harness import HarnessSettings, ModelArgs, parse_model_args, run_harness
from lextra.pipelines.harness.adapter import LextraLM

TRAIN_LEN, WINDOW, CHUNKS = 32, 64, 2
EXTEND = "self_extend:group=4,window=8"
WORDS = [
    "the",
    "a",
    "garden",
    "kitchen",
    "went",
    "moved",
    "to",
    "of",
    "and",
    "john",
    "mary",
    "apple",
    "milk",
    "office",
    "hallway",
]


def text(rng: random.Random, chars: int) -> str:
    out = ""
    while len(out) < chars:
        out += rng.choice(WORDS) + " "
    return out[:chars]


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three local tasks over jsonl files: multiple choice (loglikelihood), generation and rolling perplexity."""
    root = tmp_path_factory.mktemp("tasks")
    rng = random.Random(0)
    # contexts without a trailing space (lm-eval moves one into the continuation)
    choice = [{"context": text(rng, 20 + i).strip(), "choices": [text(rng, 4 + i % 3) for _ in range(3)],
               "gold": i % 3} for i in range(3)]  # fmt: skip
    gen = [{"prompt": text(rng, 24), "answer": "milk"} for _ in range(2)]
    rolling = [{"text": text(rng, CHUNKS * WINDOW)} for _ in range(2)]
    for name, rows in (("choice", choice), ("gen", gen), ("rolling", rolling)):
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = "dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {path}\ntest_split: test\n"
    specs = {
        "choice": 'output_type: multiple_choice\ndoc_to_text: "{{context}}"\ndoc_to_choice: "{{choices}}"\n'
        'doc_to_target: "{{gold}}"\nmetric_list:\n  - metric: acc\n',
        "gen": 'output_type: generate_until\ndoc_to_text: "{{prompt}}"\ndoc_to_target: "{{answer}}"\n'
        'generation_kwargs:\n  until: ["\\n"]\n  max_gen_toks: 4\n  do_sample: false\n'
        "metric_list:\n  - metric: exact_match\n",
        "rolling": 'output_type: loglikelihood_rolling\ndoc_to_text: ""\ndoc_to_target: "{{text}}"\n'
        "metric_list:\n  - metric: byte_perplexity\n  - metric: word_perplexity\n",
    }
    for name, body in specs.items():
        yaml = f"task: lextra_{name}\n" + common.format(path=root / f"{name}.jsonl") + body
        (root / f"lextra_{name}.yaml").write_text(yaml)
    return root


@pytest.fixture(scope="module")
def lextra_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=256, n_layer=2, n_head=2, d_model=32, train_len=TRAIN_LEN, layer_plan="rope"))
    run = tmp_path_factory.mktemp("run") / "rope"
    save_model(model.eval(), run / "model", extra={"tokenizer": {"kind": "bytes"}})
    return run


@pytest.fixture(scope="module")
def hf_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    sizes = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
    config = transformers.LlamaConfig(vocab_size=260, num_key_value_heads=2, max_position_embeddings=TRAIN_LEN, **sizes)
    folder = tmp_path_factory.mktemp("hf") / "llama"
    transformers.LlamaForCausalLM(config).eval().save_pretrained(folder)
    return save_tokenizer(folder, bos=True)  # byte-level ids, every text after <s> (as Llama's)


def lextra_numbers(lm: LextraLM, tasks: Path) -> dict[str, list]:
    """lextra's own evaluation of the three tasks' text: chunks perplexity, candidate log-likelihoods, greedy text
    (a Hugging Face model's prompts after its BOS, as lextra's evaluations feed it)."""
    tokenizer, prefix = lm.lextra_tokenizer, list(lm.prefix)
    docs = [json.loads(line)["text"] for line in (tasks / "rolling.jsonl").read_text().splitlines()]
    # the rolling document follows lm-eval's prefix token: the BOS, else the separator (a newline in bytes)
    opening = "" if prefix else "\n"
    data = PreparedData("t", {"test": [Document(str(i), opening + d + "!") for i, d in enumerate(docs)]}, tokenizer)
    config = EvalConfig(lengths=[WINDOW], protocols=["chunks"], documents=len(docs), last_token_targets=1,
                        span=CHUNKS * WINDOW)  # fmt: skip
    ppl = evaluate_model(lm.model, data, config, progress=False).ppl("chunks", WINDOW)
    logliks = []
    for line in (tasks / "choice.jsonl").read_text().splitlines():
        doc = json.loads(line)
        cands = [tokenizer.encode(" " + c) for c in doc["choices"]]
        prompt = prefix + tokenizer.encode(doc["context"])
        logliks.append(score_prompts(lm.model, [prompt], [cands[0]], [cands[1:]])["loglik"][0])
    greedy = []
    for line in (tasks / "gen.jsonl").read_text().splitlines():
        prompt = prefix + tokenizer.encode(json.loads(line)["prompt"])
        ids = score_prompts(lm.model, [prompt], [[0] * 4])["generated"][0]
        greedy.append(tokenizer.decode(ids).split("\n")[0])
    return {"ppl": [ppl], "loglik": logliks, "greedy": greedy}


def check_equal(lm: LextraLM, tasks: Path) -> None:
    settings = HarnessSettings(tasks=["lextra_choice", "lextra_gen", "lextra_rolling"], include_path=[str(tasks)],
                               builtin=False, log_samples=True, bootstrap_iters=0)  # fmt: skip
    results = run_harness(lm, settings)
    ours = lextra_numbers(lm, tasks)
    byte_ppl = results["results"]["lextra_rolling"]["byte_perplexity,none"]
    assert byte_ppl == pytest.approx(ours["ppl"][0], rel=1e-4, abs=1e-4)
    samples = {s["doc_id"]: s for s in results["samples"]["lextra_choice"]}
    for doc_id, row in enumerate(ours["loglik"]):
        gold = samples[doc_id]["doc"]["gold"]
        harness = [float(r[0][0]) for r in samples[doc_id]["resps"]]
        # lextra's row has the gold first; the task's choices are in file order
        ordered = [row[0], *row[1:]]
        assert harness == pytest.approx(ordered, abs=1e-4)
        assert samples[doc_id]["acc"] == float(max(range(3), key=lambda c: harness[c]) == gold)
    generated = {s["doc_id"]: s["resps"][0][0] for s in results["samples"]["lextra_gen"]}
    assert [generated[i] for i in range(len(ours["greedy"]))] == ours["greedy"]


@pytest.mark.slow
def test_lextra_run_under_self_extend_equals_lextras_own_numbers(lextra_run: Path, tasks: Path) -> None:
    lm = LextraLM.create_from_arg_string(f"pretrained={lextra_run},extend={EXTEND},max_length={WINDOW},batch_size=4")
    assert lm.args.extend == EXTEND and lm.label == f"rope+{EXTEND}"
    check_equal(lm, tasks)


@pytest.mark.slow
def test_hf_llama_under_self_extend_equals_lextras_own_numbers(hf_llama: Path, tasks: Path) -> None:
    lm = LextraLM(pretrained=str(hf_llama), extend=EXTEND, max_length=WINDOW, batch_size=3)
    assert lm.model.extension is not None and lm.prefix == [lm.prefix_token_id] == [256]  # its BOS
    check_equal(lm, tasks)


def test_model_args_keep_specs_whole_and_refuse_bad_input(lextra_run: Path) -> None:
    args = parse_model_args("pretrained=runs/x,extend=self_extend:group=4,window=16,mask=causal,max_length=64")
    assert args == {"pretrained": "runs/x", "extend": "self_extend:group=4,window=16", "mask": "causal",
                    "max_length": "64"}  # fmt: skip
    assert ModelArgs.from_dict(args).max_length == 64
    with pytest.raises(ConfigError, match="names no argument"):
        parse_model_args("group=4,pretrained=x")
    with pytest.raises(ConfigError, match="takes no argument 'temp'"):
        ModelArgs.from_dict({"pretrained": "x", "temp": "1"})
    with pytest.raises(ConfigError, match="max_length must be a positive integer"):
        ModelArgs.from_dict({"pretrained": "x", "max_length": "0"})
    with pytest.raises(LengthError, match="valid up to"):
        LextraLM(pretrained=str(lextra_run), extend="self_extend:group=2,window=8", max_length=100_000)


@pytest.mark.slow
def test_lextra_harness_cli_writes_json_csv_and_table(
    lextra_run: Path, tasks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = main(["harness", str(lextra_run), "--tasks", "lextra_rolling", "--include-path", str(tasks), "--extend",
                 EXTEND, "--max-length", str(WINDOW), "--out", str(out), "--quiet", "--log-samples"])  # fmt: skip
    assert code == 0
    saved = json.loads((out / "results.json").read_text())
    assert saved["label"] == f"rope+{EXTEND}" and saved["model_args"]["extend"] == EXTEND
    (row,) = [m for m in saved["metrics"] if m["metric"] == "byte_perplexity"]
    assert math.isfinite(row["value"]) and row["value"] > 1
    assert "byte_perplexity" in (out / "results.csv").read_text()
    assert "lextra_rolling" in (out / "table.md").read_text()
    logged = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [row["task"] for row in logged] == ["lextra_rolling"] * 2 and all(row["resps"] for row in logged)
    assert main(["harness", str(lextra_run), "--tasks", "t", "--include-path", str(tmp_path / "none"), "--quiet"]) == 2
    assert "is not a folder of lm-eval task YAMLs" in capsys.readouterr().err
    bad = ["harness", str(lextra_run), "--include-path", str(tasks), "--only-local", "--quiet"]
    assert main([*bad, "--tasks", "no_such_task"]) == 2
    assert "lm-eval knows no task 'no_such_task'" in capsys.readouterr().err
    assert (
        main([*bad, "--tasks", "lextra_rolling", "--extend", "self_extend:group=2,window=8", "--max-length", "99"]) == 2
    )
    assert "valid up to 56 tokens" in capsys.readouterr().err


def test_scores_do_not_depend_on_batching_or_logit_slices(lextra_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(1)
    enc = ByteTokenizer().encode
    pairs = [(enc(text(rng, 10 + i % 3)), enc(text(rng, 3 + i % 4))) for i in range(7)]
    one = LextraLM(pretrained=str(lextra_run), batch_size=1).scores(pairs)
    lm = LextraLM(pretrained=str(lextra_run), batch_size=4)
    together = lm.scores(pairs)
    monkeypatch.setattr("lextra.pipelines.harness.adapter.LOGIT_BUDGET", 1)  # one position's logits at a time
    sliced = lm.scores(pairs)
    for (a, ga), (b, gb), (c, gc) in zip(one, together, sliced, strict=True):
        assert a == pytest.approx(b, abs=1e-5) and a == pytest.approx(c, abs=1e-5) and ga == gb == gc
    assert all(total < 0 for total, _ in one)


def test_harness_without_lm_eval_is_one_line(lextra_run: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "lm_eval" else real(name, *a))
    assert main(["harness", str(lextra_run), "--tasks", "t", "--quiet"]) == 2
    assert "pip install 'lextra[harness]'" in capsys.readouterr().err
