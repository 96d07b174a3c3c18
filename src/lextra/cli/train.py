"""`lextra train`: train a GPT with a position scheme at a training length (resumable), from flags or from a
`--config run.toml` file that any flag given overrides (`lextra.cli.options.TRAIN_FLAGS` maps flags to fields)."""

from __future__ import annotations

import argparse

from lextra.cli.app import Handler, command
from lextra.cli.options import (
    add_device,
    add_quiet,
    add_scheme,
    add_training,
    refuse_corpus_with_data,
    train_config_from,
)


@command(
    "train",
    "train a GPT with a position scheme at a training length",
    options=(add_scheme, add_training, add_device, add_quiet),
    examples=(
        "lextra train --out runs/alibi --scheme alibi --train-len 128 --steps 600",
        "lextra train --config experiments/train.toml --out runs/fire --scheme fire --steps 300",
    ),
)
def configure_train(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("--out", required=True, help="run directory")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    parser.add_argument(
        "--data",
        default=None,
        metavar="DIR",
        help="train on a prepared folder (`lextra data prepare`) instead of reading --corpus; "
        "--tokenizer must be the one it was prepared with",
    )

    def run(args: argparse.Namespace) -> int:
        from lextra.train import main_process, train

        refuse_corpus_with_data(args)
        config = train_config_from(args)
        config.data = args.data
        final = train(config, args.out, resume=args.resume, progress=not args.quiet, device=args.device)
        if main_process():  # one line under torchrun
            print(f"model saved to {final}")
        return 0

    return run
