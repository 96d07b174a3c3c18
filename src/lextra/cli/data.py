"""`lextra data prepare|verify`: tokenize a corpus once into memory-mapped shards (`lextra train --data DIR`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from lextra.cli.app import Handler, group
from lextra.cli.options import add_quiet, corpora_help, positive_int

if TYPE_CHECKING:
    from lextra.data.shards import PreparedShards

data = group("data", "prepare a corpus once as memory-mapped token shards, and check prepared folders")


@data.command(
    "prepare",
    "tokenize SOURCE into a prepared folder (resumes an unfinished one)",
    options=(add_quiet,),
    examples=(
        "lextra data prepare python-code --tokenizer bpe:16384 --out data/python-code",
        "lextra data prepare english+python-code --tokenizer bytes --out data/mixed --limit-chars 20000000",
    ),
)
def configure_prepare(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument(
        "source",
        metavar="SOURCE",
        help=f"a corpus: {corpora_help()}, a mixture A+B or A:0.3+B:0.7, or a path (as --corpus)",
    )
    parser.add_argument("--tokenizer", required=True, help="bytes, bpe[:VOCAB] or hf:/local/path")
    parser.add_argument("--out", required=True, help="the prepared folder (new, or an unfinished prepare)")
    parser.add_argument(
        "--limit-chars", type=positive_int, default=None, help="use only the first N characters of the source"
    )
    parser.add_argument(
        "--text-field",
        default="text",
        help="the text field of .jsonl files, the text column of .parquet files and datasets",
    )
    _add_layout(parser)

    def run(args: argparse.Namespace) -> int:
        from lextra.data.shards import PreparedShards, prepare_shards, unfinished_command

        try:
            manifest = prepare_shards(
                args.source,
                args.tokenizer,
                args.out,
                limit_chars=args.limit_chars,
                text_field=args.text_field,
                dtype=args.dtype,
                shard_chars=args.shard_chars,
                sample_chars=args.sample_chars,
                progress=not args.quiet,
                strict=args.strict,
                workers=args.workers,
            )
        except KeyboardInterrupt:
            again = unfinished_command(args.out)
            print(f"lextra data: interrupted{f'; run `{again}` to continue' if again else ''}", file=sys.stderr)
            return 130
        print(_summary(PreparedShards.open(manifest.parent)))
        return 0

    return run


@data.command(
    "verify",
    "check every file of a prepared folder against its manifest (sizes and sha256)",
    examples=("lextra data verify data/python-code",),
)
def configure_verify(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("folder", metavar="DIR", help="a prepared folder")

    def run(args: argparse.Namespace) -> int:
        from lextra.data.shards import PreparedShards

        prepared = PreparedShards.open(args.folder, check=False)  # verify reads every file itself
        prepared.verify()
        print(_summary(prepared))
        return 0

    return run


def _summary(prepared: PreparedShards) -> str:
    """The folder's tokenizer, dtype and manifest hash, then one line per split: documents and tokens."""
    from lextra.data.corpora import SPLITS

    lines = [
        f"{prepared.root}: {prepared.tokenizer_spec}, {prepared.manifest['dtype']}, manifest {prepared.sha256[:12]}"
    ]
    for split in SPLITS:
        lines.append(f"  {split}: {prepared.num_documents(split):,} documents, {prepared.num_tokens(split):,} tokens")
    skipped = prepared.manifest.get("skipped")
    if skipped:
        count, first = skipped["files"], skipped["first"]
        named = ", ".join(first) + (", ..." if count > len(first) else "")
        lines.append(
            f"  skipped {count:,} file{'s' if count != 1 else ''}, binary or not UTF-8 (--strict refuses them): {named}"
        )
    return "\n".join(lines)


def _add_layout(parser: argparse.ArgumentParser) -> None:
    """`data prepare`'s token dtype, shard and BPE sample sizes, `--strict` and the encoding processes."""
    from lextra.data.shards import DEFAULT_SAMPLE_CHARS, DEFAULT_SHARD_CHARS, DTYPES

    parser.add_argument(
        "--dtype", default="auto", choices=["auto", *DTYPES], help="token file dtype (auto: the smallest that fits)"
    )
    parser.add_argument(
        "--shard-chars",
        type=positive_int,
        default=DEFAULT_SHARD_CHARS,
        help="source characters per shard: the memory bound and the unit a resumed prepare keeps",
    )
    parser.add_argument(
        "--sample-chars",
        type=positive_int,
        default=DEFAULT_SAMPLE_CHARS,
        help="train-split characters a bpe tokenizer is trained on",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="refuse files a folder source would skip (binary, not UTF-8), and fingerprint the source by whole-file "
        "hashes (a resumed prepare then notices any edit)",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        help="encode in N processes (the same bytes as 1; a tokenizer that encodes in threads, bpe or a fast "
        "Hugging Face one, uses its threads instead)",
    )
