#!/usr/bin/env bash
# `make gpu-check`: the first run on a lent GPU in one command, under a wall-clock budget (GPU_CHECK_SECONDS,
# default 480: installs, compiles and every step included). 1. the tests marked `gpu` (`pytest -m gpu`), 2. the
# layer-plan pieces at 16k, forward + backward (`benchmarks/hybrids.py --device cuda --backward`), 3. the sized
# benchmark (`benchmarks/gpu.py --sized`: correctness against the reference, every scheme x mask at 4k-64k, 128k
# for a subset, training tokens/s at L_tr 1024), writing benchmarks/results/gpu.md / .json, hybrids-gpu.json and
# the logs beside them; then a summary. Each step gets what is left of the budget; a step cut short says so.
# PY: the Python with torch's CUDA build (default: the project's .venv if `make` built one, else python3, e.g. a
# GPU image's own, with lextra read from src/).
set -uo pipefail
cd "$(dirname "$0")/.."
BUDGET=${GPU_CHECK_SECONDS:-480}
PY=${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
OUT_DIR=${GPU_CHECK_OUT:-benchmarks/results}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$OUT_DIR"
start=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - start))); }

"$PY" -c "import sys, torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda); \
sys.exit(0 if torch.cuda.is_available() else 'gpu-check: torch sees no CUDA device (a CPU build of torch, or no GPU)')" \
    || exit 2

tests_rc=124
if [ "$(left)" -gt 60 ]; then
    timeout --signal=INT "$(( $(left) * 2 / 5 ))" "$PY" -m pytest -m gpu -q -p no:cacheprovider \
        2>&1 | tee "$OUT_DIR/gpu-tests.log"
    tests_rc=${PIPESTATUS[0]}
fi

# the layer-plan pieces (chunk mask, sinks, softcap, partial rotary, p-RoPE, temperature, QK-norm, gate) through
# flex on CUDA at 16k, forward + backward against flash SDPA (issue 33's CUDA timings)
hybrids_rc=124
if [ "$(left)" -gt 90 ]; then
    timeout --signal=INT "$(( $(left) / 5 ))" "$PY" benchmarks/hybrids.py --device cuda --backward --repeats 5 \
        --out "$OUT_DIR/hybrids-gpu.json" > "$OUT_DIR/hybrids-gpu.log" 2>&1
    hybrids_rc=$?
fi

bench_rc=124
if [ "$(left)" -gt 30 ]; then
    timeout --signal=INT "$(( $(left) - 10 ))" "$PY" benchmarks/gpu.py --sized --out "$OUT_DIR/gpu.json" \
        2> "$OUT_DIR/gpu-bench.log"
    bench_rc=$?
fi

echo
echo "gpu-check summary ($(( $(date +%s) - start )) s of a ${BUDGET} s budget)"
echo "  tests (pytest -m gpu): $(tail -n 1 "$OUT_DIR/gpu-tests.log" 2>/dev/null || echo 'not run') [exit ${tests_rc}]"
echo "  layer-plan pieces (benchmarks/hybrids.py --device cuda --backward): $OUT_DIR/hybrids-gpu.log [exit ${hybrids_rc}]"
if [ -f "$OUT_DIR/gpu.md" ] && [ "$bench_rc" -ne 124 ]; then
    mismatches=$(grep -c '| NO |' "$OUT_DIR/gpu.md" || true)
    errors=$(grep -o '| err' "$OUT_DIR/gpu.md" | wc -l)
    echo "  benchmark: $OUT_DIR/gpu.md (correctness mismatches: ${mismatches}, cells that failed: ${errors}) [exit ${bench_rc}]"
else
    echo "  benchmark: cut short or failed [exit ${bench_rc}]; see $OUT_DIR/gpu-bench.log"
fi
[ "$tests_rc" -eq 0 ] && [ "$hybrids_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
