#!/usr/bin/env bash
# SmolLM2-135M-Instruct (L = 8192) on lextra's RULER suite at 4k, 8k and 16k tokens: no method, dynamic NTK and
# YaRN (factor 2) and the training-free extension methods at their defaults, all eleven tasks.
#
#   experiments/ruler_smollm2.sh [SAMPLES] [METHOD ...]
#   LENGTHS=16384 THREADS=1 experiments/ruler_smollm2.sh 1 dynamic yarn
#
# SAMPLES per cell (default 10); METHOD: none, linear, dynamic, yarn, or an extension method (default: none,
# dynamic, yarn and every extension method). Environment: LENGTHS (default 4096,8192,16384), THREADS, BATCH
# (samples decoded together, default 8), DEVICE (default auto: the GPU when there is one), OUT (default runs/ruler). Each method writes OUT/smollm2-METHOD/.
# Cells grow: rerunning with more samples decodes only the samples a cell lacks, so the grid can be filled over
# several sessions (two processes with disjoint METHODs and THREADS=1 use two CPU cores best).
set -euo pipefail
cd "$(dirname "$0")/.."
lextra=${LEXTRA:-.venv/bin/lextra}
samples=${1:-10}
shift || true
methods=("$@")
if [ ${#methods[@]} -eq 0 ]; then
  methods=(none dynamic yarn self_extend rerope leaky_rerope dca lm_infinite sinks string)
fi
for method in "${methods[@]}"; do
  case $method in
    none) flags=() ;;
    linear | dynamic | yarn) flags=(--rope-scaling "$method:2") ;;
    *) flags=(--extend "$method") ;;
  esac
  start=$(date +%s)
  "$lextra" ruler run smollm2 --tasks all --lengths "${LENGTHS:-4096,8192,16384}" --samples "$samples" \
    --out "${OUT:-runs/ruler}/smollm2-$method" --device "${DEVICE:-auto}" --batch-size "${BATCH:-8}" ${THREADS:+--threads "$THREADS"} \
    ${flags[@]+"${flags[@]}"}
  echo "smollm2-$method: $(($(date +%s) - start)) s" >&2
done
