"""`lextra tasks eval MODEL`: a model trained on a length-generalization task (`lextra train --task ...`) scored at
many task lengths, inside and beyond its training range; JSON, CSV and a plot."""

from __future__ import annotations

import argparse
from pathlib import Path

from lextra.cli.app import Handler, group
from lextra.cli.options import add_device, add_quiet, add_threads, positive_int

tasks = group("tasks", "length-generalization tasks: score a model trained on one at many lengths (`tasks eval`)")


@tasks.command(
    "eval",
    "score a task model at lengths inside and beyond its training range",
    options=(add_threads, add_device, add_quiet),
    examples=(
        "lextra tasks eval runs/rev --lengths 41-100 --samples 256 --beyond",
        "lextra tasks eval runs/rev --lengths 1-100 --out runs/rev/scores",
    ),
)
def configure_tasks_eval(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("checkpoint", help="a task model folder (RUN/model) or its training run folder")
    parser.add_argument("--lengths", default=None, metavar="LOW-HIGH", help="task lengths (default: the test range)")
    parser.add_argument("--samples", type=positive_int, default=128, help="examples per length (default 128)")
    parser.add_argument("--seed", type=int, default=1000, help="the examples' seed (default 1000)")
    parser.add_argument("--batch-size", type=positive_int, default=64, help="examples per forward pass")
    parser.add_argument("--beyond", action="store_true", help="refuse lengths inside the training range")
    parser.add_argument(
        "--mask", default=None, help="check the task's mask: full for encoder-style tasks, causal for decoder-style"
    )
    parser.add_argument("--out", default=None, help="results folder (default CHECKPOINT/tasks-LOW-HIGH)")

    def run(args: argparse.Namespace) -> int:
        from lextra.attention import build_mask
        from lextra.evaluate.tasks import check_beyond, evaluate_task, load_task_model
        from lextra.io import atomic_write_json
        from lextra.pipelines.loading import model_folder
        from lextra.reporting.tasks import write_length_scores
        from lextra.tasks import check_task_mask, parse_lengths

        folder = model_folder(args.checkpoint)
        run_model = load_task_model(folder, args.device)
        if args.mask is not None:
            check_task_mask(run_model.task, build_mask(args.mask, run_model.model.config.train_len).causal, args.mask)
        lengths = parse_lengths(args.lengths or run_model.task.test_lengths, "--lengths")
        if args.beyond:
            check_beyond(lengths.values(), run_model.train_lengths)
        out = Path(args.out) if args.out else folder.parent / f"tasks-{lengths.text()}"
        scores = evaluate_task(run_model, lengths.values(), samples=args.samples, seed=args.seed,
                               batch_size=args.batch_size, progress=not args.quiet)  # fmt: skip
        atomic_write_json(out / "results.json", {
            "model": str(folder), "task": run_model.task.spec(), "train_lengths": run_model.train_lengths.text(),
            "positions": run_model.sampler.spec(), "samples": args.samples, "seed": args.seed,
            "scores": [s.to_dict() for s in scores],
        })  # fmt: skip
        print(write_length_scores(scores, run_model.task.name, run_model.train_lengths.high, out))
        return 0

    return run
