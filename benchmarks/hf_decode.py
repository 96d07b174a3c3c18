"""One greedy decoding step of a Llama-family model at SmolLM2-135M's shapes (30 layers, width 576, 9 query and 3
key/value heads, vocabulary 49152, L_tr 8192; random weights, which the time does not depend on) after a cache of
L tokens: Hugging Face's own SDPA attention and `DynamicCache` against lextra's adapter (its registered attention
and growing cache) with no method and under each training-free extension method at its defaults.

    python benchmarks/hf_decode.py [--lengths 4096,16384] [--methods none,self_extend,rerope] [--steps 5]

The caches are filled with the same random keys and values (a prefill's cost is not what is measured); each
step's time is the median of `--steps` steps. On the way it checks that the adapter's step gives Hugging Face's
logits. Writes `--out` (JSON) and a markdown table next to it.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
from harness import add_threads, csv_list, machine_meta, md_table, ratio_text, write_report
from transformers import AutoModelForCausalLM, DynamicCache, LlamaConfig

from lextra.extend import EXTENSIONS, InferenceSetup
from lextra.hf import HFCausalLM, adapt

SHAPES = dict(
    vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
    num_key_value_heads=3, max_position_embeddings=8192, rope_theta=100000.0, tie_word_embeddings=True,
)  # fmt: skip


def filled(cache, layers: int, heads: int, length: int, head_dim: int, seed: int):
    """`cache` holding `length` random keys and values in each layer (the same for a given seed)."""
    generator = torch.Generator().manual_seed(seed)
    for layer in range(layers):
        keys = torch.randn(1, heads, length, head_dim, generator=generator)
        cache.update(keys, torch.randn(1, heads, length, head_dim, generator=generator), layer)
    return cache


@torch.no_grad()
def step_ms(model, cache, steps: int) -> tuple[float, torch.Tensor]:
    """Median milliseconds of `steps` one-token steps continuing `cache`, and the first step's logits."""
    times, first = [], None
    token = torch.tensor([[17]])
    for _ in range(steps):
        start = time.perf_counter()
        logits = model(token, cache=cache)
        times.append((time.perf_counter() - start) * 1e3)
        first = logits[:, -1] if first is None else first
    return statistics.median(times), first


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="4096,16384", help="tokens in the cache before the measured steps")
    parser.add_argument("--methods", default=",".join(["none", *EXTENSIONS.names()]))
    parser.add_argument("--steps", type=int, default=5, help="timed steps per cell (median)")
    parser.add_argument("--layers", type=int, default=SHAPES["num_hidden_layers"], help="fewer for a smoke run")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/hf_decode.json"))
    add_threads(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lengths, methods = [int(n) for n in csv_list(args.lengths)], csv_list(args.methods)
    torch.manual_seed(0)
    config = LlamaConfig(**{**SHAPES, "num_hidden_layers": args.layers})
    reference = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    ours: HFCausalLM = adapt(copy.deepcopy(reference))
    layers, kv_heads = config.num_hidden_layers, config.num_key_value_heads
    head_dim = config.hidden_size // config.num_attention_heads
    sources = ["src/lextra/hf/attention.py", "src/lextra/hf/cache.py", "src/lextra/attention/backends/dispatch.py"]
    meta = machine_meta(args.threads, sources)
    start = time.time()
    cells: dict[str, dict[str, float]] = {"Hugging Face sdpa + DynamicCache": {}}
    for length in lengths:

        def hf_forward(tokens, cache):
            return reference(input_ids=tokens, cache=cache, use_cache=True).logits

        baseline, want = step_ms(hf_forward, filled(DynamicCache(config=config), layers, kv_heads, length, head_dim, 0),
                                 args.steps)  # fmt: skip
        cells["Hugging Face sdpa + DynamicCache"][str(length)] = baseline
        for method in methods:
            InferenceSetup(extension=None if method == "none" else method).apply(ours)
            cache = ours.new_cache()
            filled(cache.hf, layers, kv_heads, length, head_dim, 0)
            ms, got = step_ms(ours, cache, args.steps)
            if method == "none" and not torch.allclose(got, want, atol=1e-4, rtol=1e-4):
                raise SystemExit(f"lextra's step differs from Hugging Face's at {length}: {(got - want).abs().max()}")
            cells.setdefault(f"lextra {method}", {})[str(length)] = ms
            print(f"{length} {method}: {ms:.1f} ms per step (Hugging Face {baseline:.1f} ms)", file=sys.stderr)
    meta["total_seconds"] = round(time.time() - start, 1)
    header = ["step after L tokens", *[f"L={n}: ms / x HF" for n in lengths]]
    rows = [
        [name, *[f"{row[str(n)]:.1f} / {ratio_text(row[str(n)] / cells['Hugging Face sdpa + DynamicCache'][str(n)])}"
                 for n in lengths]]
        for name, row in cells.items()
    ]  # fmt: skip
    report = (
        f"One decoding step, batch 1, fp32, SmolLM2-135M shapes ({layers} layers), median of {args.steps} steps; "
        f"torch {meta['torch']}, {args.threads} thread(s), {meta['cpu_model']}, {meta['date']}\n\n"
        + md_table(header, rows)
    )
    write_report(args.out, {"meta": meta, "ms_per_step": cells}, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
