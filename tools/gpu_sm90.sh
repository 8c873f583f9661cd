#!/usr/bin/env bash
# tools/gpu_sm90.sh - GPU-machine jobs for the sm_90a (wgmma) attention family, each bounded in
# time so that a hang costs only its own job:
#   build   meson + ninja of the CUDA backend, GPU suite and benchmarks in build-gpu (sm_90a)
#   smoke   one group of test_gpu_attention under a 60 s limit (a pipeline hang shows at once)
#   suite   tests/gpu/run_gpu_tests.sh without sanitizers: every program with the default
#           families (wgmma for head 64 / 128 / 256 prefill on sm_90), then the attention programs again
#           with FA_GPU_FAMILY=mma_sync
#   san     compute-sanitizer memcheck, racecheck, synccheck and initcheck on test_gpu_attention
#           and test_gpu_checks (quick sets)
#   bench   bench_gpu --quick --only prefill,mixed with --family auto and --family mma_sync,
#           twice each (A B A B: the spread of the repeats is the noise)
#   blocks  bench_gpu --quick --only prefill,mixed at block sizes 8, 16, 32, 64, 128 (auto)
#   peers   bench/run_perf.sh --skip-build --quick --only prefill,mixed --no-flex (cuDNN SDPA on
#           the same shapes)
#   edges   the family's paths past plain head-128 prefill (heads 64 / 256, blocks longer than a
#           tile, split-KV, ALiBi, sinks, query-head groups, dense K/V): test_gpu_attention's
#           "family edges" and "dense" groups, plain and under memcheck, racecheck and synccheck
#           (quick sets, 60 s each), then bench_gpu's prefill rows with --family auto and mma_sync
#   attn    test_gpu_attention and test_gpu_checks, whole sets, default families
#
#   tools/gpu_sm90.sh [JOB...]     default: build smoke suite
#
# Logs under $OUT (one per job, and $OUT/sm90_logs.tgz with everything); $OUT/summary.txt last.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/fa-sm90}
mkdir -p "$out"
work=/tmp/fa-sm90-work
mkdir -p "$work"
build=build-gpu
jobs=("$@")
[ ${#jobs[@]} -eq 0 ] && jobs=(build smoke suite)
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
want() { [[ " ${jobs[*]} " == *" $1 "* ]]; }
sum() { echo "$*" | tee -a "$work/summary.txt" >> "$out/summary.part"; } # (.part: survives a kill)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > "$work/machine.txt" 2>&1
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
sum "== tools/gpu_sm90.sh ${jobs[*]} at $(date -u '+%Y-%m-%d %H:%M:%S UTC'), tree $commit$(git diff --quiet 2>/dev/null || echo +dirty)"

if want build; then
    s=$(date +%s)
    if [ ! -f "$build/build.ninja" ]; then
        meson setup "$build" -Dcuda=enabled -Dtests=false -Dgpu_arch=sm_90a --buildtype=release > "$work/setup.log" 2>&1
    fi
    timeout 300 ninja -C "$build" > "$work/build.log" 2>&1
    rc=$?
    sum "build: rc $rc, $(($(date +%s) - s)) s"
    [ $rc -eq 0 ] || { grep -E 'error|FAILED' "$work/build.log" | head -20; }
fi
if want smoke; then
    s=$(date +%s)
    timeout 60 "$build/tests/gpu/test_gpu_attention" "blocks" > "$work/smoke.log" 2>&1
    sum "smoke (test_gpu_attention blocks): rc $?, $(($(date +%s) - s)) s, $(tail -n 1 "$work/smoke.log")"
    grep -E '^not ok|family' "$work/smoke.log" | head -10
fi
if want suite; then
    s=$(date +%s)
    FA_GPU_BUILD_DIR=$build FA_GPU_SANITIZE=0 FA_GPU_TIMEOUT=200 OUT="$work/suite" timeout 420 \
        bash tests/gpu/run_gpu_tests.sh > "$work/suite.log" 2>&1
    sum "suite: rc $?, $(($(date +%s) - s)) s, $(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$work/suite.log" | tail -n 1)"
    sed -n '/== GPU tests/,$p' "$work/suite.log" | head -20
    grep -hE '^not ok' "$work"/suite/*.log 2>/dev/null | head -20
fi
if want san; then
    s=$(date +%s)
    FA_GPU_BUILD_DIR=$build FA_GPU_PLAIN=0 FA_GPU_SANITIZE=1 FA_GPU_SANITIZE_TIMEOUT=200 \
        FA_GPU_SANITIZE_PROGRAMS="test_gpu_attention test_gpu_checks" OUT="$work/san" timeout 300 \
        bash tests/gpu/run_gpu_tests.sh > "$work/san.log" 2>&1
    sum "san: rc $?, $(($(date +%s) - s)) s, $(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$work/san.log" | tail -n 1)"
    sed -n '/== GPU tests/,$p' "$work/san.log" | head -20
fi
if want bench; then
    s=$(date +%s)
    for r in A1 B1 A2 B2; do
        fam=auto; [ "${r:0:1}" = B ] && fam=mma_sync
        timeout 100 "$build/bench/bench_gpu" --quick --only prefill,mixed --family $fam --csv "$work/bench_$r.csv" \
            > "$work/bench_$r.txt" 2>&1 || echo "bench $r rc $?"
    done
    sum "bench: $(($(date +%s) - s)) s"
    python3 - "$work" <<'EOF' | tee -a "$work/summary.txt"
import csv, os, sys
w = sys.argv[1]
runs = {}
for r in ("A1", "B1", "A2", "B2"):
    p = os.path.join(w, "bench_%s.csv" % r)
    if not os.path.exists(p):
        continue
    rows = list(csv.DictReader(open(p)))
    runs[r] = {x["name"]: x for x in rows}
if "A1" in runs and "B1" in runs:
    print("%-58s %10s %10s %10s %10s %7s" % ("row (us: wgmma auto A1/A2, mma_sync B1/B2)", "A1", "A2", "B1", "B2", "B/A"))
    for n, a1 in runs["A1"].items():
        def us(r):
            x = runs.get(r, {}).get(n)
            return float(x["time_us"]) if x and x.get("time_us") not in (None, "") else float("nan")
        A = [us("A1"), us("A2")]
        B = [us("B1"), us("B2")]
        a = min(A); b = min(B)
        print("%-58s %10.1f %10.1f %10.1f %10.1f %7.3f" % (n[:58], A[0], A[1], B[0], B[1], b / a if a > 0 else float("nan")))
EOF
fi
if want blocks; then
    s=$(date +%s)
    for bs in 8 16 32 64 128; do
        timeout 60 "$build/bench/bench_gpu" --quick --only prefill,mixed --block $bs > "$work/blocks_$bs.txt" 2>&1 ||
            echo "block $bs rc $?"
        grep -E '^(prefill-paged|mixed) ' "$work/blocks_$bs.txt" | tee -a "$work/summary.txt"
    done
    sum "blocks: $(($(date +%s) - s)) s"
fi
if want attn; then
    for prog in test_gpu_attention test_gpu_checks; do
        s=$(date +%s)
        timeout 200 "$build/tests/gpu/$prog" > "$work/attn_$prog.log" 2>&1
        sum "attn $prog: rc $?, $(($(date +%s) - s)) s, $(tail -n 1 "$work/attn_$prog.log")"
        grep -E '^not ok' "$work/attn_$prog.log" | head -10
    done
fi
if want edges; then
    s=$(date +%s)
    for g in "family edges" dense; do
        timeout 60 "$build/tests/gpu/test_gpu_attention" "$g" > "$work/edges_${g// /_}.log" 2>&1
        sum "edges ($g): rc $?, $(tail -n 1 "$work/edges_${g// /_}.log")"
        grep -E '^not ok' "$work/edges_${g// /_}.log" | head -20
    done
    FA_GPU_FAMILY=mma_sync timeout 60 "$build/tests/gpu/test_gpu_attention" dense > "$work/edges_dense_mma.log" 2>&1
    sum "edges (dense, mma_sync): rc $?, $(tail -n 1 "$work/edges_dense_mma.log")"
    for tool in memcheck racecheck synccheck; do
        for g in "family edges" dense; do
            FA_GPU_TEST_SANITIZER=1 FA_GPU_TEST_QUICK=1 timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 "$build/tests/gpu/test_gpu_attention" \
                "$g" > "$work/edges_${tool}_${g// /_}.log" 2>&1
            sum "edges $tool ($g): rc $?, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$work/edges_${tool}_${g// /_}.log" | tail -n 1)"
        done
    done
    for fam in auto mma_sync; do
        timeout 150 "$build/bench/bench_gpu" --only prefill --family $fam \
            --csv "$work/edges_bench_$fam.csv" > "$work/edges_bench_$fam.txt" 2>&1 || echo "edges bench $fam rc $?"
        grep -E '^prefill-' "$work/edges_bench_$fam.txt" | sed "s/^/$fam /" | tee -a "$work/summary.txt"
    done
    sum "edges: $(($(date +%s) - s)) s"
fi
if want peers; then
    s=$(date +%s)
    OUT="$work/peers" timeout 240 bash bench/run_perf.sh --skip-build --build "$build" --quick --only prefill,mixed \
        --no-flex > "$work/peers.log" 2>&1
    sum "peers: rc $?, $(($(date +%s) - s)) s"
    tail -n 40 "$work/peers.log"
fi
sum "total $(($(date +%s) - t0)) s"
cp "$work/summary.txt" "$out/summary.txt"
tar czf "$out/sm90_logs.tgz" -C "$work" . 2>/dev/null
cat "$out/summary.txt"
