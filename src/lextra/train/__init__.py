"""The one training stack: a `Trainer` (`loop`) runs a training target (a lextra GPT, `gpt`; a Hugging Face
model, `lextra.hf.finetune`). A run directory holds `config.json`, `metrics.jsonl`, `checkpoints/step_N/`
(`checkpoints/LATEST` names the newest), TensorBoard files when asked, and when done `model/`; checkpoints are
device-independent."""

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
