#!/usr/bin/env bash
# Toy models on RULER's needle tasks: what a 4 x 128 model trained at L_tr = 384 tokens can and cannot do at
# 1x-8x L_tr. Each scheme trains from scratch on half english LM windows, half RULER needle prompts with their
# answers (`--task ruler.niah+lm`, BPE 4096 on the english corpus: RULER's templates need up to 336 of its tokens,
# more than 384 bytes), then `lextra ruler` scores the eight needle tasks at 384-3072 tokens.
# About 35 min per scheme on one thread; finished models and cells are reused when rerun.
#
#   bash experiments/ruler_toy.sh [OUT] [SCHEMES] [STEPS]
set -euo pipefail
OUT=${1:-runs/ruler-toy}
SCHEMES=${2:-rope alibi nope}
STEPS=${3:-1000}
LEXTRA=${LEXTRA:-.venv/bin/lextra}
TASKS=niah_single_1,niah_single_2,niah_single_3,niah_multikey_1,niah_multikey_2,niah_multikey_3,niah_multivalue,niah_multiquery
for scheme in $SCHEMES; do
  if [ ! -f "$OUT/$scheme/model/config.json" ]; then
    resume=()
    [ -d "$OUT/$scheme" ] && resume=(--resume)
    $LEXTRA retrieval train --task ruler.niah+lm --corpus english --tokenizer bpe:4096 --train-len 384 \
      --layers 4 --width 128 --heads 4 --batch-size 16 --steps "$STEPS" --lr 2e-3 --warmup 50 \
      --checkpoint-every 100 --threads 1 --scheme "$scheme" --out "$OUT/$scheme" --quiet "${resume[@]}"
  fi
  $LEXTRA ruler "$OUT/$scheme" --tasks "$TASKS" --lengths 384,768,1536,3072 --samples 10 \
    --out "$OUT/ruler-$scheme" --threads 1 --quiet
  if [ "$scheme" = rope ]; then
    $LEXTRA ruler "$OUT/$scheme" --tasks "$TASKS" --lengths 384,768,1536,3072 --samples 10 \
      --rope-scaling dynamic:1 --out "$OUT/ruler-rope-dynamic" --threads 1 --quiet
  fi
done
