"""Option sets shared by several commands (the training flags are `lextra.cli.training_options`), the argparse
value types that refuse non-finite or out-of-range numbers, and the parsers of their values.

One name per concept: `--batch-size` and `--seed` belong to what a command does (`--eval-batch-size` and
`--eval-seed` where it also trains), `--task` is one task and `--tasks` a list, thresholds are percentages (0-100).
Old spellings are hidden aliases (`add_aliased`); defaults are read from the config dataclasses, so `--help` shows
the values the library uses.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lextra.cli.fields import config_default
from lextra.errors import ConfigError
from lextra.validate import parse_lengths


def corpora_help() -> str:
    """The built-in corpus names (`lextra.data.BUILTIN_CORPORA`), for --help."""
    from lextra.data import BUILTIN_CORPORA

    return ", ".join(BUILTIN_CORPORA)


class SpecList(argparse.Action):
    """A list flag of the spec grammar: repeatable (`--scheme A --scheme B`), each value a `;`- or (where
    unambiguous) comma-separated list (`rope,base=500000;alibi`), brackets and braces kept whole
    (`lextra.registry.split_specs`); the first occurrence replaces the default."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        from lextra.registry import split_specs

        current = getattr(namespace, self.dest, None)
        items = [] if current is None or current is self.default else list(current)
        try:
            items += split_specs(values)
        except ConfigError as err:
            raise argparse.ArgumentError(self, str(err)) from None
        setattr(namespace, self.dest, items)


def add_variants(parser: argparse.ArgumentParser, defaults: tuple[str, ...], second: str, example: str) -> None:
    """--schemes (also --scheme): the variants a comparison trains and evaluates, a repeatable spec list of
    SCHEME[+`second`] (`lextra.registry.split_compound`)."""
    parser.add_argument(
        "--schemes",
        "--scheme",
        action=SpecList,
        default=list(defaults),
        help=f"variants, repeatable, each a list separated by ';' (or ',' where unambiguous): SCHEME or "
        f"SCHEME+{second}, e.g. {example} (default: {','.join(defaults)})",
    )


def add_spec_list(
    parser: argparse.ArgumentParser, *names: str, default: list[str] | None = None, **kwargs: Any
) -> argparse.Action:
    """A `SpecList` flag (`names[1:]` hidden aliases); its value is the list of specs (`default` when not given)."""
    return add_aliased(parser, *names, action=SpecList, default=default, **kwargs)


def add_aliased(parser: argparse.ArgumentParser, name: str, *aliases: str, **kwargs: Any) -> argparse.Action:
    """`parser.add_argument(name, *aliases, ...)` with `aliases` accepted (the same value) but left out of
    `--help`: the old spellings of a renamed option."""
    action = parser.add_argument(name, *aliases, **kwargs)
    action.hidden_aliases = tuple(aliases)  # type: ignore[attr-defined]  # our own mark, read by HelpFormatter
    return action


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


def finite_float(low: float, *, low_open: bool = False) -> Callable:
    """An argparse type: a finite float >= `low` (> `low` with `low_open`)."""

    def parse(text: str) -> float:
        value = _number(float, text, "a number")
        if value <= low if low_open else value < low:
            raise argparse.ArgumentTypeError(f"must be in {'(' if low_open else '['}{low}, inf], got {text!r}")
        return value

    parse.__name__ = "number"
    return parse


positive_float = finite_float(0.0, low_open=True)
#: the argparse type of a generated flag by its field's annotation (`lextra.cli.fields`): numbers refused when
#: non-finite or negative (no training setting is; a flag that may be passes its own type), the rest of each
#: range by the config's `validate`
FIELD_TYPES: dict[type, Callable[[str], Any]] = {int: non_negative_int, float: finite_float(0.0), str: str}


def percent(*, allow_zero: bool) -> Callable[[str], float]:
    """An argparse type: a percentage in [0, 100] (or (0, 100] without `allow_zero`). A value in (0, 1] reads as a
    fraction written in the wrong unit (0.99 for 99) and is refused, naming the unit."""

    def parse(text: str) -> float:
        value = _number(float, text, "a percentage")
        low = "[0" if allow_zero else "(0"
        if value < 0 or value > 100 or (value == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"is a percentage in {low}, 100], got {text!r}")
        if 0 < value <= 1:
            raise argparse.ArgumentTypeError(
                f"is a percentage in {low}, 100], got {text!r}: a fraction? write {value * 100:g} for {value:g}"
            )
        return value

    parse.__name__ = "percent"
    return parse


# --- value parsers ------------------------------------------------------------------------------------------------
def scheme_options(scheme: str, items: list[str]) -> dict[str, Any]:
    """Repeated `--scheme-option KEY=VALUE` values, typed by the scheme's declared options (the registry's
    parsing: `slope=nan` or an unknown key is one ConfigError naming the scheme's options)."""
    from lextra.positions import SCHEMES
    from lextra.registry import Spec, parse_options, parse_spec

    return SCHEMES.parse(Spec(parse_spec(scheme, "scheme").name, None, parse_options(items, "scheme")))[1]


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


# --- option sets --------------------------------------------------------------------------------------------------
def add_threads(parser: argparse.ArgumentParser) -> None:
    """--threads: torch's intra-op threads (applied by `apply_runtime` before the handler runs)."""
    parser.add_argument(
        "--threads", type=positive_int, default=None, help="torch threads, 1 or more (default: torch's choice)"
    )


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
    threads = getattr(args, "threads", None)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    if hasattr(args, "device"):
        from lextra.devices import resolve_device

        args.device = resolve_device(args.device)


def add_corpus(parser: argparse.ArgumentParser, default_text: str) -> None:
    """--corpus (default None: `default_text` says what the command reads then) and --limit-chars."""
    parser.add_argument(
        "--corpus",
        default=None,
        help=f"{corpora_help()}, a mixture A+B, or a path (text files dir, .jsonl, .parquet, saved HF dataset) "
        f"(default: {default_text})",
    )
    parser.add_argument(
        "--limit-chars", type=positive_int, default=None, help="use only the first N characters of the corpus"
    )


def add_eval_data(parser: argparse.ArgumentParser) -> None:
    """--data: the prepared folder an evaluation reads its split from (instead of --corpus)."""
    parser.add_argument(
        "--data",
        default=None,
        metavar="DIR",
        help="evaluate on a prepared folder's split (`lextra data prepare`, with the model's tokenizer), without "
        "re-tokenizing (default: the folder the model was trained from, when it is still there; else --corpus)",
    )


def refuse_corpus_with_data(args: argparse.Namespace) -> None:
    """Refuse --corpus or --limit-chars beside --data: the prepared folder holds its corpus."""
    if getattr(args, "data", None) is not None and (args.corpus is not None or args.limit_chars is not None):
        raise ConfigError("--data replaces --corpus and --limit-chars (the folder holds its corpus); drop one")


def eval_data_from(args: argparse.Namespace, meta: dict[str, Any]) -> Any:
    """The data an evaluation reads: the `--data` folder, the model's own prepared folder (no --corpus and no
    --limit-chars given), or its corpus read with its tokenizer (`prepare_for_model`)."""
    from lextra.data import prepare_for_model
    from lextra.data.shards import shards_for_model

    refuse_corpus_with_data(args)
    if args.data is not None or (args.corpus is None and args.limit_chars is None):
        shards = shards_for_model(meta, args.data)
        if shards is not None:
            return shards.prepared_data()
    return prepare_for_model(meta, args.corpus, args.limit_chars)


def temperature_option(*schedules: str, files: bool = True) -> Callable[[argparse.ArgumentParser], None]:
    """--temperature: `none`, one of `schedules` (`log-length`: tau = ln L_tr / ln L at each length L > L_tr) or,
    with `files`, an alignment.json whose temperatures the model takes (`--temperatures FILE` is an alias)."""
    words = ("none", *schedules)

    def parse(text: str) -> str:
        if text in words:
            return text
        if not files:
            raise argparse.ArgumentTypeError(f"must be one of {', '.join(words)}, got {text!r}")
        if not Path(text).is_file():
            raise argparse.ArgumentTypeError(f"must be {', '.join(words)} or an alignment.json file; no file {text!r}")
        return text

    parse.__name__ = "temperature"
    shown = " | ".join(words) + (" | FILE" if files else "")
    parts = ["none: the model's own"]
    if "log-length" in schedules:
        parts.append("log-length: at each length L > L_tr every layer uses tau = ln L_tr / ln L")
    if files:
        parts.append("FILE: the temperatures of an alignment.json from `lextra align`")

    def add(parser: argparse.ArgumentParser) -> None:
        add_aliased(
            parser, "--temperature", *(("--temperatures",) if files else ()), type=parse, default="none",
            metavar=shown.replace(" ", ""), help="; ".join(parts),
        )  # fmt: skip

    return add


def temperature_file(args: argparse.Namespace) -> str | None:
    """The alignment.json `--temperature` names, or None for a schedule."""
    value = getattr(args, "temperature", "none")
    return None if value in ("none", "log-length") else value


def add_evaluation(parser: argparse.ArgumentParser) -> None:
    """Perplexity evaluation: lengths, protocols, stride, documents, span, split, backend and precision (defaults:
    `EvalConfig`'s); the command adds its `temperature_option`."""
    from lextra.attention.backends import backend_names
    from lextra.devices import EVAL_PRECISIONS
    from lextra.evaluate import EvalConfig

    parser.add_argument("--lengths", default=None, help="comma-separated lengths (default L_tr x 1,2,4,8,16)")
    parser.add_argument(
        "--protocols",
        default=",".join(config_default(EvalConfig, "protocols")),
        help="comma-separated perplexity protocols",
    )
    parser.add_argument("--stride", type=positive_int, default=None, help="sliding-window stride (default L/2)")
    parser.add_argument(
        "--documents",
        type=positive_int,
        default=config_default(EvalConfig, "documents"),
        help="held-out documents (pieces) evaluated at every length: the unit the intervals resample",
    )
    parser.add_argument(
        "--span",
        type=positive_int,
        default=None,
        metavar="TOKENS",
        help="tokens scored per document at every length (default 16 x L_tr, whatever --lengths asks, so a length's "
        "perplexity does not change with the others asked; at least the longest length)",
    )
    parser.add_argument(
        "--split", default=config_default(EvalConfig, "split"), choices=["validation", "test"], help="held-out split"
    )
    parser.add_argument(
        "--backend",
        type=backend_name,
        default=config_default(EvalConfig, "backend"),
        help=f"attention backend: {', '.join(backend_names())}; auto picks the fastest exact one; flex "
        "(FlexAttention) needs CUDA for gradients",
    )
    parser.add_argument(
        "--eval-precision",
        choices=EVAL_PRECISIONS,
        default=config_default(EvalConfig, "precision"),
        help="precision of the evaluation's forwards: bf16 runs the matrix products under bf16 autocast (positions, "
        "rotary angles, biases, logits and losses stay fp32, sums fp64); auto is bf16 where the device multiplies "
        "bf16 natively (a CUDA GPU with bf16, a CPU with AMX-BF16 or AVX512-BF16), else fp32",
    )


def backend_name(text: str) -> str:
    """An argparse type: a registered attention backend's name (or auto)."""
    from lextra.attention.backends import backend_names

    if text not in backend_names():
        raise argparse.ArgumentTypeError(
            f"unknown attention backend {text!r}; choose one of {', '.join(backend_names())}"
        )
    return text


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
        span=args.span,
        stride=args.stride,
        temperature="none" if temperature_file(args) else args.temperature,
        precision=args.eval_precision,
    ).validate()


def add_rope_scaling(parser: argparse.ArgumentParser, more: str = "") -> None:
    """--rope-scaling TYPE:FACTOR or a JSON dict (help: the scaling registry's types, then `more`)."""
    from lextra.reporting.catalog import scaling_help

    parser.add_argument(
        "--rope-scaling", default=None, metavar="TYPE:FACTOR", help=f"{scaling_help()}{more} (default: none)"
    )


def add_log_scaling(parser: argparse.ArgumentParser) -> None:
    """--log-scaling NAME: an inference-time log-n scaling (help: the log-n scaling registry's names)."""
    from lextra.reporting.catalog import log_scaling_help

    parser.add_argument("--log-scaling", default="none", metavar="NAME", help=log_scaling_help())


def add_rope_scaling_by_layer(parser: argparse.ArgumentParser) -> None:
    """--rope-scaling and --layers-select: the inference-time options of a model whose layers differ."""
    add_rope_scaling(parser)
    parser.add_argument(
        "--layers-select",
        default=None,
        metavar="LAYERS",
        help="the layers --rope-scaling, --log-scaling and --extend apply to: rotary, global, local, nope, all or "
        "indices such as 0,3 or 2-4 (default: the layers that can take each)",
    )


def add_mask(parser: argparse.ArgumentParser, default_text: str, *, repeatable: bool = False) -> None:
    """--mask SPEC: the inference mask (default None, meaning `default_text`; help: the mask registry's names);
    `repeatable`: a spec list, one result per mask."""
    from lextra.reporting.catalog import mask_help

    shown = f"{mask_help()} (default: {default_text})"
    if repeatable:
        add_spec_list(parser, "--mask", help=f"a list (window:64;bca), repeatable; {shown}")
    else:
        parser.add_argument("--mask", default=None, help=shown)


def add_extend(parser: argparse.ArgumentParser) -> None:
    """--extend NAME[,KEY=VALUE...]: a training-free extension method (`lextra.extend`), with --rope-scaling."""
    from lextra.reporting.catalog import extension_help

    parser.add_argument("--extend", default=None, metavar="NAME[,KEY=VALUE...]", help=extension_help())


def folder_safe(spec: str) -> str:
    """A mask or method spec as part of a folder name: `rerope:window=512` -> `rerope-window512`."""
    return spec.translate(str.maketrans(":,", "--", "="))


def apply_extend(model: Any, spec: str | None, mask: str | None, lengths: list[int], layers: str | None) -> str:
    """Apply `--extend SPEC` to a lextra GPT or a Hugging Face decoder (on the `--layers-select` layers),
    refusing a mask other than causal and lengths past the method's maximum before any work; returns
    the label suffix (`+SPEC`, or '' without one)."""
    if not spec or spec == "none":
        return ""
    from lextra.attention import build_mask
    from lextra.extend import InferenceSetup, build_extension
    from lextra.model import GPT

    if mask and not build_mask(mask, model.config.train_len).exactly_causal:
        raise ConfigError(f"--extend {spec} sets its own visibility over causal attention; drop --mask {mask}")
    if not isinstance(model, GPT) and model.config.scheme != "rope":
        raise ConfigError("--extend applies to RoPE decoders (rope, xpos, coca models; Hugging Face decoders), not T5")
    method = build_extension(spec, model.config.train_len)
    InferenceSetup(extension=method, layers=layers).apply(model)
    if method is not None:
        method.check_length(max(lengths))
    return f"+{spec}"


def retrieval_evaluation(*, with_task: bool = True, trains: bool = False) -> Callable[[argparse.ArgumentParser], None]:
    """The retrieval evaluation option set (`RetrievalEval`'s defaults): --task, --lengths, --depths, --samples,
    --candidates, and the prompts' seed and batch: `--seed` and `--batch-size`, or `--eval-seed` and
    `--eval-batch-size` in a command that also `trains` (whose `--seed` and `--batch-size` are training's)."""

    def add(parser: argparse.ArgumentParser) -> None:
        from lextra.pipelines.retrieval import RetrievalEval

        if with_task:
            from lextra.reporting.catalog import task_help

            add_aliased(parser, "--task", "--tasks", default="passkey", help=task_help())
        parser.add_argument(
            "--lengths", default=None, help="comma-separated prompt lengths (default L_tr x 1,2,4,8,16)"
        )
        parser.add_argument("--depths", default=None, help="comma-separated needle depths (default 0,0.25,0.5,0.75,1)")
        parser.add_argument(
            "--answer-inside",
            action="store_true",
            help="a length counts prompt + answer, as a training row (default: the prompt alone)",
        )
        samples = config_default(RetrievalEval, "samples")
        parser.add_argument("--samples", type=positive_int, default=samples, help="prompts per (length, depth) cell")
        parser.add_argument(
            "--candidates",
            type=int_at_least(2),
            default=config_default(RetrievalEval, "candidates"),
            help="answers ranked per prompt (gold + distractors)",
        )
        seeds = ("--eval-seed",) if trains else ("--seed", "--eval-seed")
        add_aliased(
            parser,
            *seeds,
            dest="eval_seed",
            type=non_negative_int,
            default=config_default(RetrievalEval, "seed"),
            help="seed of the evaluation prompts",
        )
        names: tuple[str, ...] = ("--eval-batch-size", "--eval-batch")
        names = names if trains else ("--batch-size", *names)
        add_aliased(
            parser,
            *names,
            dest="eval_batch_size",
            type=positive_int,
            default=config_default(RetrievalEval, "batch_size"),
            metavar="N",
            help="prompts scored together",
        )

    return add


def add_quiet(parser: argparse.ArgumentParser) -> None:
    """--quiet: no progress bars."""
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


#: setup file field -> the argparse dest of the flag that states it (`--setup FILE`)
SETUP_FLAGS = {
    "rope_scaling": "rope_scaling",
    "extension": "extend",
    "mask": "mask",
    "log_scaling": "log_scaling",
    "layers": "layers_select",
}


def add_setup(parser: argparse.ArgumentParser) -> None:
    """--setup FILE: a setup file (`lextra.extend.setup_file`) standing for the flags of `SETUP_FLAGS`."""
    parser.add_argument(
        "--setup",
        default=None,
        metavar="FILE",
        help="an inference setup file (from `lextra tune`) standing for --rope-scaling, --extend, --mask, "
        "--log-scaling and --layers-select; a flag that contradicts it is refused",
    )


def flags_given(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """The dests of the options `argv` names for `parser` (each flag or its unique abbreviation, as argparse
    accepts them), so that `--setup` and `--from` can tell a flag given from its default."""
    known = parser._option_string_actions
    given = set()
    for word in argv:
        flag = str(word).split("=", 1)[0]
        names = [flag] if flag in known else [s for s in known if flag.startswith("--") and s.startswith(flag)]
        if len(names) == 1:
            given.add(known[names[0]].dest)
    return sorted(given)


def setup_into_args(args: argparse.Namespace, command: str) -> None:
    """Put the `--setup` file's non-null fields into the flags they stand for, refusing a field the command has no
    flag for, or a flag given explicitly with another value (the file's fields are not overridden)."""
    path = getattr(args, "setup", None)
    if path is None:
        return
    from lextra.extend.setup_file import read_setup_file

    setup = read_setup_file(path).setup
    given = set(getattr(args, "given_flags", ()))
    for name, value in setup.changes().items():
        if value is None:
            continue
        dest = SETUP_FLAGS[name]
        text = json.dumps(value) if isinstance(value, dict) else str(value)
        flag = "--" + dest.replace("_", "-")
        if not hasattr(args, dest):
            raise ConfigError(f"setup file {path} sets {name}, which {command} does not take; remove it from the file")
        if dest in given and getattr(args, dest) != text:
            raise ConfigError(
                f"{flag} {getattr(args, dest)} contradicts setup file {path} ({name}: {text}); "
                f"drop {flag} or edit the file"
            )
        setattr(args, dest, text)


def source_commit() -> str:
    """The git commit of lextra's working tree (with `+dirty` when it has changes), or `unknown`."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
