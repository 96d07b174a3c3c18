"""BABILong offline (Kuratov et al. 2024, arXiv 2406.10149): bAbI's qa1-qa5 (Weston et al. 2015, arXiv 1502.05698)
generated here, their facts spread through a corpus haystack at exact token lengths, BABILong's scoring. The
tasks are RULER-style tasks (`lextra.evaluate.ruler.RulerTask`), so `lextra babilong` runs them as `lextra ruler`
runs its own."""

from lextra.evaluate.babilong.scoring import answer_complete, compare_answers, first_sentence, process_results
from lextra.evaluate.babilong.tasks import BABILONG_TASKS, PROMPTS, BabilongTask, SentenceStream, build_babilong_task
from lextra.evaluate.babilong.world import DEFAULT_FACTS, LABELS, MIN_FACTS, STORIES, Story, World

__all__ = [
    "BABILONG_TASKS",
    "DEFAULT_FACTS",
    "LABELS",
    "MIN_FACTS",
    "PROMPTS",
    "STORIES",
    "BabilongTask",
    "SentenceStream",
    "Story",
    "World",
    "answer_complete",
    "build_babilong_task",
    "compare_answers",
    "first_sentence",
    "process_results",
]
