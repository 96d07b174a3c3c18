"""What a training run is: `LoopConfig`, the settings the `Trainer` reads whatever it trains, and `TrainConfig`,
a lextra GPT's run. A field's `#:` comment is its documentation and its command-line help (`field_docs`)."""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any, ClassVar

from lextra import serialize
from lextra.attention import build_mask
from lextra.data import ORDERS
from lextra.data.corpora import mixture_weights
from lextra.data.packing import check_pack
from lextra.data.positions import PositionSampler, build_sampler
from lextra.errors import ConfigError
from lextra.model import GPTConfig
from lextra.positions.abacus import abacus_digits
from lextra.tasks import TaskBatches, algorithmic_task, check_task_mask, parse_lengths
from lextra.tensorboard import require_tensorboard
from lextra.train.mixed import MixedWindow, check_mixed_run
from lextra.validate import check_bool, check_int, check_positive, check_positive_int, check_range


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Each field's `#:` comment lines (from the nearest class in the MRO with one), joined; '' for none."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        lines = source.splitlines()
        body = ast.parse(source).body
        if not body or not isinstance(body[0], ast.ClassDef):
            continue
        for node in body[0].body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                comment: list[str] = []
                row = node.lineno - 2
                while row >= 0 and lines[row].strip().startswith("#:"):
                    comment.insert(0, lines[row].strip()[2:].strip())
                    row -= 1
                if comment or node.target.id not in docs:
                    docs[node.target.id] = " ".join(comment)
    return {f.name: docs.get(f.name, "") for f in fields(cls)}


@dataclass(kw_only=True)
class LoopConfig:
    """The settings of the training loop every target shares; a target's config redeclares differing defaults."""

    #: training windows per optimizer step (the global batch, split over torchrun's processes)
    batch_size: int = 16
    #: optimizer steps
    steps: int = 600
    #: peak learning rate (linear warmup, then cosine decay to lr x min_lr_ratio)
    lr: float = 2e-3
    #: the learning rate at the last step, as a fraction of lr
    min_lr_ratio: float = 0.1
    #: linear warmup steps
    warmup: int = 50
    #: AdamW's weight decay, on matrices only
    weight_decay: float = 0.1
    #: AdamW's beta1
    beta1: float = 0.9
    #: AdamW's beta2
    beta2: float = 0.95
    #: the largest gradient norm a step takes (larger ones are scaled down to it)
    grad_clip: float = 1.0
    #: seed of the initial weights, and of the training batches unless `data_seed` is set
    seed: int = 0
    #: seed of the training batches alone (their windows or task examples, order and positions; None: `seed`), so
    #: the data order varies with the weights fixed or the reverse, as Zhou et al. 2024 (arXiv 2402.09371) vary them
    data_seed: int | None = field(default=None, metadata=serialize.options(omit_none=True))
    #: steps between checkpoints (0: only the last)
    checkpoint_every: int = 200
    #: steps between metrics.jsonl records (0: none)
    log_every: int = 10
    #: also write the metrics.jsonl curves as TensorBoard event files (needs pip install 'lextra[tensorboard]')
    tensorboard: bool = False
    #: where those event files go (turns tensorboard on); None: the run directory's tb/
    log_dir: str | None = None
    #: the position ids the training windows are read at (`lextra.data.positions`)
    positions: str = "contiguous"
    #: the order of the training windows (`lextra.data.ORDERS`): `iid` draws each uniformly from every offset;
    #: `epoch` draws every non-overlapping window once per epoch, in a permutation keyed by (seed, epoch)
    order: str = "iid"
    #: under torchrun, shard weights, gradients and optimizer state over the processes (FSDP2) instead of
    #: replicating the model (DDP)
    fsdp: bool = False
    #: how the training windows are filled (`lextra.data.packing.PACK_MODES`): `none` cuts them from the token
    #: stream across document boundaries; `documents` fills them with whole documents, each attending only to
    #: itself at positions from its own start (Zhao et al. 2024, arXiv 2402.13991)
    pack: str = "none"

    #: what a resumed run may change: its length, logging, sharding and schedule (a diverged run resumes with lower lr)
    RESUMABLE: ClassVar[frozenset[str]] = frozenset(
        {"steps", "checkpoint_every", "log_every", "lr", "min_lr_ratio", "warmup", "grad_clip"}
        | {"tensorboard", "log_dir", "fsdp"}
    )

    def validate_loop(self, where: str = "training config:") -> None:
        """Refuse every non-finite or out-of-range loop setting before any work; integral counts become ints."""
        for name in ("batch_size", "steps"):
            setattr(self, name, check_positive_int(f"{where} {name}", getattr(self, name)))
        for name in ("warmup", "checkpoint_every", "log_every"):
            setattr(self, name, check_int(f"{where} {name}", getattr(self, name), 0))
        self.seed = check_int(f"{where} seed", self.seed, 0, 2**64 - 1)
        if self.data_seed is not None:
            self.data_seed = check_int(f"{where} data_seed", self.data_seed, 0, 2**64 - 1)
        default_lr = next(f.default for f in fields(self) if f.name == "lr")
        check_positive(f"{where} lr", self.lr, hint=f"the default is {default_lr:g}")
        check_range(f"{where} min_lr_ratio", self.min_lr_ratio, 0.0, 1.0)
        check_range(f"{where} weight_decay", self.weight_decay, 0.0)
        check_range(f"{where} beta1", self.beta1, 0.0, 1.0, high_open=True)
        check_range(f"{where} beta2", self.beta2, 0.0, 1.0, high_open=True)
        check_positive(f"{where} grad_clip", self.grad_clip, hint="the largest gradient norm a step may take")
        self.tensorboard = check_bool(f"{where} tensorboard", self.tensorboard)
        self.fsdp = check_bool(f"{where} fsdp", self.fsdp)
        if self.log_dir is not None:
            if not isinstance(self.log_dir, str) or not self.log_dir.strip():
                raise ConfigError(f"{where} log_dir must be a folder path, got {self.log_dir!r}")
            self.tensorboard = True
        if self.tensorboard:
            require_tensorboard()
        if self.order not in ORDERS:
            raise ConfigError(f"{where} order must be one of {', '.join(ORDERS)}, got {self.order!r}")
        check_pack(self.pack, where)
        if self.pack != "none":
            check_packable(self, where)

    @property
    def batch_seed(self) -> int:
        """The seed the training batches are drawn with: `data_seed`, else `seed`."""
        return self.seed if self.data_seed is None else self.data_seed


def learning_rate(config: LoopConfig, step: int) -> float:
    """Linear warmup to `lr`, then cosine decay to `lr * min_lr_ratio` at the last step."""
    if config.warmup and step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    span = max(1, config.steps - config.warmup)
    progress = min(1.0, (step - config.warmup) / span)
    floor = config.lr * config.min_lr_ratio
    return floor + 0.5 * (config.lr - floor) * (1 + math.cos(math.pi * progress))


@dataclass(kw_only=True)
class TrainConfig(LoopConfig):
    """Everything that determines a lextra GPT's training run; the same config and seed give the same weights."""

    #: the training text: a built-in corpus, a mixture A+B (weighted: A:0.3+B:0.7), or a path
    corpus: str = "python-code"
    #: bytes, bpe[:VOCAB] or hf:/local/path
    tokenizer: str = "bytes"
    #: use only the first N characters of the corpus (None: all)
    limit_chars: int | None = None
    #: a registered batch source other than plain language modelling (e.g. a retrieval task), or None
    task: str | None = None
    #: a length-generalization task's training lengths, LOW-HIGH in the task's own unit (None: its paper's range)
    task_lengths: str | None = field(default=None, metadata=serialize.options(omit_none=True))
    #: start from this model folder's weights (fine-tuning on a task; continued training at a new --train-len, with
    #: --rope-scaling for rotary schemes); the same architecture, the optimizer fresh unless `init_optimizer`
    init_from: str | None = None
    #: with init_from, also take the optimizer's moments from the final checkpoint of the run that saved that model
    #: (training continued, not restarted: the same model and settings, a new schedule and data seed may follow)
    init_optimizer: bool | None = field(default=None, metadata=serialize.options(omit_none=True))
    #: a prepared folder (`lextra data prepare`) read instead of the corpus; its source and limit replace
    #: `corpus` and `limit_chars`, and `tokenizer` must be the one it was prepared with
    data: str | None = field(default=None, metadata=serialize.options(omit_none=True))
    #: the model trained (`lextra.model.GPTConfig`)
    model: GPTConfig = field(default_factory=GPTConfig)
    #: "fp32", or "bf16" autocast for the network's matrix products
    precision: str = "fp32"
    #: learning-rate multiplier for position-scheme parameters (T5 table, KERPLE, FIRE)
    position_lr_scale: float = 10.0
    #: steps between validation losses (0: only at the end)
    eval_every: int = 0
    #: validation windows the validation loss averages (0: none)
    eval_sequences: int = 16
    #: LongLoRA's shifted sparse attention in training with groups of this many tokens (0: off); evaluation and
    #: the saved model attend with full causal attention
    s2_attn: int = 0
    #: run the step's forward and loss through `torch.compile` (inductor; `lextra.compile`); off by default: on the
    #: main job's CPU shape its compile time exceeds what it saves (benchmarks/README.md, `main_job.py`)
    compile: bool = False
    #: mixed context-window training (LongRoPE2): SHORT:LONG, LONG the training length; a share `mixed_share` of the
    #: steps cut into SHORT windows under the RoPE scaling's short side (`lextra.train.mixed`); None: off
    mixed_window: str | None = field(default=None, metadata=serialize.options(omit_none=True))
    #: the share of mixed-window steps at the short window
    mixed_share: float = 0.5

    #: how a run is carried out, not what it trains: left out of `to_dict`, so saved configs compare equal
    LOGGING_ONLY: ClassVar[tuple[str, ...]] = ("tensorboard", "log_dir", "compile", "fsdp")
    #: fields left out of `to_dict` at these values, so configs saved before they existed compare equal
    OMIT_DEFAULTS: ClassVar[dict[str, Any]] = {
        "positions": "contiguous",
        "s2_attn": 0,
        "order": "iid",
        "pack": "none",
        "mixed_share": 0.5,
    }
    #: what a resumed GPT run may change besides `LoopConfig.RESUMABLE`
    RESUMABLE = LoopConfig.RESUMABLE | {"eval_every", "eval_sequences", "data"}  # data: checked by manifest hash

    def validate(self) -> TrainConfig:
        """Refuse every non-finite or out-of-range number before any work; integral counts become ints."""
        where = "training config:"
        self.validate_loop(where)
        for name in ("eval_every", "eval_sequences"):
            setattr(self, name, check_int(f"{where} {name}", getattr(self, name), 0))
        if self.limit_chars is not None:
            self.limit_chars = check_positive_int(f"{where} limit_chars", self.limit_chars)
        check_range(f"{where} position_lr_scale", self.position_lr_scale, 0.0)
        if self.precision not in ("fp32", "bf16"):
            raise ConfigError(f"training config: precision must be fp32 or bf16, got {self.precision!r}")
        self.compile = check_bool(f"{where} compile", self.compile)
        self.model.validate()
        self.s2_attn = check_int(f"{where} s2_attn", self.s2_attn, 0)
        if self.init_optimizer is not None:
            self.init_optimizer = check_bool(f"{where} init_optimizer", self.init_optimizer) or None
        if self.init_optimizer and not self.init_from:
            raise ConfigError(
                f"{where} init_optimizer continues the optimizer of the run that saved init_from; set init_from too"
            )
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
        self._fit_task(where)
        self.sampler()
        check_s2_attn(self.s2_attn, self.model)
        if self.pack != "none":
            check_packed_model(self, where)
        self.mixed()
        return self

    def mixed(self) -> MixedWindow | None:
        """The mixed context window `mixed_window` names, checked against the run (None: off)."""
        if self.mixed_window is None:
            return None
        mixed = MixedWindow.parse(self.mixed_window, self.mixed_share, self.model.train_len)
        check_mixed_run(self, mixed)
        return mixed

    def _fit_task(self, where: str) -> None:
        """A length-generalization task sets the model's vocabulary and L_tr (its widest training row)."""
        task = algorithmic_task(self.task) if self.task is not None else None
        if task is None:
            if self.task_lengths is not None:
                raise ConfigError(f"{where} task_lengths applies to a length-generalization task; drop it or set task")
            return
        lengths = parse_lengths(self.task_lengths or task.train_lengths, f"{where} task_lengths")
        for layer, variant in enumerate(self.model.plan()):  # a plan's own masks must suit the task's style too
            if variant.mask != "causal":  # a causal layer follows the call's mask (full for encoder tasks)
                causal = build_mask(variant.mask, self.model.train_len).causal
                check_task_mask(task, causal, f"{variant.mask} (layer {layer} of the layer plan)")
        self.model.vocab_size = task.vocab_size
        self.model.train_len = TaskBatches(task, lengths).max_width()
        if self.model.abacus is not None and "digits" not in self.model.abacus:
            self.model.abacus["digits"] = abacus_digits(task.vocabulary, f"task {task.name}")
        self.model.validate()

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
    """Refuse a sampler the model cannot serve (a learned table too short, Scalable-Softmax's contiguous n)."""
    if sampler.read_length != sampler.train_len:
        raise ConfigError(
            f"--positions {sampler.spec()} skips content (PoSE's span), which lextra hf finetune reads; "
            "lextra train keeps its windows contiguous: use span=1"
        )
    if sampler.contiguous:
        return
    for variant in model.plan():
        if variant.scheme != "learned":
            continue
        table = int(variant.scheme_options.get("max_len") or model.train_len)
        if sampler.limit > table:
            raise ConfigError(
                f"--positions {sampler.spec()} draws positions up to {sampler.limit - 1}, but the learned position "
                f"table has {table} entries; train with --scheme-option max_len={sampler.limit}, a smaller "
                "target/max, or a relative scheme"
            )
    if model.learned_log_scaling():
        raise ConfigError(
            f"--positions {sampler.spec()} skips positions, but log_scaling ssmax counts keys at contiguous "
            "positions; use --positions contiguous or another logn piece"
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
    if model.learned_log_scaling():
        raise ConfigError("--s2-attn hides keys that log_scaling ssmax counts; use another logn piece or drop one")


def check_packable(config: LoopConfig, where: str) -> None:
    """Refuse loop settings packed documents cannot serve: sampled positions and FSDP."""
    if config.positions.split(":")[0].split(",")[0] != "contiguous":
        raise ConfigError(
            f"{where} pack documents numbers positions from each document's start, so positions "
            f"{config.positions!r} cannot apply; drop --positions or --pack"
        )
    if config.fsdp:
        raise ConfigError(f"{where} pack documents runs under DDP, not FSDP (its calls differ by process); drop --fsdp")


def check_packed_model(config: TrainConfig, where: str) -> None:
    """Refuse a GPT run packed documents cannot serve: a task, a compiled step, S2-Attn or a non-causal layer."""
    reasons = {
        "task": config.task is not None
        and algorithmic_task(config.task) is not None
        and f"the task {config.task!r} builds its own samples",
        "compile": config.compile and "its calls change shape every step (compile recompiles)",
        "s2_attn": config.s2_attn and "S2-Attn's groups cut the window, not the documents",
    }
    for name, why in reasons.items():
        if why:
            raise ConfigError(f"{where} pack documents cannot train with {name}: {why}; drop --pack or {name}")
    for layer, variant in enumerate(config.model.plan()):
        if not build_mask(variant.mask, config.model.train_len).causal:
            raise ConfigError(
                f"{where} pack documents needs causal attention, but layer {layer} attends with {variant.mask}; "
                "drop --pack or use a causal mask"
            )
