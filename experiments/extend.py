"""Training-free extension methods on trained rotary models: sliding perplexity at L_tr x 1..16 next to none, dynamic
NTK and YaRN.

For every model folder given (a rope, xpos or coca model, e.g. `lextra train --scheme rope --out runs/evidence/rope`
with the `make run` defaults: L_tr 128, 600 steps, python-code), evaluates perplexity at each length for:

- none; `--rope-scaling dynamic:1` (Hugging Face's dynamic NTK, s = L / L_tr at each length); `--rope-scaling
  yarn:F` with F = the largest multiple (16);
- every registered extension method (`lextra.extend.EXTENSIONS`) with its defaults at the model's L_tr; a method
  refused past its stated maximum (Self-Extend with G = 8 reaches (L - W) G + W = 6.25 L) gets a second row with
  the smallest option that reaches the longest length (`self_extend:group=21` at L_tr 128).

Cells are cached in OUT/cells.json (rerunning skips them); OUT/table.md holds one table per protocol. Each length
scores the same tokens (`span` = the longest length), as `experiments/stretch.py` does.

Usage: python experiments/extend.py runs/evidence/rope/model --out runs/evidence/extend
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from lextra.data.prepare import prepare_for_model
from lextra.errors import LengthError
from lextra.evaluate import EvalConfig, evaluate_model
from lextra.extend import EXTENSIONS, InferenceSetup, build_extension
from lextra.io import atomic_write_json, atomic_write_text
from lextra.methods import apply_rope_scaling
from lextra.model import load_model, read_model_meta
from lextra.reporting.tables import markdown_table

MULTIPLES = (1, 2, 4, 8, 16)


def variants(train_len: int, longest: int) -> list[str]:
    """Row names: none, the two scalings, every method at its defaults, and the smallest Self-Extend group that
    reaches `longest` when its default does not."""
    rows = ["none", "dynamic:1", f"yarn:{max(MULTIPLES)}"]
    for name in EXTENSIONS.names():
        rows.append(f"extend:{name}")
        method = build_extension(name, train_len)
        limit = method.max_length()
        if name == "self_extend" and limit is not None and limit < longest:
            group = math.ceil((longest - method.window) / (train_len - method.window))
            rows.append(f"extend:self_extend:group={group}")
    return rows


def prepared(folder: str, variant: str):
    """The model in `folder` with `variant` applied."""
    model = load_model(folder).eval()
    if variant.startswith("extend:"):
        InferenceSetup(extension=variant[len("extend:") :]).apply(model)
    elif variant != "none":
        apply_rope_scaling(model, variant)
    return model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="model folders (RUN/model) of rope, xpos or coca models")
    parser.add_argument("--out", default="runs/evidence/extend")
    parser.add_argument("--documents", type=int, default=8)
    parser.add_argument("--protocols", default="sliding")
    args = parser.parse_args()
    out = Path(args.out)
    cache = out / "cells.json"
    cells = json.loads(cache.read_text()) if cache.exists() else {}
    tables: dict[str, dict[str, dict[str, float | None]]] = {}
    for folder in args.models:
        data = prepare_for_model(read_model_meta(folder))
        base = load_model(folder)
        train_len, scheme = base.config.train_len, base.variants[0].scheme
        lengths = [train_len * m for m in MULTIPLES]
        for variant in variants(train_len, max(lengths)):
            label = f"{scheme} + {variant}"
            for length in lengths:
                key = f"{folder}|{variant}|{length}|{args.documents}|{args.protocols}"
                if key not in cells:
                    start = time.time()
                    model = prepared(folder, variant)
                    config = EvalConfig(
                        lengths=[length],
                        protocols=args.protocols.split(","),
                        documents=args.documents,
                        span=max(lengths),
                    )
                    try:
                        result = evaluate_model(model, data, config, progress=False)
                        cells[key] = {p: result.ppl(p, length) for p in result.protocols}
                    except LengthError as err:
                        cells[key] = {"refused": str(err)}
                    cells[key]["seconds"] = round(time.time() - start, 1)
                    atomic_write_json(cache, cells)
                    shown = " ".join(
                        f"{p}={v:.2f}" if isinstance(v, float) else f"{p}: {v}" for p, v in cells[key].items()
                    )
                    print(f"{label:40s} L={length:5d} {shown}", file=sys.stderr, flush=True)
                for protocol in args.protocols.split(","):
                    value = cells[key].get(protocol)  # None: refused past the method's maximum ("-")
                    tables.setdefault(protocol, {}).setdefault(label, {})[str(length)] = value
    text = "\n\n".join(
        f"### perplexity, {protocol} protocol ({args.documents} documents)\n\n"
        + markdown_table(rows, [str(n) for n in lengths], "model + method")
        + "\n\n- = refused: longer than the method's stated maximum"
        for protocol, rows in tables.items()
    )
    atomic_write_text(out / "table.md", text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
