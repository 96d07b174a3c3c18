"""`lextra tune MODEL --length T`: search the settings of extension methods and RoPE scalings at a target length
against perplexity plus passkey accuracy (or LongRoPE2's needle-driven perplexity), within a time budget, and write
the best as a setup file (`--setup FILE`). Ctrl-C or the budget ends the search with the best so far."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from lextra.cli.app import Handler, command
from lextra.cli.models import MODEL_HELP, add_any_model, add_model_corpus, load_any
from lextra.cli.options import (
    add_device,
    add_quiet,
    add_threads,
    finite_float,
    int_at_least,
    parse_depths,
    positive_float,
    positive_int,
)
from lextra.errors import ConfigError

#: LongRoPE's evolution settings (`EvolutionConfig` fields) that `lextra tune` gives a flag each
EVOLUTION_COUNTS = ("population", "parents", "mutations", "crossovers", "iterations")


@command(
    "tune",
    "search extension / scaling settings for a target length; write the best as a setup file (--setup FILE)",
    options=(add_threads, add_device, add_quiet),
    examples=(
        "lextra tune smollm2 --length 16384 --methods self_extend,yarn --budget 1800 --out setups/smollm2-16k.json",
        "lextra eval smollm2 --lengths 16384 --span 16384 --setup setups/smollm2-16k.json",
    ),
)
def configure_tune(parser: argparse.ArgumentParser) -> Handler:
    from lextra.pipelines.tune import METHODS, OBJECTIVES, EvolutionConfig

    parser.add_argument("model", help=MODEL_HELP)
    add_model_corpus(parser)
    # what is searched and how long
    parser.add_argument("--length", type=int_at_least(2), required=True, help="the target length T, tokens")
    parser.add_argument(
        "--methods",
        default="self_extend,dca,string,yarn",
        help=f"comma-separated methods searched, or all: {', '.join(METHODS)} (ntk: static vs dynamic NTK and the "
        "factor; longrope: LongRoPE's evolutionary search of per-dimension factors)",
    )
    parser.add_argument(
        "--budget", type=positive_float, default=None, metavar="SECONDS", help="stop after this long, keeping the best"
    )
    parser.add_argument(
        "--max-grid", type=positive_int, default=16, help="search every combination of a method up to this many"
    )
    parser.add_argument("--out", required=True, help="the setup file written (JSON), with the search's record")
    parser.add_argument("--seed", type=int_at_least(0), default=0, help="seed of the passkey prompts and the evolution")
    # how each candidate is measured
    parser.add_argument("--depths", default=None, help="passkey depths (default 0,0.25,0.5,0.75,1)")
    parser.add_argument("--samples", type=positive_int, default=1, help="passkey prompts per depth")
    parser.add_argument("--documents", type=positive_int, default=1, help="held-out documents for perplexity")
    parser.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="ppl",
        help="ppl: loss = ln(ppl) + WEIGHT * (1 - passkey); needle: loss = ln(perplexity of the passkey answers' "
        "tokens alone), LongRoPE2's needle-driven perplexity (default: ppl)",
    )
    parser.add_argument(
        "--passkey-weight",
        type=finite_float(0.0),
        default=1.0,
        help="loss = ln(ppl) + WEIGHT * (1 - passkey accuracy); 0 tunes perplexity alone",
    )
    parser.add_argument(
        "--verify-length",
        type=int_at_least(2),
        default=None,
        help="after the search, measure the baseline, each method's defaults and its best again at this length",
    )
    parser.add_argument("--verify-depths", default=None, help="passkey depths of --verify-length (default: --depths)")
    add_any_model(parser)
    # LongRoPE's hyper-parameters (defaults: its dim_mono_llama.json)
    defaults = EvolutionConfig()
    for name in EVOLUTION_COUNTS:
        parser.add_argument(
            f"--{name}", type=int_at_least(0), default=getattr(defaults, name), help=f"LongRoPE evolution: {name}"
        )
    parser.add_argument("--step", type=positive_float, default=defaults.step, help="LongRoPE: grid step of the factors")
    return _run


def _run(args: argparse.Namespace) -> int:
    from lextra.extend import InferenceSetup
    from lextra.extend.setup_file import save_setup
    from lextra.pipelines import tune

    methods = tuple(tune.parse_methods(args.methods))
    evolution = tune.EvolutionConfig(**{name: getattr(args, name) for name in (*EVOLUTION_COUNTS, "step")})
    objective_settings = tune.ObjectiveSettings(
        length=args.length,
        depths=tuple(parse_depths(args.depths)),
        samples=args.samples,
        documents=args.documents,
        passkey_weight=args.passkey_weight,
        seed=args.seed,
        objective=args.objective,
    )
    out = Path(args.out)
    if out.is_dir():
        raise ConfigError(f"--out {out} is a folder; name the setup file to write (e.g. {out / 'setup.json'})")
    loaded = load_any(args, args.model, with_tokenizer=True)
    model, train_len = loaded.model, loaded.model.config.train_len
    if args.length <= train_len:
        raise ConfigError(f"--length {args.length}: tune for a length beyond the model's L_tr = {train_len}")
    tune.reset(model)
    geometry = tune.rope_geometry(model) if "longrope" in methods else (0, 0.0)  # of the unscaled model, read now
    data = _held_out(args, loaded)
    search = tune.TuneSettings(methods, args.length, args.budget, args.max_grid, evolution, args.seed)
    objective = tune.MeasuredObjective(model, data, objective_settings)
    stream = None if args.quiet else sys.stderr
    result = tune.run_search(objective, search, train_len, geometry=lambda: geometry, stream=stream)
    if result.best is None or result.best.refused:
        why = (
            "no candidate fit in the budget"
            if result.best is None
            else f"every candidate was refused: {result.best.refused}"
        )
        raise ConfigError(f"{why}; nothing written to {out}")
    record = {
        "model": args.model,
        "train_len": train_len,
        "target_length": args.length,
        "methods": list(methods),
        "objective": objective_settings.to_dict(),
        "corpus": data.corpus,
        **result.record(),
    }
    best = InferenceSetup(**result.best.setup)
    save_setup(out, best, tune=record)  # written before the verification, which may take long
    print(_table(result))
    checked = _verify(args, result, objective, stream)
    if checked:
        save_setup(out, best, tune={**record, "verification": checked})
    why = {"budget": " (budget spent)", "interrupted": " (interrupted)"}.get(result.stopped or "", "")
    print(f"{len(result.trials)} candidates in {result.seconds:.0f} s{why}; best: {_label(result.best.setup)}")
    if checked:
        print(_verify_table(checked, args.verify_length))
    print(f"setup: {out} (use with --setup {out})")
    return 0


def _verify(args: argparse.Namespace, result: Any, objective: Any, stream: Any) -> dict[str, Any] | None:
    """--verify-length: the baseline, each method's defaults and its best measured again at that length (the rows
    of `lextra.pipelines.tune.verify`, by the search's `objective` at that length) and their settings, or None."""
    from lextra.pipelines.tune import MeasuredObjective, verify

    if args.verify_length is None:
        return None
    depths = tuple(parse_depths(args.verify_depths)) if args.verify_depths else objective.settings.depths
    settings = replace(objective.settings, length=args.verify_length, depths=depths)
    rows = verify(result, MeasuredObjective(objective.model, objective.data, settings), stream=stream)
    return {"objective": settings.to_dict(), "rows": rows}


def _verify_table(checked: dict[str, Any], length: int) -> str:
    """The verification rows: perplexity and passkey per depth at `length`."""
    depths = checked["objective"]["depths"]
    head = " | ".join(f"passkey@{d:g}" for d in depths)
    lines = [
        f"at {length} tokens:",
        f"| method | setting | ppl | needle ppl | {head} | passkey | seconds |",
        "|---|---|---:|---:|" + "---:|" * (len(depths) + 2),
    ]
    for row in checked["rows"]:
        label = f"| {row['method']} {row['kind']} | {_label(row['setup'])} |"
        if "refused" in row:
            lines.append(f"{label} refused: {row['refused']} |" + " |" * (len(depths) + 3))
            continue
        cells = " | ".join(f"{row[f'passkey@{d:g}']:.2f}" for d in depths)
        needle = _number(row.get("needle_ppl"), 3)
        lines.append(f"{label} {row['ppl']:.3f} | {needle} | {cells} | {row['passkey']:.2f} | {row['seconds']:.0f} |")
    return "\n".join(lines)


def _held_out(args: argparse.Namespace, loaded: Any) -> Any:
    """The text the objective reads: --corpus (default a lextra model's own corpus, else `HF_CORPUS`) with
    the model's tokenizer (or --tokenizer)."""
    from lextra.data import prepare_data, prepare_for_model
    from lextra.pipelines.loading import HF_CORPUS

    if loaded.is_lextra and args.tokenizer is None:
        return prepare_for_model(loaded.meta, args.corpus, args.limit_chars)
    corpus = args.corpus or HF_CORPUS
    if args.tokenizer is not None:
        return prepare_data(corpus, tokenizer=args.tokenizer, limit_chars=args.limit_chars)
    from lextra.hf.load import tokenizer_config

    return prepare_data(corpus, limit_chars=args.limit_chars, tokenizer_config=tokenizer_config(args.model))


def _label(setup: dict[str, Any]) -> str:
    """A candidate's setup (`InferenceSetup` fields) in a few words."""
    from lextra.extend import InferenceSetup
    from lextra.extend.setup_file import setup_summary

    return setup_summary(InferenceSetup(**setup))


def _table(result: Any) -> str:
    """Each method's defaults against its best: loss, perplexity, passkey, candidates and seconds."""
    lines = [
        "| method | setting | loss | ppl | needle ppl | passkey | candidates | seconds |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, entry in result.per_method().items():
        rows = [("default", entry["default"])]
        if entry["best"] is not entry["default"]:
            rows.append(("tuned", entry["best"]))
        for kind, trial in rows:
            spent = f"{entry['candidates']} | {entry['seconds']:.0f}" if kind == "default" else " | "
            if trial.refused:  # no loss to show: the reason, in the loss column
                scores = f"refused: {trial.refused} | - | - | -"
            else:
                ppl, needle, passkey = (trial.parts.get(k) for k in ("ppl", "needle_ppl", "passkey"))
                scores = f"{trial.loss:.4f} | {_number(ppl, 3)} | {_number(needle, 3)} | {_number(passkey, 2)}"
            lines.append(f"| {name} {kind} | {_label(trial.setup)} | {scores} | {spent} |")
    return "\n".join(lines)


def _number(value: float | None, digits: int) -> str:
    """A table cell: the value, or `-` where the tuner did not measure it."""
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"
