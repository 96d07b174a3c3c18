"""`lextra hf finetune`: fine-tuning a Hugging Face model at a new context length (LoRA, RoPE scaling, PoSE,
LongLoRA's S2-Attn), saved as a Hugging Face folder; the other commands take a Hugging Face model as they take a
lextra one."""

from __future__ import annotations

import argparse
from typing import Any

from lextra.cli.app import Handler, group
from lextra.cli.options import (
    FIELD_TYPES,
    add_corpus,
    add_device,
    add_quiet,
    add_rope_scaling,
    add_setup,
    add_threads,
    int_at_least,
    positive_int,
    refuse_corpus_with_data,
    setup_into_args,
)
from lextra.errors import ConfigError

hf = group("hf", "fine-tuning Hugging Face models (decoders) at a new context length")


#: the `FinetuneConfig` fields whose flags `configure_finetune` writes by hand; --s2-attn sets `s2_group`
SHARED_FIELDS = ("train_len", "corpus", "tokenizer", "data", "limit_chars", "rope_scaling")


def finetune_fields() -> list[str]:
    """The `FinetuneConfig` fields `hf finetune` generates a flag for: all but the model, the shared ones and the
    S2-Attn group (whose --s2-attn takes an optional value)."""
    from dataclasses import fields

    from lextra.hf.finetune import FinetuneConfig

    return [f.name for f in fields(FinetuneConfig) if f.name not in ("model", "s2_group", *SHARED_FIELDS)]


def finetune_config_from(args: argparse.Namespace) -> Any:
    """The `FinetuneConfig` of the command line (validated): the --config file, then --set, then every flag given."""
    from lextra.cli.fields import apply_settings, read_config_file
    from lextra.hf.finetune import FinetuneConfig
    from lextra.serialize import from_dict

    setup_into_args(args, "lextra hf finetune")
    refuse_corpus_with_data(args)
    values = read_config_file(args.config, "finetune") if args.config else {}
    flags = {name: getattr(args, name, None) for name in (*SHARED_FIELDS, *finetune_fields())}  # dests: field names
    values = apply_settings(values, args.set) | {name: value for name, value in flags.items() if value is not None}
    values["model"] = args.model
    if "train_len" not in values:
        raise ConfigError("lextra hf finetune needs --train-len L (the window it trains at)")
    if args.s2_attn is not None:
        values["s2_group"] = args.s2_attn or values["train_len"] // 4
    where = f"--config {args.config}: " if args.config else ""
    try:
        config = from_dict(FinetuneConfig, values, refuse_unknown="fine-tuning config")
    except (ConfigError, TypeError) as err:
        raise ConfigError(f"{where}{err}") from None
    return config.validate()


def _run_finetune(args: argparse.Namespace) -> int:
    from lextra.hf.finetune import finetune

    if args.out is None:
        raise ConfigError("lextra hf finetune needs --out DIR (the run folder; the model goes to DIR/model)")
    config = finetune_config_from(args)
    if args.quiet:  # transformers' loading and saving bars too
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    final, _ = finetune(config, args.out, resume=args.resume, progress=not args.quiet, device=args.device)
    print(f"model: {final} (a Hugging Face folder: lextra eval {final}, or transformers' from_pretrained)")
    return 0


@hf.command(
    "finetune",
    "fine-tune a Llama-family model at a new context length (LoRA, RoPE scaling), saved as a Hugging Face folder",
    examples=(
        "lextra hf finetune models/llama --out runs/hf/ft-yarn --train-len 8192 --rope-scaling yarn:4 --steps 400",
        "lextra hf finetune models/llama --config experiments/finetune.toml --out runs/hf/ft-pose --train-len 2048 "
        "--positions pose:32768 --trainable embed,norm --set lr=1e-4",
    ),
)
def configure_finetune(parser: argparse.ArgumentParser) -> Handler:
    from lextra.cli.fields import add_config_file, add_field_flags
    from lextra.data import ORDERS
    from lextra.data.packing import PACK_MODES
    from lextra.hf.finetune import ADAPTERS, FinetuneConfig
    from lextra.reporting.catalog import sampler_help

    add_config_file(parser, "FinetuneConfig fields (or a [finetune] table of them)")
    lora = f"; the spec: {ADAPTERS.usage('lora')} ({ADAPTERS.describe('lora')})"
    positions = f"; {sampler_help()}; pose's target is the saved max_position_embeddings"
    strict: dict[str, dict[str, Any]] = {"batch_size": {"type": positive_int}, "steps": {"type": positive_int}}
    strict |= {"order": {"choices": ORDERS}, "pack": {"choices": PACK_MODES}}
    add_field_flags(
        parser,
        FinetuneConfig,
        finetune_fields(),
        FIELD_TYPES,
        options=strict,
        more={"lora": lora, "positions": positions},
    )
    parser.add_argument(
        "--s2-attn",
        nargs="?",
        type=positive_int,
        const=0,
        default=None,
        metavar="G",
        help="LongLoRA's shifted sparse attention while training, groups of G tokens (default G: L/4), the "
        "shifted heads grouped without wrap-around as the authors train (--s2-roll: rolled, as their "
        "forward_noflashattn); the saved model runs full attention (default: off)",
    )
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    parser.add_argument("model", help="local HF folder (config.json), a .gguf file, or 'smollm2'")
    parser.add_argument("--train-len", type=int_at_least(2), default=None, help="the window it trains at (required)")
    add_corpus(parser, "kjv")
    parser.add_argument(
        "--data",
        default=None,
        metavar="DIR",
        help="a prepared folder read instead of --corpus (`lextra data prepare SOURCE --tokenizer hf:MODEL`, or "
        "with the --tokenizer given)",
    )
    parser.add_argument("--tokenizer", default=None, help="default: the model's own; e.g. bytes for tiny test models")
    add_rope_scaling(parser)
    parser.add_argument("--out", default=None, help="the run folder (required; the model goes to OUT/model)")
    add_threads(parser)
    add_device(parser)
    add_quiet(parser)
    add_setup(parser)
    return _run_finetune
