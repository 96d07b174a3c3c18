"""`lextra compare`: train and evaluate several schemes (and seeds) on the same data and budget."""

from __future__ import annotations

import argparse
from pathlib import Path

from lextra.cli.app import Handler, command
from lextra.cli.options import add_device, add_evaluation, add_quiet, add_variants, eval_config_from, temperature_option
from lextra.cli.training_options import add_training, train_config_from
from lextra.errors import ConfigError


@command(
    "compare",
    "train and evaluate several schemes on the same data, seed and budget",
    options=(add_training, add_device, add_evaluation, temperature_option("log-length", files=False), add_quiet),
    examples=(
        "lextra compare --out runs/compare",
        "lextra compare --out runs/cmp --schemes rope,rope+bca,alibi --layer-plan swan=swan,window=32 --seeds 0,1,2",
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
    parser.add_argument(
        "--seeds",
        default=None,
        metavar="S,S,...",
        help="train every model once per seed; the tables pool a variant's seeds into one row, the mean with its 95%% "
        "t-interval (default: --seed alone)",
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
            seeds=_seeds(args.seeds),
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


def _seeds(text: str | None) -> list[int]:
    """`--seeds 0,1,2` -> [0, 1, 2] (each >= 0; `compare` refuses a repeated one); none given: []."""
    if text is None:
        return []
    try:
        seeds = [int(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(f"--seeds {text!r}: give comma-separated whole numbers, e.g. --seeds 0,1,2") from None
    if any(s < 0 for s in seeds):
        raise ConfigError(f"--seeds {text!r}: give seeds >= 0, e.g. --seeds 0,1,2")
    return seeds
