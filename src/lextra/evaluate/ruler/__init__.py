"""A RULER-style long-context suite (Hsieh et al. 2024, arXiv 2404.06654) that runs offline: eleven of RULER's
thirteen synthetic tasks (eight needle-in-a-haystack variants, variable tracking, common and frequent words) at
exact token lengths for any tokenizer, greedy cached decoding, RULER's scoring, and the effective length.

Importing the package registers every task in `RULER_TASKS`, and its training rows (`ruler.niah`, `ruler.<task>`)
as retrieval training tasks.
"""

# registers the tasks, in RULER's order (niah, vt, cwe, fwe)
from lextra.evaluate.ruler import niah, tracking, aggregation  # noqa: F401, I001
from lextra.evaluate.ruler.chat import chat_format, template_parts
from lextra.evaluate.ruler.evaluate import (
    answer_samples,
    cell_from_answers,
    check_vocabulary,
    evaluate_cell,
    evaluate_length,
    generate,
)
from lextra.evaluate.ruler.haystack import DEFAULT_HAYSTACK, NOISE, EssayStream, haystack_documents
from lextra.evaluate.ruler.layout import DEPTHS, ChatFormat, PromptTooShortError, sample_seed, spread_depth
from lextra.evaluate.ruler.results import (
    DEFAULT_THRESHOLD,
    RulerAnswer,
    RulerCell,
    RulerExample,
    RulerResult,
    effective_length,
    sorted_lengths,
)
from lextra.evaluate.ruler.scoring import (
    postprocess,
    sample_score,
    string_match_all,
    string_match_part,
    wilson_interval,
)
from lextra.evaluate.ruler.tasks import PROMPT_LENGTHS, RULER_TASKS, RulerSample, RulerTask, build_ruler_task
from lextra.evaluate.ruler.training import NIAH_TASKS, RULER_TRAINING_TASKS, RulerRows, build_ruler_rows
from lextra.evaluate.ruler.words import WORDS, corpus_words

RULER_TASK_NAMES = tuple(RULER_TASKS.names())

__all__ = [
    "DEFAULT_HAYSTACK",
    "DEFAULT_THRESHOLD",
    "DEPTHS",
    "NIAH_TASKS",
    "NOISE",
    "PROMPT_LENGTHS",
    "RULER_TASKS",
    "RULER_TASK_NAMES",
    "RULER_TRAINING_TASKS",
    "WORDS",
    "ChatFormat",
    "EssayStream",
    "PromptTooShortError",
    "RulerAnswer",
    "RulerCell",
    "RulerExample",
    "RulerResult",
    "RulerRows",
    "RulerSample",
    "RulerTask",
    "answer_samples",
    "build_ruler_rows",
    "build_ruler_task",
    "cell_from_answers",
    "chat_format",
    "check_vocabulary",
    "corpus_words",
    "effective_length",
    "evaluate_cell",
    "evaluate_length",
    "generate",
    "haystack_documents",
    "postprocess",
    "sample_score",
    "sample_seed",
    "sorted_lengths",
    "spread_depth",
    "string_match_all",
    "string_match_part",
    "template_parts",
    "wilson_interval",
]
