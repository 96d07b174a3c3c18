"""A retrieval study's `until_learned` rule: the budget for models that have not learned the task at L_tr.

A fine-tuning whose exact match at L_tr (the study's own prompts) is under `bar` after the budget goes on in rounds
of `steps` steps at the learning rate its schedule ended on, each round from the last one's weights and optimizer
moments (training continued, not restarted) and on fresh rows, until its exact match at L_tr on held-out prompts
(another prompt seed) reaches `bar` or `rounds` run out. The study then scores the last round's model on its own
prompts at every length, so the score it reports at L_tr is not the one the rule stopped on. Models that learn within
the budget are left as they are.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Any

from lextra.errors import ConfigError
from lextra.train import TrainConfig
from lextra.validate import check_int, check_range

#: the data seed of round k is the fine-tuning's batch seed + k x this (rows no earlier round or seed drew)
ROUND_SEED_STRIDE = 1_000_003
KEYS = ("rounds", "steps", "bar", "prompt_seed")


@dataclass(frozen=True)
class UntilLearned:
    """At most `rounds` extra rounds of `steps` steps until held-out prompts (seed `prompt_seed`) at L_tr reach
    `bar` exact."""

    rounds: int
    steps: int
    bar: float = 0.9
    prompt_seed: int = 1

    @classmethod
    def from_section(cls, value: Any, where: str) -> UntilLearned:
        """The `[retrieval] until_learned = {rounds = R, steps = S[, bar = B, prompt_seed = P]}` table, checked."""
        name = f"{where} [retrieval] until_learned"
        if not isinstance(value, dict) or not {"rounds", "steps"} <= set(value) or set(value) - set(KEYS):
            raise ConfigError(
                f"{name} is a table {{rounds = R, steps = S}} (optional: bar, prompt_seed), got {value!r}"
            )
        return cls(
            rounds=check_int(f"{name} rounds", value["rounds"], 1),
            steps=check_int(f"{name} steps", value["steps"], 1),
            bar=check_range(f"{name} bar", value.get("bar", 0.9), 0.0, 1.0, low_open=True),
            prompt_seed=check_int(f"{name} prompt_seed", value.get("prompt_seed", 1), 1),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def round_config(self, fine_tune: TrainConfig, previous: str, k: int) -> TrainConfig:
        """Round `k` (from 1) of `fine_tune`: from the weights at `previous` and the optimizer's moments they were
        saved with, `steps` steps at its final learning rate (no warmup, no decay), on rows of data seed batch seed +
        k x `ROUND_SEED_STRIDE`."""
        config = copy.deepcopy(fine_tune)
        config.init_from = previous
        config.steps = self.steps
        config.lr = fine_tune.lr * fine_tune.min_lr_ratio
        config.min_lr_ratio = 1.0
        config.warmup = 0
        config.data_seed = fine_tune.batch_seed + k * ROUND_SEED_STRIDE
        config.init_optimizer = True
        return config.validate()
