"""`lextra ruler MODEL`: the RULER-style long-context suite (eleven synthetic tasks at exact token lengths, RULER's
scoring, the effective length) on a lextra model or a Hugging Face model.

MODEL is a lextra training run or model folder, a Hugging Face folder (config.json), a .gguf file, or `smollm2`.
The stretching options are those of `lextra eval` / `lextra hf`: `--rope-scaling`, `--mask`, `--temperatures`,
`--extend`. Prompts use RULER's base templates; `--chat` wraps them in the model's chat template.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from lextra.cli.app import Handler, command
from lextra.cli.options import (
    add_device,
    add_extend,
    add_quiet,
    add_rope_scaling,
    add_threads,
    apply_extend,
    finite_float,
    int_at_least,
    model_folder,
    non_negative_int,
    parse_lengths,
    positive_int,
)
from lextra.errors import DataError


def lextra_folder(spec: str) -> Path | None:
    """The lextra model folder `spec` names (a model folder or a run holding `model/`), or None for anything else."""
    folder = model_folder(spec)
    try:
        data = json.loads((folder / "config.json").read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return folder if isinstance(data, dict) and "model" in data and "model_type" not in data else None


def read_temperatures(path: str) -> tuple[Any, str]:
    """The temperatures of an alignment.json (`lextra align` / `lextra hf align`) and its strategy."""
    try:
        saved = json.loads(Path(path).read_text())
        return saved["temperatures"], str(saved.get("strategy", "file"))
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise DataError(f"--temperatures {path}: not an alignment.json from `lextra align` ({err})") from err


def build_tokenizer_spec(spec: str, haystack: str) -> Any:
    """--tokenizer: bytes, hf:PATH, or bpe[:VOCAB] trained on the haystack corpus's train split."""
    from lextra.data import build_tokenizer, prepare_data

    if spec.strip().startswith("bpe"):
        return prepare_data(haystack, tokenizer=spec).tokenizer
    return build_tokenizer(spec)


def weights_checksums(path: Path) -> list[str]:
    """sha256 of a model's weight files (a .gguf file, or a folder's .safetensors / .bin files)."""
    from lextra.io import sha256_file

    files = [path] if path.is_file() else sorted([*path.glob("*.safetensors"), *path.glob("*.bin")])
    return [sha256_file(f) for f in files]


def load_lextra(args: argparse.Namespace, folder: Path) -> tuple[Any, Any, str, dict[str, Any], str | None]:
    """A lextra model with the stretching options applied: (model, tokenizer, label, cell key, GPT mask)."""
    from lextra.attention import build_mask
    from lextra.data import tokenizer_from_config
    from lextra.model import read_model_meta
    from lextra.pipelines.retrieval import load_scaled

    meta = read_model_meta(folder)
    model, label = load_scaled(folder, args.rope_scaling, args.device)
    if args.tokenizer:
        tokenizer = build_tokenizer_spec(args.tokenizer, args.haystack)
    else:
        tokenizer = tokenizer_from_config(meta.get("tokenizer", {"kind": "bytes"}))
    key: dict[str, Any] = {"model": str(folder), "weights": meta.get("weights_sha256")}
    if args.mask:
        build_mask(args.mask, model.config.train_len)  # an unknown mask fails before any work
        label += f"+{args.mask}"
    if args.temperatures:
        temperatures, strategy = read_temperatures(args.temperatures)
        model.set_temperatures(temperatures)
        label += f"+tau-{strategy}"
        key["temperatures"] = temperatures
    return model, tokenizer, label, key, args.mask


def load_hugging_face(args: argparse.Namespace) -> tuple[Any, Any, str, dict[str, Any], str | None]:
    """A Hugging Face model with the stretching options applied (as `lextra hf` does), and its tokenizer."""
    from lextra.cli.hf import load_adapted
    from lextra.data import tokenizer_from_config
    from lextra.hf.load import resolve_model_path, tokenizer_config

    model, label = load_adapted(argparse.Namespace(**{**vars(args), "log_scaling": "none"}))
    if args.tokenizer:
        tokenizer = build_tokenizer_spec(args.tokenizer, args.haystack)
    else:
        tokenizer = tokenizer_from_config(tokenizer_config(args.model))
    path = resolve_model_path(args.model)
    key: dict[str, Any] = {"model": str(path.resolve()), "weights": weights_checksums(path)}
    if args.temperatures:
        key["temperatures"] = read_temperatures(args.temperatures)[0]
    return model, tokenizer, label, key, None


@command(
    "ruler",
    "RULER-style long-context suite: 11 synthetic tasks at exact lengths, scores and the effective length",
    options=(add_rope_scaling, add_extend, add_threads, add_device, add_quiet),
)
def configure_ruler(parser: argparse.ArgumentParser) -> Handler:
    from lextra.reporting.catalog import mask_help, ruler_task_help

    parser.add_argument("model", help="a lextra run or model folder, a Hugging Face folder, a .gguf file or 'smollm2'")
    parser.add_argument("--tasks", default="all", help=ruler_task_help())
    parser.add_argument("--lengths", default=None, help="comma-separated prompt lengths, tokens (default L_tr x 1,2,4)")
    parser.add_argument("--samples", type=positive_int, default=10, help="samples per (task, length) cell")
    parser.add_argument("--out", required=True, help="results folder (finished cells in it are reused)")
    parser.add_argument(
        "--threshold",
        type=finite_float(0.0, 100.0),
        default=85.6,
        help="effective length: the largest length whose average score, and every shorter one's, is at least this "
        "(default RULER's 85.6)",
    )
    parser.add_argument("--chat", action="store_true", help="wrap prompts in the model's chat template")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the samples")
    parser.add_argument("--batch", type=positive_int, default=8, help="samples decoded together (any tasks)")
    parser.add_argument("--mask", default=None, help=mask_help())
    parser.add_argument("--temperatures", default=None, help="alignment.json from `lextra align` / `lextra hf align`")
    parser.add_argument(
        "--tokenizer", default=None, help="default: the model's own; bytes, bpe[:VOCAB] or hf:PATH otherwise"
    )
    parser.add_argument(
        "--train-len", type=int_at_least(2), default=None, help="L_tr of a Hugging Face model (default its maximum)"
    )
    parser.add_argument("--haystack", default="english", help="corpus whose test split is the essay haystack")

    def run(args: argparse.Namespace) -> int:
        from lextra.evaluate.ruler import chat_format
        from lextra.pipelines.ruler import RulerSettings, parse_task_list, run_ruler

        tasks, task_options = parse_task_list(args.tasks)
        settings = RulerSettings(
            tasks=tasks,
            options=task_options,
            lengths=parse_lengths(args.lengths),
            samples=args.samples,
            seed=args.seed,
            threshold=args.threshold,
            batch_size=args.batch,
            haystack=args.haystack,
        ).validate()
        folder = lextra_folder(args.model)
        if folder is not None:
            model, tokenizer, label, key, mask = load_lextra(args, folder)
        else:
            model, tokenizer, label, key, mask = load_hugging_face(args)
        chat = chat_format(tokenizer) if args.chat else None
        label += apply_extend(model, args.extend, args.mask, settings.resolved_lengths(model.config.train_len))
        label += "+chat" if chat is not None else ""
        out = Path(args.out)
        result = run_ruler(
            model,
            tokenizer,
            settings,
            out,
            chat=chat,
            mask=mask,
            label=label,
            model_name=str(folder or args.model),
            key=key,
            progress=not args.quiet,
        )
        print((out / "table.md").read_text())
        print(f"results: {out / 'results.json'}, {out / 'results.csv'}, heatmap: {out / 'heatmap.png'}")
        print(f"effective length: {result.effective_length} (threshold {result.threshold:g})")
        return 0

    return run


@command("ruler-compare", "RULER results of several runs side by side: averages, effective lengths, task scores")
def configure_ruler_compare(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("runs", nargs="+", help="`lextra ruler` output folders (or their results.json)")
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
