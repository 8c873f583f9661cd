#!/usr/bin/env bash
# tools/gpu_gates.sh - one GPU-machine call for a change to the wgmma family: applies a variant
# spec's replacements to this checkout when FA_GT_SPEC / FA_GT_VARIANT name one (e.g.
# tools/variants/sm90_stages.py "q8gather"), builds
# once (-Dtests=false: the CUDA backend, bench_gpu and the GPU test programs), runs the GPU tests
# in both families
# (tests/gpu/run_gpu_tests.sh, no sanitizers unless FA_GT_SAN=1; FA_GT_FAMILIES=1: the wgmma
# family only), then bench_gpu's rows with the family on auto against mma_sync, interleaved,
# twice each ($FA_GT_ARGS: bench argument sets separated by ';'), then the compute-sanitizer runs
# of $FA_GT_SANRUNS while time is left ("tool program args..." separated by ';', e.g.
# "racecheck test_gpu_fp8q --quick bs=24"). $OUT/summary.txt, bench_*.txt, the logs in
# $OUT/gates_logs.tgz.
#   FA_GT_SPEC, FA_GT_VARIANT, FA_GT_PROGRAMS (default: every GPU test program but the NCCL one),
#   FA_GT_BUDGET (seconds, default 570)
set -u
cd "$(dirname "$0")/.."
top=${OUT:-/tmp/fa-gates}; mkdir -p "$top"; logs=$top/gl; mkdir -p "$logs"
sum=$top/summary.txt; : > "$sum"
start=$(date +%s)
note() { echo "$*" | tee -a "$sum"; }
left() { echo $(( ${FA_GT_BUDGET:-570} - ($(date +%s) - start) )); }
trap 'tar czf "$top/gates_logs.tgz" -C "$logs" . 2>/dev/null && rm -rf "$logs"' EXIT
note "== tools/gpu_gates.sh at $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(git rev-parse --short HEAD 2>/dev/null)"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> "$sum" 2>&1
[ -z "${FA_GT_SPEC:-}" ] || python3 tools/apply_variant.py "$FA_GT_SPEC" "${FA_GT_VARIANT:?FA_GT_VARIANT: a variant of FA_GT_SPEC}" |
    tee -a "$sum" || exit 1
command -v meson > /dev/null 2>&1 || meson() { python3 -m mesonbuild.mesonmain "$@"; }
b=build-gates
t0=$(date +%s)
meson setup "$b" -Dcuda=enabled -Dtests=false -Dgpu_arch=sm_90a --buildtype=release > "$logs/setup.log" 2>&1 &&
    timeout $(( $(left) - 60 )) ninja -C "$b" > "$logs/build.log" 2>&1
rc=$?; note "build: rc $rc, $(( $(date +%s) - t0 )) s"
[ $rc -eq 0 ] || { tail -n 30 "$logs/build.log" >> "$sum"; exit 1; }
progs=${FA_GT_PROGRAMS:-test_gpu_attention test_gpu_checks test_gpu_fp8q test_gpu_forward test_gpu_graph test_gpu_ops test_gpu_portable}
t0=$(date +%s)
OUT=$logs/tests FA_GPU_BUILD_DIR=$b FA_GPU_SANITIZE=${FA_GT_SAN:-0} FA_GPU_PROGRAMS="$progs" \
    FA_GPU_SECOND_FAMILY=$(( ${FA_GT_FAMILIES:-2} > 1 ? 1 : 0 )) \
    FA_GPU_TIMEOUT=${FA_GT_TEST_TIMEOUT:-200} timeout $(( $(left) - 40 )) bash tests/gpu/run_gpu_tests.sh > "$logs/tests.out" 2>&1
note "tests: rc $?, $(( $(date +%s) - t0 )) s: $(tail -n 1 "$logs/tests.out")"
grep -E "^test_gpu|FAIL|^not ok" "$logs/tests.out" | head -40 >> "$sum"
grep -h "^not ok" "$logs"/tests/*.log* 2>/dev/null | head -20 >> "$sum"
IFS=';' read -r -a sets <<< "${FA_GT_ARGS:---only prefill --dim 256 --quick --no-ceilings --no-check --filter prefill-paged;--only prefill --dim 128 --block 3 --quick --no-ceilings --no-check --filter prefill-paged}"
i=0
for args in "${sets[@]}"; do
    i=$((i + 1))
    for rep in 1 2; do
        for fam in auto mma_sync; do
            [ "$(left)" -gt 20 ] || { note "bench set $i: skipped (time)"; break 3; }
            # shellcheck disable=SC2086
            timeout $(( $(left) - 10 )) "$b/bench/bench_gpu" $args --family $fam \
                --csv "$logs/bench_${i}_${fam}_$rep.csv" > "$top/bench_${i}_${fam}_$rep.txt" 2>&1
        done
    done
done
python3 - "$logs" <<'PY' | tee -a "$sum"
import csv, glob, os, re, statistics, sys
t = {}
for p in glob.glob(os.path.join(sys.argv[1], "bench_*_*_*.csv")):
    fam = re.match(r"bench_\d+_(auto|mma_sync)_\d+\.csv", os.path.basename(p)).group(1)
    for r in csv.DictReader(open(p)):
        if r.get("time_us"):
            t.setdefault(r["name"], {}).setdefault(fam, []).append(float(r["time_us"]))
print("%-58s %12s %12s %8s" % ("row (us, median of 2)", "auto", "mma_sync", "auto/mma"))
for n, v in t.items():
    a = statistics.median(v["auto"]) if "auto" in v else 0
    m = statistics.median(v["mma_sync"]) if "mma_sync" in v else 0
    print("%-58s %12.1f %12.1f %8s" % (n, a, m, "%.3f" % (a / m) if a and m else "-"))
PY
IFS=';' read -r -a sans <<< "${FA_GT_SANRUNS:-}"
csan=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for s in "${sans[@]}"; do
    read -r -a w <<< "$s"
    [ ${#w[@]} -ge 2 ] || continue
    [ "$(left)" -gt 30 ] || { note "sanitizer ${w[*]}: skipped (time)"; continue; }
    t0=$(date +%s)
    timeout $(( $(left) - 10 )) "$csan" --tool "${w[0]}" --error-exitcode 9 "$b/tests/gpu/${w[1]}" "${w[@]:2}" \
        > "$logs/san_${w[0]}_${w[1]}.txt" 2>&1
    note "sanitizer ${w[*]}: rc $?, $(( $(date +%s) - t0 )) s: $(grep -E "ERROR SUMMARY|passed, .* failed" "$logs/san_${w[0]}_${w[1]}.txt" | tr '\n' ' ')"
done
note "total $(( $(date +%s) - start )) s"
