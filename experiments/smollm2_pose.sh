#!/usr/bin/env bash
# Extend by training, SmolLM2-135M-Instruct (L = 8192) to 32k (issue 27): PoSE with YaRN 4 in short windows
# (Zhu et al. 2023, arXiv 2309.10400: positions skip up to the target), full fine-tuning as the PoSE authors do, then
# perplexity at 8k/16k/32k on the held-out english document the training-free rows use (chunks protocol) and passkey
# at 32k. Needs `make hf-model`.
#   experiments/smollm2_pose.sh [OUT] [STEPS] [WINDOW] [PASSKEY_SAMPLES]
#   (defaults: runs/smollm2-pose, 250 steps, 1024-token windows, 1 prompt per depth: sized for 2 CPU cores).
# On a GPU: DEVICE=cuda experiments/smollm2_pose.sh runs/smollm2-pose 1000 8192 2   (PoSE's recipe at L = 8192:
# 1000 steps of 8k windows, about 8M tokens; bf16 autocast on CUDA).
set -euo pipefail
OUT=${1:-runs/smollm2-pose}
STEPS=${2:-250}
WINDOW=${3:-1024}
SAMPLES=${4:-1}
DEVICE=${DEVICE:-auto}
THREADS=${THREADS:-2}
PY=${PY:-python}
mkdir -p "$OUT"

if [ ! -f "$OUT/pose-yarn/model/config.json" ]; then
    /usr/bin/time -f "%e" -o "$OUT/pose-yarn.seconds" "$PY" -m lextra hf finetune smollm2 --out "$OUT/pose-yarn" \
        --train-len "$WINDOW" --positions pose:32768 --rope-scaling yarn:4 --lora none --lr 2e-5 --warmup 10 \
        --steps "$STEPS" --corpus english --log-every 10 --checkpoint-every 50 --quiet --threads "$THREADS" \
        --device "$DEVICE" $( [ -d "$OUT/pose-yarn/checkpoints" ] && echo --resume )
fi
MODEL="$OUT/pose-yarn/model"
"$PY" -m lextra eval "$MODEL" --protocols chunks --documents 1 --corpus english --lengths 8192,16384,32768 \
    --out "$OUT/eval-pose-yarn" --threads "$THREADS" --device "$DEVICE"
"$PY" -m lextra retrieval eval "$MODEL" --task passkey --lengths 32768 --samples "$SAMPLES" \
    --out "$OUT/passkey-pose-yarn" --threads "$THREADS" --device "$DEVICE" --quiet
# the training-free reference at the same length: the base model with YaRN 4 (its perplexity, and that of none,
# DCA and Self-Extend, is measured by the same `lextra eval smollm2 ...` with --rope-scaling / --extend)
"$PY" -m lextra retrieval eval smollm2 --rope-scaling yarn:4 --task passkey --lengths 32768 --samples "$SAMPLES" \
    --out "$OUT/passkey-yarn" --threads "$THREADS" --device "$DEVICE" --quiet
"$PY" -m lextra eval smollm2 --rope-scaling yarn:4 --protocols chunks --documents 1 --corpus english \
    --lengths 8192,16384,32768 --out "$OUT/eval-yarn" --threads "$THREADS" --device "$DEVICE"
