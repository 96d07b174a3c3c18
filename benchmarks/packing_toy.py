"""A toy measurement of `--pack documents`: the same small GPT trained with and without packing on a corpus of short
documents, and its validation loss (windows inside documents) along the way.

`python-code`'s documents are whole standard-library files (17.8k tokens on average), so a window drawn at random
almost never holds two of them. This builds a corpus of short documents from the same text instead: each file cut
at its top-level definitions (a JSONL, one block per line), then trains both runs on it.

    .venv/bin/python benchmarks/packing_toy.py --out /tmp/packing-toy     # about 2 x 2 minutes on one CPU core
"""

from __future__ import annotations

import argparse
import json
import re
import sysconfig
from pathlib import Path

from lextra.data.packing import PACK_MODES
from lextra.model import GPTConfig
from lextra.train import TrainConfig, train


def write_corpus(path: Path, limit_files: int) -> int:
    """Top-level blocks (a `def` or `class` and what follows until the next) of the first standard-library files,
    one JSON line each; returns how many."""
    root = Path(sysconfig.get_paths()["stdlib"])
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for file in sorted(root.glob("*.py"))[:limit_files]:
            text = file.read_text(encoding="utf-8", errors="replace")
            for block in re.split(r"\n(?=(?:def|class) )", text):
                if block.strip():
                    out.write(json.dumps({"id": f"{file.name}:{count}", "text": block}) + "\n")
                    count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--files", type=int, default=120)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--train-len", type=int, default=256)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "blocks.jsonl"
    print(f"{write_corpus(corpus, args.files)} documents in {corpus}")
    for pack in PACK_MODES:
        model = GPTConfig(n_layer=2, n_head=4, d_model=64, train_len=args.train_len, layer_plan="rope")
        config = TrainConfig(corpus=str(corpus), model=model, batch_size=8, steps=args.steps, warmup=30,
                             log_every=50, eval_every=100, eval_sequences=32, pack=pack)  # fmt: skip
        train(config, out / pack, progress=False, device="cpu")
        for line in (out / pack / "metrics.jsonl").read_text().splitlines():
            record = json.loads(line)
            if "val_loss" in record:
                print(f"pack {pack}: step {record['step']} loss {record['loss']:.4f} val_loss {record['val_loss']:.4f}")


if __name__ == "__main__":
    main()
