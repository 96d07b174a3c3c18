"""BABILong's scoring (Kuratov et al. 2024, arXiv 2406.10149; booydar/babilong `metrics.py`): the answer is the
model's first sentence, right when it mentions the target and no other label the question does not itself name.
As the authors' code: lowercased, cut at the first '.', '<context>', '<example>' and 'Question'; labels matched as
substrings."""

from __future__ import annotations

from collections.abc import Iterable


def first_sentence(output: str) -> str:
    """The part of a lowercased output BABILong reads: up to the first '.', '<context>', '<example>'."""
    text = output.lower().split(".")[0]
    for marker in ("<context>", "<example>", "Question"):
        text = text.split(marker)[0]
    return text


def compare_answers(target: str, output: str, question: str, labels: Iterable[str]) -> bool:
    """BABILong's rule: the labels the first sentence names, less those the question names, are exactly the target
    (or, for a comma-separated target, exactly its parts)."""
    said = first_sentence(output)
    target = target.lower()
    known = {label.lower() for label in labels}
    asked = {label for label in known if label in question.lower()}
    named = {label for label in known if label in said} - asked
    if "," in target and len(target) > 3:
        parts = target.split(",")
        return all(p in named for p in parts) and len(named) == len(parts)
    return target in named and len(named) == 1


def answer_complete(output: str) -> bool:
    """Whether more output can no longer change the score: the first sentence has ended."""
    text = output.lower()
    return any(marker in text for marker in (".", "<context>", "<example>"))


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """lm-eval's `process_results` of a BABILong task YAML (`lextra babilong tasks`): accuracy by BABILong's rule,
    the document holding its target, question and labels."""
    return {"acc": float(compare_answers(doc["target"], results[0], doc["question"], doc["labels"]))}
