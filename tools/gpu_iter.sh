#!/usr/bin/env bash
# tools/gpu_iter.sh - one GPU-machine call for a kernel iteration: build (meson, sm_90a), the
# GPU test programs (no sanitizers: tools/gpu_run.sh runs those), then bench/bench_gpu once per
# argument string. Logs go to $OUT (tests.txt, bench_N.txt, bench_N.csv).
#
#   tools/gpu_iter.sh "--quick --only decode,splits" "--only decode --dim 64,256 --batch 64"
#
# With no argument strings, one bench run: --quick --only decode,splits.
set -u
export NCCL_NVLS_ENABLE=0
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/fa-out}; mkdir -p "$out"
git rev-parse --short HEAD > "$out/machine.txt" 2>/dev/null
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv >> "$out/machine.txt" 2>&1
FA_GPU_SANITIZE=${FA_GPU_SANITIZE:-0} FA_GPU_BUILD_DIR=build-gpu bash tests/gpu/run_gpu_tests.sh > "$out/tests.txt" 2>&1
echo "tests rc=$?"; grep -E "FAIL|passed, " "$out/tests.txt" | tail -n 15
ninja -C build-gpu bench/bench_gpu > "$out/build_bench.txt" 2>&1 || { tail -n 20 "$out/build_bench.txt"; exit 1; }
[ $# -eq 0 ] && set -- "--quick --only decode,splits"
n=0
for a in "$@"; do
  n=$((n + 1))
  # shellcheck disable=SC2086
  timeout 280 ./build-gpu/bench/bench_gpu $a --csv "$out/bench_$n.csv" > "$out/bench_$n.txt" 2>&1 || echo "bench $n rc=$?"
  echo "== bench $n: $a"; grep -vE "^\s*$" "$out/bench_$n.txt" | tail -n 45
done
