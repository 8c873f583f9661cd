#!/usr/bin/env bash
# tools/gpu_session.sh - one GPU-machine call that runs several validation jobs with a time
# budget each, so that one device call covers them all:
#   ab      tools/gpu_ab.sh (alone on the machine: it times the decode grid)
#   hopper  tools/hopper_proto.sh (alone: it times prefill)
#   then side by side:
#   suite   tests/gpu/run_gpu_tests.sh: plain runs of every GPU program, and memcheck on
#           test_gpu_checks' and test_gpu_attention's quick sets
#   hip     backends/hip/run_hip_on_nvidia.sh run (the HIP source path through HIP's NVIDIA
#           platform)
#   python  python/tests/run_gpu.sh on the suite's build (after it)
#   then alone again:
#   blocks  bench_gpu --quick (decode and prefill rows, head 128, bf16 and fp8) at block size 1
#           and at 16, on the suite's build (tools/gpu_blocks.sh)
#
#   tools/gpu_session.sh [JOB...]          default: ab hopper suite hip python blocks
#
# The job limits add up to more than one device call's 600 s: run it as two calls, e.g.
# `tools/gpu_session.sh ab hopper` and `tools/gpu_session.sh suite hip python blocks`.
#
# Each job's console goes to its own log; every log and every file a job writes under its
# $OUT ends up in $OUT/session_logs.tgz; $OUT/summary.txt has one line per job (rc, seconds,
# the job's last "N passed, M failed" line) and is printed last. A job that is not in the tree
# (its script missing) is reported as skipped.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/fa-session}
mkdir -p "$out"
work=/tmp/fa-session-work
rm -rf "$work"
mkdir -p "$work"
jobs=("$@")
[ ${#jobs[@]} -eq 0 ] && jobs=(ab hopper suite hip python blocks)
t0=$(date +%s)
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,memory.used --format=csv > "$work/machine.txt" 2>&1

want() { [[ " ${jobs[*]} " == *" $1 "* ]]; }

run_job() { # name timeout script args...
    local name=$1 lim=$2 script=$3
    shift 3
    mkdir -p "$work/$name"
    if [ ! -f "$script" ]; then
        echo "$name: skipped ($script not in the tree)" > "$work/$name.sum"
        return
    fi
    local s=$(date +%s)
    OUT="$work/$name" timeout "$lim" bash "$script" "$@" > "$work/$name.log" 2>&1
    local rc=$?
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$work/$name.log" | tail -n 1)
    echo "$name: rc $rc, $(($(date +%s) - s)) s${line:+, $line}" > "$work/$name.sum"
    cat "$work/$name.sum" >> "$out/summary_live.txt" # survives a call cut short
}

want ab && run_job ab 110 tools/gpu_ab.sh
want hopper && run_job hopper 80 tools/hopper_proto.sh

pids=()
if want suite; then
    (FA_GPU_BUILD_DIR=build-gpu FA_GPU_SANITIZE=1 FA_GPU_SANITIZE_TIMEOUT=120 FA_GPU_SANITIZE_TOOLS=memcheck \
        FA_GPU_SANITIZE_PROGRAMS="test_gpu_checks test_gpu_attention" run_job suite 240 tests/gpu/run_gpu_tests.sh
     # the shared libraries the binding loads, and bench_gpu for the blocks job
     ninja -C build-gpu > "$work/build_all.log" 2>&1 || tail -n 20 "$work/build_all.log"
     want python && run_job python 60 python/tests/run_gpu.sh build-gpu) &
    pids+=($!)
elif want python; then
    (run_job python 240 python/tests/run_gpu.sh build-gpu) &
    pids+=($!)
fi
if want hip; then
    (FA_HIPNV_DEADLINE_S=${FA_HIPNV_DEADLINE_S:-230} run_job hip 250 backends/hip/run_hip_on_nvidia.sh run) &
    pids+=($!)
fi
for p in "${pids[@]}"; do wait "$p"; done
want blocks && run_job blocks 90 tools/gpu_blocks.sh build-gpu

{
    echo "== GPU session ($(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(($(date +%s) - t0)) s)"
    cat "$work/machine.txt"
    for j in "${jobs[@]}"; do cat "$work/$j.sum" 2>/dev/null || echo "$j: not run"; done
} > "$work/summary.txt"
tar czf "$out/session_logs.tgz" -C "$work" . 2>/dev/null
cp "$work/summary.txt" "$out/summary.txt"
for j in "${jobs[@]}"; do
    [ -f "$work/$j.log" ] && { echo "---- $j (tail)"; tail -n 14 "$work/$j.log"; }
done
cat "$out/summary.txt"
