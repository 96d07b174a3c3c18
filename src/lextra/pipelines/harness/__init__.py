"""lm-evaluation-harness (`lm_eval`) on lextra's models: the `lextra` model of lm-eval (`LextraLM`, registered when
`lextra.pipelines.harness.adapter` is imported) and `lextra harness`'s run. Needs the `harness` extra."""

from lextra.pipelines.harness.run import HarnessSettings, offline, require_lm_eval, run_harness, summary
from lextra.pipelines.harness.setup import ModelArgs, parse_model_args

__all__ = [
    "HarnessSettings",
    "ModelArgs",
    "offline",
    "parse_model_args",
    "require_lm_eval",
    "run_harness",
    "summary",
]
