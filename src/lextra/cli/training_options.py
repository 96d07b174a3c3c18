"""The training flags of `lextra train`, `compare` and `retrieval train`: the scheme and its options, the model
shape and every `TrainConfig` field (`TRAIN_FLAGS`), read into a `TrainConfig` (`train_config_from`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lextra.cli.fields import config_default
from lextra.cli.options import (
    FIELD_TYPES,
    add_aliased,
    add_rope_scaling,
    add_threads,
    corpora_help,
    finite_float,
    int_at_least,
    positive_float,
    positive_int,
    refuse_corpus_with_data,
    scheme_options,
)
from lextra.errors import ConfigError


def add_scheme(parser: argparse.ArgumentParser) -> None:
    """--scheme (a plan of one variant), repeatable --scheme-option KEY=VALUE (on every layer's scheme) and
    --layer-plan: the model's `layer_plan`."""
    from lextra.model import GPTConfig
    from lextra.reporting.catalog import scheme_help

    parser.add_argument(
        "--scheme",
        default=None,
        help=f"{scheme_help()}; the layer plan of this one variant on every layer "
        f"(default: {config_default(GPTConfig, 'layer_plan')})",
    )
    add_scheme_options(parser, "scheme option, repeatable (e.g. base=500 or layout=interleaved)")
    from lextra.attention.plan import PRESETS

    parser.add_argument(
        "--layer-plan",
        default=None,
        metavar="PLAN",
        help="a layer plan instead of --scheme: each layer's scheme+mask+pieces, ';' between layers, N*(...) repeats, "
        f"the pattern repeated over the layers (e.g. '3*(rope+window:64);nope'), or a preset: {', '.join(PRESETS)} "
        "(e.g. gemma3,window=64; see `lextra list`); give it or --scheme "
        f"(default: {config_default(GPTConfig, 'layer_plan')})",
    )


def add_scheme_options(parser: argparse.ArgumentParser, help_text: str) -> None:
    """Repeatable --scheme-option KEY=VALUE."""
    parser.add_argument("--scheme-option", action="append", default=[], metavar="KEY=VALUE", help=help_text)


#: the `TrainConfig` fields whose flags `add_training` generates (`lextra.cli.fields`); each is its own dest
GENERATED_TRAIN_FLAGS = (
    "batch_size", "steps", "lr", "min_lr_ratio", "warmup", "weight_decay", "beta1", "beta2", "grad_clip",
    "position_lr_scale", "seed", "data_seed", "checkpoint_every", "log_every", "eval_every", "eval_sequences",
    "init_from", "init_optimizer", "positions", "s2_attn", "order", "precision", "tensorboard", "log_dir", "compile",
    "fsdp", "pack", "mixed_window", "mixed_share",
)  # fmt: skip

#: training flag (its argparse dest) -> the `TrainConfig` field it sets (`model.NAME`: a `GPTConfig` field): the
#: data and model flags written by hand, then every generated one; --scheme (a plan of one variant) and
#: --scheme-option (on each layer's scheme) state the layer plan (`train_config_from`)
TRAIN_FLAGS: dict[str, str] = {
    **{name: name for name in ("corpus", "tokenizer", "limit_chars")},
    **dict.fromkeys(("scheme", "scheme_option", "layer_plan"), "model.layer_plan"),
    **{name: f"model.{name}" for name in ("train_len", "n_layer", "d_model", "n_head", "abacus")},
    **{name: name for name in GENERATED_TRAIN_FLAGS},
}


def abacus_option(text: str) -> dict[str, int]:
    """`--abacus MAX_K` as the model config's abacus options."""
    return {"max_k": int_at_least(0)(text)}


def add_training(parser: argparse.ArgumentParser) -> None:
    """--config FILE and --set, the data, the model shape, the training settings and --threads: each flag sets the
    field `TRAIN_FLAGS` names; one left out keeps the --config file's value, else the default."""
    from lextra.cli.fields import add_config_file, add_field_flags
    from lextra.data import ORDERS
    from lextra.data.packing import PACK_MODES
    from lextra.model import GPTConfig
    from lextra.reporting.catalog import sampler_help
    from lextra.train import TrainConfig

    _add_data(parser)
    add_config_file(
        parser, "TrainConfig fields, with a [model] table of GPTConfig fields (or a study's [train] section)"
    )

    def add(name: str, kind: Callable, text: str, *aliases: str) -> None:
        default = config_default(GPTConfig, name[2:].replace("-", "_"))
        add_aliased(parser, name, *aliases, type=kind, default=None, help=f"{text} (default: {default})")

    add("--train-len", int_at_least(2), "training length L_tr, tokens")
    add("--n-layer", positive_int, "layers", "--layers")
    add("--d-model", positive_int, "model width", "--width")
    add("--n-head", positive_int, "attention heads", "--heads")
    parser.add_argument(
        "--abacus",
        type=abacus_option,
        default=None,
        metavar="MAX_K",
        help="Abacus embeddings of each digit's place in its number (McLeish 2024), places shifted by a random "
        "0..MAX_K in training (the authors' 99); the digits' tokens come from the task or tokenizer (default: None)",
    )
    strict: dict[str, dict[str, Any]] = {name: {"type": positive_int} for name in ("batch_size", "steps")} | {
        "lr": {"type": positive_float},
        "position_lr_scale": {"type": finite_float(0.0)},
        "positions": {"metavar": "NAME[:OPTIONS]"},
        "s2_attn": {"metavar": "G"},
        "mixed_window": {"metavar": "SHORT:LONG"},
        "mixed_share": {"type": finite_float(0.0)},
        "order": {"choices": ORDERS},
        "pack": {"choices": PACK_MODES},
        "precision": {"choices": ["fp32", "bf16"]},
    }
    add_field_flags(
        parser,
        TrainConfig,
        GENERATED_TRAIN_FLAGS,
        FIELD_TYPES,
        options=strict,
        more={"positions": f"; {sampler_help()}"},
    )
    add_rope_scaling(
        parser,
        "; trained with and saved in the model (none removes it); with --init-from its original length is the "
        "source model's L_tr",
    )


def _add_data(parser: argparse.ArgumentParser) -> None:
    """--corpus, --tokenizer, --limit-chars, --threads: what a training run reads (defaults: `TrainConfig`'s)."""
    from lextra.train import TrainConfig

    parser.add_argument(
        "--corpus",
        default=None,
        help=f"{corpora_help()}, a mixture A+B (weighted: A:0.3+B:0.7), or a path (text files dir, "
        ".jsonl[.gz|.zst], .parquet, saved HF dataset) "
        f"(default: {config_default(TrainConfig, 'corpus')})",
    )
    parser.add_argument(
        "--limit-chars", type=positive_int, default=None, help="use only the first N characters (default: all)"
    )
    parser.add_argument(
        "--tokenizer",
        default=None,
        help=f"bytes, bpe[:VOCAB] or hf:/local/path (default: {config_default(TrainConfig, 'tokenizer')})",
    )
    add_threads(parser)


def read_train_file(path: str | Path | None, settings: list[str] | None = None) -> Any:
    """The `TrainConfig` a `--config` TOML file describes (None: the defaults; a study's [train] section too), with
    `--set KEY=VALUE` settings applied; an unknown key is one error naming the file."""
    from lextra.cli.fields import apply_settings, read_config_file
    from lextra.train import TrainConfig

    values = read_config_file(path, "train") if path is not None else {}
    values = apply_settings(values, settings or [])
    try:
        return TrainConfig.from_dict(values)
    except (ConfigError, TypeError) as err:
        raise ConfigError(f"--config {path}: {err}" if path is not None else str(err)) from None


def train_config_from(args: argparse.Namespace, scheme: str | None = None) -> Any:
    """The `TrainConfig` the training options describe (validated): the --config file (else the defaults), then
    every flag given explicitly, with `scheme` (compare's variants) in place of --scheme when the command sets it,
    and the --data folder of a command that has one (refused beside --corpus and --limit-chars)."""
    from lextra.attention.plan import LayerVariant, stated_plan
    from lextra.positions import SCHEMES
    from lextra.positions.scaling import parse_rope_scaling

    config = read_train_file(getattr(args, "config", None), getattr(args, "set", None))
    if getattr(args, "scheme", None) is not None and getattr(args, "layer_plan", None) is not None:
        raise ConfigError(
            "--scheme and --layer-plan both state the model's layers; give one (a scheme is the plan of one variant)"
        )
    for dest, target in TRAIN_FLAGS.items():
        value = getattr(args, dest, None)
        if value is None or value == [] or dest in ("scheme", "scheme_option"):  # they rewrite the plan below
            continue
        holder, name = (config.model, target[6:]) if target.startswith("model.") else (config, target)
        setattr(holder, name, value)
    if hasattr(args, "data"):
        refuse_corpus_with_data(args)
        config.data = args.data
    scheme = scheme or getattr(args, "scheme", None)
    if scheme is not None:  # a scheme spec: the plan of one variant
        config.model.layer_plan = stated_plan(scheme, what="--scheme")
    variants, rope_scaling = config.model.plan(), getattr(args, "rope_scaling", None)
    for layer, variant in enumerate(variants):  # scheme options, then a RoPE scaling, on each layer's scheme
        options = {**variant.scheme_options, **scheme_options(variant.scheme, getattr(args, "scheme_option", []))}
        if rope_scaling is not None and variant.rotary:  # `none` removes the scaling
            options = {k: v for k, v in options.items() if k != "scaling"}
            if rope_scaling != "none":
                options["scaling"] = parse_rope_scaling(rope_scaling)
        variants[layer] = LayerVariant(variant.scheme, options, variant.mask, variant.pieces)
    if rope_scaling is not None and not any(v.rotary for v in variants):  # refused, naming the schemes that take it
        rotary = [name for name in SCHEMES.names() if any(o.name == "scaling" for o in SCHEMES.options(name))]
        scheme = variants[0].scheme
        if scheme in SCHEMES and SCHEMES.canonical(scheme) not in rotary:
            raise ConfigError(
                f"--rope-scaling applies to {', '.join(rotary)} models, not {scheme}; drop it or train a rotary one"
            )
    if variants != config.model.plan():
        config.model.set_variants(variants)
    return config.validate()
