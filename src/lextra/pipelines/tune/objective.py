"""The measured objective of `lextra tune` at the target length T, one candidate setup at a time (docs/tuning.md).

`ppl`: loss = ln(perplexity) + passkey_weight * (1 - passkey accuracy), perplexity being the `chunks` protocol on
`documents` held-out pieces of T tokens; `needle`: loss = ln(perplexity of the passkey answers' tokens alone)
(LongRoPE2's needle-driven perplexity, Shang et al. 2025, arXiv 2502.20082).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lextra.errors import ConfigError
from lextra.evaluate import EvalConfig, evaluate_model
from lextra.evaluate.retrieval import evaluate_retrieval, evaluation_task
from lextra.extend import InferenceSetup
from lextra.pipelines.tune.search import Score

DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
#: the losses a candidate can be scored by (module docstring)
OBJECTIVES = ("ppl", "needle")


@dataclass(frozen=True)
class ObjectiveSettings:
    """How a candidate is measured (module docstring)."""

    length: int
    depths: tuple[float, ...] = DEFAULT_DEPTHS
    samples: int = 1
    documents: int = 1
    passkey_weight: float = 1.0
    candidates: int = 5
    seed: int = 0
    backend: str = "auto"
    split: str = "validation"
    objective: str = "ppl"

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"tune objective {self.objective!r} is unknown; choose one of {', '.join(OBJECTIVES)}")

    def to_dict(self) -> dict[str, Any]:
        loss = "ln(needle_ppl)" if self.objective == "needle" else "ln(ppl) + passkey_weight * (1 - passkey)"
        return {
            "objective": self.objective,
            "loss": loss,
            "length": self.length,
            "depths": list(self.depths),
            "passkey_samples_per_depth": self.samples,
            "documents": self.documents,
            "passkey_weight": self.passkey_weight,
            "passkey_candidates": self.candidates,
            "split": self.split,
            "seed": self.seed,
        }


def reset(model: Any) -> None:
    """The model without RoPE scaling or extension method: the state every candidate is applied to."""
    InferenceSetup(rope_scaling=None, extension=None).apply(model)


class MeasuredObjective:
    """Perplexity and passkey of `model` under a candidate setup (module docstring) on held-out `data`."""

    def __init__(self, model: Any, data: Any, settings: ObjectiveSettings) -> None:
        self.model = model
        self.data = data
        self.settings = settings
        self.task = evaluation_task("passkey", data, settings.candidates - 1)
        self.config = EvalConfig(
            lengths=[settings.length],
            protocols=["chunks"],
            documents=settings.documents,
            span=settings.length,  # one window of the target length per document, whatever L_tr is
            backend=settings.backend,
            split=settings.split,
        ).validate()

    def measure(self, setup: InferenceSetup) -> dict[str, float]:
        """Perplexity and passkey accuracy under `setup` (applied on the reset model)."""
        reset(self.model)
        setup.apply(self.model)
        s = self.settings
        evaluation = evaluate_model(self.model, self.data, self.config, progress=False)
        retrieval = evaluate_retrieval(
            self.model, self.task, [s.length], list(s.depths), samples=s.samples, seed=s.seed, batch_size=1
        )
        cells = retrieval.cells[s.length]
        by_depth = {f"passkey@{d:g}": cells[float(d)].exact for d in s.depths}
        passkey = sum(by_depth.values()) / len(by_depth)
        nll = [cells[float(d)].answer_nll for d in s.depths]
        needle = math.exp(sum(n for n in nll if n is not None) / len(nll))
        return {"ppl": evaluation.ppl("chunks", s.length), "needle_ppl": needle, "passkey": passkey, **by_depth}

    def __call__(self, setup: InferenceSetup) -> Score:
        parts = self.measure(setup)
        s = self.settings
        if s.objective == "needle":
            loss = math.log(parts["needle_ppl"])
        else:
            loss = math.log(parts["ppl"]) + s.passkey_weight * (1.0 - parts["passkey"])
        tokens = s.length * (s.documents + len(s.depths) * s.samples)
        return Score(loss, parts, tokens)


def rope_geometry(model: Any) -> tuple[int, float]:
    """(rotary dimension D, RoPE base b) of a lextra GPT's first rotary layer or a Hugging Face Llama-family
    adapter, read from its unscaled frequencies theta_1 = b^(-2/D) (call after `reset`)."""
    from lextra.model import GPT
    from lextra.positions.rotary import RotaryFrequencies

    if isinstance(model, GPT):
        schemes = [model.scheme_for(layer) for layer in range(model.config.n_layer)]
        rotary = next((s for s in schemes if isinstance(s, RotaryFrequencies)), None)
        if rotary is None:
            label = model.config.label
            raise ConfigError(f"LongRoPE rescales RoPE frequencies; this {label!r} model has no rotary layer")
    else:
        rotary = getattr(model, "rotary", None)
        if rotary is None or not hasattr(rotary, "inv_freq"):
            raise ConfigError("LongRoPE rescales RoPE frequencies; this model has none (a Llama-family model has)")
    half = int(rotary.inv_freq.numel())
    if half < 2:
        return 2 * half, 10000.0
    return 2 * half, float(rotary.inv_freq[1].double() ** (-half))
