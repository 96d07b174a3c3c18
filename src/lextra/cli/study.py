"""`lextra study CONFIG --out DIR`: train, evaluate and analyse every model of a study; write report.md/.html."""

from __future__ import annotations

import argparse
import platform
import shlex
import sys
import time
from pathlib import Path

from lextra.cli.app import Handler, command
from lextra.cli.options import add_device, add_quiet, add_threads, positive_int, source_commit


@command(
    "study",
    "the seed papers' comparisons at small scale from one config file, in one report",
    options=(add_threads, add_device, add_quiet),
    examples=(
        "lextra study experiments/study.toml --out runs/study",
        "lextra study experiments/paper-scale.toml --out runs/paper --device cuda",
    ),
)
def configure_study(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("config", help="a study TOML file, e.g. experiments/study.toml")
    parser.add_argument("--out", required=True, help="study folder (finished cells are reused)")
    parser.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        help="cells that train models run side by side in this many processes of one thread each: a task "
        "study's cells, a study's models and fine-tunings (not under torchrun) (default 1)",
    )

    def run(args: argparse.Namespace) -> int:
        import torch

        from lextra.pipelines.study import Study, load_study, write_report
        from lextra.pipelines.task_study import TaskStudyConfig
        from lextra.train import main_process

        config = load_study(args.config)
        start, commit = time.time(), source_commit()
        if isinstance(config, TaskStudyConfig):
            return _task_study(config, args, commit, start)
        study = Study(config, args.out, progress=not args.quiet, commit=commit, device=args.device, jobs=args.jobs)
        results = study.run()
        if not main_process():  # under torchrun the first process writes and prints the report
            return 0
        header = [
            f"# {config.name}",
            "",
            f"Produced by `lextra study {shlex.quote(args.config)} --out {shlex.quote(args.out)}`: cells computed "
            f"at commit {', '.join(f'`{c}`' for c in results.cell_commits)}, report written at `{commit}`; "
            f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.machine()}, {args.device}; "
            f"{results.compute_minutes} min of compute over all cells (this invocation: "
            f"{(time.time() - start) / 60:.1f} min; cells computed earlier are reused).",
            "",
            f"Training: {config.train.steps} steps x {config.train.batch_size} x {config.train_len} tokens of "
            f"`{config.train.corpus}`, {config.train.model.n_layer} layers, width {config.train.model.d_model}, "
            f"{config.train.model.n_head} heads, seeds {config.seeds}. Models: "
            + ", ".join(f"{m.label} ({m.layer_plan})" for m in config.models)
            + ".",
            "",
        ]
        md, page = write_report(results, Path(args.out), header)
        print(md.read_text())
        print(f"report: {md}, {page}", file=sys.stderr)
        return 0

    return run


def _task_study(config, args: argparse.Namespace, commit: str, start: float) -> int:
    """A length-generalization study (`kind = "tasks"`): its cells, then report.md, results.csv, study.json."""
    import torch

    from lextra.pipelines.task_study import TaskStudy

    study = TaskStudy(config, args.out, progress=not args.quiet, commit=commit, device=args.device, jobs=args.jobs)
    results = study.run()
    train = config.train
    header = [
        f"# {config.name}",
        "",
        f"Produced by `lextra study {shlex.quote(args.config)} --out {shlex.quote(args.out)} --jobs {args.jobs}` at "
        f"`{commit}`; torch {torch.__version__}, {platform.machine()}; "
        f"{results.to_dict()['compute_minutes']} min of compute over all cells (this invocation: "
        f"{(time.time() - start) / 60:.1f} min of wall time).",
        "",
        f"Training: {train.steps} steps x {train.batch_size} examples, lr {train.lr:g}, {train.model.n_layer} layers, "
        f"width {train.model.d_model}, {train.model.n_head} heads; {config.replicates()}; {config.samples} examples "
        "per length. Models: " + ", ".join(f"{m.label} ({m.layer_plan}, {m.positions})" for m in config.models) + ".",
        "",
        *([config.paper, ""] if config.paper else []),
        *([config.notes, ""] if config.notes else []),
    ]
    report = results.write(Path(args.out), header)
    print(report.read_text())
    print(f"report: {report}", file=sys.stderr)
    return 0
