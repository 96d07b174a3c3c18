"""`lextra analyze resolution|receptive-field|dispersion`: why schemes extrapolate or not, over models (lextra runs
or Hugging Face models, with the stretching options of `lextra eval`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from lextra.cli.app import Handler, group
from lextra.cli.models import MODEL_HELP, add_any_model, model_options
from lextra.cli.options import (
    add_aliased,
    add_corpus,
    add_device,
    add_eval_data,
    add_log_scaling,
    add_mask,
    add_rope_scaling_by_layer,
    add_spec_list,
    add_threads,
    non_negative_int,
    percent,
    positive_int,
    refuse_corpus_with_data,
    temperature_option,
)
from lextra.cli.training_options import add_scheme_options
from lextra.errors import ConfigError

if TYPE_CHECKING:
    from lextra.pipelines.checkpoints import Checkpoint, TextSource


def add_analysis_inputs(parser: argparse.ArgumentParser) -> None:
    """What every analysis shares: the output, masks, split, corpus, stretching options, threads and device."""
    parser.add_argument("--out", required=True, help="output folder (JSON, CSV, markdown table, PNG plots)")
    add_mask(parser, "each model's own: causal, full for T5", repeatable=True)
    parser.add_argument("--split", default="validation", choices=["validation", "test"], help="held-out split")
    add_corpus(parser, "the corpus each lextra model was trained on; english otherwise")
    add_eval_data(parser)
    add_rope_scaling_by_layer(parser)
    add_log_scaling(parser)
    temperature_option()(parser)
    add_threads(parser)
    add_device(parser)
    parser.add_argument("--quiet", action="store_true", help="print only where the results are, not their table")


analyze = group(
    "analyze",
    "explain why: attention resolution, empirical receptive field, attention dispersion",
    options=(add_analysis_inputs,),
)


def _lengths_and_documents(parser: argparse.ArgumentParser, documents: int, lengths_help: str) -> None:
    parser.add_argument("--lengths", default=None, help=lengths_help)
    parser.add_argument(
        "--documents", type=positive_int, default=documents, help="held-out texts (segments) per length"
    )


def _prepare(
    args: argparse.Namespace, multiples: tuple[int, ...], scheme_len: int | None = None
) -> tuple[list[str], list[Checkpoint], TextSource, list[int], int]:
    """Masks (default: each model's own), checkpoints, the text source, the lengths (--lengths, else L_tr x
    `multiples`) and the common L_tr shared by the three analyses; `scheme_len`: the L_tr of --scheme rows, which
    --train-len also states, so a lextra model keeps its own."""
    from lextra.attention import build_mask
    from lextra.pipelines.checkpoints import TextSource, analysis_lengths, common_train_len, load_checkpoints

    for mask in args.mask or []:
        build_mask(mask, train_len=2)  # raises on a bad spec
    if args.mask and len(set(args.mask)) != len(args.mask):
        raise ConfigError(f"--mask lists a mask twice: {args.mask}")
    refuse_corpus_with_data(args)
    hf_train_len = scheme_len is not None
    checkpoints = load_checkpoints(args.checkpoints, args.device, model_options(args), hf_train_len=hf_train_len)
    masks = args.mask or list(dict.fromkeys(c.default_mask for c in checkpoints)) or ["causal"]
    train_len = common_train_len(checkpoints, scheme_len or 0)
    source = TextSource(args.split, args.corpus, args.limit_chars, args.data)
    return masks, checkpoints, source, analysis_lengths(args.lengths, train_len, multiples), train_len


def _print(out: str, name: str, plots: list[str], quiet: bool = False) -> None:
    """Print the markdown table a command wrote (unless `quiet`), then where its files are."""
    folder = Path(out)
    if not quiet:
        print((folder / f"{name}.md").read_text())
    figures = ", ".join(str(folder / p) for p in plots)
    print(f"results: {folder / (name + '.json')}, {folder / (name + '.csv')}; plots: {figures}")


@analyze.command(
    "resolution",
    "attention resolution R (Sun 2022): empirical from checkpoints, theoretical from schemes",
    examples=(
        "lextra analyze resolution runs/compare/models/rope runs/compare/models/alibi --out runs/resolution",
        "lextra analyze resolution --scheme rope --scheme xpos --theory --out runs/resolution-theory",
    ),
)
def _configure_resolution(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("checkpoints", nargs="*", metavar="MODEL", help=f"{MODEL_HELP}; several side by side")
    add_spec_list(
        parser,
        "--scheme",
        default=[],
        help="theoretical R of schemes alone, no training: a spec list (rope,base=500000;alibi), repeatable",
    )
    add_scheme_options(parser, "option for every --scheme")
    parser.add_argument("--theory", action="store_true", help="also theoretical rows from each checkpoint's scheme")
    add_aliased(parser, "--n-head", "--heads", type=positive_int, default=4, help="heads of a --scheme (default 4)")
    parser.add_argument("--head-dim", type=positive_int, default=32, help="head dimension of a --scheme (default 32)")
    add_any_model(
        parser,
        "L_tr of a --scheme (BCA block = L_tr / 2; default 128) or of a Hugging Face model (default its maximum)",
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of a --scheme's initial parameters")
    _lengths_and_documents(parser, 8, "comma-separated input lengths (default L_tr x 1,2,4)")

    def run(args: argparse.Namespace) -> int:
        import torch

        from lextra.cli.options import scheme_options
        from lextra.pipelines.analyze import resolution_report
        from lextra.positions import HeadDims, build_scheme

        if not args.checkpoints and not args.scheme:
            raise ConfigError("give at least one checkpoint or --scheme NAME")
        scheme_len = args.train_len or 128
        masks, checkpoints, source, lengths, train_len = _prepare(args, (1, 2, 4), scheme_len)
        dims = HeadDims(args.n_head, args.head_dim, args.n_head * args.head_dim, scheme_len)
        schemes = []
        for name in args.scheme:
            torch.manual_seed(args.seed)
            options = scheme_options(name, args.scheme_option)
            schemes.append((name, build_scheme(name, dims, **options).to(args.device).eval()))
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
        _print(args.out, "resolution", ["resolution.png"], args.quiet)
        return 0

    return run


@analyze.command(
    "receptive-field",
    "empirical receptive field (Chi 2023): gradient share of recent tokens, ERF at a 99 percent share",
    examples=(
        "lextra analyze receptive-field runs/compare/models/rope runs/compare/models/alibi --out runs/erf",
        "lextra analyze receptive-field runs/alibi --threshold 90 --mask causal --mask bca --out runs/erf-90",
    ),
)
def _configure_receptive_field(parser: argparse.ArgumentParser) -> Handler:
    from lextra.analysis.receptive_field import THRESHOLD as ERF_THRESHOLD

    parser.add_argument("checkpoints", nargs="+", metavar="MODEL", help=f"{MODEL_HELP}; several side by side")
    add_any_model(parser)
    parser.add_argument(
        "--threshold",
        type=percent(allow_zero=False),
        default=round(100 * ERF_THRESHOLD, 6),
        help="cumulative gradient share that defines the ERF, a percentage in (0, 100]",
    )
    parser.add_argument("--batch-size", type=positive_int, default=8, help="segments per backward pass")
    _lengths_and_documents(parser, 16, "comma-separated segment lengths (default L_tr x 1,2,4,8)")

    def run(args: argparse.Namespace) -> int:
        from lextra.pipelines.analyze import receptive_field_report

        masks, checkpoints, source, lengths, _ = _prepare(args, (1, 2, 4, 8))
        receptive_field_report(
            checkpoints,
            lengths,
            masks,
            source,
            args.out,
            documents=args.documents,
            threshold=args.threshold / 100,
            batch_size=max(1, args.batch_size),
        )
        _print(args.out, "receptive_field", ["receptive_field.png"], args.quiet)
        return 0

    return run


@analyze.command(
    "dispersion",
    "attention dispersion (Chi, Fan, Rudnicky 2023): entropy, max probability, layer-0 logits",
    examples=(
        "lextra analyze dispersion runs/compare/models/rope runs/compare/models/nope --out runs/dispersion",
        "lextra analyze dispersion runs/alibi --lengths 128,1024 --documents 4 --out runs/dispersion-alibi",
    ),
)
def _configure_dispersion(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("checkpoints", nargs="+", metavar="MODEL", help=f"{MODEL_HELP}; several side by side")
    add_any_model(parser)
    parser.add_argument("--batch-size", type=positive_int, default=4, help="inputs per forward pass")
    _lengths_and_documents(parser, 8, "comma-separated input lengths (default L_tr x 1,2,4,8,16)")

    def run(args: argparse.Namespace) -> int:
        from lextra.pipelines.analyze import dispersion_report

        masks, checkpoints, source, lengths, _ = _prepare(args, (1, 2, 4, 8, 16))
        dispersion_report(
            checkpoints, lengths, masks, source, args.out, documents=args.documents, batch_size=max(1, args.batch_size)
        )
        _print(args.out, "dispersion", ["dispersion.png", "first_layer_logits.png"], args.quiet)
        return 0

    return run
