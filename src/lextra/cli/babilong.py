"""`lextra babilong run|compare|tasks`: BABILong's qa1-qa5 offline (bAbI facts hidden in a corpus haystack,
BABILong's scoring) with the options and outputs of `lextra ruler`, and its samples as lm-eval task YAMLs (docs/
harness.md)."""

from __future__ import annotations

import argparse

from lextra.cli.app import Handler, group
from lextra.cli.options import add_spec_list, non_negative_int, positive_int
from lextra.cli.ruler import RUN_OPTIONS, configure_ruler_compare, configure_suite, haystack_from

babilong = group(
    "babilong",
    "BABILong offline: bAbI qa1-qa5 in a corpus haystack (`babilong run`, also `lextra babilong MODEL`), runs side "
    "by side (`babilong compare`), lm-eval tasks (`babilong tasks`)",
    default="run",
)


def task_help() -> str:
    from lextra.reporting.catalog import babilong_task_help

    return babilong_task_help()


@babilong.command(
    "run",
    "BABILong qa1-qa5 at exact lengths in a corpus haystack, BABILong's scoring, the RULER-style outputs",
    options=RUN_OPTIONS,
    examples=(
        "lextra babilong run smollm2 --lengths 2048,4096 --samples 10 --out runs/babilong/smollm2",
        "lextra babilong run runs/rope --tasks qa1,qa2,facts=20 --extend self_extend:group=4 --out runs/babilong/x",
    ),
)
def configure_babilong(parser: argparse.ArgumentParser) -> Handler:
    from lextra.pipelines.babilong import BabilongSettings

    return configure_suite(parser, BabilongSettings, task_help())


babilong.command(
    "compare",
    "BABILong results of several runs side by side: averages, task scores",
    examples=("lextra babilong compare runs/babilong/a runs/babilong/b --out runs/babilong/comparison",),
)(configure_ruler_compare)


@babilong.command(
    "tasks",
    "write BABILong samples as lm-eval task YAMLs (one per task and length, tag babilong_offline)",
    examples=("lextra babilong tasks --lengths 1024,4096 --samples 20 --tokenizer hf:models/llama --out tasks/",),
)
def configure_babilong_tasks(parser: argparse.ArgumentParser) -> Handler:
    add_spec_list(parser, "--tasks", "--task", default=["all"], help=task_help())
    parser.add_argument("--lengths", required=True, help="comma-separated prompt lengths, tokens of --tokenizer")
    parser.add_argument("--samples", type=positive_int, default=10, help="samples per (task, length)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the samples")
    parser.add_argument("--tokenizer", default="bytes", help="the tokenizer lengths count in: bytes, hf:PATH, bpe")
    parser.add_argument("--haystack", default=None, help="corpus whose test split is the haystack")
    parser.add_argument("--data", default=None, metavar="DIR", help="a prepared folder's test split as the haystack")
    parser.add_argument("--out", required=True, help="folder for the YAMLs, their jsonl files and utils.py")

    def run(args: argparse.Namespace) -> int:
        from lextra.cli.options import parse_lengths
        from lextra.pipelines.babilong import BabilongSettings, write_task_yamls
        from lextra.pipelines.loading import build_tokenizer_spec
        from lextra.pipelines.ruler import parse_task_list

        tasks, options = parse_task_list(args.tasks, BabilongSettings.registry)
        haystack, documents = haystack_from(args)
        settings = BabilongSettings(tasks=tasks, options=options, lengths=parse_lengths(args.lengths),
                                    samples=args.samples, seed=args.seed, haystack=haystack)  # fmt: skip
        tokenizer = build_tokenizer_spec(args.tokenizer, haystack)
        names = write_task_yamls(args.out, settings, tokenizer, documents)
        print(f"{len(names)} lm-eval tasks (tag babilong_offline) in {args.out}: {', '.join(names)}")
        return 0

    return run
