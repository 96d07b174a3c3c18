"""Training rows from the RULER generators (`ruler.niah`, `ruler.<task>` retrieval training tasks)."""

from __future__ import annotations

import collections
import json
import random
import re

import pytest
import torch

from lextra.cli import main
from lextra.data import ByteTokenizer
from lextra.data.prepare import prepare_data
from lextra.errors import ConfigError
from lextra.evaluate.retrieval import evaluation_task
from lextra.tasks.registry import parse_task_spec
from lextra.tasks.ruler import NIAH_TASKS, RULER_TASK_NAMES, RULER_TRAINING_TASKS, build_ruler_rows
from lextra.train import TrainConfig, batch_source

torch.set_num_threads(1)

BYTES = ByteTokenizer()
NEEDLE = re.compile(r"One of the special magic \w+ for (\S+) is: (\S+?)\.(?=\s|$)")
QUESTION = re.compile(r"What (?:is|are all) the special magic \w+ for (.+?) mentioned in the provided text\?")


def split_row(text: str) -> tuple[str, list[str]]:
    """The prompt up to RULER's answer prefix (" ... mentioned in the provided text is/are") and the answer's items."""
    prompt, _, answer = text.rpartition(" mentioned in the provided text ")
    answer = answer.split(" ", 1)[1]
    assert answer.endswith("."), answer
    return prompt, answer[:-1].split(", ")


@pytest.mark.parametrize("name", NIAH_TASKS)
def test_a_row_is_exactly_the_length_and_ends_with_the_answer_its_needles_give(name) -> None:
    rows = build_ruler_rows(f"ruler.{name}", BYTES)
    rng = random.Random(7)
    for length in (901, 1237):
        ids = rows.training_row(length, rng)
        assert len(ids) == length
        prompt, answer = split_row(BYTES.decode(ids))
        values = collections.defaultdict(list)
        for key, value in NEEDLE.findall(prompt):
            values[key].append(value)
        keys = re.split(r", and |, ", QUESTION.findall(prompt)[-1])
        assert sorted(answer) == sorted(v for k in keys for v in values[k])  # RULER's order: as generated


def test_the_niah_mix_draws_every_needle_task_and_rows_depend_on_the_generator_only() -> None:
    rows = build_ruler_rows("ruler.niah", BYTES)
    assert [t.name for t in rows.tasks] == list(NIAH_TASKS) and len(NIAH_TASKS) == 8
    kinds, asked = set(), set()
    for seed in range(30):
        text = BYTES.decode(rows.training_row(900, random.Random(seed)))
        kinds.add(re.findall(r"special magic (\w+)", text)[-1])
        asked.add(len(re.split(r", and |, ", QUESTION.findall(text)[-1])))
        assert rows.training_row(900, random.Random(seed)) == BYTES.encode(text)
    assert kinds == {"number", "numbers", "uuid"} and asked == {1, 4}  # single, multi-value, multi-query questions
    assert rows.training_row(900, random.Random(1)) != rows.training_row(900, random.Random(2))


def test_specs_are_training_tasks_and_their_batches_are_reproducible() -> None:
    assert set(RULER_TRAINING_TASKS) == {"ruler.niah", *(f"ruler.{n}" for n in RULER_TASK_NAMES)}
    assert parse_task_spec("ruler.niah+lm").ratio == 0.5 and parse_task_spec("ruler.vt:0.3").name == "ruler.vt"
    with pytest.raises(ConfigError, match=r"unknown training task 'ruler\.nope'.*ruler\.niah"):
        parse_task_spec("ruler.nope")
    data = prepare_data("python-code", limit_chars=200_000)
    config = TrainConfig(task="ruler.niah+lm")
    config.model.train_len = 900
    source = batch_source(config, data)
    batch = source.batch(step=3, batch_size=6, length=900, seed=0)
    assert batch.shape == (6, 901) and batch.dtype == torch.long
    assert torch.equal(batch, source.batch(step=3, batch_size=6, length=900, seed=0))
    assert not torch.equal(batch, source.batch(step=4, batch_size=6, length=900, seed=0))
    texts = [BYTES.decode(row.tolist()) for row in batch]
    assert any("special magic" in t for t in texts) and any("special magic" not in t for t in texts)


def test_a_training_length_too_short_for_a_task_or_a_retrieval_eval_of_one_is_refused() -> None:
    data = prepare_data("python-code", limit_chars=200_000)
    config = TrainConfig(task="ruler.niah")
    config.model.train_len = 400
    with pytest.raises(ConfigError, match=r"'ruler.niah' at --train-len 400: RULER task 'niah_\w+' needs prompts"):
        batch_source(config, data)
    with pytest.raises(ConfigError, match="lextra ruler"):
        evaluation_task("ruler.niah", data)


def test_retrieval_train_on_ruler_rows_then_lextra_ruler(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    common = ["--corpus", "python-code", "--limit-chars", "1500000", "--n-layer", "1", "--d-model", "32"]
    common += ["--n-head", "2", "--batch-size", "2", "--threads", "1", "--quiet", "--out", str(run)]
    code = main(["retrieval", "train", "--task", "ruler.niah_single_1+lm", "--train-len", "300", *common])
    assert code == 2 and "--train-len 300" in capsys.readouterr().err
    assert (
        main(["retrieval", "train", "--task", "ruler.niah_single_1+lm", "--train-len", "600", "--steps", "2", *common])
        == 0
    )
    assert json.loads((run / "config.json").read_text())["train"]["task"] == "ruler.niah_single_1+lm"
    out = tmp_path / "ruler"
    args = ["ruler", str(run), "--tasks", "niah_single_1", "--lengths", "600", "--samples", "1", "--out", str(out)]
    assert main([*args, "--threads", "1", "--quiet"]) == 0
    assert json.loads((out / "results.json").read_text())["cells"]["niah_single_1"]["600"]["samples"] == 1
    code = main(["retrieval", "compare", "--task", "ruler.niah", "--schemes", "rope", "--out", str(tmp_path / "c")])
    assert code == 2 and "lextra ruler" in capsys.readouterr().err
