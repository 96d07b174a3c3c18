"""RULER's synthetic tasks as offline generators (Hsieh et al. 2024, arXiv 2404.06654): eleven of its thirteen
tasks (eight needle-in-a-haystack variants, variable tracking, common and frequent words) at exact token lengths
for any tokenizer, RULER's per-sample score, and their training rows (`ruler.niah`, `ruler.<task>`).

Importing the package registers every task in `RULER_TASKS` (in RULER's order: niah, vt, cwe, fwe) and its
training rows in the training-task registry; `lextra.evaluate.ruler` evaluates models on them.
"""

from lextra.tasks.ruler import niah, tracking, aggregation  # noqa: F401, I001
from lextra.tasks.ruler.haystack import DEFAULT_HAYSTACK, NOISE, EssayStream, haystack_documents
from lextra.tasks.ruler.layout import (
    DEPTHS,
    ChatFormat,
    Chunk,
    Draft,
    PromptTooShortError,
    insertion_index,
    interleave,
    sample_seed,
    spread_depth,
)
from lextra.tasks.ruler.scoring import postprocess, sample_score, string_match_all, string_match_part, wilson_interval
from lextra.tasks.ruler.tasks import PROMPT_LENGTHS, RULER_TASKS, RulerSample, RulerTask, build_ruler_task
from lextra.tasks.ruler.training import NIAH_TASKS, RULER_TRAINING_TASKS, RulerRows, build_ruler_rows
from lextra.tasks.ruler.words import WORDS, corpus_words

RULER_TASK_NAMES = tuple(RULER_TASKS.names())

__all__ = [
    "DEFAULT_HAYSTACK",
    "DEPTHS",
    "NIAH_TASKS",
    "NOISE",
    "PROMPT_LENGTHS",
    "RULER_TASKS",
    "RULER_TASK_NAMES",
    "RULER_TRAINING_TASKS",
    "WORDS",
    "ChatFormat",
    "Chunk",
    "Draft",
    "EssayStream",
    "PromptTooShortError",
    "RulerRows",
    "RulerSample",
    "RulerTask",
    "build_ruler_rows",
    "build_ruler_task",
    "corpus_words",
    "haystack_documents",
    "insertion_index",
    "interleave",
    "postprocess",
    "sample_score",
    "sample_seed",
    "spread_depth",
    "string_match_all",
    "string_match_part",
    "wilson_interval",
]
