#!/usr/bin/env bash
# tools/gpu_validate.sh - one GPU-machine call that validates a tree: the GPU suite (every case),
# the demo in eager and CUDA-graph mode, bench_ops, then every harness program's FULL case set
# under compute-sanitizer memcheck, racecheck, initcheck and synccheck, split over shards that
# run side by side. Small summaries go to $OUT; all logs as $OUT/logs.tgz.
#
#   tools/gpu_validate.sh [SHARDS [SANITIZER_TIMEOUT_S]]     defaults: 3, 360
#   FA_VALIDATE_DEADLINE_S (default 570): the sanitizer timeout is cut so that the whole script
#   ends by then (one device call is at most 600 s); FA_VALIDATE_BENCH=0 leaves out bench_ops
set -u
export NCCL_NVLS_ENABLE=0
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/fa-validate}; mkdir -p "$out"
logs=/tmp/fa-validate-logs; rm -rf "$logs"; mkdir -p "$logs"
shards=${1:-3}; stime=${2:-360}
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > "$out/machine.txt" 2>&1
git rev-parse --short HEAD >> "$out/machine.txt" 2>/dev/null
OUT=$logs/suite FA_GPU_SANITIZE=0 FA_GPU_BUILD_DIR=build-gpu bash tests/gpu/run_gpu_tests.sh > "$out/suite.txt" 2>&1
echo "suite rc=$? ($(( $(date +%s) - t0 )) s)"; tail -n 12 "$out/suite.txt"
ninja -C build-gpu bench/demo bench/bench_ops > "$logs/build_bench.txt" 2>&1 || tail -n 20 "$logs/build_bench.txt"
{ timeout 120 ./build-gpu/bench/demo; echo "demo rc=$?"; timeout 120 ./build-gpu/bench/demo --graph; echo "demo --graph rc=$?"; } > "$out/demo.txt" 2>&1
grep -E "rc=|graph|replay|eager|max" "$out/demo.txt" | tail -n 16
if [ "${FA_VALIDATE_BENCH:-1}" != 0 ]; then
  timeout 90 ./build-gpu/bench/bench_ops > "$logs/bench_ops.txt" 2>&1; echo "bench_ops rc=$?"; grep '^# perf' "$logs/bench_ops.txt"
fi
s0=$(date +%s)
left=$(( t0 + ${FA_VALIDATE_DEADLINE_S:-570} - s0 - 15 ))
[ "$left" -lt "$stime" ] && stime=$left
echo "sanitizers: $shards shards, ${stime} s per run"
OUT=$logs/san FA_GPU_PLAIN=0 FA_GPU_SANITIZE_SET=full FA_GPU_SANITIZE_SHARDS=$shards FA_GPU_SANITIZE_TIMEOUT=$stime \
  FA_GPU_BUILD_DIR=build-gpu bash tests/gpu/run_gpu_tests.sh > "$out/sanitize.txt" 2>&1
echo "sanitizers rc=$? ($(( $(date +%s) - s0 )) s)"; grep -vE "^ *$" "$out/sanitize.txt" | tail -n 40
tar czf "$out/logs.tgz" -C "$logs" . 2>/dev/null
echo "total $(( $(date +%s) - t0 )) s"
