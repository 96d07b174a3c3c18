#!/usr/bin/env bash
# Mixed context-window training (LongRoPE2) and packed documents against plain YaRN fine-tuning, toy scale (issue
# 47): a rope model trained at L_tr 128 (600 steps, python-code, bytes), continued at 1024 under yarn:8 for STEPS
# steps, plainly, with --mixed-window 128:1024 (half the steps cut into 128-token pieces under the original RoPE)
# and with --pack documents (whole documents, attended alone, positions from 0), for 3 seeds of the continued
# training; perplexity (chunks, 8 held-out documents) at 128..1024 and passkey at 1024
# (10 prompts over 5 depths) for every model. experiments/mixed_window_report.py makes the table.
#   experiments/mixed_window.sh [OUT] [STEPS]   (OUT default runs/mixed-window; STEPS default 60)
set -euo pipefail
OUT=${1:-runs/mixed-window}
STEPS=${2:-60}
DEVICE=${DEVICE:-auto}
PY=${PY:-python}
mkdir -p "$OUT"

train() {  # NAME ARGS...: train once (skipped when its model exists), timing it
    local name=$1; shift
    if [ ! -f "$OUT/$name/model/config.json" ]; then
        /usr/bin/time -f "%e" -o "$OUT/$name.seconds" "$PY" -m lextra train --out "$OUT/$name" --device "$DEVICE" \
            --quiet "$@"
    fi
}

evaluate() {  # NAME: perplexity 128..1024 and passkey at 1024 (skipped when done)
    local name=$1
    [ -f "$OUT/eval-$name/results.json" ] || "$PY" -m lextra eval "$OUT/$name/model" --out "$OUT/eval-$name" \
        --lengths 128,256,512,1024 --protocols chunks --documents 8 --device "$DEVICE" --quiet
    [ -f "$OUT/passkey-$name/results.json" ] || "$PY" -m lextra retrieval eval "$OUT/$name/model" \
        --out "$OUT/passkey-$name" --lengths 1024 --samples 2 --device "$DEVICE" --quiet
}

train base --scheme rope
evaluate base
for seed in 0 1 2; do
    common=(--scheme rope --init-from "$OUT/base/model" --train-len 1024 --rope-scaling yarn:8 --steps "$STEPS"
            --warmup 10 --lr 5e-4 --batch-size 2 --seed "$seed")
    train "yarn-s$seed" "${common[@]}"
    train "mixed-s$seed" "${common[@]}" --mixed-window 128:1024
    train "packed-s$seed" "${common[@]}" --pack documents
    evaluate "yarn-s$seed"
    evaluate "mixed-s$seed"
    evaluate "packed-s$seed"
done
