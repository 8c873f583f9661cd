#!/usr/bin/env bash
# One call on the GPU machine: build, GPU test suite (+ sanitizers), the demo, and a quick
# benchmark pass. Logs go to $OUT. Usage: tools/gpu_run.sh [quick|full|bench-only]
set -u
mode=${1:-quick}
export NCCL_NVLS_ENABLE=0
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/fa-out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > "$out/machine.txt" 2>&1
git rev-parse --short HEAD >> "$out/machine.txt" 2>/dev/null
if [ "$mode" != bench-only ]; then
  FA_GPU_SANITIZE=${FA_GPU_SANITIZE:-1} FA_GPU_BUILD_DIR=build-gpu bash tests/gpu/run_gpu_tests.sh > "$out/gpu_tests.txt" 2>&1
  tail -n 30 "$out/gpu_tests.txt"
  ninja -C build-gpu bench/demo bench/bench_gpu bench/bench_ops > "$out/build_bench.txt" 2>&1 || tail -n 20 "$out/build_bench.txt"
  ./build-gpu/bench/demo > "$out/demo.txt" 2>&1 || echo "demo failed"
  tail -n 12 "$out/demo.txt"
fi
if [ -x build-gpu/bench/bench_gpu ]; then
  if [ "$mode" = full ]; then args=""; else args="--quick"; fi
  timeout 300 ./build-gpu/bench/bench_gpu $args --csv "$out/bench.csv" > "$out/bench.txt" 2>&1 || echo "bench rc=$?"
  tail -n 40 "$out/bench.txt"
fi
if [ -x build-gpu/bench/bench_ops ]; then   # cache write, merge, dcp_correct vs a device copy
  timeout 120 ./build-gpu/bench/bench_ops > "$out/bench_ops.txt" 2>&1 || echo "bench_ops rc=$?"
  grep '^# perf' "$out/bench_ops.txt"
fi
