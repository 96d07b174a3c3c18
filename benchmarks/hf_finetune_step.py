"""One training step of `lextra hf finetune` next to a plain Hugging Face + peft training step.

What it measures
    A small random Llama (width 256, 4 layers, 8 heads, 4 KV heads, MLP 688, vocabulary 4096), saved to a temporary
    folder, fine-tuned with LoRA r=8 alpha=16 on q/k/v/o, gradient checkpointing on, batch 1 at each `--lengths`
    window. lextra: the model `lextra.hf.finetune.build_model` builds and `train_step` (the step the
    `lextra hf finetune` loop runs: forward, next-token cross-entropy, backward, gradient clipping) plus the AdamW
    step. Plain: `AutoModelForCausalLM.from_pretrained` of the same folder, `peft.get_peft_model` with the same
    LoraConfig, `gradient_checkpointing_enable`, and `model(input_ids, labels=input_ids).loss.backward()`, the same
    clipping and AdamW step. Reported: the median step time over `--steps` timed steps after `--warmup` untimed
    ones, for each, measured alternately in one process, and their ratio.

Usage
    .venv/bin/python benchmarks/hf_finetune_step.py                       # 2048 and 4096 tokens, CPU
    .venv/bin/python benchmarks/hf_finetune_step.py --device cuda --lengths 2048,4096,8192
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

from lextra.hf.finetune import FinetuneConfig, build_model, make_optimizer, train_step


def _llama(folder: Path) -> None:
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(
        "llama",
        vocab_size=4096,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        rope_theta=10000.0,
    )
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)


def _plain(folder: Path, device: torch.device) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    from peft import LoraConfig, get_peft_model

    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    model.config.use_cache = False
    lora = LoraConfig(r=8, lora_alpha=16.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], lora_dropout=0.0)
    model = get_peft_model(model, lora)
    model.get_base_model().gradient_checkpointing_enable({"use_reentrant": False})
    model.to(device).train()
    params = [p for p in model.parameters() if p.requires_grad]
    return model, torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="2048,4096")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    precision = "bf16" if device.type == "cuda" else "fp32"
    transformers.utils.logging.disable_progress_bar()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "llama"
        _llama(folder)
        for length in (int(n) for n in args.lengths.split(",")):
            config = FinetuneConfig(model=str(folder), train_len=length, tokenizer="bytes")
            ours, _ = build_model(config, device)
            ours.train()
            ours_opt = make_optimizer(ours, config)
            plain, plain_opt = _plain(folder, device)
            batch = torch.randint(0, 4096, (1, length + 1), generator=torch.Generator().manual_seed(0)).to(device)
            times: dict[str, list[float]] = {"lextra": [], "plain": []}
            for step in range(args.warmup + args.steps):
                for name in ("lextra", "plain"):
                    _sync(device)
                    start = time.perf_counter()
                    if name == "lextra":
                        train_step(ours, ours_opt, batch, 1.0, precision)
                        ours_opt.step()
                    else:
                        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                            loss = plain(input_ids=batch[:, :-1], labels=batch[:, :-1]).loss
                        plain_opt.zero_grad(set_to_none=True)
                        loss.backward()
                        torch.nn.utils.clip_grad_norm_([p for p in plain.parameters() if p.requires_grad], 1.0)
                        plain_opt.step()
                    _sync(device)
                    if step >= args.warmup:
                        times[name].append(time.perf_counter() - start)
            ours_s, plain_s = statistics.median(times["lextra"]), statistics.median(times["plain"])
            row = {"length": length, "device": str(device), "lextra_s": round(ours_s, 4),
                   "plain_s": round(plain_s, 4), "ratio": round(ours_s / plain_s, 3)}  # fmt: skip
            rows.append(row)
            print(f"L={length}: lextra {ours_s:.3f} s/step, plain HF+peft {plain_s:.3f} s/step, "
                  f"ratio {ours_s / plain_s:.2f}x", file=sys.stderr)  # fmt: skip
            del ours, plain, ours_opt, plain_opt
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
