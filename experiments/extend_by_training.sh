#!/usr/bin/env bash
# Extend by training, toy scale (issue 27): the `make run` rope model (L_tr 128) taken to 2048 by continued
# training (PI, YaRN), PoSE and randomized positions, next to the training-free methods; sliding perplexity at
# 128..2048 over 8 held-out documents and passkey at 2048 (10 prompts over 5 depths) for each row.
#   experiments/extend_by_training.sh [OUT] [STEPS_LONG]   (OUT default runs/extend-by-training; STEPS_LONG: the
#   continued-training steps, default 100). Pass --device cuda through DEVICE=cuda to run on a GPU.
#   SCHEME=alibi (or fire, any non-rotary scheme) runs the rows that need no RoPE: the base, PoSE, randomized.
set -euo pipefail
OUT=${1:-runs/extend-by-training}
STEPS_LONG=${2:-100}
DEVICE=${DEVICE:-auto}
SCHEME=${SCHEME:-rope}
PY=${PY:-python}
mkdir -p "$OUT"

train() {  # NAME ARGS...: train once (skipped when its model exists), timing it
    local name=$1; shift
    if [ ! -f "$OUT/$name/model/config.json" ]; then
        /usr/bin/time -f "%e" -o "$OUT/$name.seconds" "$PY" -m lextra train --out "$OUT/$name" --device "$DEVICE" "$@"
    fi
}

evaluate() {  # NAME ARGS...: sliding perplexity 128..2048 and passkey at 2048
    local name=$1 model=$2; shift 2
    "$PY" -m lextra eval "$model" --out "$OUT/eval-$name" --lengths 128,256,512,1024,2048 --protocols sliding \
        --documents 8 --device "$DEVICE" "$@"
    "$PY" -m lextra retrieval eval "$model" --out "$OUT/passkey-$name" --lengths 2048 --samples 2 --quiet \
        --device "$DEVICE" "$@"
}

if [ "$SCHEME" != rope ]; then
    train "$SCHEME" --scheme "$SCHEME"
    train "$SCHEME-pose" --scheme "$SCHEME" --positions pose:2048
    train "$SCHEME-randomized" --scheme "$SCHEME" --positions randomized:2048
    for name in "$SCHEME" "$SCHEME-pose" "$SCHEME-randomized"; do
        evaluate "$name" "$OUT/$name/model"
    done
    exit 0
fi

train rope --scheme rope
train pose --scheme rope --positions pose:2048
train randomized --scheme rope --positions randomized:2048
train pi-512 --scheme rope --init-from "$OUT/rope/model" --train-len 512 --rope-scaling linear:4 \
    --steps "$STEPS_LONG" --warmup 10 --lr 5e-4
train yarn-512 --scheme rope --init-from "$OUT/rope/model" --train-len 512 --rope-scaling yarn:4 \
    --steps "$STEPS_LONG" --warmup 10 --lr 5e-4
train pose-yarn --scheme rope --positions pose:2048 --init-from "$OUT/rope/model" --rope-scaling yarn:16 \
    --steps "$STEPS_LONG" --warmup 10 --lr 5e-4
train full-2048 --scheme rope --init-from "$OUT/rope/model" --train-len 2048 --steps "$STEPS_LONG" --warmup 10 \
    --lr 5e-4 --batch-size 4
train s2-2048 --scheme rope --init-from "$OUT/rope/model" --train-len 2048 --s2-attn 512 --steps "$STEPS_LONG" \
    --warmup 10 --lr 5e-4 --batch-size 4

evaluate none "$OUT/rope/model"
evaluate leaky_rerope "$OUT/rope/model" --extend leaky_rerope
for name in pose randomized pi-512 yarn-512 pose-yarn full-2048 s2-2048; do
    evaluate "$name" "$OUT/$name/model"
done
