"""The RULER suite: exact lengths for two tokenizers, needles at the asked depths, gold answers recovered from the
prompt alone by plain-Python oracles, RULER's scoring, pure samples, cached decoding, and the whole command."""

from __future__ import annotations

import collections
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import transformers

from lextra.cli import main
from lextra.data import ByteTokenizer, Document, build_tokenizer
from lextra.errors import ConfigError, DataError
from lextra.evaluate.retrieval.scoring import prefill
from lextra.evaluate.ruler import (
    RulerCell,
    RulerResult,
    check_vocabulary,
    effective_length,
    evaluate_cell,
    generate,
    template_parts,
)
from lextra.hf import adapt
from lextra.model import GPT, GPTConfig, save_model
from lextra.pipelines.study import Study, parse_study
from lextra.reporting.ruler import save_ruler_outputs
from lextra.tasks.ruler import (
    DEPTHS,
    RULER_TASK_NAMES,
    WORDS,
    ChatFormat,
    build_ruler_task,
    corpus_words,
    haystack_documents,
    postprocess,
    sample_seed,
    string_match_all,
    string_match_part,
    wilson_interval,
)

torch.set_num_threads(1)

BYTES = ByteTokenizer()
#: two prompt lengths per tokenizer, above every task's minimum (cwe's, the largest: ~1.8k bytes, ~1.1k BPE tokens)
LENGTHS = {"bytes": (1900, 2600), "bpe": (1300, 1700)}


@pytest.fixture(scope="module")
def documents() -> list[Document]:
    return haystack_documents()


@pytest.fixture(scope="module")
def bpe(documents, tmp_path_factory):
    """A byte-level BPE of 512 tokens trained on essay text (merges cross the prompts' words and digits)."""
    text = " ".join(d.text for d in documents)[:60_000]
    train = [Document(f"d{i}", text[i * 3000 : (i + 1) * 3000]) for i in range(20)]
    return build_tokenizer("bpe:512", train, tmp_path_factory.mktemp("bpe"), corpus_name="ruler-test")


def tokenizer_of(kind: str, bpe):
    return BYTES if kind == "bytes" else bpe


# --- oracles: the gold answer from the decoded prompt alone, with no knowledge of the generators ----------------
def niah_oracle(text: str) -> list[str]:
    """Every complete needle "... for KEY is: VALUE." read into KEY -> values; the asked keys from the question."""
    values: dict[str, list[str]] = collections.defaultdict(list)
    for key, value in re.findall(r"One of the special magic \w+ for (\S+) is: (\S+?)\.(?=\s|$)", text):
        values[key].append(value)
    asked = re.findall(r"What (?:is|are all) the special magic \w+ for (.+?) mentioned in the provided text\?", text)
    keys = re.split(r", and |, ", asked[-1])
    return [v for k in keys for v in values[k]]


def vt_oracle(text: str) -> list[str]:
    """Follow the chain from the asked value (the last question; an example may come first)."""
    value = re.findall(r"assigned the value (\d+) in the text above\.", text)[-1]
    holding = {name for name, v in re.findall(r"VAR ([A-Z]+) = (\d+)", text) if v == value}
    links = re.findall(r"VAR ([A-Z]+) = VAR ([A-Z]+)", text)
    while True:
        grown = holding | {b for b, a in links if a in holding}
        if grown == holding:
            return sorted(holding)
        holding = grown


def cwe_counts(text: str) -> collections.Counter:
    """Word counts of the last numbered list (the task's; a solved example's list comes first)."""
    body = text.split("Memorize the ones that appear most often.\n")[-1].split("\nQuestion:")[0]
    return collections.Counter(re.findall(r"\d+\. ([a-z]+)", body))


def fwe_counts(text: str) -> collections.Counter:
    """Counts of the coded words, the dots (noise the question says to ignore) left out."""
    body = text.split("Find the three most frequently appeared coded words. ")[-1].split("\nQuestion:")[0]
    return collections.Counter(w for w in body.split() if w.strip("."))


def oracle(task: str, text: str) -> list[str]:
    """The answer a reader of `text` gives (in the prompt's order for niah and vt, sorted for cwe and fwe)."""
    if task.startswith("niah"):
        return niah_oracle(text)
    if task == "vt":
        return vt_oracle(text)
    counts = cwe_counts(text) if task == "cwe" else fwe_counts(text)
    return sorted(w for w, _ in counts.most_common(10 if task == "cwe" else 3))


# --- generators ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["bytes", "bpe"])
@pytest.mark.parametrize("name", RULER_TASK_NAMES)
def test_every_task_hits_its_length_exactly_and_its_answer_follows_from_the_prompt(name, kind, documents, bpe):
    tokenizer = tokenizer_of(kind, bpe)
    task = build_ruler_task(name, tokenizer, documents)
    for length in LENGTHS[kind]:
        for index in range(2):
            sample = task.sample(length, index, seed=3)
            assert len(sample.prompt_ids) == length
            assert max(sample.prompt_ids) < tokenizer.vocab_size
            start, end = sample.context_span
            assert 0 < start < end < length and sample.units >= 1
            text = tokenizer.decode(sample.prompt_ids)
            assert sorted(oracle(name, text)) == sorted(sample.references), (name, kind, length, index)
            if name == "cwe":  # the common words stand clear of the rest
                counts = cwe_counts(text).most_common()
                assert counts[9][1] > counts[10][1]
            if name == "fwe":
                counts = fwe_counts(text).most_common()
                assert counts[2][1] > counts[3][1]


def test_task_contents_follow_ruler(documents) -> None:
    single = build_ruler_task("niah_single_1", BYTES).sample(1500, 0)
    assert re.fullmatch(r"\d{7}", single.references[0])
    assert single.text.startswith("A special magic number is hidden within the following text.")
    assert single.text.endswith(" mentioned in the provided text is")
    uuid = build_ruler_task("niah_multikey_3", BYTES).sample(2000, 0)
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", uuid.references[0])
    assert len(re.findall(r"One of the special magic uuids for [0-9a-f-]{36} is: ", uuid.text)) >= 5
    many = build_ruler_task("niah_multiquery", BYTES, documents).sample(2000, 0)
    assert len(many.references) == 4 and many.text.startswith("Some special magic numbers are hidden")
    assert many.text.endswith(" mentioned in the provided text are") and many.budget == 128
    vt = build_ruler_task("vt", BYTES).sample(2500, 0)
    assert len(vt.references) == 5 and all(re.fullmatch(r"[A-Z]{5}", v) for v in vt.references)
    assert vt.text.count("Memorize and track the chain(s)") == 2 and vt.budget == 30  # a solved example first
    assert vt.text.endswith("5 variables are assgined the value " + vt.text.split("value ")[-1])
    plain = build_ruler_task("vt", BYTES, fewshot=False).sample(2500, 0)
    assert plain.text.count("Memorize and track the chain(s)") == 1
    short = cwe_counts(build_ruler_task("cwe", BYTES).sample(3000, 0).text)
    long = cwe_counts(build_ruler_task("cwe", BYTES).sample(7000, 0).text)
    assert short.most_common(1)[0][1] == 6 and long.most_common(1)[0][1] == 30  # RULER's x6 below 4096 tokens
    assert min(long.values()) == 3 and min(short.values()) == 1


@pytest.mark.parametrize(
    ("name", "depths", "length"),
    [
        ("niah_single_1", [0.0], 3000),
        ("niah_single_1", [0.3], 3000),
        ("niah_single_1", [1.0], 3000),
        ("niah_single_2", [0.6], 6000),
        ("niah_multikey_2", [0.45], 3000),
        ("niah_multivalue", [0.1, 0.35, 0.7, 0.95], 6000),
        ("vt", [0.9, 0.1, 0.5, 0.3, 0.7], 4000),
    ],
)
def test_needles_sit_at_the_asked_depths(name, depths, length, documents) -> None:
    sample = build_ruler_task(name, BYTES, documents).sample(length, 0, depths=depths)
    text = BYTES.decode(sample.prompt_ids)
    start, end = sample.context_span
    context = BYTES.decode(sample.prompt_ids[start:end])
    if name == "vt":  # the chain's statements, in chain order, at the sorted depths
        value = re.findall(r"value (\d+) in the text above", text)[-1]
        first = re.search(rf"VAR ([A-Z]+) = {value}", context)
        spots, names = [first.start()], [first.group(1)]
        for _ in range(4):
            link = re.search(rf"VAR ([A-Z]+) = VAR {names[-1]}\b", context)
            spots.append(link.start())
            names.append(link.group(1))
        expected = sorted(depths)
    else:  # each asked value's needle
        spots = [context.index(f"is: {value}.") for value in sample.references]
        expected = depths
    # slack: a sentence-boundary snap in an essay, a noise line or a distractor otherwise, plus the other needles
    slack = (250 if name in ("niah_single_2", "niah_multivalue") else 110) + 70 * (len(depths) - 1)
    for spot, depth in zip(spots, expected, strict=True):
        assert abs(spot / len(context) - depth) <= slack / len(context) + 0.02, (name, depth, spot / len(context))
    assert sample.depths == (sorted(depths) if name == "vt" else depths)
    assert len(sample.needle_spans) == len(depths)
    for a, b in sample.needle_spans:
        assert "VAR" in BYTES.decode(sample.prompt_ids[a:b]) or "special magic" in BYTES.decode(sample.prompt_ids[a:b])


def test_depths_spread_over_the_grid_and_bad_depths_are_refused() -> None:
    task = build_ruler_task("niah_single_1", BYTES)
    firsts = [task.sample(1200, i).depths[0] for i in range(10)]
    assert len(set(firsts)) == 10 and set(firsts) <= set(DEPTHS)
    assert min(firsts) <= 0.2 and max(firsts) >= 0.8
    assert len(DEPTHS) == 40 and DEPTHS[0] == 0.0 and DEPTHS[-1] == 1.0
    with pytest.raises(ConfigError, match="takes 1 depths in \\[0, 1\\]"):
        task.sample(1200, 0, depths=[1.5])
    with pytest.raises(ConfigError, match=r"at least \d+ tokens .* got a 300-token prompt .*; use lengths of at least"):
        task.sample(300, 0)


def test_samples_are_pure_functions_of_task_length_index_and_seed(documents) -> None:
    first = build_ruler_task("niah_multikey_1", BYTES, documents)
    again = build_ruler_task("niah_multikey_1", BYTES, documents)
    a = first.sample(2000, 4, seed=1)
    assert again.sample(2000, 4, seed=1).prompt_ids == a.prompt_ids
    assert first.sample(2000, 4, seed=1).references == a.references  # no state carried between draws
    assert first.sample(2000, 5, seed=1).prompt_ids != a.prompt_ids
    assert first.sample(2000, 4, seed=2).prompt_ids != a.prompt_ids
    # the seed is SHA-256 of the parts, not Python's salted hash(): another process with another salt agrees
    code = (
        "from lextra.data import ByteTokenizer; from lextra.tasks.ruler import build_ruler_task, sample_seed;"
        "print(sample_seed('x', 1), build_ruler_task('vt', ByteTokenizer()).sample(2000, 3, 7).prompt_ids[-300:])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    here = build_ruler_task("vt", BYTES).sample(2000, 3, 7).prompt_ids[-300:]
    assert out.strip() == f"{sample_seed('x', 1)} {here}"


def test_the_word_list_is_the_english_corpus_vocabulary() -> None:
    from lextra.data import load_corpus

    assert list(WORDS) == corpus_words(load_corpus("english"))
    assert len(WORDS) > 8000 and len(set(WORDS)) == len(WORDS)


def test_a_tokenizer_that_loses_the_answer_is_refused() -> None:
    class Letters(ByteTokenizer):
        """Drops digits: the needle's number cannot be encoded."""

        name = "letters"

        def encode(self, text: str) -> list[int]:
            return [b for b in text.encode() if not 48 <= b <= 57]

    with pytest.raises(DataError, match=r"cannot encode RULER task 'niah_single_1'.*loses '\d{7}'"):
        build_ruler_task("niah_single_1", Letters()).sample(1500, 0)
    model = SimpleNamespace(config=SimpleNamespace(vocab_size=100))
    with pytest.raises(DataError, match=r"token id \d+ but the model has 100 embeddings"):
        check_vocabulary(model, [build_ruler_task("fwe", BYTES).sample(800, 0)], BYTES)


# --- scoring --------------------------------------------------------------------------------------------------------
def test_scoring_follows_rulers_rule() -> None:
    assert string_match_all(["The special magic number is 1234567."], [["1234567"]]) == 100.0
    assert string_match_all(["abc DEF"], [["def", "ghi"]]) == 50.0  # share contained, case-insensitive
    assert string_match_all(["nothing", "1 and 2"], [["1"], ["1", "2", "3"]]) == 33.33  # mean, rounded as RULER
    assert string_match_all(["12345678"], [["1234567"]]) == 100.0  # containment, as RULER (not exact match)
    assert string_match_part(["b and a"], [["b", "z"]]) == 100.0
    assert string_match_part(["a", "z"], [["b"], ["y", "z"]]) == 50.0
    assert postprocess("\x00 abc\tdef \n") == "abc\ndef"
    low, high = wilson_interval(50.0, 10)
    assert math.isclose(low, 23.659, abs_tol=1e-3) and math.isclose(high, 76.341, abs_tol=1e-3)
    assert wilson_interval(100.0, 10)[1] == 100.0 and math.isclose(wilson_interval(100.0, 10)[0], 72.246, abs_tol=1e-3)
    assert wilson_interval(0.0, 5)[0] == 0.0


def test_effective_length_needs_every_shorter_length_at_the_threshold() -> None:
    assert effective_length({4096: 90.0, 8192: 86.0, 16384: 70.0}) == 8192
    assert effective_length({4096: 90.0, 8192: 80.0, 16384: 95.0}) == 4096  # a recovery at 16k does not count
    assert effective_length({4096: 85.6}) == 4096 and effective_length({4096: 85.59}) is None
    assert effective_length({4096: 60.0, 8192: 61.0}, threshold=50.0) == 8192


# --- decoding -------------------------------------------------------------------------------------------------------
class ScriptedModel:
    """Emits, for each prompt row, the text `answer(prompt)` byte by byte, then `after` (a space); counts its calls."""

    def __init__(self, answer, after: int = ord(" ")) -> None:
        self.answer, self.after, self.calls = answer, after, 0
        self.config = SimpleNamespace(train_len=64, vocab_size=max(256, after + 1))

    def new_cache(self) -> SimpleNamespace:
        return SimpleNamespace(answers=None, step=0)

    def __call__(self, tokens: torch.Tensor, cache=None) -> torch.Tensor:
        self.calls += 1
        if cache.answers is None:
            cache.answers = [self.answer(BYTES.decode(row)).encode() for row in tokens.tolist()]
        else:
            cache.step += 1
        logits = torch.zeros(tokens.shape[0], tokens.shape[1], self.config.vocab_size)
        for row, answer in enumerate(cache.answers):
            logits[row, -1, answer[cache.step] if cache.step < len(answer) else self.after] = 1.0
        return logits


@pytest.mark.parametrize("name", ["niah_single_1", "niah_multivalue", "vt", "cwe"])
def test_a_model_that_reads_the_prompt_right_scores_100_and_stops_early(name, documents) -> None:
    model = ScriptedModel(lambda prompt: " " + " ".join(oracle(name, prompt)))
    task = build_ruler_task(name, BYTES, documents)
    cell = evaluate_cell(model, task, 2000, 3, batch_size=2)
    assert cell.score == 100.0 and cell.samples == 3 and cell.low < 100.0 == cell.high
    assert cell.examples[0].score == 1.0 and cell.examples[0].references[0] in cell.examples[0].output
    # each batch (samples 0-1, then 2) decodes in chunks of 16 tokens until its longest answer is out
    prompt = task.prompt_tokens(2000)  # RULER's rule: the prompts leave the answer budget of the 2000 tokens
    assert prompt == 2000 - task.budget and task.prompt_tokens(2000, "exact") == 2000
    answers = [len(" " + " ".join(task.sample(prompt, i).references)) for i in range(3)]
    chunks = [max(answers[:2]), answers[2]]
    assert model.calls == sum(min(task.budget, 16 * math.ceil(n / 16)) for n in chunks)
    if name.startswith("niah"):  # far below the 2 x 128 tokens of decoding to the budget
        assert model.calls <= 2 * 48


def test_partial_answers_score_their_share_and_silence_uses_the_whole_budget(documents) -> None:
    half = ScriptedModel(lambda prompt: " " + " ".join(oracle("niah_multivalue", prompt)[:2]))
    task = build_ruler_task("niah_multivalue", BYTES, documents)
    assert evaluate_cell(half, task, 2000, 2).score == 50.0
    silent = ScriptedModel(lambda prompt: "")
    sample = build_ruler_task("fwe", BYTES).sample(900, 0)
    texts = generate(silent, [sample.prompt_ids] * 2, [sample.references] * 2, BYTES, [50, 7])
    assert texts == [" " * 50, " " * 7] and silent.calls == 50  # one prefill and 49 steps
    padded = ScriptedModel(lambda prompt: "ok", after=259)  # ids past the tokenizer's 256 (a padded vocabulary)
    assert generate(padded, [sample.prompt_ids], [["never"]], BYTES, 5) == ["ok"]


def tiny_gpt(scheme: str = "rope") -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=256, n_layer=2, n_head=2, d_model=32, train_len=64, layer_plan=scheme)).eval()


def tiny_llama(max_pos: int = 64):
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(
        "llama", vocab_size=260, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_pos, rope_theta=10000.0,
    )  # fmt: skip
    return transformers.AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize(("mask", "extend"), [(None, None), ("window:32", None), (None, "sinks")])
@torch.no_grad()
def test_cached_greedy_decoding_equals_recomputing_the_whole_sequence(mask, extend) -> None:
    from lextra.attention import build_mask
    from lextra.extend import InferenceSetup

    model = tiny_gpt()
    if extend:  # attention sinks evict keys from the cache: the preallocated cache falls back to growing tensors
        InferenceSetup(extension=extend).apply(model)
    prompts = torch.randint(0, 256, (2, 200), generator=torch.Generator().manual_seed(1))
    full = build_mask(mask or "causal", 64)
    ids = prompts.clone()
    for _ in range(20):
        ids = torch.cat([ids, model(ids, mask=full)[:, -1].argmax(-1, keepdim=True)], dim=1)
    want = [BYTES.decode(row[200:]) for row in ids.tolist()]
    if mask:  # what generate decodes under: the mask the model's layers hold
        InferenceSetup(mask=mask).apply(model)
    got = generate(model, prompts.tolist(), [["\x00never"]] * 2, BYTES, 20)
    assert got == want
    if mask or extend:
        return
    hf = adapt(tiny_llama())
    logits, _ = prefill(hf, prompts)  # only the last position's logits
    assert torch.allclose(logits, hf(prompts)[:, -1], atol=1e-5)


# --- the command ------------------------------------------------------------------------------------------------
def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny") / "run"
    save_model(tiny_gpt(), folder / "model", extra={"tokenizer": {"kind": "bytes"}})
    return folder


def test_the_whole_command_on_a_tiny_lextra_model_writes_results_and_resumes(tiny_folder, tmp_path, capsys) -> None:
    out = tmp_path / "ruler"
    args = ["ruler", "run", str(tiny_folder), "--lengths", "1900,2600", "--samples", "2", "--out", str(out)]
    args += ["--tasks", ";".join(RULER_TASK_NAMES)]  # the built-in tasks (`all` adds a plugin's)
    assert main([*args, "--quiet", "--threads", "1", "--threshold", "0"]) == 0
    printed = capsys.readouterr().out
    assert "| niah_single_1 |" in printed and "effective length: 2600 (threshold 0)" in printed
    data = json.loads((out / "results.json").read_text())
    assert data["tasks"] == list(RULER_TASK_NAMES) and data["lengths"] == [1900, 2600]
    assert data["label"] == "rope" and data["model"] == str(tiny_folder / "model") and data["samples"] == 2
    assert data["effective_length"] == 2600 and set(data["averages"]) == {"1900", "2600"}
    for task in RULER_TASK_NAMES:
        for length in ("1900", "2600"):
            cell = data["cells"][task][length]
            assert 0.0 <= cell["low"] <= cell["score"] <= cell["high"] <= 100.0 and cell["samples"] == 2
            assert cell["seconds"] > 0 and len(cell["examples"]) == 2
    rows = (out / "results.csv").read_text().splitlines()
    assert rows[0] == "model,task,length,score,low,high,samples,seconds" and len(rows) == 1 + 11 * 2 + 2
    assert rows[-1].startswith("rope,average,2600,")
    assert (out / "heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(list((out / "cells").glob("*.json"))) == 22
    # resume: a cell whose key matches is read back (even a doctored answer), one whose key differs is recomputed
    kept, stale = out / "cells" / "cwe-1900.json", out / "cells" / "fwe-2600.json"
    doctored = json.loads(kept.read_text())
    assert [a["index"] for a in doctored["answers"]] == [0, 1] and "samples" not in doctored["key"]
    for answer in doctored["answers"]:
        answer["output"] = " ".join(answer["references"])  # contains every reference: scores 100
    kept.write_text(json.dumps(doctored))
    other = json.loads(stale.read_text())
    other["key"]["label"] = "alibi"
    for answer in other["answers"]:
        answer["output"] = " ".join(answer["references"])
    stale.write_text(json.dumps(other))
    assert main([*args, "--quiet", "--threads", "1"]) == 0
    again = json.loads((out / "results.json").read_text())
    assert again["cells"]["cwe"]["1900"]["score"] == 100.0 != data["cells"]["cwe"]["1900"]["score"]
    assert again["cells"]["fwe"]["2600"]["score"] == data["cells"]["fwe"]["2600"]["score"] != 100.0
    assert json.loads(stale.read_text())["key"]["label"] == "rope"


class InterruptedRunError(Exception):
    """Stands for a run killed mid-way."""


def test_cells_grow_by_the_samples_they_lack_and_keep_every_decoded_batch(tiny_folder, tmp_path, monkeypatch) -> None:
    import lextra.evaluate.ruler.evaluate as evaluate

    decoded: list[int] = []  # rows per call of generate
    stop_after: list[int] = []  # raise InterruptedRunError once this many calls have run
    real = evaluate.generate

    def counted(model, prompts, *args, **kwargs):
        if stop_after and len(decoded) == stop_after[0]:
            raise InterruptedRunError
        decoded.append(len(prompts))
        return real(model, prompts, *args, **kwargs)

    monkeypatch.setattr(evaluate, "generate", counted)

    def run(out: Path, samples: int, *extra: str) -> dict:
        args = ["ruler", "run", str(tiny_folder), "--tasks", "niah_single_1,vt", "--lengths", "1700", "--out", str(out)]
        assert main([*args, "--samples", str(samples), "--quiet", "--threads", "1", *extra]) == 0
        return json.loads((out / "results.json").read_text())

    def answers(out: Path, task: str) -> list[dict]:
        return json.loads((out / "cells" / f"{task}-1700.json").read_text())["answers"]

    two = run(tmp_path / "a", 2)
    assert sum(decoded) == 4 and [a["index"] for a in answers(tmp_path / "a", "vt")] == [0, 1]
    assert all(0 < a["prefill_seconds"] <= a["seconds"] for a in answers(tmp_path / "a", "vt"))
    cell = two["cells"]["vt"]["1700"]
    held = sum(a["prefill_seconds"] for a in answers(tmp_path / "a", "vt"))  # rounded to ms each
    assert cell["prefill_seconds"] == pytest.approx(held, abs=2e-3) and cell["prefill_seconds"] <= cell["seconds"]
    table = (tmp_path / "a" / "table.md").read_text()
    assert re.search(r"compute: \d+ s \((\d+\.\d\d)x their prefills\)", table)
    first = answers(tmp_path / "a", "niah_single_1")
    decoded.clear()
    three = run(tmp_path / "a", 3)
    assert sum(decoded) == 2 and three["samples"] == 3  # only sample 2 of each task was decoded
    assert answers(tmp_path / "a", "niah_single_1")[:2] == first
    for task in ("niah_single_1", "vt"):
        held = answers(tmp_path / "a", task)
        expected = round(sum(a["score"] for a in held) / 3 * 100, 2)
        assert three["cells"][task]["1700"]["score"] == expected and three["cells"][task]["1700"]["samples"] == 3
    decoded.clear()
    one = run(tmp_path / "a", 1)
    assert decoded == [] and one["cells"]["vt"]["1700"]["samples"] == 1  # read back, nothing decoded
    assert one["cells"]["niah_single_1"]["1700"]["score"] == round(first[0]["score"] * 100, 2)
    assert len(answers(tmp_path / "a", "vt")) == 3  # a smaller run keeps what the cell holds
    assert two["cells"]["vt"]["1700"]["examples"] == three["cells"]["vt"]["1700"]["examples"]

    # a run killed after its second batch keeps both batches; the rerun decodes only the rest, to the same answers
    decoded.clear()
    stop_after.append(2)
    with pytest.raises(InterruptedRunError):
        run(tmp_path / "b", 3, "--batch-size", "1")
    assert [a["index"] for a in answers(tmp_path / "b", "vt")] == [0, 1]  # vt's short budget sorts it first
    assert not (tmp_path / "b" / "cells" / "niah_single_1-1700.json").exists()
    stop_after.clear()
    decoded.clear()
    run(tmp_path / "b", 3, "--batch-size", "1")
    assert decoded == [1] * 4
    for task in ("niah_single_1", "vt"):
        assert [a["output"] for a in answers(tmp_path / "b", task)] == [
            a["output"] for a in answers(tmp_path / "a", task)
        ]


def _result(label: str, scores: dict[str, dict[int, float]], samples: int = 4) -> RulerResult:
    """A RULER result from hand-written scores (intervals from the scores)."""
    cells = {
        task: {n: RulerCell(task, n, v, *wilson_interval(v, samples), samples, 1.0) for n, v in row.items()}
        for task, row in scores.items()
    }
    lengths = sorted({n for row in scores.values() for n in row})
    return RulerResult(label, list(scores), lengths, samples, 0, 85.6, cells)


def test_ruler_compare_puts_runs_side_by_side(tmp_path, capsys) -> None:
    base = _result("base", {"niah_single_1": {1000: 100.0, 2000: 50.0}, "vt": {1000: 80.0, 2000: 0.0}})
    scaled = _result("base+yarn:2", {"niah_single_1": {1000: 100.0, 2000: 100.0, 4000: 75.0}, "vt": {1000: 100.0,
                     2000: 75.0, 4000: 25.0}}, samples=2)  # fmt: skip
    for name, result in (("a", base), ("b", scaled)):
        save_ruler_outputs(tmp_path / name, result)
    runs = [str(tmp_path / "a"), str(tmp_path / "b" / "results.json")]
    assert main(["ruler", "compare", *runs, "--out", str(tmp_path / "c")]) == 0
    printed = capsys.readouterr().out
    summary = printed.split("\n\n")[1].splitlines()
    assert summary[0] == "| run | 1000 | 2000 | 4000 | effective length | tasks | samples |"
    assert summary[2] == "| base | 90.0 | 25.0 | - | 1000 | 2 | 4 |"
    assert summary[3] == "| base+yarn:2 | 100.0 | 87.5 | 50.0 | 2000 | 2 | 2 |"
    low, high = wilson_interval(75.0, 2)
    assert f"| vt | 0 [0, {wilson_interval(0.0, 4)[1]:.0f}] | 75 [{low:.0f}, {high:.0f}] |" in printed
    at_4000 = printed.split("### 4000 tokens")[1]
    assert "| niah_single_1 | - | 75 [" in at_4000 and "| average | - | 50.0 |" in at_4000
    rows = (tmp_path / "c" / "comparison.csv").read_text().splitlines()
    assert len(rows) == 1 + (4 + 2) + (6 + 3) and rows[-1].startswith("base+yarn:2,average,4000,50.0")
    assert (tmp_path / "c" / "averages.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "c" / "comparison.md").read_text().strip() == printed.split("\n\ntable:")[0].strip()
    # one line, exit 2: the same label twice, a folder without results, a file that is not one
    assert main(["ruler", "compare", str(tmp_path / "a"), str(tmp_path / "a")]) == 2
    assert "needs runs with distinct labels, got ['base', 'base']" in one_line_error(capsys)
    assert main(["ruler", "compare", str(tmp_path / "a"), str(tmp_path / "none")]) == 2
    missing = tmp_path / "none" / "results.json"
    assert f"no RULER results at {missing}; run `lextra ruler MODEL --out" in one_line_error(capsys)
    (tmp_path / "bad.json").write_text('{"label": "x"}')
    assert main(["ruler", "compare", str(tmp_path / "bad.json")]) == 2
    assert "bad.json is not a `lextra ruler` results.json (KeyError" in one_line_error(capsys)


def test_masks_temperatures_and_extension_methods_reach_a_lextra_model(tiny_folder, tmp_path, capsys) -> None:
    (tmp_path / "align.json").write_text(json.dumps({"strategy": "pmax", "temperatures": [[1.5, 0.5], [1.0, 2.0]]}))
    base = ["ruler", str(tiny_folder), "--tasks", "niah_single_1", "--lengths", "900", "--samples", "1", "--quiet"]
    tau = ["--temperature", str(tmp_path / "align.json")]
    assert main([*base, "--out", str(tmp_path / "a"), "--mask", "window:32", *tau]) == 0
    cell = json.loads((tmp_path / "a" / "cells" / "niah_single_1-900.json").read_text())
    assert cell["key"]["label"] == "rope+window:32+tau-pmax" and cell["key"]["mask"] == "window:32"
    assert cell["key"]["temperatures"] == [[1.5, 0.5], [1.0, 2.0]]
    assert main([*base, "--out", str(tmp_path / "b"), "--extend", "rerope:window=16"]) == 0
    assert json.loads((tmp_path / "b" / "results.json").read_text())["label"] == "rope+rerope:window=16"
    capsys.readouterr()
    assert main([*base, "--out", str(tmp_path / "c"), "--extend", "self_extend"]) == 2  # past its maximum length
    assert "self_extend(L=64, group=8" in one_line_error(capsys)


def test_a_tiny_hugging_face_llama_runs_tasks_with_and_without_its_chat_template(tmp_path: Path, capsys) -> None:
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers

    backend = Backend(models.BPE(vocab={c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    hf_tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>")
    hf_tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    folder = tmp_path / "llama"
    tiny_llama().save_pretrained(folder)
    hf_tokenizer.save_pretrained(folder)
    assert template_parts(hf_tokenizer) == ChatFormat("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")
    common = ["ruler", "run", str(folder), "--tasks", "niah_single_1,fwe", "--lengths", "700", "--samples", "1"]
    common += ["--quiet"]
    assert main([*common, "--out", str(tmp_path / "base"), "--threads", "1"]) == 0
    assert main([*common, "--out", str(tmp_path / "chat"), "--chat", "--rope-scaling", "yarn:4"]) == 0
    base = json.loads((tmp_path / "base" / "results.json").read_text())
    chat = json.loads((tmp_path / "chat" / "results.json").read_text())
    assert base["label"] == "llama" and not base["chat"] and base["tasks"] == ["niah_single_1", "fwe"]
    assert chat["label"] == "llama+yarn:4+chat" and chat["chat"] and chat["model"] == str(folder)
    assert set(chat["cells"]["fwe"]) == {"700"}
    capsys.readouterr()
    assert main([*common, "--out", str(tmp_path / "x"), "--chat", "--tokenizer", "bytes"]) == 2
    assert "--chat needs the model's Hugging Face tokenizer with a chat template" in one_line_error(capsys)


def test_bad_input_exits_2_with_one_line_naming_the_fix(tiny_folder, tmp_path, capsys) -> None:
    from tokenizers import Tokenizer as Backend
    from tokenizers import models, pre_tokenizers

    base = ["ruler", str(tiny_folder), "--out", str(tmp_path / "out"), "--quiet", "--samples", "1"]
    assert main([*base, "--tasks", "niah_single_1,niah_single_9"]) == 2
    line = one_line_error(capsys)
    assert "unknown RULER task 'niah_single_9'" in line and "use 'all' or names from: niah_single_1" in line
    assert main([*base, "--lengths", "1000", "--tasks", "vt"]) == 2
    line = one_line_error(capsys)
    found = re.search(r"RULER task 'vt' needs prompts of at least (\d+) tokens .* got a (\d+)-token prompt .* "
                      r"less its (\d+)-token answer budget\); use lengths of at least (\d+)", line)  # fmt: skip
    assert found, line
    needed, prompt, budget, advised = map(int, found.groups())
    assert prompt + budget == 1000 and advised == needed + budget  # the prompt is the length less the budget
    assert main([*base, "--lengths", "300", "--tasks", "vt;cwe;niah_single_1"]) == 2
    line = one_line_error(capsys)  # every task too long for the length, in one line: not one per try
    asked = r" needs (\d+) \(asked 300\)"
    pattern = rf"(\d) tasks do not fit their cells .*: 'vt'{asked}, 'cwe'{asked}, 'niah_single_1'{asked}; use"
    found = re.search(pattern, line)
    assert found and found.group(1) == "3" and min(map(int, found.groups()[1:])) > 300, line
    assert main([*base, "--samples", "0"]) == 2
    assert "argument --samples: must be an integer >= 1, got '0'" in one_line_error(capsys)
    words = Backend(models.WordLevel(vocab={"[UNK]": 0, "A": 1, "special": 2}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]").save_pretrained(tmp_path / "wl")
    assert main([*base, "--tokenizer", f"hf:{tmp_path / 'wl'}", "--tasks", "niah_single_1", "--lengths", "900"]) == 2
    assert "cannot encode RULER task 'niah_single_1'" in one_line_error(capsys)
    assert not (tmp_path / "out").exists()  # every refusal came before any work


# --- a study's [ruler] section --------------------------------------------------------------------------------------
def test_a_study_ruler_section_is_checked_and_runs_resumable_cells(tiny_folder, tmp_path, monkeypatch) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(6):
        (corpus / f"d{i}.txt").write_text(f"document {i}: " + "lorem ipsum dolor sit amet " * 40)
    study = {
        "train": {"corpus": str(corpus), "model": {"train_len": 64, "n_layer": 1, "d_model": 32, "n_head": 2}},
        "models": [{"label": "rope", "scheme": "rope"}],
        "multiples": [1, 2],
    }
    with pytest.raises(ConfigError, match="unknown RULER task 'nope'"):
        parse_study({**study, "ruler": {"tasks": ["nope"]}})
    with pytest.raises(ConfigError, match="\\[ruler\\]: unknown keys \\['depth'\\]"):
        parse_study({**study, "ruler": {"depth": 1}})
    with pytest.raises(ConfigError, match="no model labelled 'alibi'"):
        parse_study({**study, "ruler": {"models": ["alibi"]}})
    section = {"models": ["rope"], "tasks": ["niah_single_1", "fwe"], "multiples": [20, 30], "samples": 1}
    config = parse_study({**study, "ruler": section})
    run = Study(config, tmp_path / "study", progress=False)
    run.models[("rope", 0)] = tiny_folder / "model"
    results = run.ruler()
    folder = tmp_path / "study" / "ruler" / "rope"
    assert results["rope"].lengths == [1280, 1920] and (folder / "heatmap.png").exists()
    summary = (tmp_path / "study" / "ruler" / "comparison.md").read_text().split("\n\n")[1].splitlines()
    averages = results["rope"].averages
    assert summary[2].startswith(f"| rope | {averages[1280]:.1f} | {averages[1920]:.1f} | ")
    assert sorted(p.name for p in (folder / "cells").iterdir()) == [
        "fwe-1280.json", "fwe-1920.json", "niah_single_1-1280.json", "niah_single_1-1920.json",
    ]  # fmt: skip
    stamps = {p.name: p.stat().st_mtime_ns for p in (folder / "cells").iterdir()}
    again = Study(config, tmp_path / "study", progress=False)
    again.models[("rope", 0)] = tiny_folder / "model"
    assert again.ruler()["rope"].to_dict() == results["rope"].to_dict()
    assert {p.name: p.stat().st_mtime_ns for p in (folder / "cells").iterdir()} == stamps
    # a finished model's RULER is a study cell: a third run reads it without running the suite
    monkeypatch.setattr("lextra.pipelines.ruler.run_ruler", lambda *a, **k: pytest.fail("ran a finished RULER cell"))
    third = Study(config, tmp_path / "study", progress=False)
    third.models[("rope", 0)] = tiny_folder / "model"
    assert third.ruler()["rope"].to_dict() == results["rope"].to_dict()
