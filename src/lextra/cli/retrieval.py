"""`lextra retrieval train|eval|compare|completion`: retrieval and code completion beyond the training length."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from lextra.cli.app import Handler, group
from lextra.cli.models import MODEL_HELP, add_any_model, add_model_corpus, load_any, model_options
from lextra.cli.options import (
    add_aliased,
    add_device,
    add_extend,
    add_log_scaling,
    add_mask,
    add_quiet,
    add_rope_scaling_by_layer,
    add_setup,
    add_threads,
    add_variants,
    apply_extend,
    folder_safe,
    non_negative_int,
    parse_depths,
    parse_lengths,
    positive_int,
    refuse_corpus_with_data,
    retrieval_evaluation,
    setup_into_args,
    temperature_option,
)
from lextra.cli.training_options import add_scheme, add_training, train_config_from

#: the default lengths of a Hugging Face model's retrieval: L_tr and 2 L_tr (its L_tr is long)
HF_MULTIPLES = (1, 2)
DEFAULT_COMPARE = ("rope", "rope+dynamic", "alibi", "coca", "coca+dynamic", "nope", "t5", "sandwich")

retrieval = group(
    "retrieval",
    "passkey / lines / kv / code-key retrieval and code completion beyond L_tr",
    options=(add_quiet, add_device),
)


def retrieval_settings(args: argparse.Namespace, multiples: tuple[int, ...] | None = None) -> Any:
    """The `RetrievalEval` the retrieval evaluation options describe."""
    from lextra.evaluate.retrieval import DEFAULT_MULTIPLES
    from lextra.pipelines.retrieval import RetrievalEval

    return RetrievalEval(
        lengths=parse_lengths(args.lengths),
        depths=parse_depths(args.depths),
        samples=args.samples,
        candidates=args.candidates,
        seed=args.eval_seed,
        batch_size=args.eval_batch_size,
        multiples=multiples or DEFAULT_MULTIPLES,
        answer_inside=args.answer_inside,
    )


def add_task_data(parser: argparse.ArgumentParser, *, evaluates: bool = False) -> None:
    """--data: a prepared folder whose decoded documents a task trains on (and, `evaluates`, is prompted from)."""
    also = " and build the evaluation prompts from its test split" if evaluates else ""
    parser.add_argument(
        "--data",
        default=None,
        metavar="DIR",
        help=f"train on a prepared folder's documents (`lextra data prepare`, --tokenizer its own), decoded{also} "
        "(default: read --corpus)",
    )


@retrieval.command(
    "train",
    "train a model on a retrieval task at L_tr",
    options=(add_scheme, add_training),
    examples=(
        "lextra retrieval train --out runs/passkey-alibi --scheme alibi --task passkey --steps 300",
        "lextra retrieval train --out runs/kv-rope --task kv+lm --init-from runs/compare/models/rope/model",
    ),
)
def configure_train(parser: argparse.ArgumentParser) -> Handler:
    from lextra.reporting.catalog import task_help

    parser.add_argument("--out", required=True, help="run directory")
    add_aliased(parser, "--task", "--tasks", default="passkey", help=task_help(training=True))
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    add_task_data(parser)

    def run(args: argparse.Namespace) -> int:
        from lextra.pipelines.retrieval import train_on_task
        from lextra.train import main_process

        final = train_on_task(
            train_config_from(args),
            args.task,
            args.out,
            resume=args.resume,
            progress=not args.quiet,
            device=args.device,
        )
        if main_process():  # one line under torchrun
            print(f"model saved to {final}")
        return 0

    return run


@retrieval.command(
    "eval",
    "accuracy over lengths x needle depths, with a heatmap, of a lextra or Hugging Face model",
    options=(
        add_rope_scaling_by_layer,
        add_log_scaling,
        add_extend,
        add_threads,
        retrieval_evaluation(),
        temperature_option(),
        add_setup,
        add_any_model,
    ),
    examples=(
        "lextra retrieval eval runs/passkey-rope --rope-scaling yarn:4 --extend self_extend",
        "lextra retrieval eval smollm2 --rope-scaling dynamic:4 --lengths 4096,16384 --samples 4 --batch-size 1",
    ),
)
def configure_eval(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("checkpoint", metavar="MODEL", help=MODEL_HELP)
    parser.add_argument(
        "--out",
        default=None,
        help="results folder (default: RUN/retrieval-TASK for a lextra model, runs/hf/NAME/retrieval-TASK for another)",
    )
    add_mask(parser, "the model's own: causal, full for T5")
    add_model_corpus(parser)
    parser.add_argument(
        "--data",
        default=None,
        metavar="DIR",
        help="build the prompts from a prepared folder's test split (`lextra data prepare`), decoded with its "
        "tokenizer, which must be the model's (default: the model's corpus)",
    )

    def run(args: argparse.Namespace) -> int:
        from lextra.data.shards import text_data_for_model
        from lextra.evaluate.retrieval import evaluation_task
        from lextra.reporting.retrieval import save_retrieval_outputs

        setup_into_args(args, "lextra retrieval eval")
        refuse_corpus_with_data(args)
        loaded = load_any(args, args.checkpoint, args.mask)
        model, label = loaded.model, loaded.label
        settings = retrieval_settings(args, None if loaded.is_lextra else HF_MULTIPLES)
        lengths = settings.resolved_lengths(model.config.train_len)
        label += apply_extend(model, args.extend, args.mask, lengths, args.layers_select)
        data = text_data_for_model(loaded.meta, args.data, args.corpus, args.limit_chars)
        task = evaluation_task(args.task, data, args.candidates - 1)
        result = settings.run(model, task, label, progress=not args.quiet)
        result.model = loaded.name
        suffix = f"-{folder_safe(args.extend)}" if args.extend else ""
        out = Path(args.out or loaded.results_root / f"retrieval-{task.name}{suffix}")
        paths = save_retrieval_outputs(out, result)
        print(paths["table"].read_text())
        print(f"results: {paths['json']}, heatmap: {paths['heatmap']}")
        return 0

    return run


@retrieval.command(
    "compare",
    "train each scheme on the task with one budget; one accuracy table",
    options=(add_training, retrieval_evaluation(with_task=False, trains=True)),
    examples=(
        "lextra retrieval compare --out runs/passkey --schemes rope,rope+dynamic,alibi --steps 300",
        "lextra retrieval compare --out runs/kv --task kv+lm --init-from-compare runs/compare",
    ),
)
def configure_compare(parser: argparse.ArgumentParser) -> Handler:
    from lextra.reporting.catalog import task_help

    parser.add_argument("--out", required=True, help="comparison folder (finished models are reused)")
    add_aliased(parser, "--task", "--tasks", default="passkey", help=task_help(training=True))
    add_variants(parser, DEFAULT_COMPARE, "SCALING", "rope;rope+dynamic;rope,base=500000")
    parser.add_argument(
        "--init-from-compare",
        default=None,
        metavar="DIR",
        help="fine-tune each scheme from DIR/models/SCHEME/model (a `lextra compare` folder: LM-pretrained models)",
    )
    add_task_data(parser, evaluates=True)

    def run(args: argparse.Namespace) -> int:
        from lextra.pipelines.retrieval import compare_retrieval
        from lextra.train import main_process

        out = Path(args.out)
        compare_retrieval(
            args.schemes,
            train_config_from(args, scheme="nope"),
            args.task,
            retrieval_settings(args),
            out,
            init_from_compare=args.init_from_compare,
            progress=not args.quiet,
            device=args.device,
        )
        if main_process():  # under torchrun the first process prints the table
            print((out / "table.md").read_text())
            print(f"results: {out / 'summary.json'}, heatmaps: {out / 'heatmaps'}")
        return 0

    return run


@retrieval.command(
    "completion",
    "next-line code completion by context length, with a truncation baseline",
    options=(add_rope_scaling_by_layer, add_threads),
    examples=(
        "lextra retrieval completion runs/compare/models/rope runs/compare/models/alibi --out runs/completion",
        "lextra retrieval completion runs/rope --out runs/completion-yarn --rope-scaling yarn:4 --lines 16",
    ),
)
def configure_completion(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("checkpoints", nargs="+", help="model folders (RUN/model) or training run folders")
    parser.add_argument("--out", required=True, help="results folder")
    parser.add_argument("--lengths", default=None, help="context lengths (default L_tr x 1,2,4,8,16)")
    parser.add_argument("--lines", type=positive_int, default=32, help="held-out lines per context length")
    parser.add_argument("--max-new", type=positive_int, default=96, help="most tokens generated per line")
    add_aliased(
        parser,
        "--seed",
        "--eval-seed",
        dest="eval_seed",
        type=non_negative_int,
        default=0,
        help="seed of the held-out lines drawn",
    )

    def run(args: argparse.Namespace) -> int:
        from lextra.data import prepare_for_model
        from lextra.evaluate.retrieval import evaluate_completion
        from lextra.io import atomic_write_json, atomic_write_text
        from lextra.pipelines.loading import load_lextra
        from lextra.reporting.retrieval import completion_table

        results = {}
        for checkpoint in args.checkpoints:
            loaded = load_lextra(checkpoint, model_options(args), args.device)
            folder, model, label = loaded.folder, loaded.model, loaded.label
            data = prepare_for_model(loaded.meta)
            result = evaluate_completion(
                model,
                data.splits["test"],
                data.tokenizer,
                parse_lengths(args.lengths),
                lines=args.lines,
                max_new=args.max_new,
                seed=args.eval_seed,
                label=label,
                progress=not args.quiet,
            )
            result.model = str(folder)
            results[label] = result
        out = Path(args.out)
        atomic_write_json(out / "completion.json", {label: r.to_dict() for label, r in results.items()})
        atomic_write_text(out / "table.md", completion_table(results) + "\n")
        print((out / "table.md").read_text())
        print(f"results: {out / 'completion.json'}")
        return 0

    return run
