"""The lextra GPT training target (`GPTTarget`), which `train(config, run_dir)` runs under the `Trainer`; its
checkpoints and final `run_dir/model` are model folders."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from lextra.attention.plan import format_plan, with_scheme_options
from lextra.compile import StepLoss, answer_loss, next_token_loss
from lextra.data import eval_sequences
from lextra.data.packing import check_pack_corpus
from lextra.data.positions import PositionSampler, sampled_batch
from lextra.data.prepare import PreparedData
from lextra.errors import CheckpointError, ConfigError
from lextra.model import GPT, GPTConfig, load_model, read_model_meta, save_model
from lextra.positions.abacus import tokenizer_digits
from lextra.positions.scaling import SCALING_TYPES, TRAIN_LENGTH, scaling_type_of
from lextra.tasks import TaskBatches, algorithmic_task, parse_lengths
from lextra.train.checkpoints import FINAL, continue_optimizer, refuse_changes
from lextra.train.config import TrainConfig
from lextra.train.distributed import Distributed
from lextra.train.loop import Trainer
from lextra.train.mixed import MixedWindow, resolve_mixed_scaling
from lextra.train.packing import packed_source, packed_step
from lextra.train.sharding import gathered, load_full
from lextra.train.target import StepFunction, TrainingTarget
from lextra.train.task_runs import task_mask, task_positions, task_record
from lextra.train.tasks import batch_source, check_same_data, open_training_data

#: parameter dtypes AdamW's fused CPU and CUDA kernels take
FUSED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: model fields continued training may change from its --init-from model (the RoPE scaling is a scheme option)
CONTINUE_CHANGES = ("train_len", "temperatures")


def train(
    config: TrainConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    on_step: Callable[[int], None] | None = None,
    device: str | torch.device | None = None,
) -> Path:
    """Train a GPT on `device` (see `Trainer`); returns the folder of the final model (`run_dir/model`)."""
    config.validate()
    trainer = Trainer(GPTTarget(config), run_dir, resume=resume, progress=progress, device=device, on_step=on_step)
    return Path(trainer.run())


def make_optimizer(model: GPT, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW, decay on the network's matrices only; scheme parameters at lr * position_lr_scale, no decay."""
    scheme_params = {id(p) for p in model.schemes.parameters()}
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for param in model.parameters():
        if id(param) not in scheme_params:
            (decay if param.dim() >= 2 else no_decay).append(param)
    groups = [
        {"params": decay, "weight_decay": config.weight_decay, "lr_scale": 1.0},
        {"params": no_decay, "weight_decay": 0.0, "lr_scale": 1.0},
        {"params": list(model.schemes.parameters()), "weight_decay": 0.0, "lr_scale": config.position_lr_scale},
    ]
    params = list(model.parameters())
    # one fused kernel per parameter group (not a Python loop over tensors) where torch has one for these tensors
    fused = all(p.device.type in ("cpu", "cuda") and p.dtype in FUSED_DTYPES for p in params)
    return torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2), fused=fused)


class GPTTarget(TrainingTarget):
    """A lextra GPT as a `TrainingTarget` (see `lextra.train.target` for what each method does)."""

    command = "lextra train"
    kind = "training"
    config: TrainConfig

    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        self.label = f"train {config.model.label}"
        self.extra: dict[str, Any] = {}
        self._model: GPT | None = None
        self.validation: list[torch.Tensor] = []
        self.step_loss: StepLoss | None = None
        #: a length-generalization task's batches (None: text, or a retrieval task's rows)
        self.task_batches: TaskBatches | None = None
        self._sampler: PositionSampler | None = None
        #: mixed context-window training's windows (None: every step at L_tr)
        self._mixed: MixedWindow | None = None

    @property
    def model(self) -> GPT:
        assert self._model is not None, "build first"
        return self._model

    @property
    def length(self) -> int:
        return self.config.model.train_len

    def sampler(self) -> PositionSampler:
        return self.config.sampler()

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        config = self.config
        if self._sampler is None:
            self._sampler = self.sampler()
        if config.pack != "none":  # (B, 2, L + 1): tokens and document ids; each document numbers its own positions
            return self.stream.batch(step, config.batch_size, config.model.train_len, config.batch_seed), None
        if self.task_batches is None:
            tokens, positions = sampled_batch(self._sampler, self.stream, step, config.batch_size, config.batch_seed)
            if self._mixed is not None and self._mixed.is_short(config.batch_seed, step):
                return self._mixed.cut(tokens), positions
            return tokens, positions
        tokens = self.task_batches.batch(step, config.batch_size, 0, config.batch_seed)
        return tokens, task_positions(self._sampler, tokens.shape[-1], config.batch_seed, step)

    def open_data(self, world: Distributed, run_dir: Path, resume: bool, progress: bool) -> None:
        config = self.config
        task = algorithmic_task(config.task) if config.task is not None else None
        if task is not None:
            if resume:
                self._check_resumable(run_dir)
            self.task_batches = TaskBatches(task, parse_lengths(config.task_lengths or task.train_lengths))
            self._stream = self.task_batches
            self.extra = {"task": task_record(task, self.task_batches.lengths), "train": config.to_dict()}
            return
        if config.pack != "none" and config.data is None:
            check_pack_corpus(config.corpus, config.limit_chars)
        data, cached = open_training_data(config, progress, prepare=world.is_main)
        tokenizer = data.tokenizer
        config.model.vocab_size = tokenizer.vocab_size
        if config.model.abacus is not None and "digits" not in config.model.abacus:
            config.model.abacus["digits"] = tokenizer_digits(tokenizer.encode, f"tokenizer {config.tokenizer!r}")
        continue_from(config)
        self._mixed = config.mixed()
        if self._mixed is not None:
            resolve_mixed_scaling(config, self._mixed)
        if resume:
            check_same_data(run_dir, data.folder, cached=cached)
            self._check_resumable(run_dir)
        self._stream = batch_source(config, data)
        if config.pack != "none":
            self._stream = packed_source(self._stream)
        self.extra = {"tokenizer": tokenizer.to_config(), "train": config.to_dict()}
        if "data" in data.record():
            self.extra["data"] = data.record()["data"] | ({"cache": True} if cached else {})
        if world.is_main or config.fsdp:  # a sharded model's forward is a collective: every process evaluates
            self.validation = validation_batches(data, config)

    def _check_resumable(self, run_dir: Path) -> None:
        """Refuse to resume with a config that changes anything but `TrainConfig.RESUMABLE`."""
        saved_path = run_dir / "config.json"
        if not saved_path.exists():
            return
        try:
            saved = json.loads(saved_path.read_text())["train"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise CheckpointError(f"{saved_path} is corrupt ({err}); start a new run directory") from None
        saved = TrainConfig.from_dict(saved).to_dict()  # as this version writes it (a model stated by its scheme)
        refuse_changes(run_dir, saved, self.config.to_dict(), self.config.RESUMABLE)

    def run_record(self) -> dict[str, Any]:
        return {k: self.extra[k] for k in ("train", "tokenizer", "task", "data") if k in self.extra}

    def build(self, device: torch.device, world: Distributed) -> GPT:
        torch.manual_seed(self.config.seed)
        self._model = GPT(self.config.model).to(device)  # built on the CPU: the same initial weights on every device
        self._model.set_s2_attn(self.config.s2_attn)
        self.device = device
        self.validation = [b.to(device) for b in self.validation]
        return self._model

    def shard_units(self) -> list[torch.nn.Module]:
        return list(self.model.blocks)  # the root keeps the tied embedding and head, and the position schemes

    def optimizer(self) -> torch.optim.Optimizer:
        return make_optimizer(self.model, self.config)

    def started(self, start: int, optimizer: torch.optim.Optimizer) -> None:
        if self.config.init_from and start == 0:  # a resumed run already holds weights past the initial ones
            _initialise_from(self.model, self.config.init_from)
            if self.config.init_optimizer:
                continue_optimizer(optimizer, self.config.init_from)

    def step_function(self, network: torch.nn.Module) -> StepFunction:
        config = self.config
        if config.pack != "none":
            return lambda batch, positions: packed_step(network, network, batch, config.precision, self.device)
        loss = (
            next_token_loss
            if self.task_batches is None
            else partial(answer_loss, mask=task_mask(self.task_batches.task))
        )
        self.step_loss = StepLoss(network, config.precision, self.device, compile=config.compile,
                                  label=config.model.label, loss=loss,
                                  dynamic=False if self.task_batches is None else None)  # fmt: skip
        return self.step_loss

    def trainable(self) -> list[tuple[str, torch.nn.Parameter]]:
        return list(self.model.named_parameters())

    def save_weights(self, folder: Path | None) -> None:
        state = self.full_state(keep=folder is not None)
        if folder is not None:
            save_model(self.model, folder, extra=self.extra, state=state)

    def load_weights(self, folder: Path) -> None:
        load_full(self.model, load_model(folder).state_dict())

    def full_state(self, keep: bool) -> dict[str, torch.Tensor]:
        """The model's weights as whole CPU tensors, the tied head left out (a collective when sharded)."""
        tied = self.config.model.tie_embeddings
        return gathered(((k, v) for k, v in self.model.state_dict().items() if not (tied and k == "head.weight")), keep)

    def validation_loss(self, done: int) -> float | None:
        config = self.config
        if not self.validation or not ((config.eval_every and done % config.eval_every == 0) or done == config.steps):
            return None
        loss = validation_loss(self.model, self.validation)
        self.model.train()
        return loss

    def divergence_causes(self) -> list[str]:
        causes = []
        given = {k: v for variant in self.config.model.plan() for k, v in variant.scheme_options.items()}
        if given:
            options = ", ".join(f"{k}={v!r}" for k, v in given.items())
            causes.append(f"an extreme scheme option ({options})")
        if self.config.precision == "bf16":
            causes.append("bf16 overflow (try --precision fp32)")
        return causes

    def finish(self, run_dir: Path, world: Distributed) -> Path:
        if self.step_loss is not None and self.step_loss.summary() and world.is_main:
            print(f"lextra train: {self.config.model.label}: {self.step_loss.summary()}", file=sys.stderr)
        final = run_dir / FINAL
        state = self.full_state(keep=world.is_main)
        if world.is_main:
            save_model(self.model, final, extra={**self.extra, "steps": self.config.steps}, state=state)
        return final


def _comparable(model: GPTConfig) -> dict[str, Any]:
    data = model.to_dict()
    for name in CONTINUE_CHANGES:
        data.pop(name, None)
    variants = model.plan()
    data["layer_plan"] = format_plan(with_scheme_options(variants, list(range(len(variants))), {}, ("scaling",)))
    return data


def continue_from(config: TrainConfig) -> GPTConfig | None:
    """Check `config.init_from` against this run's model (only the training length and RoPE scaling may change);
    a scaling without an original length gets the source's. Returns the source's config (None without one)."""
    if not config.init_from:
        return None
    meta = read_model_meta(config.init_from)
    source = GPTConfig.from_dict(meta["model"])
    mine, theirs = _comparable(config.model), _comparable(source)
    differences = [k for k in mine if mine[k] != theirs.get(k)]
    if differences:
        detail = "; ".join(f"{k}: model {theirs.get(k)!r}, this run {mine[k]!r}" for k in differences[:4])
        raise ConfigError(
            f"--init-from {config.init_from}: its model config differs from this run's ({detail}); only "
            "--train-len and --rope-scaling may change, so set the other model options as the model has them"
        )
    variants = config.model.plan()
    for layer, (variant, trained) in enumerate(zip(variants, source.plan(), strict=True)):
        scaling = variant.scheme_options.get("scaling")
        if (
            isinstance(scaling, dict)
            and scaling_type_of(scaling) in SCALING_TYPES
            and SCALING_TYPES.get(scaling_type_of(scaling)).declares(TRAIN_LENGTH)
            and TRAIN_LENGTH not in scaling
        ):
            before = trained.scheme_options.get("scaling")
            original = before.get(TRAIN_LENGTH) if isinstance(before, dict) else None
            filled = {**scaling, TRAIN_LENGTH: original or source.train_len}
            variants = with_scheme_options(variants, [layer], {"scaling": filled})
    if variants != config.model.plan():
        config.model.set_variants(variants)
        config.model.validate()
    return source


def _initialise_from(model: GPT, folder: str) -> None:
    """Copy a saved model's weights into `model` (same scheme and shape; `continue_from` checked the config)."""
    source = load_model(folder)
    mismatched = [
        name
        for name, tensor in source.state_dict().items()
        if name in model.state_dict() and model.state_dict()[name].shape != tensor.shape
    ]
    if mismatched:
        raise ConfigError(
            f"--init-from {folder}: its weights {', '.join(mismatched[:3])} have other shapes at --train-len "
            f"{model.config.train_len} (a table sized by L_tr); keep its --train-len or set the table size "
            "(e.g. --scheme-option max_len=...) as the model has it"
        )
    load_full(model, source.state_dict())


def validation_batches(data: PreparedData, config: TrainConfig) -> list[torch.Tensor]:
    """Fixed validation windows at the training length from the validation split ([] when there are none)."""
    if not config.eval_sequences:
        return []
    tokens = data.documents("validation")
    if not tokens:
        return []
    sequences, _ = eval_sequences(tokens, config.model.train_len, config.eval_sequences)
    return [torch.stack(sequences)]


@torch.no_grad()
def validation_loss(model: GPT, batches: list[torch.Tensor]) -> float:
    """Mean next-token loss over fixed validation windows at the training length."""
    model.eval()
    losses = [float(model.loss(batch)) for batch in batches]
    return sum(losses) / len(losses)
