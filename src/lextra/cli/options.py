"""Option sets shared by several commands (data, threads, device, training, evaluation, retrieval evaluation), the
argparse value types that refuse non-finite or out-of-range numbers, and the parsers of their values."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


# --- value types: argparse turns their ArgumentTypeError into one line and exit code 2 --------------------------
def _number(kind: Callable[[str], Any], text: str, what: str) -> Any:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `low`."""

    def parse(text: str) -> int:
        value = _number(int, text, "an integer")
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        return value

    parse.__name__ = f"int>={low}"
    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def finite_float(low: float | None = None, high: float | None = None, *, low_open: bool = False) -> Callable:
    """An argparse type: a finite float in [low, high] (or (low, high] with `low_open`)."""

    def parse(text: str) -> float:
        value = _number(float, text, "a number")
        too_low = low is not None and (value <= low if low_open else value < low)
        if too_low or (high is not None and value > high):
            left = "(" if low_open else "["
            raise argparse.ArgumentTypeError(
                f"must be in {left}{'-inf' if low is None else low}, {'inf' if high is None else high}], got {text!r}"
            )
        return value

    parse.__name__ = "number"
    return parse


positive_float = finite_float(0.0, low_open=True)


# --- value parsers ------------------------------------------------------------------------------------------------
def parse_option(text: str) -> tuple[str, Any]:
    """KEY=VALUE with VALUE read as JSON when it parses (numbers, true/false, lists), else as a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"scheme option {text!r} must look like KEY=VALUE, e.g. base=500000")
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return key, value
    return key, parsed


def parse_lengths(text: str | None) -> list[int] | None:
    """Comma-separated positive token counts, or None when none are given (the caller's defaults apply)."""
    if not text:
        return None
    try:
        lengths = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--lengths takes comma-separated integers, got {text!r}") from None
    if any(n < 1 for n in lengths):
        raise ConfigError(f"--lengths must be positive integers, got {text!r}")
    return lengths


def parse_depths(text: str | None) -> list[float]:
    """`0,0.5,1` -> [0.0, 0.5, 1.0] (default 0, 0.25, 0.5, 0.75, 1)."""
    from lextra.evaluate.retrieval import DEFAULT_DEPTHS

    if not text:
        return list(DEFAULT_DEPTHS)
    try:
        depths = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--depths takes comma-separated numbers in [0, 1], got {text!r}") from None
    if not depths or any(not 0 <= d <= 1 for d in depths):
        raise ConfigError(f"--depths must be numbers in [0, 1], got {text!r}")
    return depths


def model_folder(path: str) -> Path:
    """A model folder, or a training run folder holding `model/`."""
    folder = Path(path)
    return folder / "model" if (folder / "model" / "config.json").exists() else folder


# --- option sets --------------------------------------------------------------------------------------------------
def add_threads(parser: argparse.ArgumentParser) -> None:
    """--threads: torch's intra-op threads (applied by `apply_runtime` before the handler runs)."""
    parser.add_argument("--threads", type=non_negative_int, default=0, help="torch threads (default: torch's choice)")


def add_device(parser: argparse.ArgumentParser) -> None:
    """--device: where the command runs its models (resolved by `apply_runtime`, so a bad one fails first)."""
    parser.add_argument(
        "--device",
        default="auto",
        metavar="DEVICE",
        help="auto (CUDA when available, else the CPU), cpu, cuda or cuda:N; under torchrun each process uses "
        "the GPU of its LOCAL_RANK (default: auto)",
    )


def apply_runtime(args: argparse.Namespace) -> None:
    """Apply the runtime options every command shares (threads; the device, resolved to a `torch.device` in
    `args.device`) before its handler runs: a device torch cannot use ends the command before any work."""
    threads = getattr(args, "threads", 0)
    if threads:
        import torch

        torch.set_num_threads(threads)
    if hasattr(args, "device"):
        from lextra.devices import resolve_device

        args.device = resolve_device(args.device)


def add_corpus(parser: argparse.ArgumentParser, *, default: str | None = "python-code", help_default: str = "") -> None:
    """--corpus and --limit-chars."""
    parser.add_argument(
        "--corpus",
        default=default,
        help=help_default or "python-code (built in), english, or a path (text files dir, .jsonl, saved HF dataset)",
    )
    parser.add_argument(
        "--limit-chars", type=positive_int, default=None, help="use only the first N characters of the corpus"
    )


def add_data(parser: argparse.ArgumentParser) -> None:
    """--corpus, --tokenizer, --limit-chars, --threads: what a training run reads."""
    add_corpus(parser)
    parser.add_argument("--tokenizer", default="bytes", help="bytes, bpe[:VOCAB] or hf:/local/path")
    add_threads(parser)


def add_scheme(parser: argparse.ArgumentParser) -> None:
    """--scheme and repeatable --scheme-option KEY=VALUE."""
    from lextra.reporting.catalog import scheme_help

    parser.add_argument("--scheme", default="rope", help=scheme_help())
    add_scheme_options(parser, "scheme option, repeatable (e.g. base=500 or layout=interleaved)")


def add_scheme_options(parser: argparse.ArgumentParser, help_text: str) -> None:
    """Repeatable --scheme-option KEY=VALUE."""
    parser.add_argument("--scheme-option", action="append", default=[], metavar="KEY=VALUE", help=help_text)


def add_training(parser: argparse.ArgumentParser) -> None:
    """The model shape and the training budget, with the data options."""
    add_data(parser)
    parser.add_argument("--train-len", type=int_at_least(2), default=DEFAULTS["train_len"], help="training length")
    parser.add_argument("--layers", type=positive_int, default=DEFAULTS["layers"])
    parser.add_argument("--width", type=positive_int, default=DEFAULTS["width"], help="d_model")
    parser.add_argument("--heads", type=positive_int, default=DEFAULTS["heads"])
    parser.add_argument("--batch-size", type=positive_int, default=DEFAULTS["batch_size"])
    parser.add_argument("--steps", type=positive_int, default=DEFAULTS["steps"])
    parser.add_argument("--lr", type=positive_float, default=DEFAULTS["lr"])
    parser.add_argument("--warmup", type=non_negative_int, default=50)
    parser.add_argument(
        "--position-lr-scale",
        type=finite_float(0.0),
        default=DEFAULTS["position_lr_scale"],
        help="learning-rate multiplier for position-scheme parameters (T5 table, KERPLE, FIRE)",
    )
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--checkpoint-every", type=positive_int, default=200)
    parser.add_argument("--init-from", default=None, help="start from this model folder's weights (fine-tuning)")
    parser.add_argument(
        "--precision",
        default="fp32",
        choices=["fp32", "bf16"],
        help="bf16 autocast for matrix products (position math stays fp32)",
    )


def train_config_from(args: argparse.Namespace, scheme: str | None = None) -> Any:
    """The `TrainConfig` the training options describe (validated)."""
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


def add_evaluation(parser: argparse.ArgumentParser) -> None:
    """Perplexity evaluation: lengths, protocols, stride, documents, split, backend, temperature."""
    parser.add_argument("--lengths", default=None, help="comma-separated lengths (default L_tr x 1,2,4,8,16)")
    parser.add_argument("--protocols", default="chunks,sliding,last-token")
    parser.add_argument("--stride", type=positive_int, default=None, help="sliding-window stride (default L/2)")
    parser.add_argument(
        "--documents", type=positive_int, default=8, help="held-out documents evaluated at every length"
    )
    parser.add_argument("--split", default="test", choices=["validation", "test"])
    from lextra.attention import BACKENDS

    parser.add_argument(
        "--backend",
        default="auto",
        choices=BACKENDS,
        help="attention backend: auto picks the fastest exact one; flex (FlexAttention) needs CUDA for gradients",
    )
    parser.add_argument(
        "--temperature",
        default="none",
        choices=["none", "log-length"],
        help="log-length: at each length L > L_tr use tau = ln L_tr / ln L in every layer",
    )


def eval_config_from(args: argparse.Namespace, mask: str = "causal") -> Any:
    """The `EvalConfig` the evaluation options describe (validated)."""
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


def add_rope_scaling(parser: argparse.ArgumentParser) -> None:
    """--rope-scaling TYPE:FACTOR or a JSON dict."""
    from lextra.reporting.catalog import scaling_help

    parser.add_argument("--rope-scaling", default=None, metavar="TYPE:FACTOR", help=scaling_help())


def add_extend(parser: argparse.ArgumentParser) -> None:
    """--extend NAME[,KEY=VALUE...]: a training-free extension method (`lextra.extend`), with --rope-scaling."""
    from lextra.reporting.catalog import extension_help

    parser.add_argument("--extend", default=None, metavar="NAME[,KEY=VALUE...]", help=extension_help())


def folder_safe(spec: str) -> str:
    """A mask or method spec as part of a folder name: `rerope:window=512` -> `rerope-window512`."""
    return spec.translate(str.maketrans({":": "-", ",": "-", "=": ""}))


def apply_extend(model: Any, spec: str | None, mask: str | None = None, lengths: list[int] | None = None) -> str:
    """Apply `--extend SPEC` to a lextra GPT or a Hugging Face decoder, refusing a mask other than causal and
    lengths past the method's maximum before any work; returns the label suffix (`+SPEC`, or '' without one)."""
    if not spec or spec == "none":
        return ""
    from lextra.attention import build_mask
    from lextra.extend import apply_extension
    from lextra.model import GPT

    if mask and not build_mask(mask, model.config.train_len).exactly_causal:
        raise ConfigError(f"--extend {spec} sets its own visibility over causal attention; drop --mask {mask}")
    if isinstance(model, GPT):
        method = apply_extension(model, spec)
    elif hasattr(model, "set_extension"):
        method = model.set_extension(spec)
    else:
        raise ConfigError("--extend applies to RoPE decoders (rope, xpos, coca models; Llama-family models), not T5")
    if method is not None and lengths:
        method.check_length(max(lengths))
    return f"+{spec}"


def retrieval_evaluation(
    *, with_task: bool = True, multiples: str = "1,2,4,8,16", samples: int = 20, batch: int = 8
) -> Callable[[argparse.ArgumentParser], None]:
    """The retrieval evaluation option set: --task, --lengths, --depths, --samples, --candidates, --eval-seed,
    --eval-batch, with the given defaults."""

    def add(parser: argparse.ArgumentParser) -> None:
        if with_task:
            from lextra.reporting.catalog import task_help

            parser.add_argument("--task", default="passkey", help=task_help())
        parser.add_argument(
            "--lengths", default=None, help=f"comma-separated prompt lengths (default L_tr x {multiples})"
        )
        parser.add_argument("--depths", default=None, help="comma-separated needle depths (default 0,0.25,0.5,0.75,1)")
        parser.add_argument("--samples", type=positive_int, default=samples, help="prompts per (length, depth) cell")
        parser.add_argument(
            "--candidates", type=int_at_least(2), default=5, help="answers ranked per prompt (gold + distractors)"
        )
        parser.add_argument("--eval-seed", type=non_negative_int, default=0, help="seed of the evaluation prompts")
        parser.add_argument("--eval-batch", type=positive_int, default=batch, help="prompts scored together")

    return add


def add_quiet(parser: argparse.ArgumentParser) -> None:
    """--quiet: no progress bars."""
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
