"""`lextra ruler run MODEL` (also `lextra ruler MODEL`): the RULER-style long-context suite (eleven synthetic tasks
at exact token lengths, RULER's scoring, the effective length) on any model, with the stretching options of `lextra
eval`; `lextra ruler compare RUN...`: runs side by side."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any

from lextra.cli.app import Handler, group
from lextra.cli.models import MODEL_HELP, add_any_model, model_options
from lextra.cli.options import (
    add_aliased,
    add_device,
    add_extend,
    add_mask,
    add_quiet,
    add_rope_scaling_by_layer,
    add_setup,
    add_spec_list,
    add_threads,
    apply_extend,
    config_default,
    non_negative_int,
    parse_lengths,
    percent,
    positive_int,
    setup_into_args,
    temperature_option,
)

#: the shared option sets of a suite run (`lextra ruler run`, `lextra babilong run`)
RUN_OPTIONS = (
    add_rope_scaling_by_layer,
    add_extend,
    temperature_option(),
    add_threads,
    add_device,
    add_quiet,
    add_setup,
)

ruler = group(
    "ruler",
    "RULER-style long-context suite: run it on a model (`ruler run`, also `lextra ruler MODEL`) or set runs side "
    "by side (`ruler compare`)",
    default="run",
)


@ruler.command(
    "run",
    "RULER-style long-context suite: 11 synthetic tasks at exact lengths, scores and the effective length",
    options=RUN_OPTIONS,
    examples=(
        "lextra ruler run smollm2 --lengths 4096,8192 --samples 10 --out runs/ruler/smollm2",
        "lextra ruler run runs/ruler-toy --tasks niah_single_1,vt --rope-scaling yarn:4 --out runs/ruler/toy-yarn",
    ),
)
def configure_ruler(parser: argparse.ArgumentParser) -> Handler:
    from lextra.pipelines.ruler import RulerSettings
    from lextra.reporting.catalog import ruler_task_help

    return configure_suite(parser, RulerSettings, ruler_task_help())


def configure_suite(parser: argparse.ArgumentParser, suite: Any, task_help: str) -> Handler:
    """The options and the handler of a run of a RULER-style suite: `suite` is `RulerSettings` or a subclass
    naming another registry of tasks (`lextra babilong run`)."""
    parser.add_argument("model", help=MODEL_HELP)
    _add_sampling(parser, suite, task_help)
    add_mask(parser, "causal")
    _add_model_and_haystack(parser, suite)

    def run(args: argparse.Namespace) -> int:
        from lextra.devices import resolve_device
        from lextra.evaluate.ruler import chat_format
        from lextra.pipelines.loading import load_model_spec
        from lextra.pipelines.ruler import RulerTarget, run_ruler
        from lextra.train import Distributed

        setup_into_args(args, f"lextra {args.command_path}")
        haystack, documents = haystack_from(args)
        settings = _suite_settings(args, suite, haystack)
        options = replace(model_options(args, args.mask), haystack=haystack)
        loaded = load_model_spec(args.model, options, args.device)
        model = loaded.model
        chat = chat_format(loaded.tokenizer) if args.chat else None
        label = loaded.label
        lengths = settings.resolved_lengths(model.config.train_len)
        label += apply_extend(model, args.extend, args.mask, lengths, args.layers_select)
        label += "+chat" if chat is not None else ""
        out = Path(args.out)
        target = RulerTarget(
            model,
            loaded.tokenizer,
            label=label,
            key=loaded.key,
            setup=loaded.inference,
            name=loaded.name,
            chat=chat,
            documents=documents,
        )
        world = Distributed.from_environment(resolve_device(args.device))  # torchrun: cells shared out
        result = run_ruler(target, settings, out, progress=not args.quiet, world=world)
        if world.is_main:
            print((out / "table.md").read_text())
            print(f"results: {out / 'results.json'}, {out / 'results.csv'}, heatmap: {out / 'heatmap.png'}")
            print(f"effective length: {result.effective_length} (threshold {result.threshold:g})")
        return 0

    return run


def _suite_settings(args: argparse.Namespace, suite: Any, haystack: str) -> Any:
    """The validated settings of a suite run from its options."""
    from lextra.pipelines.ruler import parse_task_list

    tasks, task_options = parse_task_list(args.tasks, suite.registry)
    return suite(
        tasks=tasks,
        options=task_options,
        lengths=parse_lengths(args.lengths),
        samples=args.samples,
        seed=args.seed,
        threshold=args.threshold,
        batch_size=args.batch_size,
        haystack=haystack,
        prompt_length=args.prompt_length,
    ).validate()


def _add_sampling(parser: argparse.ArgumentParser, suite: Any, task_help: str) -> None:
    """A suite run's tasks, lengths, samples, output folder, threshold, chat template, seed and batch size."""
    add_spec_list(parser, "--tasks", "--task", default=["all"], help=task_help)
    parser.add_argument("--lengths", default=None, help="comma-separated prompt lengths, tokens (default L_tr x 1,2,4)")
    parser.add_argument(
        "--samples",
        type=positive_int,
        default=config_default(suite, "samples"),
        help="samples per (task, length) cell",
    )
    parser.add_argument("--out", required=True, help="results folder (finished cells in it are reused)")
    parser.add_argument(
        "--threshold",
        type=percent(allow_zero=True),
        default=config_default(suite, "threshold"),
        help="effective length: the largest length whose average score (a percentage, 0-100), and every shorter "
        "one's, is at least this (default: RULER's %(default)s)",
    )
    parser.add_argument("--chat", action="store_true", help="wrap prompts in the model's chat template")
    parser.add_argument(
        "--seed", type=non_negative_int, default=config_default(suite, "seed"), help="seed of the samples"
    )
    add_aliased(
        parser,
        "--batch-size",
        "--batch",
        type=positive_int,
        default=config_default(suite, "batch_size"),
        help="samples decoded together (any tasks)",
    )


def _add_model_and_haystack(parser: argparse.ArgumentParser, suite: Any) -> None:
    """A suite run's tokenizer, training length, haystack (a corpus or a prepared folder) and prompt-length rule."""
    add_any_model(parser)
    parser.add_argument(
        "--haystack",
        default=None,
        help=f"corpus whose test split is the essay haystack (default: {config_default(suite, 'haystack')})",
    )
    parser.add_argument(
        "--data",
        default=None,
        metavar="DIR",
        help="take the essay haystack from a prepared folder's test split (`lextra data prepare`), decoded with "
        "its tokenizer (any tokenizer: the prompts are encoded again with the model's), instead of --haystack",
    )
    parser.add_argument(
        "--prompt-length",
        default=config_default(suite, "prompt_length"),
        choices=["ruler", "exact"],
        help="ruler: a LENGTH cell's prompts leave the task's answer budget (prompt + answer <= LENGTH, RULER's "
        "rule); exact: prompts of LENGTH tokens, the answer generated past it",
    )


def haystack_from(args: argparse.Namespace) -> tuple[str, Any]:
    """The haystack's name (what the cells record) and its documents: the --data folder's test split, named as
    `--haystack SOURCE` names it (so the cells are shared), else the --haystack corpus (None: the settings read it)."""
    if args.data is None:
        from lextra.pipelines.ruler import RulerSettings

        return args.haystack or config_default(RulerSettings, "haystack"), None
    from lextra.data.shards import PreparedShards
    from lextra.errors import ConfigError, DataError

    if args.haystack is not None:
        raise ConfigError("--data replaces --haystack (the folder's test split is the haystack); drop one")
    shards = PreparedShards.open(args.data)
    documents = shards.texts("test")
    if not len(documents):
        raise DataError(f"{shards.root} has no test-split documents to hide needles in; prepare a larger corpus")
    limit = shards.manifest.get("limit_chars")
    return (shards.corpus if limit is None else f"{shards.corpus} (first {limit} characters)"), documents


@ruler.command(
    "compare",
    "RULER results of several runs side by side: averages, effective lengths, task scores",
    examples=(
        "lextra ruler compare runs/ruler/smollm2-none runs/ruler/smollm2-yarn --out runs/ruler/comparison",
        "lextra ruler compare runs/ruler/*/results.json",
    ),
)
def configure_ruler_compare(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("runs", nargs="+", help="`lextra ruler run` output folders (or their results.json)")
    parser.add_argument("--out", default=None, help="folder for comparison.md, comparison.csv and averages.png")

    def run(args: argparse.Namespace) -> int:
        from lextra.pipelines.ruler import read_ruler_result
        from lextra.reporting.ruler import ruler_comparison, save_ruler_comparison

        results = [read_ruler_result(path) for path in args.runs]
        print(ruler_comparison(results))
        if args.out:
            files = save_ruler_comparison(args.out, results)
            print(f"\ntable: {files['table']}, csv: {files['csv']}, plot: {files['plot']}")
        return 0

    return run
