"""`lextra retrieval train|eval|compare|completion`: retrieval and code completion beyond the training length."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lextra.cli import command
from lextra.commands import (
    _model_folder,
    _threads,
    add_train_args,
    apply_rope_scaling,
    parse_lengths,
    train_config_from,
)
from lextra.errors import ConfigError

DEFAULT_COMPARE = "rope,rope+dynamic,alibi,coca,coca+dynamic,nope,t5,sandwich"


def parse_depths(text: str | None) -> list[float]:
    """`0,0.5,1` -> [0.0, 0.5, 1.0] (default 0, 0.25, 0.5, 0.75, 1)."""
    from lextra.retrieval.evaluate import DEFAULT_DEPTHS

    if not text:
        return list(DEFAULT_DEPTHS)
    try:
        depths = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--depths takes comma-separated numbers in [0, 1], got {text!r}") from None
    if not depths or any(not 0 <= d <= 1 for d in depths):
        raise ConfigError(f"--depths must be numbers in [0, 1], got {text!r}")
    return depths


def parse_variant(spec: str) -> tuple[str, str | None]:
    """`rope` -> ("rope", None); `rope+dynamic` -> ("rope", "dynamic:1"); `coca+yarn:4` -> ("coca", "yarn:4")."""
    from lextra.positions import SCHEMES

    scheme, _, scaling = spec.strip().partition("+")
    SCHEMES.get(scheme)
    if scaling and ":" not in scaling:
        scaling += ":1"
    return scheme, scaling or None


def _task_data(meta: dict[str, Any], corpus: str | None = None, limit: int | None = None):
    from lextra.prepare import prepare_data

    train_meta = meta.get("train", {})
    return prepare_data(
        corpus or train_meta.get("corpus", "python-code"),
        limit_chars=limit if limit is not None else train_meta.get("limit_chars"),
        tokenizer_config=meta.get("tokenizer", {"kind": "bytes"}),
    )


def _eval_task(name: str, data: Any, distractors: int):
    from lextra.retrieval import build_task, parse_task_spec

    name = parse_task_spec(name).name
    return build_task(
        name, data.tokenizer, data.splits["test"] if name == "code-key" else None, distractors=distractors
    )


def add_retrieval_eval_args(
    parser: argparse.ArgumentParser,
    with_task: bool = True,
    *,
    multiples: str = "1,2,4,8,16",
    samples: int = 20,
    batch: int = 8,
) -> None:
    """--task, --lengths, --depths, --samples, --candidates, --eval-seed, --eval-batch."""
    if with_task:
        parser.add_argument("--task", default="passkey", help="passkey, passkey-mj, lines, kv or code-key")
    parser.add_argument("--lengths", default=None, help=f"comma-separated prompt lengths (default L_tr x {multiples})")
    parser.add_argument("--depths", default=None, help="comma-separated needle depths (default 0,0.25,0.5,0.75,1)")
    parser.add_argument("--samples", type=int, default=samples, help="prompts per (length, depth) cell")
    parser.add_argument("--candidates", type=int, default=5, help="answers ranked per prompt (gold + distractors)")
    parser.add_argument("--eval-seed", type=int, default=0, help="seed of the evaluation prompts")
    parser.add_argument("--eval-batch", type=int, default=batch, help="prompts scored together")


def evaluate_from_args(
    model: Any, task: Any, args: argparse.Namespace, label: str, multiples: tuple[int, ...] | None = None
) -> dict[str, Any]:
    """`evaluate_retrieval` with the command's --lengths (default L_tr x `multiples`), --depths, --samples..."""
    from lextra.retrieval.evaluate import DEFAULT_MULTIPLES, default_lengths, evaluate_retrieval

    lengths = parse_lengths(args.lengths) or default_lengths(model.config.train_len, multiples or DEFAULT_MULTIPLES)
    return evaluate_retrieval(
        model,
        task,
        lengths,
        parse_depths(args.depths),
        samples=args.samples,
        seed=args.eval_seed,
        batch_size=args.eval_batch,
        progress=not getattr(args, "quiet", False),
        label=label,
    )


def _train(args: argparse.Namespace, scheme: str | None = None, out: Path | None = None) -> Path:
    from lextra.retrieval import register_task_spec
    from lextra.train import train

    config = train_config_from(args, scheme=scheme)
    config.task = register_task_spec(args.task)
    return train(config, out or args.out, resume=getattr(args, "resume", False), progress=not args.quiet)


def _configure_train(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="run directory")
    parser.add_argument("--task", default="passkey", help="NAME, NAME+lm (half LM windows) or NAME:RATIO")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    add_train_args(parser)


def _configure_eval(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="a model folder (RUN/model) or a training run folder")
    parser.add_argument("--out", default=None, help="results folder (default CHECKPOINT/retrieval-TASK)")
    parser.add_argument("--rope-scaling", default=None, metavar="TYPE:FACTOR", help="e.g. dynamic:1 (rope/coca)")
    parser.add_argument("--threads", type=int, default=0)
    add_retrieval_eval_args(parser)


def _configure_compare(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="comparison folder (finished models are reused)")
    parser.add_argument("--task", default="passkey", help="training task spec (NAME, NAME+lm, NAME:RATIO)")
    parser.add_argument("--schemes", default=DEFAULT_COMPARE, help="variants: SCHEME or SCHEME+SCALING (rope+dynamic)")
    parser.add_argument(
        "--init-from-compare",
        default=None,
        metavar="DIR",
        help="fine-tune each scheme from DIR/models/SCHEME/model (a `lextra compare` folder: LM-pretrained models)",
    )
    add_train_args(parser, with_scheme=False)
    add_retrieval_eval_args(parser, with_task=False)


def _configure_completion(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoints", nargs="+", help="model folders (RUN/model) or training run folders")
    parser.add_argument("--out", required=True, help="results folder")
    parser.add_argument("--lengths", default=None, help="context lengths (default L_tr x 1,2,4,8,16)")
    parser.add_argument("--lines", type=int, default=32, help="held-out lines per context length")
    parser.add_argument("--max-new", type=int, default=96, help="most tokens generated per line")
    parser.add_argument("--rope-scaling", default=None, metavar="TYPE:FACTOR", help="e.g. dynamic:1 (rope/coca)")
    parser.add_argument("--eval-seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0)


ACTIONS = {
    "train": ("train a model on a retrieval task at L_tr", _configure_train),
    "eval": ("accuracy over lengths x needle depths, with a heatmap", _configure_eval),
    "compare": ("train each scheme on the task with one budget; one accuracy table", _configure_compare),
    "completion": ("next-line code completion by context length, with a truncation baseline", _configure_completion),
}


@command("retrieval", "passkey / lines / kv / code-key retrieval and code completion beyond L_tr")
def _configure_retrieval(parser: argparse.ArgumentParser):
    sub = parser.add_subparsers(dest="action", required=True)
    for name, (help_text, configure) in ACTIONS.items():
        child = sub.add_parser(name, help=help_text, description=help_text)
        configure(child)
        child.add_argument("--quiet", action="store_true", help="no progress bars")

    def run(args: argparse.Namespace) -> int:
        _threads(args)
        return {"train": _run_train, "eval": _run_eval, "compare": _run_compare, "completion": _run_completion}[
            args.action
        ](args)

    return run


def _run_train(args: argparse.Namespace) -> int:
    final = _train(args)
    print(f"model saved to {final}")
    return 0


def _run_eval(args: argparse.Namespace) -> int:
    from lextra.retrieval.evaluate import save_retrieval_outputs

    folder, meta, model, label = _load_scaled(args.checkpoint, args.rope_scaling)
    task = _eval_task(args.task, _task_data(meta), args.candidates - 1)
    result = evaluate_from_args(model, task, args, label)
    result["model"] = str(folder)
    out = Path(args.out or folder.parent / f"retrieval-{task.name}")
    paths = save_retrieval_outputs(out, result)
    print(paths["table"].read_text())
    print(f"results: {paths['json']}, heatmap: {paths['heatmap']}")
    return 0


def _run_compare(args: argparse.Namespace) -> int:
    from lextra.io import atomic_write_json, atomic_write_text
    from lextra.model import load_model, read_model_meta
    from lextra.retrieval.evaluate import plot_heatmap, retrieval_tables
    from lextra.train import FINAL

    out = Path(args.out)
    variants = [v for v in args.schemes.split(",") if v.strip()]
    if not variants:
        raise ConfigError("--schemes needs at least one variant")
    parsed = {v: parse_variant(v) for v in variants}
    models: dict[str, Path] = {}
    results: dict[str, dict[str, Any]] = {}
    for label, (scheme, scaling) in parsed.items():
        if scheme not in models:
            run_dir = out / "models" / scheme
            final = run_dir / FINAL
            if (final / "config.json").exists():
                _log(f"reusing {final}")
            else:
                _log(f"training {scheme}")
                if args.init_from_compare:
                    args.init_from = _pretrained(args.init_from_compare, scheme)
                args.resume = (run_dir / "checkpoints").exists()
                final = _train(args, scheme=scheme, out=run_dir)
            models[scheme] = final
        meta = read_model_meta(models[scheme])
        if meta.get("train", {}).get("task") != args.task:
            raise ConfigError(f"{models[scheme]} was trained on task {meta.get('train', {}).get('task')!r}, "
                              f"not {args.task!r}; use a new --out folder")  # fmt: skip
        model = load_model(models[scheme])
        if scaling:
            apply_rope_scaling(model, scaling)
        _log(f"evaluating {label}")
        task = _eval_task(args.task, _task_data(meta), args.candidates - 1)
        result = evaluate_from_args(model, task, args, label)
        result["model"] = str(models[scheme])
        results[label] = result
        name = label.replace(":", "-").replace("+", "_")
        atomic_write_json(out / "results" / f"{name}.json", result)
        plot_heatmap(result, out / "heatmaps" / f"{name}.png")
    summary = {"task": args.task, "variants": results}
    atomic_write_json(out / "summary.json", summary)
    atomic_write_text(out / "table.md", retrieval_tables(results) + "\n")
    print((out / "table.md").read_text())
    print(f"results: {out / 'summary.json'}, heatmaps: {out / 'heatmaps'}")
    return 0


def _load_scaled(checkpoint: str, rope_scaling: str | None) -> tuple[Path, dict[str, Any], Any, str]:
    """A model folder, its metadata, the model with `rope_scaling` applied, and a label naming both."""
    from lextra.model import load_model, read_model_meta

    folder = _model_folder(checkpoint)
    model = load_model(folder)
    label = model.config.scheme
    if rope_scaling:
        apply_rope_scaling(model, rope_scaling)
        label += f"+{rope_scaling}"
    return folder, read_model_meta(folder), model, label


def _pretrained(folder: str, scheme: str) -> str:
    """The `lextra compare` model of `scheme` under `folder`, or an error naming the missing path."""
    path = Path(folder) / "models" / scheme / "model"
    if not (path / "config.json").exists():
        raise ConfigError(f"--init-from-compare: no {scheme} model at {path}; run `lextra compare` with it first")
    return str(path)


def _run_completion(args: argparse.Namespace) -> int:
    from lextra.io import atomic_write_json, atomic_write_text
    from lextra.retrieval.completion import completion_table, evaluate_completion

    results = {}
    for checkpoint in args.checkpoints:
        folder, meta, model, label = _load_scaled(checkpoint, args.rope_scaling)
        data = _task_data(meta)
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
        result["model"] = str(folder)
        results[label] = result
    out = Path(args.out)
    atomic_write_json(out / "completion.json", results)
    atomic_write_text(out / "table.md", completion_table(results) + "\n")
    print((out / "table.md").read_text())
    print(f"results: {out / 'completion.json'}")
    return 0


def _log(message: str) -> None:
    print(f"lextra retrieval: {message}", file=sys.stderr, flush=True)
