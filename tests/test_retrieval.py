"""Retrieval prompts put the needle where asked, training rows end with the answer, scoring is exact."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch
from torch import nn

import lextra.cli.retrieval  # noqa: F401  (registers `lextra retrieval`)
from lextra.cli import main
from lextra.data import ByteTokenizer, Document, build_tokenizer
from lextra.data.prepare import prepare_data
from lextra.errors import ConfigError, DataError
from lextra.evaluate.retrieval.completion import (
    LineScores,
    edit_similarity,
    evaluate_completion,
    line_match,
    pick_lines,
)
from lextra.evaluate.retrieval.evaluate import RetrievalResult, RetrievalScores, evaluate_retrieval
from lextra.evaluate.retrieval.scoring import candidate_loglik, gold_rank, prefill, score_prompts
from lextra.kv_cache import KVCache
from lextra.model import GPT, GPTConfig
from lextra.reporting.retrieval import save_retrieval_outputs
from lextra.tasks.registry import TRAINING_TASKS, parse_task_spec
from lextra.tasks.retrieval import TASK_NAMES, TASKS, build_task
from lextra.tasks.rows import RowSource
from lextra.train import TrainConfig, batch_source

torch.set_num_threads(1)

LIMIT = 1_000_000
BYTES = ByteTokenizer()
CODE = [Document(f"f{i}.py", f"def f{i}(x):\n    return x + {i}\n\n" * 20) for i in range(8)]
SIMPLE_TASKS = ["passkey", "passkey-mj", "lines", "kv"]


@pytest.fixture(scope="module")
def bpe():
    """A small byte-level BPE trained on text like the prompts (no Hugging Face download)."""
    docs = [
        Document(f"d{i}", f"The pass key is {i * 7919}. The grass is green. line {i}: {i * 13} ") for i in range(60)
    ]
    import tempfile

    return build_tokenizer("bpe:300", docs, tempfile.mkdtemp(), corpus_name="retrieval-test")


def make_task(name: str, tokenizer=BYTES):
    return build_task(name, tokenizer, CODE if name == "code-key" else None)


# ----------------------------------------------------------------------------- generators
@pytest.mark.parametrize("name", [*SIMPLE_TASKS, "code-key"])
@pytest.mark.parametrize("tokenizer_kind", ["bytes", "bpe"])
def test_needle_at_exact_depth_and_length_with_recoverable_answer(name, tokenizer_kind, bpe) -> None:
    tokenizer = BYTES if tokenizer_kind == "bytes" else bpe
    task = make_task(name, tokenizer)
    length = 600 if tokenizer_kind == "bytes" else 400
    fixed_positions = []
    for depth in (0.0, 0.25, 0.5, 0.75, 1.0):
        sample = task.sample(length, depth, random.Random(7))
        assert len(sample.prompt_ids) == length  # exact, for every tokenizer
        start, end = sample.needle_tokens
        needle_text = sample.prompt_text[sample.needle_span[0] : sample.needle_span[1]]
        assert tokenizer.decode(sample.prompt_ids[start:end]) == needle_text
        assert sample.answer_text.strip() in needle_text  # the answer is in the needle ...
        assert sample.prompt_text.count(sample.answer_text.strip()) == needle_text.count(sample.answer_text.strip())
        assert sample.answer_ids == tokenizer.encode(sample.answer_text)
        assert all(d.strip() != sample.answer_text.strip() for d in sample.distractors)
        assert len(sample.distractors) == 4
        fixed_positions.append(start)
        if name in ("passkey", "passkey-mj", "code-key"):
            prefix = len(tokenizer.encode(PREFIXES[name]))
            question = tokenizer.encode(question_of(sample))
            assert sample.prompt_ids[-len(question) :] == question
            filler = length - (end - start) - len(question) - prefix
            assert start - prefix == math.floor(depth * filler + 0.5)
    assert fixed_positions == sorted(fixed_positions) and fixed_positions[0] < fixed_positions[-1]


PREFIXES = {
    "passkey": "",
    "code-key": "",
    "passkey-mj": build_task("passkey-mj", BYTES).draw(random.Random(0))["prefix"],
}


def question_of(sample) -> str:
    """The question that ends a passkey or code-key prompt."""
    text = sample.prompt_text
    return text[text.rindex("\nWhat is") if "\nWhat is" in text else text.rindex("\n\nassert") :]


@pytest.mark.parametrize("name", ["lines", "kv"])
def test_record_tasks_put_the_gold_record_at_the_depth_slot(name) -> None:
    task = make_task(name)
    for depth in (0.0, 0.5, 1.0):
        sample = task.sample(900, depth, random.Random(3))
        text = sample.prompt_text
        marker = "line " if name == "lines" else '": "'
        starts = [i for i in range(len(text)) if text.startswith(marker, i)][: -1 if name == "lines" else None]
        gold = starts.index(next(s for s in starts if sample.needle_span[0] <= s < sample.needle_span[1]))
        assert gold == math.floor(depth * (len(starts) - 1) + 0.5)


def test_passkey_exact_text_and_determinism() -> None:
    task = make_task("passkey")
    a, b = task.sample(200, 0.5, random.Random(1)), task.sample(200, 0.5, random.Random(1))
    assert a == b
    assert a != task.sample(200, 0.5, random.Random(2))
    key = a.answer_text.strip()
    assert len(key) == 5 and key.isdigit()
    assert f"The pass key is {key}. Remember it. {key} is the pass key." in a.prompt_text
    assert a.prompt_text.endswith("\nWhat is the pass key? The pass key is")
    assert a.prompt_ids == BYTES.encode(a.prompt_text)  # bytes: the text is exactly the ids


@pytest.mark.parametrize("name", [*SIMPLE_TASKS, "code-key"])
def test_samples_drawn_in_a_row_differ(name) -> None:
    task, rng = make_task(name), random.Random(0)
    samples = [task.sample(400, 0.5, rng) for _ in range(3)]
    assert len({s.answer_text for s in samples}) == 3 and len({s.prompt_text for s in samples}) == 3


def test_too_short_lengths_and_bad_depths_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="at least"):
        make_task("passkey").sample(40, 0.5, random.Random(0))
    with pytest.raises(ConfigError, match="depth"):
        make_task("kv").sample(400, 1.5, random.Random(0))
    with pytest.raises(ConfigError, match="unknown retrieval task 'haystack'; known retrieval tasks: passkey"):
        build_task("haystack", BYTES)
    with pytest.raises(ConfigError, match="has no option 'instruction'; its options: digits, distractors"):
        build_task("passkey", BYTES, instruction=True)


def test_tasks_are_built_through_the_registry_with_their_options() -> None:
    assert set(TASK_NAMES) == {"passkey", "passkey-mj", "lines", "kv", "code-key"}
    assert [o.name for o in TASKS.options("kv")] == ["width", "distractors", "ends"]
    kv = build_task("kv", BYTES, CODE, width=4, distractors=2)  # documents are ignored by tasks without them
    sample = kv.sample(300, 0.5, random.Random(0))
    assert len(sample.answer_text) == 4 and len(sample.distractors) == 2
    instructed = build_task("passkey-mj", BYTES)
    assert instructed.name == "passkey-mj" and build_task("passkey", BYTES).name == "passkey"  # seeds use names
    with pytest.raises(DataError, match="code-key"):
        build_task("code-key", BYTES)


# ----------------------------------------------------------------------------- training batches
def _needle_depth(row: list[int]) -> str:
    """Where a passkey training row's needle sits: 'start', 'end' (just before the question) or 'inside'."""
    text = BYTES.decode(row)
    if text.startswith("The pass key is"):
        return "start"
    return "end" if "is the pass key. \nWhat is the pass key?" in text else "inside"


def test_training_rows_put_a_share_ends_of_needles_at_either_end() -> None:
    plain, ended = make_task("passkey"), build_task("passkey", BYTES, ends=0.4)
    seeds = range(1500)
    # ends=0 draws exactly the rows a uniform depth draws, from the same generator state
    for seed in range(20):
        rng = random.Random(seed)
        expected = plain.sample(129, rng.random(), rng, with_answer=True)
        assert plain.training_row(129, random.Random(seed)) == expected.prompt_ids + expected.answer_ids

    def share(task, where: str) -> float:
        return sum(_needle_depth(task.training_row(129, random.Random(s))) == where for s in seeds) / len(seeds)

    assert share(plain, "start") < 0.04 and share(plain, "end") < 0.04  # 26 filler bytes: about 1/52 each
    assert 0.17 < share(ended, "start") < 0.27 and 0.17 < share(ended, "end") < 0.27  # 0.2 each, plus the uniform's
    always = build_task("passkey", BYTES, ends=1.0)
    assert {_needle_depth(always.training_row(129, random.Random(s))) for s in range(200)} == {"start", "end"}
    with pytest.raises(ConfigError, match=r"ends=1.5 is a share of training rows; use a value in \[0, 1\]"):
        build_task("passkey", BYTES, ends=1.5)
    assert parse_task_spec("passkey,ends=0.4").options == {"ends": 0.4}


def test_task_specs_parse_and_every_task_is_in_the_one_training_registry() -> None:
    assert parse_task_spec("passkey").ratio == 1.0
    assert parse_task_spec("kv+lm").ratio == 0.5
    assert parse_task_spec("lines:0.25").ratio == 0.25
    for bad in ("passkey:2", "passkey:x", "needle"):
        with pytest.raises(ConfigError):
            parse_task_spec(bad)
    names = set(TRAINING_TASKS.names())  # retrieval, RULER and algorithmic tasks alike
    assert set(TASK_NAMES) <= names and {"ruler.niah", "ruoss.reverse_string", "mqar"} <= names


@pytest.mark.parametrize("name", [*SIMPLE_TASKS, "code-key"])
def test_batches_are_pure_and_end_with_the_answer(name) -> None:
    task = make_task(name)
    source = RowSource(task)
    length = 300 if name == "passkey-mj" else 128
    batch = source.batch(5, 4, length, seed=3)
    assert batch.shape == (4, length + 1) and batch.dtype == torch.long
    assert torch.equal(batch, source.batch(5, 4, length, seed=3))
    assert not torch.equal(batch, source.batch(6, 4, length, seed=3))
    assert not torch.equal(batch, source.batch(5, 4, length, seed=3, rank=1, world_size=2))
    for row in batch.tolist():
        text = BYTES.decode(row)
        answer = text[-5:] if name != "kv" else text[-8:]
        needle_region = text[: -len(answer)]
        assert answer.strip() and answer.strip() in needle_region[:-10]  # the answer was hidden earlier


def test_mixed_batches_hold_task_and_corpus_rows() -> None:
    data = prepare_data("python-code", limit_chars=LIMIT)
    config = TrainConfig(limit_chars=LIMIT, task="passkey+lm")
    source = batch_source(config, data)
    batch = source.batch(0, 32, 128, seed=0)
    kinds = ["What is the pass key?" in BYTES.decode(row) for row in batch.tolist()]
    assert 0 < sum(kinds) < 32
    assert torch.equal(batch, batch_source(config, data).batch(0, 32, 128, seed=0))


# ----------------------------------------------------------------------------- scoring
class ScriptedModel(nn.Module):
    """A fake LM: at absolute position p it puts logit `high` on script[p] (0 elsewhere), else uniform."""

    def __init__(self, script: dict[int, int], vocab: int = 256, high: float = 10.0) -> None:
        super().__init__()
        self.config = GPTConfig(n_layer=1, n_head=1, d_model=8, train_len=16)
        self.script, self.vocab, self.high = script, vocab, high

    def new_cache(self) -> KVCache:
        return KVCache(1)

    def forward(self, tokens: torch.Tensor, cache=None) -> torch.Tensor:
        start = cache.length if cache is not None else 0
        B, L = tokens.shape
        logits = torch.zeros(B, L, self.vocab)
        for i in range(L):
            if start + i in self.script:
                logits[:, i, self.script[start + i]] = self.high
        if cache is not None:
            cache.length += L
        return logits


def test_greedy_exact_match_and_rank_on_a_scripted_model() -> None:
    prompt = [1, 2, 3, 4]
    # position 3 (last prompt token) predicts 7, then position 4 predicts 8: the model says "7 8"
    model = ScriptedModel({3: 7, 4: 8})
    result = score_prompts(model, [prompt, prompt], [[7, 8], [7, 9]], [[[5, 6], [7, 5]], [[7, 8], [1, 1]]])
    assert result["generated"] == [[7, 8], [7, 8]]
    assert result["exact"] == [True, False]
    high = 10.0 - math.log(math.exp(10.0) + 255)  # log-prob of the scripted token
    low = -math.log(math.exp(10.0) + 255)  # of any other token
    expected = [[2 * high, 2 * low, high + low], [high + low, 2 * high, 2 * low]]
    assert torch.allclose(torch.tensor(result["loglik"]), torch.tensor(expected), atol=1e-5)
    assert result["rank"] == [1, 2]


def test_ties_rank_against_the_gold_answer_and_single_token_answers() -> None:
    assert gold_rank(torch.tensor([[0.0, 0.0, -1.0], [-1.0, -2.0, -3.0], [-3.0, -1.0, -2.0]])).tolist() == [2, 1, 3]
    model = ScriptedModel({2: 4})
    logits, cache = prefill(model, torch.tensor([[1, 2, 3]]))
    scores = candidate_loglik(model, logits, cache, [[[4], [5]]])
    assert scores[0, 0] > scores[0, 1]


@torch.no_grad()
def test_the_prefill_attends_with_the_mask_the_setup_set() -> None:
    from lextra.extend import InferenceSetup

    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, d_model=32, train_len=16, layer_plan="alibi")).eval()
    prompts = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0))
    causal, _ = prefill(model, prompts)
    InferenceSetup(mask="window:4").apply(model)
    windowed, cache = prefill(model, prompts)
    assert torch.allclose(windowed, model(prompts, mask="window:4")[:, -1], atol=1e-5)
    assert not torch.allclose(windowed, causal, atol=1e-3)
    assert cache.length == 40


@torch.no_grad()
def test_cached_scoring_matches_a_full_forward_pass() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, d_model=32, train_len=16, layer_plan="rope")).eval()
    prompt, answer, other = [5, 6, 7, 8, 9, 10], [11, 12, 13], [14, 15, 16]
    result = score_prompts(model, [prompt], [answer], [[other]])
    for index, cand in enumerate((answer, other)):
        tokens = torch.tensor([prompt + cand])
        logp = torch.log_softmax(model(tokens[:, :-1]), -1)[0, len(prompt) - 1 :]
        manual = logp.gather(1, torch.tensor(cand)[:, None]).sum()
        assert math.isclose(result["loglik"][0][index], float(manual), abs_tol=1e-4)
    full = model(torch.tensor([prompt])).argmax(-1)[0, -1].item()
    assert result["generated"][0][0] == full


def test_evaluation_grid_on_an_oracle_and_saved_outputs(tmp_path) -> None:
    task = make_task("passkey")

    class Oracle(ScriptedModel):
        """Knows every passkey: reads it from the prompt and predicts it after the prompt."""

        def forward(self, tokens, cache=None):
            if cache is not None and cache.length == 0:
                self.script = {}
                text = BYTES.decode(tokens[0].tolist())
                key = " " + text.split("The pass key is ")[1][:5]
                self.script = {tokens.shape[1] - 1 + i: b for i, b in enumerate(BYTES.encode(key))}
            return super().forward(tokens, cache)

    result = evaluate_retrieval(Oracle({}), task, [128, 256], [0.0, 1.0], samples=3, batch_size=1, label="oracle")
    assert result.by_length[256] == RetrievalScores(exact=1.0, rank1=1.0, mean_rank=1.0)
    blind = evaluate_retrieval(ScriptedModel({}), task, [128], [0.5], samples=2, label="blind")
    assert blind.overall.exact == 0.0 and blind.overall.mean_rank == 5.0  # ties rank last
    paths = save_retrieval_outputs(tmp_path, result)
    saved = json.loads(paths["json"].read_text())
    assert saved["cells"]["128"]["1.0"]["exact"] == 1.0
    assert paths["heatmap"].stat().st_size > 1000 and "| oracle |" in paths["table"].read_text()


def test_answer_inside_fits_prompt_and_answer_in_the_length() -> None:
    task, prefills = make_task("passkey"), []

    class Recorder(ScriptedModel):
        def forward(self, tokens, cache=None):
            if cache is not None and cache.length == 0:
                prefills.append(tokens.shape[1])
            return super().forward(tokens, cache)

    plain = evaluate_retrieval(Recorder({}), task, [128], [0.0, 1.0], samples=2, batch_size=1)
    inside = evaluate_retrieval(Recorder({}), task, [128], [0.0, 1.0], samples=2, batch_size=1, answer_inside=True)
    assert prefills == [128] * 4 + [128 - len(" 12345")] * 4  # the 6-byte answer then ends at 128
    assert not plain.answer_inside and inside.answer_inside
    assert RetrievalResult.from_dict(json.loads(json.dumps(inside.to_dict()))).answer_inside


# ----------------------------------------------------------------------------- code completion
def test_line_metrics_and_line_picking() -> None:
    assert line_match("    return x  ", "    return x") and not line_match("return x", "    return x")
    assert edit_similarity("abcd", "abcd") == 1.0 and edit_similarity("", "abcd") == 0.0
    assert math.isclose(edit_similarity("abcd", "abce"), 0.75)
    picked = pick_lines(CODE, BYTES, context=40, count=5, seed=0, max_line_tokens=80)
    assert len(picked) == 5
    for context, line in picked:
        assert len(context) == 40 and BYTES.decode(context).endswith("\n") and line.strip()
        assert any(BYTES.decode(context) + line in d.text for d in CODE)


def test_completion_on_a_model_that_copies_the_repeating_file() -> None:
    class Copier(nn.Module):
        """Predicts the token seen `period` positions earlier (the files repeat every `period` bytes)."""

        def __init__(self, period: int) -> None:
            super().__init__()
            self.config = GPTConfig(n_layer=1, n_head=1, d_model=8, train_len=16)
            self.period, self.seen = period, None

        def new_cache(self) -> KVCache:
            return KVCache(1)

        def forward(self, tokens, cache=None):
            self.seen = tokens if cache.length == 0 else torch.cat([self.seen, tokens], 1)
            cache.length += tokens.shape[1]
            L = self.seen.shape[1]
            logits = torch.zeros(tokens.shape[0], tokens.shape[1], 256)
            for i in range(L - tokens.shape[1], L):
                source = i + 1 - self.period
                if source >= 0:
                    logits[torch.arange(tokens.shape[0]), i - (L - tokens.shape[1]), self.seen[:, source]] = 10.0
            return logits

    period = len("def f1(x):\n    return x + 1\n\n")
    docs = [Document("f1.py", "def f1(x):\n    return x + 1\n\n" * 30)]
    result = evaluate_completion(Copier(period), docs, BYTES, [16, 64], lines=4, max_new=40)
    assert result.buckets[64].full == LineScores(exact=1.0, edit_sim=1.0)  # the whole period is visible
    assert result.buckets[64].truncated.exact < 1.0  # only L_tr = 16 tokens: cannot copy


# ----------------------------------------------------------------------------- commands end to end
def test_train_eval_and_compare_commands(tmp_path) -> None:
    common = ["--limit-chars", str(LIMIT), "--n-layer", "1", "--d-model", "32", "--n-head", "2", "--train-len", "112"]
    common += ["--batch-size", "4", "--steps", "3", "--warmup", "1", "--threads", "1", "--quiet"]
    run = tmp_path / "run"
    assert main(["retrieval", "train", "--task", "passkey:0.75", "--out", str(run), "--scheme", "alibi", *common]) == 0
    saved = json.loads((run / "model" / "config.json").read_text())
    assert saved["train"]["task"] == "passkey:0.75" and saved["steps"] == 3
    evaluation = ["--lengths", "112,224", "--depths", "0,1", "--samples", "2", "--candidates", "3"]
    out = tmp_path / "eval"
    assert main(["retrieval", "eval", str(run), "--out", str(out), "--threads", "1", "--quiet", *evaluation]) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["lengths"] == [112, 224] and result["candidates"] == 3
    assert set(result["cells"]["224"]) == {"0.0", "1.0"} and result["cells"]["112"]["0.0"]["samples"] == 2
    assert 1.0 <= result["overall"]["mean_rank"] <= 3.0 and (out / "heatmap.png").exists()
    cmp_out = tmp_path / "cmp"
    args = ["retrieval", "compare", "--task", "kv", "--schemes", "rope,rope+dynamic", "--out", str(cmp_out)]
    assert main([*args, *common, *evaluation]) == 0
    summary = json.loads((cmp_out / "summary.json").read_text())
    assert set(summary["variants"]) == {"rope", "rope+dynamic"}
    assert (cmp_out / "heatmaps" / "rope_dynamic.png").exists()
    assert "| rope+dynamic |" in (cmp_out / "table.md").read_text()
    # fine-tuning from a `lextra compare` folder: each scheme starts from DIR/models/SCHEME/model
    tuned = tmp_path / "tuned"
    args = ["retrieval", "compare", "--task", "kv", "--schemes", "rope", "--out", str(tuned)]
    assert main([*args, "--init-from-compare", str(cmp_out), *common, *evaluation]) == 0
    saved = json.loads((tuned / "models" / "rope" / "model" / "config.json").read_text())
    assert saved["train"]["init_from"] == str(cmp_out / "models" / "rope" / "model")
    missing = ["retrieval", "compare", "--task", "kv", "--schemes", "alibi", "--out", str(tmp_path / "m")]
    assert main([*missing, "--init-from-compare", str(cmp_out), *common, *evaluation]) == 2
    completion = ["retrieval", "completion", str(run), "--out", str(tmp_path / "cc"), "--lengths", "112,224"]
    assert main([*completion, "--lines", "3", "--max-new", "8", "--threads", "1", "--quiet"]) == 0
    cc = json.loads((tmp_path / "cc" / "completion.json").read_text())
    assert cc["alibi"]["buckets"]["224"]["lines"] == 3


def test_command_mistakes_are_one_line_errors(tmp_path, capsys) -> None:
    assert main(["retrieval", "train", "--task", "needle", "--out", str(tmp_path / "x"), "--steps", "1"]) == 2
    assert "unknown training task" in capsys.readouterr().err
