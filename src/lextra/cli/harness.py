"""`lextra harness MODEL --tasks ...`: EleutherAI's lm-evaluation-harness (the `harness` extra) on a lextra run or
a Hugging Face model under any inference setup, offline. The model is lm-eval's `lextra` model
(`lextra.pipelines.harness.adapter.LextraLM`), whose `--model_args` are the options here (`_model_args`)."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from lextra.cli.app import Handler, command
from lextra.cli.models import MODEL_HELP, add_any_model
from lextra.cli.options import (
    add_mask,
    add_spec_list,
    int_at_least,
    non_negative_int,
    positive_int,
    setup_into_args,
    temperature_file,
)
from lextra.cli.ruler import RUN_OPTIONS


@command(
    "harness",
    "lm-evaluation-harness tasks on a lextra or Hugging Face model under any inference setup (offline)",
    options=RUN_OPTIONS,  # the stretching options of `lextra ruler run`
    examples=(
        "lextra harness runs/rope --tasks my_task --include-path tasks/ --extend self_extend:group=4 --out runs/h",
        "lextra harness smollm2 --tasks babilong_offline --include-path runs/babilong-tasks --max-length 8192",
    ),
)
def configure_harness(parser: argparse.ArgumentParser) -> Handler:
    parser.add_argument("model", help=MODEL_HELP)
    add_spec_list(parser, "--tasks", "--task", required=True, help="lm-eval task names (or task YAML files)")
    parser.add_argument(
        "--include-path", action="append", default=[], metavar="DIR", help="a folder of task YAMLs (repeatable)"
    )
    parser.add_argument(
        "--only-local",
        action="store_true",
        help="look tasks up in the --include-path folders only (indexing lm-eval's built-in tasks takes ~30 s)",
    )
    parser.add_argument("--out", default=None, help="results folder (default runs/harness/MODEL-NAME)")
    parser.add_argument("--num-fewshot", type=non_negative_int, default=None, help="few-shot examples per prompt")
    parser.add_argument("--limit", type=positive_int, default=None, help="documents per task (default: all)")
    parser.add_argument("--max-length", type=int_at_least(2), default=None, help="longest input (default L_tr)")
    parser.add_argument("--batch-size", type=positive_int, default=8, help="rows of one length run together")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of lm-eval's random choices")
    parser.add_argument(
        "--bootstrap-iters", type=non_negative_int, default=1000, help="bootstrap iterations of the standard errors"
    )
    parser.add_argument(
        "--log-samples", action="store_true", help="also write each document's prompt and responses to samples.jsonl"
    )
    add_mask(parser, "causal")
    parser.add_argument("--log-scaling", default=None, choices=["none", "qwen"], help="log-n scaling of the logits")
    add_any_model(parser)

    def run(args: argparse.Namespace) -> int:
        from lextra.pipelines.harness import HarnessSettings, offline, require_lm_eval, run_harness, summary
        from lextra.reporting.harness import save_harness_outputs

        setup_into_args(args, "lextra harness")
        require_lm_eval()
        offline()
        if args.quiet:  # no `datasets` bars and no lm-eval messages below errors (its request-building bar stays)
            os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
            logging.getLogger("lm_eval").setLevel(logging.ERROR)
        settings = HarnessSettings(
            tasks=list(args.tasks),
            include_path=list(args.include_path),
            builtin=not args.only_local,
            num_fewshot=args.num_fewshot,
            limit=args.limit,
            seed=args.seed,
            bootstrap_iters=args.bootstrap_iters,
            log_samples=args.log_samples,
        ).validate()
        model_args = _model_args(args)
        from lextra.pipelines.harness.adapter import LextraLM  # needs lm_eval: after `require_lm_eval`

        lm = LextraLM(**model_args)
        results = run_harness(lm, settings)
        out = Path(args.out or Path("runs") / "harness" / Path(args.model).name)
        record = summary(results, lm.label, lm.model_name, model_args, settings.tasks)
        paths = save_harness_outputs(out, record, results.get("samples"))
        print(paths["table"].read_text())
        print(f"results: {paths['json']}, {paths['csv']}" + (f", {paths['samples']}" if "samples" in paths else ""))
        return 0

    return run


def _model_args(args: argparse.Namespace) -> dict[str, Any]:
    """The `lextra` model's arguments from the command's options (those not given left out)."""
    values = {
        "pretrained": args.model,
        "rope_scaling": args.rope_scaling,
        "extend": args.extend,
        "mask": args.mask,
        "temperature": temperature_file(args),
        "log_scaling": args.log_scaling,
        "layers": args.layers_select,
        "tokenizer": args.tokenizer,
        "train_len": args.train_len,
        "max_length": args.max_length,
        "batch_size": args.batch_size,
        "device": str(args.device),
    }
    return {k: v for k, v in values.items() if v is not None}
