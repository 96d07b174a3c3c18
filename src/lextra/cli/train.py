"""`lextra train`: train a GPT with a position scheme at a training length (resumable), from flags or from a
`--config run.toml` file that any flag given overrides (`lextra.cli.training_options`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from lextra.cli.app import Handler, command
from lextra.cli.options import add_device, add_quiet
from lextra.cli.training_options import add_scheme, add_training, train_config_from


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

    parser.add_argument(
        "--task",
        default=None,
        metavar="SPEC",
        help="train on a length-generalization task (`lextra list` shows them: ruoss.*, kazemnejad.*, zhou.addition, "
        "mqar) instead of text; its alphabet sets the vocabulary and its widest training row L_tr",
    )
    parser.add_argument(
        "--task-lengths", default=None, metavar="LOW-HIGH", help="the task's training lengths (default: its paper's)"
    )

    def run(args: argparse.Namespace) -> int:
        from lextra.train import final_losses, main_process, train

        config = train_config_from(args)
        if args.task is not None or args.task_lengths is not None:
            config.task = args.task if args.task is not None else config.task
            config.task_lengths = args.task_lengths if args.task_lengths is not None else config.task_lengths
            config.validate()
        final = train(config, args.out, resume=args.resume, progress=not args.quiet, device=args.device)
        if main_process():  # one line each under torchrun
            losses = final_losses(Path(args.out))
            names = {"loss": "train loss", "val_loss": "validation loss"}
            if losses:
                print("final " + ", ".join(f"{names[k]} {v:.4f}" for k, v in losses.items()))
            print(f"model saved to {final}")
        return 0

    return run
