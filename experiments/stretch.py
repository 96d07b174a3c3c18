"""Stretch trained models without retraining: perplexity at L_tr x 1..16 under each inference-time method.

For every model folder given (e.g. the rope, t5 and alibi models of `lextra compare`) and every applicable method,
evaluates perplexity at each length and writes one table per protocol (rows: model + method, columns: lengths):

- none; RoPE scalings for rope/xpos/coca models: `linear` (PI), `ntk`, `yarn` with factor = the largest length
  / L_tr, and `dynamic` (HF's dynamic NTK, factor 1, i.e. s = L / L_tr);
- temperature alignment `pmax` and `entropy`, calibrated separately at each evaluation length on validation
  windows, and `log-length` (tau = ln L_tr / ln L);
- `qwen` log-n scaling of the queries past L_tr.

Usage: python experiments/stretch.py runs/compare/models/{rope,t5,alibi}/model --out runs/stretch
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lextra.data.prepare import prepare_for_model
from lextra.evaluate import EvalConfig, evaluate_model
from lextra.io import atomic_write_json, atomic_write_text
from lextra.methods.stretch import methods_for, prepared
from lextra.model import load_model, read_model_meta
from lextra.reporting.tables import markdown_table

MULTIPLES = (1, 2, 4, 8, 16)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="model folders (RUN/model)")
    parser.add_argument("--out", default="runs/stretch")
    parser.add_argument("--documents", type=int, default=8)
    parser.add_argument("--windows", type=int, default=2, help="calibration windows for pmax / entropy")
    parser.add_argument("--protocols", default="sliding,last-token")
    args = parser.parse_args()
    out = Path(args.out)
    table: dict[str, dict[str, dict[str, float]]] = {}
    cache = out / "cells.json"
    cells = json.loads(cache.read_text()) if cache.exists() else {}
    for folder in args.models:
        meta = read_model_meta(folder)
        base = load_model(folder).eval()
        data = prepare_for_model(meta)
        lengths = [base.config.train_len * m for m in MULTIPLES]
        for method in methods_for(base):
            label = f"{base.variants[0].scheme} + {method}"
            for length in lengths:
                key = f"{folder}|{method}|{length}"
                if key not in cells:
                    model = prepared(base, method, data, length, float(max(MULTIPLES)), args.windows)
                    config = EvalConfig(
                        lengths=[length],
                        protocols=args.protocols.split(","),
                        documents=args.documents,
                        span=max(lengths),
                    )
                    result = evaluate_model(model, data, config, progress=False)
                    cells[key] = {p: result.ppl(p, length) for p in result.protocols}
                    atomic_write_json(cache, cells)
                    print(
                        f"{label:28s} L={length:5d} " + " ".join(f"{p}={v:.2f}" for p, v in cells[key].items()),
                        file=sys.stderr,
                        flush=True,
                    )
                for protocol, ppl in cells[key].items():
                    table.setdefault(protocol, {}).setdefault(label, {})[str(length)] = ppl
    text = "\n\n".join(
        f"### perplexity, {protocol} protocol\n\n" + markdown_table(rows, lengths, "model + method")
        for protocol, rows in table.items()
    )
    atomic_write_text(out / "table.md", text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
