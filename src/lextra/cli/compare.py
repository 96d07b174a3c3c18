"""`lextra compare`: train and evaluate several schemes on the same data, seed and budget."""

from __future__ import annotations

import argparse
from pathlib import Path

from lextra.cli.app import Handler, command
from lextra.cli.options import (
    add_device,
    add_evaluation,
    add_quiet,
    add_training,
    add_variants,
    eval_config_from,
    temperature_option,
    train_config_from,
)


@command(
    "compare",
    "train and evaluate several schemes on the same data, seed and budget",
    options=(add_training, add_device, add_evaluation, temperature_option("log-length", files=False), add_quiet),
    examples=(
        "lextra compare --out runs/compare",
        "lextra compare --out runs/cmp --schemes rope,rope+bca,alibi,t5 --layer-plan swan=swan,window=32 --steps 300",
    ),
)
def configure_compare(parser: argparse.ArgumentParser) -> Handler:
    from lextra.pipelines.compare import DEFAULT_VARIANTS

    parser.add_argument("--out", required=True, help="comparison folder (finished cells are reused)")
    add_variants(parser, DEFAULT_VARIANTS, "MASK", "rope,base=500000;rope+bca;alibi+window:64")
    parser.add_argument(
        "--layer-plan",
        action="append",
        default=[],
        dest="plans",  # not the model's `layer_plan` (TRAIN_FLAGS): one model per plan
        metavar="LABEL=PLAN",
        help="also train and evaluate a layer plan, labelled LABEL in the tables, repeatable (one plan each: a "
        "plan's own ';' stays whole), e.g. swan=swan,window=32 or 'hybrid=3*(rope+window:32);nope'; with "
        "--layer-plan and no --schemes only the plans are compared (default: none)",
    )
    schemes_default = parser.get_default("schemes")

    def run(args: argparse.Namespace) -> int:
        from lextra.pipelines.compare import compare
        from lextra.train import main_process

        base = train_config_from(args, scheme="nope")
        schemes = [] if args.plans and args.schemes is schemes_default else args.schemes
        compare(
            schemes,
            base,
            eval_config_from(args),
            args.out,
            plans=args.plans,
            progress=not args.quiet,
            device=args.device,
        )
        if not main_process():  # under torchrun the first process prints the tables
            return 0
        out = Path(args.out)
        print((out / "table.md").read_text())
        print(f"plot: {out / 'perplexity.png'}")
        print(f"results: {out / 'summary.json'}, {out / 'results.csv'}")
        return 0

    return run
