"""Subcommand `lextra analyze {resolution, receptive-field, dispersion}` (registered into `lextra.cli`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from lextra.cli import command
from lextra.errors import ConfigError

Handler = Callable[[argparse.Namespace], int]
ANALYSES: dict[str, tuple[str, Callable[[argparse.ArgumentParser], Handler]]] = {}


def analysis(name: str, help_text: str) -> Callable:
    """Register `lextra analyze NAME`: the decorated function adds its arguments and returns the handler."""

    def register(configure: Callable[[argparse.ArgumentParser], Handler]) -> Callable:
        ANALYSES[name] = (help_text, configure)
        return configure

    return register


@command("analyze", "explain why: attention resolution, empirical receptive field, attention dispersion")
def _configure_analyze(parser: argparse.ArgumentParser) -> Handler:
    sub = parser.add_subparsers(dest="analysis", required=True, metavar="ANALYSIS")
    for name, (help_text, configure) in ANALYSES.items():
        child = sub.add_parser(name, help=help_text, description=help_text)
        child.set_defaults(analysis_handler=configure(child))

    def run(args: argparse.Namespace) -> int:
        return args.analysis_handler(args)

    return run


def _common_args(parser: argparse.ArgumentParser, documents: int, lengths_help: str) -> None:
    parser.add_argument("--out", required=True, help="output folder (JSON, CSV, markdown table, PNG plots)")
    parser.add_argument("--lengths", default=None, help=lengths_help)
    parser.add_argument(
        "--mask",
        action="append",
        default=None,
        help="inference mask, repeatable: causal (default), bca, window:W",
    )
    parser.add_argument("--documents", type=int, default=documents, help="held-out texts (segments) per length")
    parser.add_argument("--split", default="validation", choices=["validation", "test"])
    parser.add_argument("--corpus", default=None, help="default: the corpus each model was trained on")
    parser.add_argument("--limit-chars", type=int, default=None)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")


def _prepare(args: argparse.Namespace):
    """Threads, masks, checkpoints and the text source shared by the three analyses."""
    import torch

    from lextra.analysis.inputs import TextSource, load_checkpoints
    from lextra.attention import build_mask

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.documents < 1:
        raise ConfigError(f"--documents must be >= 1, got {args.documents}")
    masks = args.mask or ["causal"]
    for mask in masks:
        build_mask(mask, train_len=2)  # raises on a bad spec
    if len(set(masks)) != len(masks):
        raise ConfigError(f"--mask lists a mask twice: {masks}")
    checkpoints = load_checkpoints(args.checkpoints)
    return masks, checkpoints, TextSource(args.split, args.corpus, args.limit_chars)


def _print(out: str, name: str, plots: list[str]) -> None:
    """Print the markdown table a command wrote, then where its files are."""
    folder = Path(out)
    print((folder / f"{name}.md").read_text())
    figures = ", ".join(str(folder / p) for p in plots)
    print(f"results: {folder / (name + '.json')}, {folder / (name + '.csv')}; plots: {figures}")


@analysis("resolution", "attention resolution R (Sun 2022): empirical from checkpoints, theoretical from schemes")
def _configure_resolution(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("checkpoints", nargs="*", help="model folders (RUN/model) or training run folders")
    parser.add_argument(
        "--scheme", action="append", default=[], help="theoretical R of a scheme alone (repeatable), no training"
    )
    parser.add_argument(
        "--scheme-option", action="append", default=[], metavar="KEY=VALUE", help="option for every --scheme"
    )
    parser.add_argument("--theory", action="store_true", help="also theoretical rows from each checkpoint's scheme")
    parser.add_argument("--heads", type=int, default=4, help="heads of a --scheme (default 4)")
    parser.add_argument("--head-dim", type=int, default=32, help="head dimension of a --scheme (default 32)")
    parser.add_argument("--train-len", type=int, default=128, help="L_tr of a --scheme (BCA block = L_tr / 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of a --scheme's initial parameters")
    _common_args(parser, 8, "comma-separated input lengths (default L_tr x 1,2,4)")

    def run(args: argparse.Namespace) -> int:
        import torch

        from lextra.analysis.inputs import common_train_len, parse_lengths
        from lextra.analysis.reports import resolution_report
        from lextra.commands import parse_option
        from lextra.positions import HeadDims, build_scheme

        if not args.checkpoints and not args.scheme:
            raise ConfigError("give at least one checkpoint or --scheme NAME")
        for name, value in (("--heads", args.heads), ("--head-dim", args.head_dim), ("--train-len", args.train_len)):
            if value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value}")
        masks, checkpoints, source = _prepare(args)
        options = dict(parse_option(o) for o in args.scheme_option)
        dims = HeadDims(args.heads, args.head_dim, args.heads * args.head_dim, args.train_len)
        schemes = []
        for name in args.scheme:
            torch.manual_seed(args.seed)
            schemes.append((name, build_scheme(name, dims, **options).eval()))
        train_len = common_train_len(checkpoints, args.train_len)
        lengths = parse_lengths(args.lengths, train_len, (1, 2, 4))
        resolution_report(
            checkpoints,
            schemes,
            lengths,
            masks,
            source,
            args.out,
            documents=args.documents,
            theory=args.theory,
            train_len=train_len,
        )
        _print(args.out, "resolution", ["resolution.png"])
        return 0

    return run


@analysis("receptive-field", "empirical receptive field (Chi 2023): gradient share of recent tokens, ERF at 0.99")
def _configure_receptive_field(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("checkpoints", nargs="+", help="model folders (RUN/model) or training run folders")
    parser.add_argument("--threshold", type=float, default=0.99, help="cumulative share that defines the ERF")
    parser.add_argument("--batch-size", type=int, default=8)
    _common_args(parser, 16, "comma-separated segment lengths (default L_tr x 1,2,4,8)")

    def run(args: argparse.Namespace) -> int:
        from lextra.analysis.inputs import common_train_len, parse_lengths
        from lextra.analysis.reports import receptive_field_report

        if not 0.0 < args.threshold <= 1.0:
            raise ConfigError(f"--threshold must be in (0, 1], got {args.threshold}")
        masks, checkpoints, source = _prepare(args)
        lengths = parse_lengths(args.lengths, common_train_len(checkpoints, 0), (1, 2, 4, 8))
        receptive_field_report(
            checkpoints,
            lengths,
            masks,
            source,
            args.out,
            documents=args.documents,
            threshold=args.threshold,
            batch_size=max(1, args.batch_size),
        )
        _print(args.out, "receptive_field", ["receptive_field.png"])
        return 0

    return run


@analysis("dispersion", "attention dispersion (Chi, Fan, Rudnicky 2023): entropy, max probability, layer-0 logits")
def _configure_dispersion(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("checkpoints", nargs="+", help="model folders (RUN/model) or training run folders")
    parser.add_argument("--batch-size", type=int, default=4)
    _common_args(parser, 8, "comma-separated input lengths (default L_tr x 1,2,4,8,16)")

    def run(args: argparse.Namespace) -> int:
        from lextra.analysis.inputs import common_train_len, parse_lengths
        from lextra.analysis.reports import dispersion_report

        masks, checkpoints, source = _prepare(args)
        lengths = parse_lengths(args.lengths, common_train_len(checkpoints, 0), (1, 2, 4, 8, 16))
        dispersion_report(
            checkpoints, lengths, masks, source, args.out, documents=args.documents, batch_size=max(1, args.batch_size)
        )
        _print(args.out, "dispersion", ["dispersion.png", "first_layer_logits.png"])
        return 0

    return run
