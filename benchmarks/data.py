"""Prepared token shards against the raw corpus: preparing, window sampling, time to the first step, peak RSS.

What it measures
    - prepare: tokens/s of `prepare_shards(SOURCE, TOKENIZER)` (all of it: the scan, the BPE sample read, the
      batched encoding, the writes and their sha256) against the `tokenizers` library encoding the same
      documents in ONE `encode_batch_fast` call (its own threads; the limit of the encoder), with the tokenizer
      already trained and cached for both. The byte tokenizer's baseline is `str.encode` per document.
    - sampling: batches/s and tokens/s of `PreparedShards.batch` (from the memmap) against `TrainStream.batch`
      (the in-memory stream), at L_tr x batch (default 1024 x 32), `--batches` consecutive steps; the two give
      the same batches bit for bit (tests/test_shards.py), so only the speed differs.
    - shards and order: batches/s of the same training stream prepared as one shard file and as `--shards`
      files (the same windows bit for bit; tests/test_sampling.py), each in i.i.d. order (`PreparedShards.batch`)
      and in epoch order (`EpochOrder`), interleaved in `--rounds` rounds in one process (median of the rounds),
      timed in CPU seconds of the process (`time.process_time`), so that other jobs on the machine do not count.
    - first step: seconds from calling `lextra.train.train` until its first optimizer step is done, on the
      prepared folder (`data=`) and on the raw corpus read in memory (`LEXTRA_DATA_CACHE=off`; the tokenizer
      cached in both), one-layer model; torch's
      one-off import of `torch._dynamo` (AdamW's first use, about 5 s here) is done before the clock starts.
    - checksum on read: seconds of `PreparedShards.open` on a `--checksum-mb` folder (bytes) the first time (every
      file hashed with xxh3-128, the stamp written), warm (a later process: the stamp says the files are
      unchanged) and without the check (`check=False`); the files are in the page cache in all three.
    - peak RSS of preparing synthetic corpora of `--rss-mb` sizes (the source's documents repeated with distinct
      ids, as one .jsonl file): it must not grow with the corpus.

How it measures
    Every measurement runs in a fresh subprocess (the driver imports neither torch nor lextra), so its `ru_maxrss`
    is its own; `--repeats` runs of each, the median is reported. Timings on a shared 2-core VM are noisy.

Usage
    .venv/bin/python benchmarks/data.py                                  # python-code, bpe:4096, 5M characters
    .venv/bin/python benchmarks/data.py --quick                          # smoke run: 1M characters, 1 repeat
    .venv/bin/python benchmarks/data.py --source english+python-code --tokenizer bpe:16384 --limit-chars 0
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------------------- workers (one per subprocess)
def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _limit(task: dict[str, Any]) -> int | None:
    return task["limit_chars"] or None


def work_encode(task: dict[str, Any]) -> dict[str, Any]:
    """The encoder's own speed on the documents: one `encode_batch_fast` call (or bytes)."""
    from lextra.data import ByteTokenizer, load_corpus, prepare_data

    data = prepare_data(task["source"], task["tokenizer"], _limit(task))  # trains or loads the cached tokenizer
    texts = [doc.text for doc in load_corpus(task["source"], limit_chars=_limit(task))]
    start = time.perf_counter()
    if isinstance(data.tokenizer, ByteTokenizer):
        tokens = sum(len(text.encode("utf-8")) for text in texts)
    else:
        encodings = data.tokenizer._backend.encode_batch_fast(texts, add_special_tokens=False)
        tokens = sum(len(e.ids) for e in encodings)
    seconds = time.perf_counter() - start
    return {"tokens": tokens, "seconds": seconds, "documents": len(texts)}


def work_prepare(task: dict[str, Any]) -> dict[str, Any]:
    """`prepare_shards` into a fresh folder, timed whole."""
    from lextra.data import PreparedShards, prepare_shards

    out = Path(task["out"])
    start = time.perf_counter()
    extra = {"shard_chars": task["shard_chars"]} if "shard_chars" in task else {}
    prepare_shards(task["source"], task["tokenizer"], out, limit_chars=_limit(task), progress=False, **extra)
    seconds = time.perf_counter() - start
    prepared = PreparedShards.open(out)
    tokens = sum(prepared.num_tokens(s) for s in ("train", "validation", "test"))
    return {"tokens": tokens, "seconds": seconds, "peak_rss_mib": _peak_rss_mib(), "chars": prepared.manifest["chars"]}


def work_sample(task: dict[str, Any]) -> dict[str, Any]:
    """Batches/s of the memmap and of the in-memory stream over the same steps."""
    from lextra.data import PreparedShards, TrainStream, prepare_data

    prepared = PreparedShards.open(task["out"])
    data = prepare_data(task["source"], task["tokenizer"], _limit(task))
    stream = TrainStream.from_documents(data.splits["train"], data.tokenizer)
    result: dict[str, Any] = {}
    for name, source in (("memmap", prepared), ("in-memory", stream)):
        source.batch(0, task["batch"], task["length"], seed=0)  # warm-up (page cache, allocator)
        start = time.perf_counter()
        for step in range(task["batches"]):
            source.batch(step, task["batch"], task["length"], seed=0)
        seconds = time.perf_counter() - start
        result[name] = {
            "batches_per_s": task["batches"] / seconds,
            "tokens_per_s": task["batches"] * task["batch"] * task["length"] / seconds,
        }
    return result


def work_first_step(task: dict[str, Any]) -> dict[str, Any]:
    """Seconds from `train(...)` to its first finished step, on the prepared folder or the raw corpus."""
    import torch

    from lextra.model import GPTConfig
    from lextra.train import TrainConfig, train

    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])  # its first use imports torch._dynamo: seconds, not data
    if not task["prepared"]:  # the raw corpus read in memory, as before the data cache (which would read shards)
        os.environ["LEXTRA_DATA_CACHE"] = "off"
    model = GPTConfig(n_layer=1, n_head=2, d_model=64, train_len=128, layer_plan="rope")
    config = TrainConfig(
        corpus=task["source"],
        tokenizer=task["tokenizer"],
        limit_chars=_limit(task),
        data=task["out"] if task["prepared"] else None,
        model=model,
        batch_size=4,
        steps=2,
        checkpoint_every=0,
        eval_sequences=0,
    )
    start = time.perf_counter()
    first: list[float] = []

    class FirstStepDoneError(Exception):
        pass

    def on_step(done: int) -> None:
        first.append(time.perf_counter() - start)
        raise FirstStepDoneError

    with contextlib.suppress(FirstStepDoneError):
        train(config, Path(task["run"]), progress=False, on_step=on_step)
    return {"seconds": first[0], "peak_rss_mib": _peak_rss_mib()}


def work_shards(task: dict[str, Any]) -> dict[str, Any]:
    """Batches/s of one shard file against several, in i.i.d. and in epoch order, interleaved in rounds."""
    from lextra.data import EpochOrder, PreparedShards

    folders = {"one": PreparedShards.open(task["one"]), "many": PreparedShards.open(task["many"])}
    sources = {
        f"{name}/{order}": (EpochOrder(shards) if order == "epoch" else shards)
        for name, shards in folders.items()
        for order in ("iid", "epoch")
    }
    rates: dict[str, list[float]] = {name: [] for name in sources}
    for source in sources.values():
        source.batch(0, task["batch"], task["length"], seed=0)  # warm-up (page cache, allocator)
    for _ in range(task["rounds"]):
        for name, source in sources.items():
            start = time.process_time()  # CPU time: other jobs on a shared machine do not count
            for step in range(task["batches"]):
                source.batch(step, task["batch"], task["length"], seed=0)
            rates[name].append(task["batches"] / (time.process_time() - start))
    files = {name: len(shards.manifest["splits"]["train"]["shards"]) for name, shards in folders.items()}
    return {"batches_per_s": {name: statistics.median(r) for name, r in rates.items()}, "files": files}


# ----------------------------------------------------------------------------- checksum_cost
def work_checksum(task: dict[str, Any]) -> dict[str, Any]:
    """One `PreparedShards.open` of the folder, timed: the first (its stamp removed), warm, or unchecked."""
    from lextra.data import PreparedShards
    from lextra.data.integrity import STAMP

    out = Path(task["out"])
    if task["first"]:
        (out / STAMP).unlink(missing_ok=True)
    start = time.perf_counter()
    PreparedShards.open(out, check=task["check"])
    return {"seconds": time.perf_counter() - start}


WORKERS = {
    "encode": work_encode,
    "prepare": work_prepare,
    "sample": work_sample,
    "shards": work_shards,
    "first_step": work_first_step,
    "checksum": work_checksum,
}


# ----------------------------------------------------------------------------- driver
def run_cell(task: dict[str, Any]) -> dict[str, Any]:
    """One measurement in a fresh process; its JSON result."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(task)], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode:
        raise SystemExit(f"cell {task['kind']} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def synthetic_jsonl(task: dict[str, Any], megabytes: int, path: Path) -> None:
    """A .jsonl of about `megabytes` MB: the source's documents repeated, each copy with its own ids."""
    code = (
        "import json, sys\n"
        "from lextra.data import load_corpus\n"
        "docs = load_corpus(sys.argv[1])\n"
        "target, written, copy = int(sys.argv[2]) * 2**20, 0, 0\n"
        "with open(sys.argv[3], 'w', encoding='utf-8') as out:\n"
        "    while written < target:\n"
        "        for doc in docs:\n"
        "            line = json.dumps({'id': f'copy{copy}/{doc.id}', 'text': doc.text}) + '\\n'\n"
        "            out.write(line)\n"
        "            written += len(line)\n"
        "            if written >= target:\n"
        "                break\n"
        "        copy += 1\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run([sys.executable, "-c", code, task["source"], str(megabytes), str(path)], check=True, env=env)


def checksum_cost(base: dict[str, Any], folder: Path, megabytes: int, repeats: int) -> dict[str, Any]:
    """Seconds to open a prepared folder of about `megabytes` MB (bytes tokenizer): the first open, which hashes
    every file, a warm (stamped) open and an unchecked one, each in a fresh process, interleaved; medians."""
    corpus = folder / "checksum.jsonl"
    synthetic_jsonl(base, megabytes, corpus)
    out = folder / "checksum"
    run_cell({"kind": "prepare", "source": str(corpus), "tokenizer": "bytes", "limit_chars": 0, "out": str(out)})
    corpus.unlink()
    size = sum(p.stat().st_size for p in out.iterdir() if p.suffix in (".tokens", ".offsets"))
    cells = {"first": (True, True), "warm": (False, True), "unchecked": (False, False)}
    seconds: dict[str, list[float]] = {name: [] for name in cells}
    for _ in range(repeats):
        for name, (first, check) in cells.items():
            cell = run_cell({"kind": "checksum", "out": str(out), "first": first, "check": check})
            seconds[name].append(cell["seconds"])
    return {"megabytes": size / 1e6, **{name: median(values) for name, values in seconds.items()}}


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--source", default="python-code")
    parser.add_argument("--tokenizer", default="bpe:4096")
    parser.add_argument("--limit-chars", type=int, default=5_000_000, help="0: the whole source")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--shards", type=int, default=10, help="shard files of the multi-shard folder")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds of the shards-and-order cell")
    parser.add_argument("--rss-mb", default="25,100", help="synthetic corpus sizes (MB) for peak RSS; '' skips")
    parser.add_argument("--rss-tokenizer", default="bytes")
    parser.add_argument("--checksum-mb", type=int, default=50, help="folder size (MB) the checksum on read is timed on")
    parser.add_argument("--quick", action="store_true", help="1M characters, 1 repeat, 50 batches, RSS at 5,20 MB")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "data.json"))
    args = parser.parse_args()
    if args.worker is not None:
        task = json.loads(args.worker)
        print(json.dumps(WORKERS[task["kind"]](task)))
        return
    if args.quick:
        args.limit_chars, args.repeats, args.batches, args.rss_mb = 1_000_000, 1, 50, "5,20"
    os.environ.setdefault("LEXTRA_CACHE", str(Path(tempfile.gettempdir()) / "lextra-bench-data-cache"))
    base = {"source": args.source, "tokenizer": args.tokenizer, "limit_chars": args.limit_chars}
    results: dict[str, Any] = {"settings": {**base, **{k: getattr(args, k) for k in ("length", "batch", "batches")}}}
    results["load_average_start"] = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        run_cell({**base, "kind": "encode"})  # trains and caches the tokenizer outside every timing
        encode, prepare = [], []
        for repeat in range(args.repeats):  # interleaved, so a machine that gets busier hits both
            encode.append(run_cell({**base, "kind": "encode"}))
            prepare.append(run_cell({**base, "kind": "prepare", "out": str(folder / f"p{repeat}")}))
        raw_rate = median([r["tokens"] / r["seconds"] for r in encode])
        prep_rate = median([r["tokens"] / r["seconds"] for r in prepare])
        results["prepare"] = {
            "tokens": prepare[0]["tokens"],
            "encoder_tokens_per_s": raw_rate,
            "prepare_tokens_per_s": prep_rate,
            "slowdown": raw_rate / prep_rate,
        }
        prepared = str(folder / "p0")
        sizes = {"length": args.length, "batch": args.batch, "batches": args.batches}
        samples = [run_cell({**base, "kind": "sample", "out": prepared, **sizes}) for _ in range(args.repeats)]
        results["sampling"] = {
            name: {key: median([s[name][key] for s in samples]) for key in ("batches_per_s", "tokens_per_s")}
            for name in ("memmap", "in-memory")
        }
        many = folder / "many"
        chars = prepare[0]["chars"]
        shard_chars = max(1, chars // args.shards)
        prepare_many = {**base, "kind": "prepare", "out": str(many), "shard_chars": shard_chars}
        run_cell(prepare_many)
        cells = [
            run_cell({"kind": "shards", "one": prepared, "many": str(many), "rounds": args.rounds, **sizes})
            for _ in range(args.repeats)
        ]
        results["shards"] = {
            "files": cells[0]["files"],
            "batches_per_s": {k: median([c["batches_per_s"][k] for c in cells]) for k in cells[0]["batches_per_s"]},
        }
        first = {}
        for label, flag in (("prepared", True), ("raw", False)):
            runs = [
                run_cell(
                    {**base, "kind": "first_step", "out": prepared, "prepared": flag, "run": str(folder / f"r{i}")}
                )
                for i in range(args.repeats)
            ]
            for i in range(args.repeats):
                subprocess.run(["rm", "-rf", str(folder / f"r{i}")], check=True)
            first[label] = {
                "seconds": median([r["seconds"] for r in runs]),
                "peak_rss_mib": median([r["peak_rss_mib"] for r in runs]),
            }
        results["first_step"] = first
        if args.checksum_mb:
            results["checksum"] = checksum_cost(base, folder, args.checksum_mb, args.repeats)
        rss = []
        for megabytes in [int(x) for x in args.rss_mb.split(",") if x.strip()]:
            corpus = folder / f"synthetic-{megabytes}.jsonl"
            synthetic_jsonl(base, megabytes, corpus)
            cell = run_cell(
                {
                    "kind": "prepare",
                    "source": str(corpus),
                    "tokenizer": args.rss_tokenizer,
                    "limit_chars": 0,
                    "out": str(folder / f"rss-{megabytes}"),
                }
            )
            rss.append({"megabytes": megabytes, **cell, "tokens_per_s": cell["tokens"] / cell["seconds"]})
            corpus.unlink()
        results["rss"] = rss
    results["load_average_end"] = os.getloadavg()[0]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    report = render(results, args)
    out.with_suffix(".md").write_text(report)
    print(report)


def render(results: dict[str, Any], args: argparse.Namespace) -> str:
    """The markdown tables of a run."""
    p, s, f = results["prepare"], results["sampling"], results["first_step"]
    lines = [
        f"source {args.source}, tokenizer {args.tokenizer}, limit {args.limit_chars or 'none'} characters, "
        f"median of {args.repeats}, load average {results['load_average_start']:.1f} at the start, "
        f"{results['load_average_end']:.1f} at the end",
        "",
        "| preparing | tokens/s |",
        "|---|---|",
        f"| `tokenizers` encode_batch_fast, one call | {p['encoder_tokens_per_s']:,.0f} |",
        f"| `prepare_shards` (scan, sample, encode, write, sha256) | {p['prepare_tokens_per_s']:,.0f} "
        f"({p['slowdown']:.2f}x the encoder's time per token) |",
        "",
        f"| sampling at {args.length} x {args.batch} | batches/s | tokens/s |",
        "|---|---|---|",
    ]
    for name in ("memmap", "in-memory"):
        lines.append(f"| {name} | {s[name]['batches_per_s']:,.0f} | {s[name]['tokens_per_s']:,.0f} |")
    shards = results["shards"]
    rate, files = shards["batches_per_s"], shards["files"]
    lines += [
        "",
        f"| sampling at {args.length} x {args.batch}, batches per CPU second | i.i.d. | epoch order | epoch / i.i.d. |",
        "|---|---|---|---|",
    ]
    for name in ("one", "many"):
        iid, epoch = rate[f"{name}/iid"], rate[f"{name}/epoch"]
        lines.append(f"| {files[name]} shard file(s) | {iid:,.0f} | {epoch:,.0f} | {iid / epoch:.2f}x the time |")
    lines.append(
        f"| {files['many']} files against 1 | {rate['one/iid'] / rate['many/iid']:.2f}x the time | "
        f"{rate['one/epoch'] / rate['many/epoch']:.2f}x the time | |"
    )
    lines += ["", "| first training step | seconds | peak RSS MiB |", "|---|---|---|"]
    for name in ("prepared", "raw"):
        lines.append(f"| {name} | {f[name]['seconds']:.2f} | {f[name]['peak_rss_mib']:,.0f} |")
    if results.get("checksum"):
        c = results["checksum"]
        lines += ["", f"| opening a {c['megabytes']:.0f} MB prepared folder | ms |", "|---|---|"]
        for name, label in (("first", "first open (every file hashed)"), ("warm", "warm (stamped)")):
            lines.append(f"| {label} | {c[name] * 1e3:.1f} |")
        lines.append(f"| without the check | {c['unchecked'] * 1e3:.1f} |")
    if results["rss"]:
        lines += [
            "",
            f"| prepare a synthetic corpus ({args.rss_tokenizer}) | tokens/s | peak RSS MiB |",
            "|---|---|---|",
        ]
        for r in results["rss"]:
            lines.append(f"| {r['megabytes']} MB | {r['tokens_per_s']:,.0f} | {r['peak_rss_mib']:,.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
