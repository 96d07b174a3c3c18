#!/usr/bin/env bash
# Toy models on RULER's needle tasks: what a 4 x 128 model trained at L_tr = 384 tokens can and cannot do at
# 1x-8x L_tr. BPE 4096 on the english corpus (RULER's needle templates need up to 336 of its tokens, more than
# 384 bytes, so the byte-level `make run` models at L_tr = 128 cannot hold one prompt). Each scheme trains from
# scratch on RULER prompts with their answers (`--task TASK`, default ruler.niah_single_1: 800 steps at lr 2e-3),
# is fine-tuned on them for 800 more (lr 1e-3), and `lextra ruler` scores the eight needle tasks at 384-3072 tokens
# (rope also under dynamic NTK). About 35 min per scheme on one thread; finished models and cells are reused.
#
#   bash experiments/ruler_toy.sh [OUT] [SCHEMES] [STEPS] [TASK]
set -euo pipefail
OUT=${1:-runs/ruler-toy}
SCHEMES=${2:-rope}
STEPS=${3:-800}
TASK=${4:-ruler.niah_single_1}
LEXTRA=${LEXTRA:-.venv/bin/lextra}
TASKS=niah_single_1,niah_single_2,niah_single_3,niah_multikey_1,niah_multikey_2,niah_multikey_3,niah_multivalue,niah_multiquery
MODEL=(--corpus english --tokenizer bpe:4096 --train-len 384 --n-layer 4 --d-model 128 --n-head 4 --batch-size 16)

train() {  # OUT_DIR LR WARMUP [extra options]: train unless finished, resuming an interrupted run
  local dir=$1 lr=$2 warmup=$3
  shift 3
  [ -f "$dir/model/config.json" ] && return
  local resume=()
  [ -d "$dir" ] && resume=(--resume)
  $LEXTRA retrieval train --task "$TASK" "${MODEL[@]}" --steps "$STEPS" --lr "$lr" --warmup "$warmup" \
    --checkpoint-every 100 --threads 1 --out "$dir" --quiet "${resume[@]}" "$@"
}

for scheme in $SCHEMES; do
  train "$OUT/$scheme" 2e-3 50 --scheme "$scheme"
  train "$OUT/$scheme-ft" 1e-3 20 --scheme "$scheme" --init-from "$OUT/$scheme/model"
  for stage in "$scheme" "$scheme-ft"; do
    $LEXTRA ruler run "$OUT/$stage" --tasks "$TASKS" --lengths 384,768,1536,3072 --samples 10 \
      --out "$OUT/ruler-$stage" --threads 1 --quiet
  done
  if [ "$scheme" = rope ]; then
    $LEXTRA ruler run "$OUT/$scheme-ft" --tasks "$TASKS" --lengths 384,768,1536,3072 --samples 10 \
      --rope-scaling dynamic:1 --out "$OUT/ruler-$scheme-ft-dynamic" --threads 1 --quiet
  fi
done
