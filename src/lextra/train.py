"""Training: AdamW with warmup and cosine decay, progress, metrics, atomic checkpoints and exact resume.

A run directory holds `config.json` (training + model config), `metrics.jsonl`, `checkpoints/step_N/` (model,
optimizer and state, each written atomically; `checkpoints/LATEST` names the newest), with `tensorboard` on the
same curves as TensorBoard event files in `tb/` (or `log_dir`), and, when done, `model/`.
Batches are a pure function of (seed, step, rank) and the learning rate of step, so `resume=True` continues
exactly where the last checkpoint left off. A step whose loss or gradient norm is non-finite stops the run before
anything of it is saved (`TrainingDivergedError`); resuming with a lower `lr` continues from the last good checkpoint.
The device is a runtime choice (`train(..., device=)`), never part of the config: checkpoints are device-independent,
so a run trained on a GPU resumes or evaluates on the CPU and back.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from lextra import serialize
from lextra.compile import StepLoss
from lextra.data import ORDERS, EpochOrder, TrainStream, eval_sequences, in_order
from lextra.data.corpora import mixture_weights
from lextra.data.positions import PositionSampler, build_sampler
from lextra.data.prepare import PreparedData, prepare_data
from lextra.data.shards import PreparedShards, cached_shards, data_cache_dir, training_batches
from lextra.data.windows import encode_documents
from lextra.devices import resolve_device
from lextra.errors import CheckpointError, ConfigError, TrainingDivergedError
from lextra.io import atomic_write, atomic_write_json, atomic_write_text, sha256_file
from lextra.locks import run_lock
from lextra.model import GPT, GPTConfig, load_model, read_model_meta, save_model
from lextra.positions.scaling import SCALING_TYPES
from lextra.tensorboard import Board, require_tensorboard, run_log_dir
from lextra.training_tasks import TRAINING_TASKS
from lextra.validate import check_bool, check_int, check_positive, check_positive_int, check_range

CHECKPOINTS = "checkpoints"
LATEST = "LATEST"
FINAL = "model"
KEEP_CHECKPOINTS = 2
#: parameter dtypes AdamW's fused CPU and CUDA kernels take
FUSED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@dataclass
class TrainConfig:
    """Everything that determines a training run; the same config and seed give the same weights.

    `position_lr_scale` (10) multiplies the learning rate of position-scheme parameters: Adam moves each
    parameter by about lr per step, so at small budgets (hundreds of steps) a T5 bucket table initialised near 0
    cannot reach the few-unit biases it needs at the network's learning rate; the learned tables of KERPLE and
    FIRE profit too (benchmarks/README.md has the measurement behind the default).
    """

    corpus: str = "python-code"
    tokenizer: str = "bytes"
    limit_chars: int | None = None
    #: a registered batch source other than plain language modelling (e.g. a retrieval task), or None
    task: str | None = None
    #: start from this model folder's weights (fine-tuning, e.g. on a retrieval task); same architecture
    init_from: str | None = None
    #: a prepared folder (`lextra data prepare`) read instead of the corpus; its source and limit replace
    #: `corpus` and `limit_chars`, and `tokenizer` must be the one it was prepared with
    data: str | None = field(default=None, metadata=serialize.options(omit_none=True))
    model: GPTConfig = field(default_factory=GPTConfig)
    batch_size: int = 16
    #: 600 steps: the budget `lextra train` and `lextra compare` (`make run`) use unless told otherwise
    steps: int = 600
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 50
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    #: "fp32", or "bf16" autocast for the network's matrix products
    precision: str = "fp32"
    position_lr_scale: float = 10.0
    seed: int = 0
    checkpoint_every: int = 200
    eval_every: int = 0
    eval_sequences: int = 16
    log_every: int = 10
    #: also write the metrics.jsonl curves (and `lextra compare`'s perplexity curves) as TensorBoard event files
    tensorboard: bool = False
    #: where those event files go (turns `tensorboard` on); None: the run directory's tb/
    log_dir: str | None = None
    #: the position sampler the training windows are read at (`lextra.data.positions`): `contiguous`,
    #: `pose[:TARGET][,chunks=N]`, `randomized[:MAX]`
    positions: str = "contiguous"
    #: LongLoRA's shifted sparse attention in training with groups of this many tokens (0: off); evaluation and
    #: the saved model attend with full causal attention
    s2_attn: int = 0
    #: the order of the training windows (`lextra.data.ORDERS`): `iid` draws each uniformly from every offset;
    #: `epoch` draws every non-overlapping window once per epoch, in a permutation keyed by (seed, epoch)
    order: str = "iid"
    #: run the step's forward and loss through `torch.compile` (inductor; `lextra.compile`); off by default: on the
    #: main job's CPU shape its compile time exceeds what it saves (benchmarks/README.md, `main_job.py`)
    compile: bool = False

    #: how a run is carried out, not what it trains (where its curves go, whether its step is compiled): left out
    #: of `to_dict`, so saved configs, study cells and reused models compare equal either way
    LOGGING_ONLY: ClassVar[tuple[str, ...]] = ("tensorboard", "log_dir", "compile")
    #: fields left out of `to_dict` at these values, so configs saved before they existed compare equal
    OMIT_DEFAULTS: ClassVar[dict[str, Any]] = {"positions": "contiguous", "s2_attn": 0, "order": "iid"}

    def validate(self) -> TrainConfig:
        """Refuse every non-finite or out-of-range number before any work; integral counts become ints."""
        where = "training config:"
        for name in ("batch_size", "steps"):
            setattr(self, name, check_positive_int(f"{where} {name}", getattr(self, name)))
        for name in ("warmup", "checkpoint_every", "eval_every", "eval_sequences", "log_every"):
            setattr(self, name, check_int(f"{where} {name}", getattr(self, name), 0))
        self.seed = check_int(f"{where} seed", self.seed, 0, 2**64 - 1)
        if self.limit_chars is not None:
            self.limit_chars = check_positive_int(f"{where} limit_chars", self.limit_chars)
        check_positive(f"{where} lr", self.lr, hint="the default is 2e-3")
        check_range(f"{where} min_lr_ratio", self.min_lr_ratio, 0.0, 1.0)
        check_range(f"{where} weight_decay", self.weight_decay, 0.0)
        check_range(f"{where} beta1", self.beta1, 0.0, 1.0, high_open=True)
        check_range(f"{where} beta2", self.beta2, 0.0, 1.0, high_open=True)
        check_positive(f"{where} grad_clip", self.grad_clip, hint="the largest gradient norm a step may take")
        check_range(f"{where} position_lr_scale", self.position_lr_scale, 0.0)
        if self.precision not in ("fp32", "bf16"):
            raise ConfigError(f"training config: precision must be fp32 or bf16, got {self.precision!r}")
        self.tensorboard = check_bool(f"{where} tensorboard", self.tensorboard)
        self.compile = check_bool(f"{where} compile", self.compile)
        if self.log_dir is not None:
            if not isinstance(self.log_dir, str) or not self.log_dir.strip():
                raise ConfigError(f"{where} log_dir must be a folder path, got {self.log_dir!r}")
            self.tensorboard = True
        if self.tensorboard:
            require_tensorboard()
        self.model.validate()
        self.s2_attn = check_int(f"{where} s2_attn", self.s2_attn, 0)
        if self.order not in ORDERS:
            raise ConfigError(f"{where} order must be one of {', '.join(ORDERS)}, got {self.order!r}")
        if self.order == "epoch" and self.task is not None:
            raise ConfigError(
                f"{where} order epoch visits the windows of a text stream, but the task {self.task!r} builds its "
                "own samples; drop the task or use order iid"
            )
        if self.order == "epoch" and self.data is None and mixture_weights(self.corpus) is not None:
            raise ConfigError(
                f"{where} order epoch draws every window once, but the weighted mixture {self.corpus} draws its "
                "parts by weight; use order iid, or the unweighted mixture (A+B)"
            )
        self.sampler()
        check_s2_attn(self.s2_attn, self.model)
        return self

    def sampler(self) -> PositionSampler:
        """The position sampler `positions` names, checked against the model it feeds (see `check_sampler`)."""
        sampler = build_sampler(self.positions, self.model.train_len)
        check_sampler(sampler, self.model)
        return sampler

    def to_dict(self) -> dict[str, Any]:
        data = serialize.to_dict(self)
        for name in self.LOGGING_ONLY:
            del data[name]
        for name, default in self.OMIT_DEFAULTS.items():
            if data.get(name) == default:
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Read a saved or written config (the model through `GPTConfig.from_dict`); unknown keys are refused."""
        return serialize.from_dict(cls, data, refuse_unknown="training config")


def check_sampler(sampler: PositionSampler, model: GPTConfig) -> None:
    """Refuse a sampler the model's scheme cannot serve: a learned table shorter than the positions it draws, and
    Scalable-Softmax, whose n counts keys at contiguous positions."""
    if sampler.contiguous:
        return
    if model.scheme == "learned":
        table = int(model.scheme_options.get("max_len") or model.train_len)
        if sampler.limit > table:
            raise ConfigError(
                f"--positions {sampler.spec()} draws positions up to {sampler.limit - 1}, but the learned position "
                f"table has {table} entries; train with --scheme-option max_len={sampler.limit}, a smaller "
                "target/max, or a relative scheme"
            )
    if model.log_scaling == "ssmax":
        raise ConfigError(
            f"--positions {sampler.spec()} skips positions, but log_scaling ssmax counts keys at contiguous "
            "positions; use --positions contiguous or another log_scaling"
        )


def check_s2_attn(group: int, model: GPTConfig) -> None:
    """Refuse an S2-Attn group that does not divide the training window (or cannot be halved)."""
    if not group:
        return
    L = model.train_len
    if group < 2 or group % 2 or L % group or group == L:
        raise ConfigError(
            f"--s2-attn {group}: the group must be even and divide the training window L_tr ({L}) into two or "
            f"more groups; use e.g. --s2-attn {L // 4 if L % 8 == 0 else L // 2}"
        )
    if model.n_head < 2:
        raise ConfigError(f"--s2-attn shifts half the heads, but the model has {model.n_head}; use n_head >= 2")
    if model.log_scaling == "ssmax":
        raise ConfigError("--s2-attn hides keys that log_scaling ssmax counts; use another log_scaling or drop one")


class BatchSource(Protocol):
    """Where training batches come from: (batch_size, length + 1) token ids, a pure function of its arguments."""

    def batch(
        self, step: int, batch_size: int, length: int, seed: int, rank: int = 0, world_size: int = 1
    ) -> torch.Tensor: ...


#: task name -> factory(config, data) of a BatchSource; other modules register tasks here
BATCH_SOURCES: dict[str, Callable[[TrainConfig, PreparedData], BatchSource]] = {}
#: callables that register a task spec missing from `BATCH_SOURCES` (e.g. `passkey:0.3`), or raise ConfigError
BATCH_SOURCE_RESOLVERS: list[Callable[[str], object]] = []


def batch_source(config: TrainConfig, data: PreparedData) -> BatchSource:
    """Plain language modelling on the corpus' train split, or the registered task named by `config.task`."""
    if config.task is None:
        return in_order(TrainStream.from_documents(data.splits["train"], data.tokenizer), config.order)
    return resolve_task(config.task)(config, data)


def resolve_task(task: str) -> Callable[[TrainConfig, PreparedData], BatchSource]:
    """The `BATCH_SOURCES` factory of a task spec: the built-in tasks' modules are imported first (whatever the
    caller imported), then a spec not registered yet is offered to `BATCH_SOURCE_RESOLVERS`."""
    if task not in BATCH_SOURCES:
        TRAINING_TASKS.fill()  # the modules that register the built-in tasks
    if task not in BATCH_SOURCES:
        for resolver in BATCH_SOURCE_RESOLVERS:
            resolver(task)  # raises ConfigError naming the known tasks when the spec is not one
            if task in BATCH_SOURCES:
                break
    if task not in BATCH_SOURCES:
        known = ", ".join(sorted(BATCH_SOURCES)) or "none registered"
        raise ConfigError(f"unknown training task {task!r}; known tasks: {known}")
    return BATCH_SOURCES[task]


def learning_rate(config: TrainConfig, step: int) -> float:
    """Linear warmup to `lr`, then cosine decay to `lr * min_lr_ratio` at the last step."""
    if config.warmup and step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    span = max(1, config.steps - config.warmup)
    progress = min(1.0, (step - config.warmup) / span)
    floor = config.lr * config.min_lr_ratio
    return floor + 0.5 * (config.lr - floor) * (1 + math.cos(math.pi * progress))


def make_optimizer(model: GPT, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW; weight decay only on the network's matrices; position-scheme parameters (T5 table, KERPLE, FIRE,
    learned positions) get no decay and their own learning rate, lr * position_lr_scale."""
    scheme_params = {id(p) for p in model.positions.parameters()}
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for param in model.parameters():
        if id(param) not in scheme_params:
            (decay if param.dim() >= 2 else no_decay).append(param)
    groups = [
        {"params": decay, "weight_decay": config.weight_decay, "lr_scale": 1.0},
        {"params": no_decay, "weight_decay": 0.0, "lr_scale": 1.0},
        {"params": list(model.positions.parameters()), "weight_decay": 0.0, "lr_scale": config.position_lr_scale},
    ]
    params = list(model.parameters())
    # one fused kernel per parameter group (not a Python loop over tensors) where torch has one for these tensors
    fused = all(p.device.type in ("cpu", "cuda") and p.dtype in FUSED_DTYPES for p in params)
    return torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2), fused=fused)


# ----------------------------------------------------------------------------- checkpoints
def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    state = optimizer.state_dict()
    tensors = {
        f"{index}.{key}": value.detach().contiguous().cpu()
        for index, entries in state["state"].items()
        for key, value in entries.items()
    }
    return tensors, {"param_groups": state["param_groups"]}


def _load_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def save_checkpoint(
    run_dir: Path,
    model: GPT,
    optimizer: torch.optim.Optimizer,
    step: int,
    extra: dict,
    position: dict[str, int] | None = None,
) -> Path:
    """Write checkpoints/step_N atomically (into a temporary folder, then renamed) and point LATEST at it;
    `position` (where an epoch-order run stands in its data) goes into its state.json."""
    root = run_dir / CHECKPOINTS
    final = root / f"step_{step:07d}"
    staging = root / f".step_{step:07d}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    save_model(model, staging, extra=extra)
    tensors, meta = _optimizer_tensors(optimizer)
    atomic_write(staging / "optimizer.safetensors", lambda tmp: save_file(tensors, str(tmp)))
    state = {
        "step": step,
        "optimizer": meta,
        "optimizer_sha256": sha256_file(staging / "optimizer.safetensors"),
        "torch_rng_state": torch.get_rng_state().tolist(),
    }
    if position is not None:
        state["data_position"] = position
    device = next(model.parameters()).device
    if device.type == "cuda":  # dropout on the GPU draws from its own generator
        state["cuda_rng_state"] = torch.cuda.get_rng_state(device).tolist()
    atomic_write_json(staging / "state.json", state)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staging, final)
    atomic_write_text(root / LATEST, final.name + "\n")
    for old in sorted(root.glob("step_*"))[:-KEEP_CHECKPOINTS]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(
    path: Path, config: TrainConfig, map_location: str | torch.device = "cpu"
) -> tuple[GPT, torch.optim.Optimizer, int]:
    """Model and optimizer on `map_location` and the next step, from one checkpoint folder, every file verified."""
    model = load_model(path, map_location=map_location)
    state_path = path / "state.json"
    try:
        state = json.loads(state_path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"checkpoint {path} has a missing or corrupt state.json ({err})") from None
    tensors_path = path / "optimizer.safetensors"
    if not tensors_path.exists() or sha256_file(tensors_path) != state.get("optimizer_sha256"):
        raise CheckpointError(f"checkpoint {path}: optimizer.safetensors is missing or corrupt (checksum mismatch)")
    optimizer = make_optimizer(model, config)
    _load_optimizer(optimizer, load_file(str(tensors_path)), state["optimizer"])
    torch.set_rng_state(torch.tensor(state["torch_rng_state"], dtype=torch.uint8, device="cpu"))
    device = torch.device(map_location)
    if device.type == "cuda" and "cuda_rng_state" in state:
        torch.cuda.set_rng_state(torch.tensor(state["cuda_rng_state"], dtype=torch.uint8, device="cpu"), device)
    return model, optimizer, int(state["step"])


def checkpoint_candidates(run_dir: Path) -> list[Path]:
    """Checkpoint folders, newest first (LATEST's target first when it names one)."""
    root = run_dir / CHECKPOINTS
    found = sorted(root.glob("step_*"), reverse=True)
    latest = root / LATEST
    if latest.exists():
        named = root / latest.read_text().strip()
        if named in found:
            found.remove(named)
            found.insert(0, named)
    return found


# ----------------------------------------------------------------------------- the loop
#: what a resumed run may change: its length and logging, and the schedule (lr, min_lr_ratio, warmup, grad_clip),
#: so that a run that diverged continues from its last good checkpoint with a lower learning rate
COMPATIBLE_CHANGES = {
    "steps",
    "checkpoint_every",
    "eval_every",
    "log_every",
    "eval_sequences",
    "lr",
    "min_lr_ratio",
    "warmup",
    "grad_clip",
    "data",  # the folder may move; its manifest's hash must match (`_check_same_data`)
}


def _check_compatible(run_dir: Path, config: TrainConfig) -> None:
    """Refuse to resume with a config that changes anything but `COMPATIBLE_CHANGES`."""
    saved_path = run_dir / "config.json"
    if not saved_path.exists():
        return
    try:
        saved = json.loads(saved_path.read_text())["train"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise CheckpointError(f"{saved_path} is corrupt ({err}); start a new run directory") from None
    current = config.to_dict()
    differences = [k for k in current if k not in COMPATIBLE_CHANGES and saved.get(k) != current[k]]
    if differences:
        detail = "; ".join(f"{k}: saved {saved.get(k)!r}, now {current[k]!r}" for k in differences[:4])
        raise ConfigError(
            f"cannot resume {run_dir} with an incompatible config ({detail}); "
            "use the original settings or a new --out directory"
        )


def _check_same_data(run_dir: Path, shards: PreparedShards | None, *, cached: bool = False) -> None:
    """Refuse to resume a run on prepared data other than what it was trained on (compared by manifest hash).

    A run on the raw corpus continues on its cache entry (`cached`): the two give the same batches."""
    saved_path = run_dir / "config.json"
    if not saved_path.exists():
        return
    saved = (json.loads(saved_path.read_text()).get("data") or {}).get("manifest_sha256")
    now = shards.sha256 if shards is not None else None
    if saved is None and cached:
        return
    if saved != now:
        was = f"prepared data with manifest sha256 {saved[:12]}" if saved else "the raw corpus"
        if shards is not None and cached:
            given = f"no --data given (the corpus' cache entry {shards.root} has manifest sha256 {shards.sha256[:12]})"
        elif shards is not None:
            given = f"{shards.root} has manifest sha256 {shards.sha256[:12]}"
        else:
            given = "no --data given"
        raise ConfigError(f"cannot resume {run_dir}: it was trained on {was}, {given}; resume with the data it used")


def open_training_data(
    config: TrainConfig, progress: bool = True, *, prepare: bool = True
) -> tuple[PreparedShards | None, bool]:
    """The prepared folder of `config.data`, or the data cache's entry of `config.corpus` for plain language
    modelling (None for a task, or with the cache off), and whether it is the cache's. A `--data` folder's source
    and limit become the config's (a task trains on its documents decoded). Only a process that may `prepare`
    writes a cache entry; the others (torchrun ranks but 0) wait for it."""
    if config.data is None:
        if config.task is not None or data_cache_dir() is None:
            if mixture_weights(config.corpus) is not None:
                why = f"the task {config.task!r} reads" if config.task is not None else "LEXTRA_DATA_CACHE=off reads"
                raise ConfigError(
                    f"a weighted mixture ({config.corpus}) samples prepared parts, but {why} the corpus into memory; "
                    "use plain language modelling with the data cache on, or --data DIR"
                )
            return None, False
        shards = cached_shards(config.corpus, config.tokenizer, config.limit_chars, progress=progress, prepare=prepare)
        return shards, True
    shards = PreparedShards.open(config.data)
    shards.check_tokenizer(config.tokenizer)
    config.corpus, config.limit_chars = shards.manifest["source"], shards.manifest["limit_chars"]
    return shards, False


def train(
    config: TrainConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    on_step: Callable[[int], None] | None = None,
    device: str | torch.device | None = None,
) -> Path:
    """Train a model on `device` (see `resolve_device`; None: CUDA when available, the LOCAL_RANK GPU under
    torchrun); returns the folder of the final model (`run_dir/model`). `on_step(done)` runs after every step
    (progress hooks, tests that interrupt a run). One process at a time writes `run_dir` (`lextra.locks`)."""
    config.validate()
    run_dir = Path(run_dir)
    with run_lock(run_dir):
        return _train(config, run_dir, resume=resume, progress=progress, on_step=on_step, device=device)


def _train(
    config: TrainConfig,
    run_dir: Path,
    *,
    resume: bool,
    progress: bool,
    on_step: Callable[[int], None] | None,
    device: str | torch.device | None,
) -> Path:
    """`train` in the run folder whose lock this process holds."""
    device = resolve_device(device)
    world = Distributed.from_environment(device)
    if config.batch_size % world.size:
        raise ConfigError(
            f"the global batch ({config.batch_size}) must divide evenly over {world.size} processes; "
            f"use a batch size that is a multiple of {world.size}"
        )
    if not resume and (run_dir / CHECKPOINTS).exists() and any((run_dir / CHECKPOINTS).glob("step_*")):
        raise ConfigError(f"{run_dir} already holds a training run; pass --resume to continue it or use a new --out")
    shards, cached = open_training_data(config, progress and world.is_main, prepare=world.is_main)
    data: PreparedData | None = None
    stream: BatchSource
    if shards is not None:
        tokenizer = shards.tokenizer()
    else:
        data = prepare_data(config.corpus, config.tokenizer, config.limit_chars)
        tokenizer = data.tokenizer
    config.model.vocab_size = tokenizer.vocab_size
    continue_from(config)
    if resume:
        _check_same_data(run_dir, shards, cached=cached)
        _check_compatible(run_dir, config)
    if shards is not None and config.task is None:
        stream = training_batches(shards, config.order)
    else:
        # a task builds its samples from text: a prepared folder's documents decoded (`PreparedShards.texts`)
        if data is None:
            assert shards is not None
            data = shards.prepared_data()
        stream = batch_source(config, data)
    extra = {"tokenizer": tokenizer.to_config(), "train": config.to_dict()}
    if shards is not None:
        extra["data"] = {"path": str(shards.root), "manifest_sha256": shards.sha256} | (
            {"cache": True} if cached else {}
        )
    if world.is_main:
        saved = {"train": config.to_dict(), "tokenizer": extra["tokenizer"]}
        atomic_write_json(run_dir / "config.json", saved | ({"data": extra["data"]} if shards is not None else {}))
    world.barrier()

    torch.manual_seed(config.seed)
    model = GPT(config.model).to(device)  # built on the CPU: the same initial weights on every device
    optimizer = make_optimizer(model, config)
    start = 0
    if resume:
        model, optimizer, start = _resume(run_dir, config, model, optimizer, device)
        _check_position(run_dir, stream, start, config)
    if config.init_from and start == 0:  # a resumed run already holds weights past the initial ones
        _initialise_from(model, config.init_from)
    metrics_path = run_dir / "metrics.jsonl"
    board = None
    if world.is_main:
        _truncate_metrics(metrics_path, start)
        if config.tensorboard:
            board = Board(run_log_dir(config.log_dir, run_dir), purge_step=start or None)
    validation = [b.to(device) for b in _validation_batches(data, shards, config)] if world.is_main else []
    network = world.wrap(model)
    progress = progress and world.is_main

    L = config.model.train_len
    sampler = config.sampler()
    model.set_s2_attn(config.s2_attn)
    bar = tqdm(
        total=config.steps,
        initial=start,
        disable=not progress,
        unit="step",
        dynamic_ncols=True,
        desc=f"train {config.model.label}",
        file=sys.stderr,
    )
    model.train()
    step_loss = StepLoss(network, config.precision, device, compile=config.compile, label=config.model.label)
    parameters = list(model.parameters())
    foreach = all(p.device.type in ("cpu", "cuda") for p in parameters)  # one norm kernel for all gradients
    window_start, window_tokens = time.perf_counter(), 0
    for step in range(start, config.steps):
        lr = learning_rate(config, step)
        for group in optimizer.param_groups:
            group["lr"] = lr * group["lr_scale"]
        # the global batch is the same whatever the number of processes; each takes its own rows
        batch = world.shard(stream.batch(step, config.batch_size, L, config.seed)).to(device)
        # one position vector per step, the same on every process (drawn for the global batch: rank 0)
        positions = None if sampler.contiguous else sampler.positions(config.seed, step).to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = step_loss(batch, positions)
        grad_norm = torch.nn.utils.clip_grad_norm_(parameters, config.grad_clip, foreach=foreach)
        done = step + 1
        failed = _non_finite(world, loss, grad_norm)
        if failed:  # before the update, so the weights in memory and on disk are the last good ones
            bar.close()
            world.close()
            raise _diverged(run_dir, config, done, lr, failed)
        optimizer.step()
        window_tokens += config.batch_size * L
        record: dict[str, Any] | None = None
        if config.log_every and (done % config.log_every == 0 or done == config.steps):
            elapsed = time.perf_counter() - window_start
            tokens_per_s = window_tokens / max(elapsed, 1e-9)
            record = {
                "step": done,
                "loss": world.mean(loss.detach()),
                "lr": lr,
                "grad_norm": grad_norm.item(),
                "tokens_per_s": round(tokens_per_s, 1),
            }
            position = _position(stream, done, config)
            if position is not None:  # epochs done, as a fraction
                record["epoch"] = round(position["epoch"] + position["window"] / position["windows"], 4)
            bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{tokens_per_s:,.0f}")
            window_start, window_tokens = time.perf_counter(), 0
        if validation and ((config.eval_every and done % config.eval_every == 0) or done == config.steps):
            record = record or {"step": done}
            record["val_loss"] = validation_loss(model, validation)
            model.train()
        if record and world.is_main:
            _append_metrics(metrics_path, record)
            if board is not None:
                board.record(record)
        if config.checkpoint_every and done % config.checkpoint_every == 0 and done < config.steps:
            _check_weights(world, bar, model, run_dir, config, done, lr)
            if world.is_main:
                save_checkpoint(run_dir, model, optimizer, done, extra, _position(stream, done, config))
            world.barrier()
        bar.update(1)
        if on_step is not None:
            on_step(done)
    _check_weights(world, bar, model, run_dir, config, config.steps, learning_rate(config, config.steps - 1))
    bar.close()
    if step_loss.summary() and world.is_main:
        print(f"lextra train: {config.model.label}: {step_loss.summary()}", file=sys.stderr)
    if board is not None:
        board.close()
    final = run_dir / FINAL
    if world.is_main:
        save_checkpoint(run_dir, model, optimizer, config.steps, extra, _position(stream, config.steps, config))
        save_model(model, final, extra={**extra, "steps": config.steps})
    world.close()
    return final


def _non_finite(world: Distributed, loss: torch.Tensor, grad_norm: torch.Tensor) -> str:
    """Which of this step's loss (on any process) and gradient norm are non-finite, '' when neither is.

    One host sync per step (and one tiny all-reduce under DDP), so every process decides alike and stops at once.
    """
    flags = torch.stack((~torch.isfinite(loss.detach()), ~torch.isfinite(grad_norm.detach()))).float()
    loss_bad, grad_bad = world.total(flags).tolist()
    names = [name for name, bad in (("loss", loss_bad), ("gradient norm", grad_bad)) if bad]
    return " and ".join(names)


def _check_weights(
    world: Distributed, bar: tqdm, model: GPT, run_dir: Path, config: TrainConfig, done: int, lr: float
) -> None:
    """Stop before a checkpoint would save non-finite weights (a finite gradient times a huge learning rate)."""
    bad = [name for name, param in model.named_parameters() if not bool(torch.isfinite(param).all())]
    if bad:  # parameters are identical on every process, so all of them stop here
        bar.close()
        world.close()
        raise _diverged(run_dir, config, done, lr, f"weights ({', '.join(bad[:3])})")


def _diverged(run_dir: Path, config: TrainConfig, step: int, lr: float, what: str) -> TrainingDivergedError:
    """The one-line error of a run that went non-finite at `step`: the likely cause and how to continue."""
    candidates = checkpoint_candidates(run_dir)
    last = candidates[0] if candidates else None
    causes = [f"a learning rate too high (lr {config.lr:g}, {lr:g} at this step)"]
    if config.model.scheme_options:
        options = ", ".join(f"{k}={v!r}" for k, v in config.model.scheme_options.items())
        causes.append(f"an extreme scheme option ({options})")
    if config.precision == "bf16":
        causes.append("bf16 overflow (try --precision fp32)")
    lower = f"{config.lr / 10:g}"
    if last is not None:
        fix = (
            f"continue from the last good checkpoint, step {int(last.name.split('_')[-1])} ({last}), "
            f"with --resume and a lower learning rate, e.g. --lr {lower}"
        )
    else:
        fix = f"no checkpoint was saved before it: rerun with a lower learning rate, e.g. --lr {lower}"
    return TrainingDivergedError(
        f"training diverged at step {step} of {config.steps}: the {what} became non-finite (nan or inf), so "
        f"nothing of this step was saved; likely cause: {' or '.join(causes)}; {fix}",
        step=step,
        checkpoint=last,
    )


class Distributed:
    """torchrun / DDP plumbing: rank and world size from the environment (nccl on GPUs, gloo on the CPU).

    Every process draws the same global batch and keeps its own rows, so a run on N processes sees exactly the
    data of a one-process run with the same global batch, and DDP's gradient average equals its gradient. On
    GPUs each process uses the device `resolve_device` gave it: the GPU of its LOCAL_RANK.
    """

    def __init__(self, rank: int = 0, size: int = 1, device: torch.device | None = None) -> None:
        self.rank, self.size = rank, size
        self.device = device or torch.device("cpu")

    @classmethod
    def from_environment(cls, device: torch.device | None = None) -> Distributed:
        """The process group torchrun describes (none for one process), with the backend `device` needs."""
        device = device or torch.device("cpu")
        size = int(os.environ.get("WORLD_SIZE", "1"))
        if size <= 1:
            return cls(device=device)
        import torch.distributed as dist

        if device.type == "cuda":
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            if device.type == "cuda":
                dist.init_process_group("nccl", device_id=device)
            else:
                dist.init_process_group("gloo")
        return cls(dist.get_rank(), dist.get_world_size(), device)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def wrap(self, model: GPT) -> torch.nn.Module:
        if self.size == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel

        if self.device.type == "cuda":
            return DistributedDataParallel(model, device_ids=[self.device.index], output_device=self.device.index)
        return DistributedDataParallel(model)

    def shard(self, batch: torch.Tensor) -> torch.Tensor:
        rows = batch.shape[0] // self.size
        return batch[self.rank * rows : (self.rank + 1) * rows]

    def mean(self, value: torch.Tensor) -> float:
        """The mean of a scalar over processes (the global batch's loss), as a float."""
        if self.size > 1:
            import torch.distributed as dist

            value = value.clone()
            dist.all_reduce(value)
            value /= self.size
        return value.item()

    def total(self, values: torch.Tensor) -> torch.Tensor:
        """The sum of a tensor over processes (itself on one process)."""
        if self.size > 1:
            import torch.distributed as dist

            values = values.clone()
            dist.all_reduce(values)
        return values

    def barrier(self) -> None:
        if self.size > 1:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        if self.size > 1:
            import torch.distributed as dist

            dist.barrier()
            dist.destroy_process_group()


#: model fields continued training may change from its --init-from model (the RoPE scaling is a scheme option)
CONTINUE_CHANGES = ("train_len", "temperatures")


def _comparable(model: GPTConfig) -> dict[str, Any]:
    data = model.to_dict()
    for name in CONTINUE_CHANGES:
        data.pop(name, None)
    data["scheme_options"] = {k: v for k, v in model.scheme_options.items() if k != "scaling"}
    return data


def continue_from(config: TrainConfig) -> GPTConfig | None:
    """Check `config.init_from` against this run's model before any work: the same scheme and shape, changing at
    most the training length and the RoPE scaling. A scaling without an original length gets the source's (its
    own scaling's original length, else its L_tr), so `--train-len 512 --rope-scaling yarn:4` on a model trained
    at 128 scales from 128. Returns the source's config (None without --init-from)."""
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
    scaling = config.model.scheme_options.get("scaling")
    if isinstance(scaling, dict) and scaling.get("type", "none") in SCALING_TYPES:
        uses = SCALING_TYPES.get(scaling["type"]).uses
        if "original_max_position_embeddings" in uses and "original_max_position_embeddings" not in scaling:
            before = source.scheme_options.get("scaling")
            original = before.get("original_max_position_embeddings") if isinstance(before, dict) else None
            scaling = {**scaling, "original_max_position_embeddings": original or source.train_len}
            config.model.scheme_options = {**config.model.scheme_options, "scaling": scaling}
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
    model.load_state_dict(source.state_dict())


def _resume(
    run_dir: Path, config: TrainConfig, model: GPT, optimizer: torch.optim.Optimizer, device: torch.device
) -> tuple[GPT, Any, int]:
    candidates = checkpoint_candidates(run_dir)
    if not candidates:
        print(f"lextra train: no checkpoint in {run_dir}; starting from step 0", file=sys.stderr)
        return model, optimizer, 0
    errors = []
    for path in candidates:
        try:
            return load_checkpoint(path, config, map_location=device)
        except CheckpointError as err:
            errors.append(str(err))
            print(f"lextra train: warning: skipping unusable checkpoint: {err}", file=sys.stderr)
    raise CheckpointError("no usable checkpoint to resume from: " + " | ".join(errors))


def _position(stream: BatchSource, step: int, config: TrainConfig) -> dict[str, int] | None:
    """Where an epoch-order run stands after `step` steps (None in i.i.d. order)."""
    if not isinstance(stream, EpochOrder):
        return None
    return stream.position(step, config.batch_size, config.model.train_len)


def _check_position(run_dir: Path, stream: BatchSource, start: int, config: TrainConfig) -> None:
    """Refuse to resume an epoch-order run whose checkpoint stands elsewhere in the data than step `start` of
    this stream does (the batches follow from the step, so this holds unless the windows of the data changed)."""
    expected = _position(stream, start, config)
    if expected is None or start == 0:
        return
    state_path = run_dir / CHECKPOINTS / f"step_{start:07d}" / "state.json"
    saved = json.loads(state_path.read_text()).get("data_position")
    if saved != expected:
        raise CheckpointError(
            f"cannot resume {run_dir}: its checkpoint at step {start} stands at {saved} in the data, this run's "
            f"windows put step {start} at {expected}; resume with the data it used"
        )


def _truncate_metrics(path: Path, step: int) -> None:
    """Keep the metrics of steps <= `step`, so a resumed run's log has no duplicates."""
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step]
    atomic_write_text(path, "".join(line + "\n" for line in kept))


def _append_metrics(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a") as handle:
        handle.write(json.dumps(record) + "\n")


def _validation_batches(
    data: PreparedData | None, shards: PreparedShards | None, config: TrainConfig
) -> list[torch.Tensor]:
    if not config.eval_sequences:
        return []
    if shards is not None:
        tokens = shards.documents("validation")
    else:
        assert data is not None
        tokens = encode_documents(data.splits["validation"], data.tokenizer)
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
