"""Subcommands `lextra train`, `lextra eval` and `lextra compare` (registered into `lextra.cli`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from lextra.cli import command
from lextra.errors import ConfigError

DEFAULTS = {
    "layers": 4,
    "width": 128,
    "heads": 4,
    "train_len": 128,
    "batch_size": 16,
    "steps": 600,
    "lr": 2e-3,
    "position_lr_scale": 10.0,
}


def parse_option(text: str) -> tuple[str, Any]:
    """KEY=VALUE with VALUE read as JSON when it parses (numbers, true/false, lists), else as a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"scheme option {text!r} must look like KEY=VALUE, e.g. base=500000")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def parse_lengths(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--lengths takes comma-separated integers, got {text!r}") from None


def _threads(args: argparse.Namespace) -> None:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)


def add_data_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--corpus",
        default="python-code",
        help="python-code (built in), english, or a path (text files dir, .jsonl, saved HF dataset)",
    )
    parser.add_argument("--tokenizer", default="bytes", help="bytes, bpe[:VOCAB] or hf:/local/path")
    parser.add_argument("--limit-chars", type=int, default=None, help="use only the first N characters of the corpus")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")


def add_train_args(parser: argparse.ArgumentParser, with_scheme: bool = True) -> None:
    add_data_args(parser)
    if with_scheme:
        parser.add_argument("--scheme", default="rope", help="position scheme (see `lextra list`)")
        parser.add_argument(
            "--scheme-option",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="scheme option, repeatable (e.g. base=500 or layout=interleaved)",
        )
    parser.add_argument("--train-len", type=int, default=DEFAULTS["train_len"], help="training length L_tr")
    parser.add_argument("--layers", type=int, default=DEFAULTS["layers"])
    parser.add_argument("--width", type=int, default=DEFAULTS["width"], help="d_model")
    parser.add_argument("--heads", type=int, default=DEFAULTS["heads"])
    parser.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"])
    parser.add_argument("--steps", type=int, default=DEFAULTS["steps"])
    parser.add_argument("--lr", type=float, default=DEFAULTS["lr"])
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument(
        "--position-lr-scale",
        type=float,
        default=DEFAULTS["position_lr_scale"],
        help="learning-rate multiplier for position-scheme parameters (T5 table, KERPLE, FIRE)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-every", type=int, default=200)
    parser.add_argument("--init-from", default=None, help="start from this model folder's weights (fine-tuning)")
    parser.add_argument(
        "--precision",
        default="fp32",
        choices=["fp32", "bf16"],
        help="bf16 autocast for matrix products (position math stays fp32)",
    )


def train_config_from(args: argparse.Namespace, scheme: str | None = None) -> Any:
    from lextra.model import GPTConfig
    from lextra.train import TrainConfig

    options = dict(parse_option(o) for o in getattr(args, "scheme_option", []))
    model = GPTConfig(
        n_layer=args.layers,
        n_head=args.heads,
        d_model=args.width,
        train_len=args.train_len,
        scheme=scheme or args.scheme,
        scheme_options=options,
    )
    return TrainConfig(
        corpus=args.corpus,
        tokenizer=args.tokenizer,
        limit_chars=args.limit_chars,
        model=model,
        batch_size=args.batch_size,
        steps=args.steps,
        lr=args.lr,
        warmup=args.warmup,
        seed=args.seed,
        position_lr_scale=args.position_lr_scale,
        precision=args.precision,
        init_from=args.init_from,
        checkpoint_every=args.checkpoint_every,
    )


def add_eval_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lengths", default=None, help="comma-separated lengths (default L_tr x 1,2,4,8,16)")
    parser.add_argument("--protocols", default="chunks,sliding,last-token")
    parser.add_argument("--stride", type=int, default=None, help="sliding-window stride (default L/2)")
    parser.add_argument("--documents", type=int, default=8, help="held-out documents evaluated at every length")
    parser.add_argument("--split", default="test", choices=["validation", "test"])
    parser.add_argument("--backend", default="auto", choices=["auto", "reference", "sdpa", "chunked"])
    parser.add_argument(
        "--temperature",
        default="none",
        choices=["none", "log-length"],
        help="log-length: at each length L > L_tr use tau = ln L_tr / ln L in every layer",
    )


def eval_config_from(args: argparse.Namespace, mask: str = "causal") -> Any:
    from lextra.evaluate import EvalConfig

    return EvalConfig(
        lengths=parse_lengths(args.lengths),
        protocols=args.protocols.split(","),
        mask=mask,
        backend=args.backend,
        split=args.split,
        documents=args.documents,
        stride=args.stride,
        temperature=args.temperature,
    ).validate()


@command("train", "train a GPT with a position scheme at a training length")
def _configure_train(parser: argparse.ArgumentParser):
    parser.add_argument("--out", required=True, help="run directory")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    add_train_args(parser)

    def run(args: argparse.Namespace) -> int:
        from lextra.train import train

        _threads(args)
        final = train(train_config_from(args), args.out, resume=args.resume)
        print(f"model saved to {final}")
        return 0

    return run


@command("eval", "perplexity of a trained model at many lengths under three protocols")
def _configure_eval(parser: argparse.ArgumentParser):
    parser.add_argument("checkpoint", help="a model folder (RUN/model) or a training run folder")
    parser.add_argument("--out", default=None, help="results folder (default CHECKPOINT/eval-MASK)")
    parser.add_argument("--mask", default="causal", help="inference mask: causal, bca, window:W")
    parser.add_argument(
        "--rope-scaling",
        default=None,
        metavar="TYPE:FACTOR",
        help="RoPE frequency scaling for rope/xpos/coca models: linear:S, ntk:S, dynamic:S, yarn:S, "
        "llama3:S or a JSON dict of RopeScaling fields",
    )
    parser.add_argument("--corpus", default=None, help="default: the corpus the model was trained on")
    parser.add_argument("--limit-chars", type=int, default=None)
    parser.add_argument("--threads", type=int, default=0)
    add_eval_args(parser)

    def run(args: argparse.Namespace) -> int:
        from lextra.evaluate import evaluate_model
        from lextra.io import atomic_write_json
        from lextra.model import load_model, read_model_meta
        from lextra.prepare import prepare_data
        from lextra.report import save_eval_outputs

        _threads(args)
        folder = _model_folder(args.checkpoint)
        meta = read_model_meta(folder)
        train_meta = meta.get("train", {})
        corpus = args.corpus or train_meta.get("corpus", "python-code")
        limit = args.limit_chars if args.limit_chars is not None else train_meta.get("limit_chars")
        data = prepare_data(corpus, limit_chars=limit, tokenizer_config=meta.get("tokenizer", {"kind": "bytes"}))
        model = load_model(folder)
        label = model.config.scheme
        if args.rope_scaling:
            apply_rope_scaling(model, args.rope_scaling)
            label += f"+{args.rope_scaling}"
        config = eval_config_from(args, args.mask)
        label += "" if args.mask == "causal" else f"+{args.mask}"
        evaluation = evaluate_model(model, data, config, label=label)
        out = Path(args.out or folder.parent / f"eval-{args.mask.replace(':', '-')}")
        atomic_write_json(out / "results.json", {"model": str(folder), "corpus": corpus, **evaluation})
        paths = save_eval_outputs(out, label, evaluation)
        print(paths["table"].read_text())
        print(f"results: {out / 'results.json'}, plot: {paths['plot']}")
        return 0

    return run


def _model_folder(path: str) -> Path:
    folder = Path(path)
    return folder / "model" if (folder / "model" / "config.json").exists() else folder


@command("align", "temperature alignment: per-layer softmax temperatures for inputs of a target length")
def _configure_align(parser: argparse.ArgumentParser):
    parser.add_argument("checkpoint", help="a model folder (RUN/model) or a training run folder")
    parser.add_argument("--strategy", default="pmax", choices=["pmax", "entropy", "log-length"])
    parser.add_argument("--length", type=int, required=True, help="the target input length L_ex")
    parser.add_argument("--per-head", action="store_true", help="one temperature per head instead of per layer")
    parser.add_argument("--windows", type=int, default=4, help="calibration windows from the validation split")
    parser.add_argument("--out", default=None, help="aligned model folder (default CHECKPOINT-STRATEGY-LENGTH)")
    parser.add_argument("--threads", type=int, default=0)

    def run(args: argparse.Namespace) -> int:
        from lextra.align import align_temperatures
        from lextra.io import atomic_write_json
        from lextra.model import load_model, read_model_meta, save_model
        from lextra.prepare import prepare_data
        from lextra.report import markdown_table

        _threads(args)
        folder = _model_folder(args.checkpoint)
        meta = read_model_meta(folder)
        train_meta = meta.get("train", {})
        data = prepare_data(
            train_meta.get("corpus", "python-code"),
            limit_chars=train_meta.get("limit_chars"),
            tokenizer_config=meta.get("tokenizer", {"kind": "bytes"}),
        )
        model = load_model(folder)
        result = align_temperatures(
            model, data, args.strategy, args.length, windows=args.windows, per_head=args.per_head
        )
        out = Path(args.out or f"{folder}-{args.strategy}-{args.length}")
        extra = {k: v for k, v in meta.items() if k in ("tokenizer", "train")}
        save_model(model, out, extra={**extra, "alignment": result.to_dict()})
        atomic_write_json(out / "alignment.json", result.to_dict())
        statistic = "entropy" if args.strategy == "entropy" else "pmax"
        rows = {
            f"layer {i}": {
                "target": result.target[i],
                "before": result.before[i],
                "after": result.after[i],
                "tau": sum(t) / len(t),
            }
            for i, t in enumerate(result.temperatures)
        }
        print(f"mean {statistic}: target at L_tr = {result.train_len}, before and after at L_ex = {args.length}")
        print(markdown_table(rows, ["target", "before", "after", "tau"], "layer"))
        if result.saturated:
            print(f"warning: target out of reach for (layer, head) {result.saturated}: temperature at its bound")
        print(f"aligned model saved to {out}")
        return 0

    return run


def parse_rope_scaling(spec: str) -> dict[str, Any]:
    """`yarn:4` -> {"type": "yarn", "factor": 4.0}; a JSON object is taken as it is."""
    if spec.lstrip().startswith("{"):
        try:
            return dict(json.loads(spec))
        except (json.JSONDecodeError, TypeError, ValueError):
            raise ConfigError(f"--rope-scaling: {spec!r} is not a JSON object") from None
    kind, _, factor = spec.partition(":")
    try:
        return {"type": kind, "factor": float(factor or 1.0)} if kind != "none" else {"type": "none"}
    except ValueError:
        raise ConfigError(f"--rope-scaling: expected TYPE:FACTOR such as yarn:4, got {spec!r}") from None


def apply_rope_scaling(model: Any, spec: str) -> None:
    """Give a trained rope/xpos/coca model an inference-time frequency scaling."""
    from lextra.positions.rotary import RotaryFrequencies

    if not isinstance(model.positions[0], RotaryFrequencies):
        raise ConfigError(f"--rope-scaling applies to rope, xpos and coca models, not {model.config.scheme!r}")
    model.set_scheme_options(scaling=parse_rope_scaling(spec))


@command("compare", "train and evaluate several schemes on the same data, seed and budget")
def _configure_compare(parser: argparse.ArgumentParser):
    from lextra.compare import DEFAULT_VARIANTS

    parser.add_argument("--out", required=True, help="comparison folder (finished cells are reused)")
    parser.add_argument(
        "--schemes",
        default=",".join(DEFAULT_VARIANTS),
        help="comma-separated variants: SCHEME or SCHEME+MASK (e.g. rope+bca, alibi+window:64)",
    )
    add_train_args(parser, with_scheme=False)
    add_eval_args(parser)

    def run(args: argparse.Namespace) -> int:
        from lextra.compare import compare

        _threads(args)
        base = train_config_from(args, scheme="nope")
        summary_variants = [v for v in args.schemes.split(",") if v.strip()]
        compare(summary_variants, base, eval_config_from(args), args.out)
        out = Path(args.out)
        print((out / "table.md").read_text())
        print(f"plot: {out / 'perplexity.png'}")
        print(f"results: {out / 'summary.json'}, {out / 'results.csv'}")
        return 0

    return run
