"""A RULER-style long-context evaluation (Hsieh et al. 2024, arXiv 2404.06654) that runs offline."""

from lextra.evaluate.ruler.chat import chat_format, template_parts
from lextra.evaluate.ruler.evaluate import (
    answer_samples,
    cell_from_answers,
    check_vocabulary,
    evaluate_cell,
    evaluate_length,
    generate,
)
from lextra.evaluate.ruler.results import (
    DEFAULT_THRESHOLD,
    RulerAnswer,
    RulerCell,
    RulerExample,
    RulerResult,
    effective_length,
    sorted_lengths,
)

__all__ = [
    "DEFAULT_THRESHOLD",
    "RulerAnswer",
    "RulerCell",
    "RulerExample",
    "RulerResult",
    "answer_samples",
    "cell_from_answers",
    "chat_format",
    "check_vocabulary",
    "effective_length",
    "evaluate_cell",
    "evaluate_length",
    "generate",
    "sorted_lengths",
    "template_parts",
]
