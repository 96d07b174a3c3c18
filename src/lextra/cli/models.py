"""The model a command reads: a lextra run or model folder, a Hugging Face folder, a .gguf file or `smollm2`
(`lextra.pipelines.loading.load_model_spec`), with the options that say how a Hugging Face model is read."""

from __future__ import annotations

import argparse
from typing import Any

from lextra.cli.options import add_corpus, int_at_least, temperature_file

MODEL_HELP = "a lextra run or model folder (RUN/model), a Hugging Face folder (config.json), a .gguf file or 'smollm2'"


def add_any_model(
    parser: argparse.ArgumentParser, train_len_help: str = "L_tr of a Hugging Face model (default: its maximum)"
) -> None:
    """--tokenizer and --train-len: how a Hugging Face model is read (a lextra model has its own)."""
    parser.add_argument(
        "--tokenizer",
        default=None,
        help="a Hugging Face model's tokenizer (default: its own; bytes, bpe[:VOCAB] or hf:PATH, e.g. bytes for tiny "
        "test models)",
    )
    parser.add_argument("--train-len", type=int_at_least(2), default=None, help=train_len_help)


def add_model_corpus(parser: argparse.ArgumentParser) -> None:
    """--corpus and --limit-chars of a command that reads any model (default: a lextra model's own corpus)."""
    from lextra.pipelines.loading import HF_CORPUS

    add_corpus(parser, f"the corpus a lextra model was trained on; {HF_CORPUS} otherwise")


def model_options(args: argparse.Namespace, mask: str | None = None) -> Any:
    """The `ModelOptions` of a command's flags: its RoPE scaling, `mask`, log-n scaling and layers (each unset
    where the command has no such flag), the --temperature file, the tokenizer and L_tr of a Hugging Face model."""
    from lextra.pipelines.loading import ModelOptions, setup_from

    setup = setup_from(
        rope_scaling=getattr(args, "rope_scaling", None),
        mask=mask,
        log_scaling=getattr(args, "log_scaling", None),
        layers=getattr(args, "layers_select", None),
    )
    return ModelOptions(
        setup,
        temperatures=temperature_file(args),
        tokenizer=getattr(args, "tokenizer", None),
        train_len=getattr(args, "train_len", None),
        quiet=bool(getattr(args, "quiet", False)),
    )


def load_any(args: argparse.Namespace, spec: str, mask: str | None = None, *, with_tokenizer: bool = False) -> Any:
    """The model `spec` names on --device with every stretching flag applied (`model_options`; read a --setup
    file into the flags first, `setup_into_args`): a `LoadedModel`."""
    from lextra.pipelines.loading import load_model_spec

    return load_model_spec(spec, model_options(args, mask), args.device, with_tokenizer=with_tokenizer)
