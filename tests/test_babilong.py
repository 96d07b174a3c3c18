"""BABILong offline: bAbI qa1-qa5 answers correct by construction (a simulator reading the facts' sentences answers
every question the same), determinism by seed, exact lengths and the depth range of the facts, BABILong's scoring
rule, and `lextra babilong run|compare|tasks` end to end on a tiny model."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch

from lextra.cli import main
from lextra.data import ByteTokenizer, Document
from lextra.errors import ConfigError
from lextra.evaluate.babilong import LABELS, MIN_FACTS, STORIES, build_babilong_task, compare_answers, process_results
from lextra.model import GPT, GPTConfig, save_model

MOVE = re.compile(r"^(\w+) (?:moved to|went to|travelled to|journeyed to|went back to) the (\w+)\.$")
TAKE = re.compile(r"^(\w+) (?:got|picked up|grabbed|took) the (\w+) there\.$")
DROP = re.compile(r"^(\w+) (?:dropped|discarded|put down|left) the (\w+)\.$")
GIVE = re.compile(r"^(\w+) (?:gave|passed|handed) the (\w+) to (\w+)\.$")
RELATION = re.compile(r"^The (\w+) is (north|south|east|west) of the (\w+)\.$")
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}


def simulate(facts: list[str], question: str) -> str:
    """The answer read off the sentences alone (a second, sentence-level simulation of bAbI's world)."""
    where: dict[str, str] = {}
    holder: dict[str, str] = {}
    lies: dict[str, str] = {}
    trail: dict[str, list[str]] = {}
    gifts: list[tuple[str, str, str]] = []
    relations: set[tuple[str, str, str]] = set()

    def place(item: str) -> str | None:
        return where.get(holder[item]) if item in holder else lies.get(item)

    for fact in facts:
        if m := MOVE.match(fact):
            where[m[1]] = m[2]
        elif m := TAKE.match(fact):
            assert m[2] not in holder and lies.get(m[2], where[m[1]]) == where[m[1]], f"impossible take: {fact}"
            holder[m[2]] = m[1]
            lies.pop(m[2], None)
        elif m := DROP.match(fact):
            assert holder.pop(m[2]) == m[1]
            lies[m[2]] = where[m[1]]
        elif m := GIVE.match(fact):
            assert holder[m[2]] == m[1] and where[m[1]] == where[m[3]], f"impossible gift: {fact}"
            holder[m[2]] = m[3]
            gifts.append((m[1], m[2], m[3]))
        elif m := RELATION.match(fact):
            relations |= {(m[1], m[2], m[3]), (m[3], OPPOSITE[m[2]], m[1])}
        else:
            raise AssertionError(f"unparsed fact {fact!r}")
        for item in {*holder, *lies}:
            at = place(item)
            if at is not None and trail.setdefault(item, [])[-1:] != [at]:
                trail[item].append(at)
    if m := re.match(r"^Where is the (\w+)\?$", question):
        return str(place(m[1]))
    if m := re.match(r"^Where is (\w+)\?$", question):
        return where[m[1]]
    if m := re.match(r"^Where was the (\w+) before the (\w+)\?$", question):
        seen = trail[m[1]]
        assert seen.count(m[2]) == 1 and seen[-1] == m[2]
        return seen[-2]
    if m := re.match(r"^What is (\w+) of the (\w+)\?$", question):
        (answer,) = {x for x, d, y in relations if d == m[1] and y == m[2]}
        return answer
    if m := re.match(r"^What is the (\w+) (\w+) of\?$", question):
        (answer,) = {y for x, d, y in relations if x == m[1] and d == m[2]}
        return answer
    patterns = [
        (r"^Who gave the (\w+) to (\w+)\?$", lambda g, m: g[1] == m[1] and g[2] == m[2], 0),
        (r"^Who received the (\w+)\?$", lambda g, m: g[1] == m[1], 2),
        (r"^What did (\w+) give to (\w+)\?$", lambda g, m: g[0] == m[1] and g[2] == m[2], 1),
        (r"^Who did (\w+) give the (\w+) to\?$", lambda g, m: g[0] == m[1] and g[1] == m[2], 2),
        (r"^Who gave the (\w+)\?$", lambda g, m: g[1] == m[1], 0),
    ]
    for pattern, fits, part in patterns:
        if m := re.match(pattern, question):
            return next(g for g in reversed(gifts) if fits(g, m))[part]
    raise AssertionError(f"unparsed question {question!r}")


@pytest.mark.parametrize("qa", sorted(STORIES))
def test_every_answer_is_what_the_facts_say(qa: str) -> None:
    rng = random.Random(qa)
    for _ in range(150):
        story = STORIES[qa](rng, rng.randint(MIN_FACTS[qa], 24) if qa != "qa4" else 2)
        assert simulate(story.facts, story.question) == story.answer
        assert story.answer in LABELS[qa]
        # BABILong scores the answer right and its question's own labels never count
        assert compare_answers(story.answer, f"The answer is {story.answer}.", story.question, LABELS[qa])


def documents() -> list[Document]:
    rng = random.Random(0)
    words = ["old", "river", "town", "light", "stone", "winter", "bread", "song", "road", "field", "window", "dawn"]
    sentences = [" ".join(rng.choice(words) for _ in range(rng.randint(6, 14))).capitalize() + "." for _ in range(300)]
    return [Document("d", " ".join(sentences))]


def test_samples_are_seeded_exact_and_their_facts_lie_between_start_and_end() -> None:
    task = build_babilong_task("qa2", ByteTokenizer(), documents(), start=0.4, end=0.6)
    a, b = task.sample(3000, 1, seed=5), task.sample(3000, 1, seed=5)
    assert a.prompt_ids == b.prompt_ids and a.references == b.references
    assert task.sample(3000, 1, seed=6).prompt_ids != a.prompt_ids
    assert len(a.prompt_ids) == 3000 and len(task.sample(2500, 0).prompt_ids) == 2500
    begin, end = a.context_span
    assert len(a.needle_spans) == 10 and a.depths == sorted(a.depths)
    for (lo, _), depth in zip(a.needle_spans, a.depths, strict=True):
        assert 0.4 <= depth <= 0.6
        assert 0.35 <= (lo - begin) / (end - begin) <= 0.65  # sentence placement, within a sentence or two
    facts = [ByteTokenizer().decode(a.prompt_ids[lo:hi]).strip() for lo, hi in a.needle_spans]
    assert all(re.match(r"^[A-Z]\w+ .*\.$", f) for f in facts)
    with pytest.raises(ConfigError, match="start < end"):
        build_babilong_task("qa1", ByteTokenizer(), documents(), start=0.7, end=0.2)
    with pytest.raises(ConfigError, match="qa4"):
        build_babilong_task("qa4", ByteTokenizer(), documents(), facts=5)


@pytest.mark.parametrize(
    ("target", "output", "question", "labels", "right"),
    [
        ("bathroom", "The most recent location of Mary is bathroom.", "Where is Mary?", "qa1", True),
        ("bathroom", "bathroom or kitchen", "Where is Mary?", "qa1", False),
        ("bathroom", "Mary is in the kitchen. Earlier bathroom.", "Where is Mary?", "qa1", False),
        ("bathroom", "BATHROOM<example> kitchen", "Where is Mary?", "qa1", True),
        ("garden", "Before the kitchen the apple was in the garden.", "Where was the apple before the kitchen?",
         "qa3", True),
        ("Fred", "Fred gave it to Bill", "Who gave the apple to Bill?", "qa5", True),
        ("apple", "Fred gave the apple to Bill.", "What did Fred give to Jeff?", "qa5", False),
        ("apple,milk", "apple, milk", "What is Mary carrying?", ["apple", "football", "milk"], True),
        ("apple,milk", "apple, football and milk", "What is Mary carrying?", ["apple", "football", "milk"], False),
        ("office", "", "Where is John?", "qa1", False),
    ],
)  # fmt: skip
def test_scoring_follows_babilongs_rule(target: str, output: str, question: str, labels, right: bool) -> None:
    labels = LABELS[labels] if isinstance(labels, str) else labels
    assert compare_answers(target, output, question, labels) is right
    doc = {"target": target, "question": question, "labels": list(labels)}
    assert process_results(doc, [output]) == {"acc": float(right)}


@pytest.mark.slow
def test_babilong_commands_run_compare_and_write_lm_eval_tasks(tmp_path: Path, capsys) -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=256, n_layer=1, n_head=2, d_model=32, train_len=32, layer_plan="rope"))
    save_model(model.eval(), tmp_path / "run" / "model", extra={"tokenizer": {"kind": "bytes"}})
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(40):  # documents of which the split's hash holds some out
        (corpus / f"{i}.txt").write_text(documents()[0].text)
    common = ["--tasks", "qa1;qa4", "--lengths", "900", "--samples", "2", "--haystack", str(corpus), "--quiet"]
    out = tmp_path / "out"
    assert main(["babilong", str(tmp_path / "run"), *common, "--out", str(out), "--threads", "1"]) == 0
    saved = json.loads((out / "results.json").read_text())
    assert saved["suite"] == "BABILong" and saved["tasks"] == ["qa1", "qa4"] and saved["lengths"] == [900]
    cells = [json.loads((out / "cells" / f"{t}-900.json").read_text()) for t in ("qa1", "qa4")]
    for cell, task in zip(cells, ("qa1", "qa4"), strict=True):
        rescored = [
            compare_answers(a["references"][0], a["output"], a["question"], LABELS[task]) for a in cell["answers"]
        ]
        assert saved["cells"][task]["900"]["score"] == round(100 * sum(rescored) / 2, 2)
    assert "BABILong" in (out / "table.md").read_text()
    # a resumed cell is scored again by BABILong's rule: both outputs hold the target, one names another label too
    doctored = json.loads((out / "cells" / "qa1-900.json").read_text())
    first, second = doctored["answers"]
    first["output"] = f"It is the {first['references'][0]}. Not the garden or the hallway."
    second["output"] = (
        f"The hallway or the {second['references'][0]}."
        if second["references"][0] != "hallway"
        else "The kitchen or the hallway."
    )
    (out / "cells" / "qa1-900.json").write_text(json.dumps(doctored))
    assert main(["babilong", str(tmp_path / "run"), *common, "--out", str(out), "--threads", "1"]) == 0
    assert json.loads((out / "results.json").read_text())["cells"]["qa1"]["900"]["score"] == 50.0
    too_short = (["--tasks", "qa1", "--lengths", "100"], "BABILong task 'qa1' needs prompts of at least")
    for bad, needle in (
        (["--tasks", "qa9"], "unknown BABILong task 'qa9'"),
        (["--tasks", "qa3,facts=1"], ">= 3"),
        too_short,
    ):
        assert main(["babilong", str(tmp_path / "run"), *common[2:], *bad, "--out", str(out), "--threads", "1"]) == 2
        assert needle in capsys.readouterr().err
    assert main(["babilong", "compare", str(out), "--out", str(tmp_path / "cmp")]) == 0
    assert (tmp_path / "cmp" / "comparison.md").read_text().startswith("### BABILong average")
    tasks = tmp_path / "tasks"
    assert main(["babilong", "tasks", *common[:-1], "--out", str(tasks)]) == 0
    rows = [json.loads(line) for line in (tasks / "babilong_offline_qa1_900.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and rows[0]["target"] in LABELS["qa1"] and len(rows[0]["input"]) == 900 - 20
    from lextra.pipelines.harness import HarnessSettings, run_harness
    from lextra.pipelines.harness.adapter import LextraLM

    lm = LextraLM(pretrained=str(tmp_path / "run"), max_length=1024)
    settings = HarnessSettings(tasks=["babilong_offline_qa1_900"], include_path=[str(tasks)], builtin=False,
                               log_samples=True, bootstrap_iters=0)  # fmt: skip
    results = run_harness(lm, settings)
    samples = results["samples"]["babilong_offline_qa1_900"]
    expected = [
        compare_answers(s["doc"]["target"], s["resps"][0][0], s["doc"]["question"], LABELS["qa1"]) for s in samples
    ]
    assert results["results"]["babilong_offline_qa1_900"]["acc,none"] == sum(expected) / 2
