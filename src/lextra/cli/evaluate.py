"""`lextra eval` (perplexity at many lengths), `lextra align` (temperature alignment) and `lextra report` (evaluations
side by side), on lextra models and Hugging Face models alike."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lextra.cli.app import Handler, command
from lextra.cli.models import MODEL_HELP, add_any_model, add_model_corpus, load_any
from lextra.cli.options import (
    add_device,
    add_eval_data,
    add_evaluation,
    add_extend,
    add_log_scaling,
    add_mask,
    add_quiet,
    add_rope_scaling_by_layer,
    add_setup,
    add_threads,
    apply_extend,
    eval_config_from,
    eval_data_from,
    folder_safe,
    positive_int,
    setup_into_args,
    source_commit,
    temperature_option,
)
from lextra.errors import ConfigError

if TYPE_CHECKING:
    from lextra.methods.align import Alignment


@command(
    "eval",
    "perplexity of a model (lextra or Hugging Face) at many lengths under three protocols",
    options=(
        add_rope_scaling_by_layer,
        add_log_scaling,
        add_extend,
        add_threads,
        add_device,
        add_evaluation,
        temperature_option("log-length"),
        add_quiet,
        add_setup,
        add_any_model,
    ),
    examples=(
        "lextra eval runs/rope --rope-scaling yarn:4 --mask bca --protocols sliding --temperature log-length",
        "lextra eval smollm2 --lengths 2048,4096,8192 --span 8192 --protocols sliding --documents 4",
    ),
)  # fmt: skip
def configure_eval(parser: argparse.ArgumentParser) -> Handler:
    _add_results_options(parser)
    add_mask(parser, "causal")
    add_model_corpus(parser)
    add_eval_data(parser)
    parser.add_argument(
        "--log-dir",
        default=None,
        help="also write the perplexity curves (one per protocol, over lengths) as TensorBoard event files here",
    )
    return _run_eval


def _add_results_options(parser: argparse.ArgumentParser) -> None:
    """The model (or the results file to rerun) and where results go."""
    parser.add_argument("checkpoint", nargs="?", default=None, metavar="MODEL", help=MODEL_HELP)
    parser.add_argument(
        "--out",
        default=None,
        help="results folder (default: RUN/eval-SETUP for a lextra model, runs/hf/NAME/eval-SETUP for another; "
        "named by the setup)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the results in an existing --out folder")
    parser.add_argument(
        "--from",
        dest="from_file",
        default=None,
        metavar="RESULTS",
        help="rerun the evaluation a results.json records (model, setup, settings); flags given here win",
    )


def _run_eval(args: argparse.Namespace) -> int:
    """`lextra eval`: perplexity at every length, written as results.json (with its rerun record), table and plot."""
    from lextra.evaluate import evaluate_model
    from lextra.hf import HFCausalLM
    from lextra.io import atomic_write_json
    from lextra.reporting.perplexity import save_eval_outputs
    from lextra.tensorboard import Board, require_tensorboard

    rerun_into_args(args)
    if args.checkpoint is None:
        raise ConfigError("lextra eval needs a model (or --from RESULTS.json); give RUN, RUN/model or a HF model")
    setup_into_args(args, "lextra eval")
    if args.log_dir is not None:  # before any work
        require_tensorboard()
    config = eval_config_from(args, args.mask or "causal")
    loaded = load_any(args, args.checkpoint, args.mask)
    model = loaded.model
    if not loaded.is_lextra and not isinstance(model, HFCausalLM):
        raise ConfigError("perplexity needs a decoder-only model; for T5 use `lextra retrieval eval` or analyze")
    data = eval_data_from(args, loaded.meta)
    lengths = config.resolved_lengths(model.config.train_len)
    label = loaded.label + apply_extend(model, args.extend, args.mask, lengths, args.layers_select)
    label += "+tau-log-length" if config.temperature == "log-length" else ""  # a setup too: its own folder
    setup = label.removeprefix(loaded.base).removeprefix("+") or "causal"
    out = Path(args.out or loaded.results_root / folder_safe(f"eval-{setup.replace('+', '_')}"))
    if (out / "results.json").exists() and not args.overwrite:
        raise ConfigError(
            f"{out} already holds results ({out / 'results.json'}); pass --overwrite to replace them or give "
            "another --out"
        )
    evaluation = evaluate_model(model, data, config, progress=not args.quiet, label=label)
    source = data.record()
    seed = (loaded.meta.get("train") or {}).get("seed")  # the training seed: `report` pools a label's seeds
    record = {"model": loaded.name, "label": label, "setup": setup, "seed": seed, **source}
    atomic_write_json(out / "results.json", {**record, **evaluation.to_dict(), "rerun": rerun_record(args)})
    paths = save_eval_outputs(out, label, evaluation)
    if args.log_dir is not None:
        board = Board(args.log_dir)
        board.evaluation(evaluation, setup)
        board.close()
    print(paths["table"].read_text())
    print(f"results: {out / 'results.json'}, plot: {paths['plot']}")
    return 0


@command(
    "align",
    "temperature alignment: per-layer softmax temperatures for inputs of a target length (a lextra model's aligned "
    "copy is saved; a Hugging Face model's temperatures go to alignment.json, read back by --temperature FILE)",
    options=(add_rope_scaling_by_layer, add_log_scaling, add_threads, add_device, add_quiet, add_any_model),
    examples=(
        "lextra align runs/alibi --length 1024 --strategy pmax",
        "lextra align smollm2 --length 8192 --strategy pmax --out runs/hf/align-8k",
    ),
)  # fmt: skip
def configure_align(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("checkpoint", metavar="MODEL", help=MODEL_HELP)
    parser.add_argument(
        "--strategy", default="pmax", choices=["pmax", "entropy", "log-length"], help="what the temperatures match"
    )
    parser.add_argument("--length", type=positive_int, required=True, help="the target input length L_ex")
    parser.add_argument("--per-head", action="store_true", help="one temperature per head instead of per layer")
    parser.add_argument("--windows", type=positive_int, default=4, help="calibration windows from the validation split")
    parser.add_argument(
        "--max-rows",
        type=positive_int,
        default=None,
        help="query rows sampled per window, a memory bound (default: every row of a lextra model, 1024 of another)",
    )
    add_mask(parser, "the model's own: causal, full for T5")
    add_model_corpus(parser)
    add_eval_data(parser)
    parser.add_argument(
        "--out",
        default=None,
        help="the aligned model folder (a lextra model; default MODEL-STRATEGY-LENGTH) or the folder of "
        "alignment.json (default runs/hf/NAME/align-STRATEGY-LENGTH)",
    )

    def run(args: argparse.Namespace) -> int:
        from lextra.io import atomic_write_json
        from lextra.methods import align_temperatures
        from lextra.model import save_model

        loaded = load_any(args, args.checkpoint, args.mask)
        if loaded.is_lextra and loaded.label != loaded.base:
            raise ConfigError(
                f"lextra align saves the aligned copy of a lextra model as trained; drop the setup ({loaded.setup}) "
                "and give it to the aligned copy's evaluation instead"
            )
        model = loaded.model
        result = align_temperatures(
            model,
            eval_data_from(args, loaded.meta),
            args.strategy,
            args.length,
            windows=args.windows,
            per_head=args.per_head,
            mask=args.mask or getattr(model, "default_mask", "causal"),
            max_rows=args.max_rows or (None if loaded.is_lextra else 1024),
        )
        _print_alignment(result, args.strategy, args.length)
        if loaded.folder is not None:  # a lextra model: its aligned copy, with alignment.json beside its weights
            out = Path(args.out or f"{loaded.folder}-{args.strategy}-{args.length}")
            extra = {k: v for k, v in loaded.meta.items() if k in ("tokenizer", "train")}
            save_model(model, out, extra={**extra, "alignment": result.to_dict()})
            atomic_write_json(out / "alignment.json", result.to_dict())
            print(f"aligned model saved to {out}")
        else:
            out = Path(args.out or loaded.results_root / f"align-{args.strategy}-{args.length}")
            atomic_write_json(out / "alignment.json", {"model": loaded.name, "label": loaded.label, **result.to_dict()})
            print(f"temperatures: {out / 'alignment.json'} (use with --temperature)")
        return 0

    return run


def _print_alignment(result: Alignment, strategy: str, length: int) -> None:
    """Each layer's statistic (target at L_tr, before and after at L_ex) and mean temperature, and the heads whose
    target was out of reach."""
    from lextra.reporting.tables import markdown_table

    statistic = "entropy" if strategy == "entropy" else "pmax"
    rows = {
        f"layer {i}": {"target": result.target[i], "before": result.before[i], "after": result.after[i],
                       "tau": sum(t) / len(t)}
        for i, t in enumerate(result.temperatures)
    }  # fmt: skip
    print(f"mean {statistic}: target at L_tr = {result.train_len}, before and after at L_ex = {length}")
    print(markdown_table(rows, ["target", "before", "after", "tau"], "layer"))
    if result.saturated:
        print(f"warning: target out of reach for (layer, head) {result.saturated}: temperature at its bound")


#: what a rerun of `lextra eval --from results.json` does not take from the file: where and how this run goes
RERUN_SKIPS = frozenset({"out", "from_file", "overwrite", "quiet", "device", "threads", "log_dir", "handler",
                         "command_path", "given_flags", "plugin", "setup"})  # fmt: skip
#: the fields a results file needs to be rerun
RERUN_FIELDS = ("lextra", "commit", "arguments")


def rerun_record(args: argparse.Namespace) -> dict[str, Any]:
    """What `--from` needs to rerun an evaluation: lextra's version and commit, and every argument that decides the
    numbers (the command words, the model, the inference setup, the evaluation settings)."""
    import lextra

    arguments = {k: v for k, v in vars(args).items() if k not in RERUN_SKIPS and not k.startswith("command_")}
    return {"lextra": lextra.__version__, "commit": source_commit(), "arguments": arguments}


def rerun_into_args(args: argparse.Namespace) -> None:
    """Fill the arguments from `--from FILE`'s record (those given on this command line win; a file from before the
    span was recorded scored max(lengths) tokens per document); a file without a full record is refused."""
    path = getattr(args, "from_file", None)
    if path is None:
        return
    try:
        saved = json.loads(Path(path).read_text())
        record = saved["rerun"]
        missing = [name for name in RERUN_FIELDS if name not in record]
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError(
            f"--from {path}: not a results file with a rerun record (written by lextra eval of this lextra version); "
            "give a results.json that lextra eval wrote"
        ) from None
    if missing:
        raise ConfigError(
            f"--from {path}: its rerun record (lextra {record.get('lextra', '?')}) lacks {', '.join(missing)}; "
            f"rerun the evaluation with its flags instead"
        )
    given = set(getattr(args, "given_flags", ()))
    if getattr(args, "checkpoint", None):
        given.add("checkpoint")
    unknown = sorted(set(record["arguments"]) - set(vars(args)))
    if unknown:
        raise ConfigError(
            f"--from {path}: written by lextra {record['lextra']}, it sets {', '.join(unknown)}, which lextra eval "
            "does not take; rerun with this version's flags"
        )
    for dest, value in record["arguments"].items():
        if dest not in given:
            setattr(args, dest, value)
    if args.span is None and "span" not in saved and saved.get("lengths"):
        args.span = max(int(n) for n in saved["lengths"])


@command(
    "report",
    "perplexity of several evaluated models or setups side by side, with confidence intervals: one table and plot, a "
    "ppl(k L_tr)/ppl(L_tr) column; results of one label trained with several seeds pool into one row",
    examples=(
        "lextra report runs/rope/eval-causal runs/alibi/eval-causal runs/rope/eval-yarn-4 --out runs/report",
        "lextra report runs/*/eval-causal --out runs/report --multiple 8",
    ),
)
def configure_report(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("results", nargs="+", help="evaluation folders (lextra eval's RUN/eval-SETUP) or results.json")
    parser.add_argument("--out", required=True, help="where table.md, results.csv and perplexity.png go")
    parser.add_argument(
        "--multiple", type=positive_int, default=None, help="k of the summary column (default: largest)"
    )

    def run(args: argparse.Namespace) -> int:
        from lextra.evaluate import Evaluation
        from lextra.reporting.perplexity import side_by_side

        evaluations: dict[str, list[Evaluation]] = {}
        seeds: dict[str, list[object]] = {}
        for given in args.results:
            path = Path(given) / "results.json" if Path(given).is_dir() else Path(given)
            try:
                record = json.loads(path.read_text())
                evaluation = Evaluation.from_dict(record)
            except (OSError, ValueError, KeyError, TypeError):
                raise ConfigError(
                    f"{given} holds no lextra eval results.json; give lextra eval's output folders"
                ) from None
            label, seed = record.get("label") or path.parent.name, record.get("seed")
            if label in evaluations and (seed is None or seed in seeds[label]):  # not another seed: its own row
                label = f"{label} ({path.parent})"
            evaluations.setdefault(label, []).append(evaluation)
            seeds.setdefault(label, []).append(seed)
        paths = side_by_side(evaluations, args.out, summary_multiple=args.multiple)
        print(paths["table"].read_text())
        print(f"table: {paths['table']}, plot: {paths['plot']}")
        return 0

    return run
