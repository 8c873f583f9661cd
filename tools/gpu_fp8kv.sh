#!/usr/bin/env bash
# tools/gpu_fp8kv.sh - one GPU-machine call for the wgmma family's fp8 paths: fp8 caches under a
# 16-bit query (the KV8 kernels) and the fp8 query at heads 64 / 128 / 256. Jobs in order, each
# time-bounded (FA_FK_BUDGET s in all, default 560):
#   build   meson build of the tests and bench_gpu (build-fk: sm_90a, heads 64 / 128 / 256), and
#           the QGMMA probe (tools/qgmma_probe.cu) beside it
#   tests   the probe; test_gpu_fp8q (whole; and under FA_GPU_FAMILY=mma_sync, the refusals),
#           test_gpu_attention's "fp8" cases and test_gpu_checks under FA_GPU_FAMILY=wgmma, side
#           by side
#   san     compute-sanitizer memcheck and racecheck on the quick sets of test_gpu_fp8q and of
#           test_gpu_attention's "fp8 wgmma" cases (wgmma family)
#   bench   bench_gpu's prefill rows at heads 64 / 128 / 256 ($FA_FK_BENCH, default: every prefill
#           row the three heads have, without the checks), twice
# $OUT/summary.txt, the logs in $OUT/fk_logs.tgz.
set -u
cd "$(dirname "$0")/.."
top=${OUT:-/tmp/fa-fk}; mkdir -p "$top"; logs=$top/fk; mkdir -p "$logs"
sum=$top/summary.txt; : > "$sum"
start=$(date +%s)
note() { echo "$*" | tee -a "$sum"; }
left() { echo $(( ${FA_FK_BUDGET:-560} - ($(date +%s) - start) )); }
trap 'tar czf "$top/fk_logs.tgz" -C "$logs" . 2>/dev/null && rm -rf "$logs"' EXIT
note "== tools/gpu_fp8kv.sh $* at $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(git rev-parse --short HEAD 2>/dev/null)"
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> "$sum" 2>&1
B=build-fk
last() { grep -E "passed, [0-9]+ failed" "$1" | tail -n 1; }
for job in "$@"; do
    t0=$(date +%s); budget=$(left)
    [ "$budget" -gt 15 ] || { note "$job: skipped (no time left)"; continue; }
    case $job in
    build)
        (nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a tools/qgmma_probe.cu -o /tmp/qp > "$logs/probe_build.txt" 2>&1) &
        (meson setup "$B" -Dcuda=enabled -Dnccl=disabled -Dtests=disabled -Dgpu_arch=sm_90a \
            -Dhead_dims=64,128,256 --buildtype=release > "$logs/setup.txt" 2>&1 &&
            timeout $((budget - 10)) ninja -C "$B" tests/gpu/test_gpu_fp8q tests/gpu/test_gpu_attention \
                tests/gpu/test_gpu_checks bench/bench_gpu > "$logs/build.txt" 2>&1)
        rc=$?; wait
        note "build: rc $rc, $(( $(date +%s) - t0 )) s"
        [ $rc -eq 0 ] || { grep -hE "error|FAILED" "$logs/build.txt" "$logs/setup.txt" | head -20 >> "$sum"; exit 1; } ;;
    tests)
        (timeout 40 /tmp/qp > "$logs/probe.txt" 2>&1; echo "probe: $(tail -n 1 "$logs/probe.txt")" > "$logs/r_probe") &
        T=$(( budget > 200 ? 180 : budget - 20 ))
        (FA_GPU_FAMILY=wgmma timeout $T $B/tests/gpu/test_gpu_fp8q > "$logs/fp8q.txt" 2>&1; echo "test_gpu_fp8q (wgmma): rc $? $(last "$logs/fp8q.txt")" > "$logs/r_fp8q") &
        (FA_GPU_FAMILY=mma_sync timeout $T $B/tests/gpu/test_gpu_fp8q --quick > "$logs/fp8q_mma.txt" 2>&1; echo "test_gpu_fp8q --quick (mma_sync): rc $? $(last "$logs/fp8q_mma.txt")" > "$logs/r_fp8q_mma") &
        (FA_GPU_FAMILY=wgmma timeout $T $B/tests/gpu/test_gpu_attention "fp8" > "$logs/attn_fp8.txt" 2>&1; echo "test_gpu_attention fp8 (wgmma): rc $? $(last "$logs/attn_fp8.txt")" > "$logs/r_attn") &
        (FA_GPU_FAMILY=wgmma timeout $T $B/tests/gpu/test_gpu_checks > "$logs/checks.txt" 2>&1; echo "test_gpu_checks (wgmma): rc $? $(last "$logs/checks.txt")" > "$logs/r_checks") &
        wait
        for r in probe fp8q fp8q_mma attn checks; do note "$(cat "$logs/r_$r")"; done
        grep -hE "^not ok|FAIL" "$logs"/probe.txt "$logs"/fp8q*.txt "$logs"/attn_fp8.txt "$logs"/checks.txt | head -30 >> "$sum"
        note "tests: $(( $(date +%s) - t0 )) s" ;;
    san)
        T=$(( (budget - 10) / 2 ))
        for tool in memcheck racecheck; do
            (FA_GPU_FAMILY=wgmma timeout $T compute-sanitizer --tool $tool $B/tests/gpu/test_gpu_fp8q --quick > "$logs/san_${tool}_fp8q.txt" 2>&1
             echo "$tool test_gpu_fp8q --quick: rc $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$logs/san_${tool}_fp8q.txt" | tail -n 1) $(last "$logs/san_${tool}_fp8q.txt")" > "$logs/r_${tool}_a") &
            (FA_GPU_FAMILY=wgmma timeout $T compute-sanitizer --tool $tool $B/tests/gpu/test_gpu_attention --quick "fp8 wgmma" > "$logs/san_${tool}_attn.txt" 2>&1
             echo "$tool test_gpu_attention --quick 'fp8 wgmma': rc $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$logs/san_${tool}_attn.txt" | tail -n 1) $(last "$logs/san_${tool}_attn.txt")" > "$logs/r_${tool}_b") &
            wait
            note "$(cat "$logs/r_${tool}_a")"; note "$(cat "$logs/r_${tool}_b")"
        done
        note "san: $(( $(date +%s) - t0 )) s" ;;
    bench)
        for rep in 1 2; do
            # shellcheck disable=SC2086
            timeout $(( $(left) / (3 - rep) > 10 ? $(left) / (3 - rep) - 5 : 10 )) $B/bench/bench_gpu \
                ${FA_FK_BENCH:---only prefill --dim 64,128,256 --no-ceilings --no-check} --csv "$logs/bench$rep.csv" > "$logs/bench$rep.txt" 2>&1
            note "bench rep $rep: rc $?"
        done
        python3 - "$logs" <<'PY' > "$top/bench.txt"
import csv, os, statistics, sys
t = {}
for rep in (1, 2):
    p = os.path.join(sys.argv[1], "bench%d.csv" % rep)
    if os.path.exists(p):
        for r in csv.DictReader(open(p)):
            if r.get("time_us"):
                t.setdefault(r["name"], []).append((float(r["time_us"]), r.get("tflops", "")))
print("%-60s %12s %10s" % ("row (median of the runs)", "us", "TFLOP/s"))
for n, v in t.items():
    print("%-60s %12.1f %10s" % (n, statistics.median(x[0] for x in v), v[0][1]))
PY
        cat "$top/bench.txt" >> "$sum"
        note "bench: $(( $(date +%s) - t0 )) s" ;;
    *) note "$job: unknown job" ;;
    esac
done
note "total $(( $(date +%s) - start )) s"
