"""The one training stack: a `Trainer` (`loop`) runs a training target (`target`: a lextra GPT, `gpt`; a Hugging
Face model, `lextra.hf.finetune`) with its settings (`config`), checkpoints (`checkpoints`), curves (`metrics`),
torchrun replication (`distributed`), FSDP2 sharding (`sharding`), and a GPT run's batch sources (`tasks`).

A run directory holds `config.json`, `metrics.jsonl`, `checkpoints/step_N/` (each written atomically;
`checkpoints/LATEST` names the newest), TensorBoard event files in `tb/` (or `log_dir`) when asked, and when done
`model/`. The device is a runtime choice (`train(..., device=)`), never part of the config: checkpoints are
device-independent, so a run trained on a GPU resumes or evaluates on the CPU and back.
"""

from lextra.train.checkpoints import CHECKPOINTS, FINAL, KEEP_CHECKPOINTS, LATEST, checkpoint_candidates
from lextra.train.config import LoopConfig, TrainConfig, check_s2_attn, check_sampler, field_docs, learning_rate
from lextra.train.distributed import Distributed, main_process
from lextra.train.gpt import GPTTarget, continue_from, make_optimizer, train, validation_loss
from lextra.train.loop import Trainer, non_finite
from lextra.train.metrics import final_losses
from lextra.train.target import TrainingTarget
from lextra.train.tasks import (
    BatchSource,
    batch_source,
    open_training_data,
)

__all__ = [
    "CHECKPOINTS",
    "FINAL",
    "KEEP_CHECKPOINTS",
    "LATEST",
    "BatchSource",
    "Distributed",
    "GPTTarget",
    "LoopConfig",
    "TrainConfig",
    "Trainer",
    "TrainingTarget",
    "batch_source",
    "check_s2_attn",
    "check_sampler",
    "checkpoint_candidates",
    "continue_from",
    "field_docs",
    "final_losses",
    "learning_rate",
    "main_process",
    "make_optimizer",
    "non_finite",
    "open_training_data",
    "train",
    "validation_loss",
]
