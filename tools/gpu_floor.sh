#!/usr/bin/env bash
# tools/gpu_floor.sh - one GPU-machine call for the decode floor (fp8 caches faster than bf16 on
# every row of the decode grid). Builds the tree (CUDA backend, bench_gpu and the GPU test
# programs, every width) and, side by side, bench_gpu of a variant of it (FA_FL_SPEC /
# FA_FL_VARIANT, heads 64 and 128); then the launch-bound rows (1 x 1k, heads 64 / 128, 32/8 and
# 64/8 heads, bf16 and fp8) on both, interleaved, FA_FL_REPS times (default 3); the whole decode
# grid on the tree; the GPU test programs FA_FL_PROGRAMS (default test_gpu_attention
# test_gpu_checks; one kernel family, no sanitizers) while the budget lasts.
#   FA_FL_BUDGET seconds (default 540). $OUT: summary.txt, floor_*.csv, grid.csv / grid.txt, the
#   logs in floor_logs.tgz.
set -u
cd "$(dirname "$0")/.."
top=${OUT:-/tmp/fa-floor}; logs=$top/logs; mkdir -p "$logs"
start=$(date +%s)
left() { echo $(( ${FA_FL_BUDGET:-540} - ($(date +%s) - start) )); }
sum=$top/summary.txt
note() { echo "$*" | tee -a "$sum"; }
trap 'tar czf "$top/floor_logs.tgz" -C "$logs" . 2>/dev/null && rm -rf "$logs"' EXIT
note "== tools/gpu_floor.sh at $(date -u '+%F %T UTC')"
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader >> "$sum" 2>&1
command -v meson > /dev/null 2>&1 || meson() { python3 -m mesonbuild.mesonmain "$@"; }
cfg="-Dcuda=enabled -Dtests=false -Dnccl=disabled -Dgpu_arch=sm_90a --buildtype=release"
vt=/tmp/fa-floor-var vpid=
if [ -n "${FA_FL_SPEC:-}" ]; then
    rm -rf "$vt"; mkdir -p "$vt"
    tar cf - --exclude='./build*' --exclude=./.git . | tar xf - -C "$vt"
    python3 tools/apply_variant.py "$FA_FL_SPEC" "${FA_FL_VARIANT:?a variant of FA_FL_SPEC}" "$vt" >> "$sum" || exit 1
    # shellcheck disable=SC2086
    (cd "$vt" && meson setup build-v $cfg -Dhead_dims=64,128 > "$logs/setup_v.log" 2>&1 &&
        ninja -C build-v bench/bench_gpu > "$logs/build_v.log" 2>&1) &
    vpid=$!
fi
t0=$(date +%s)
# shellcheck disable=SC2086
meson setup build-fl $cfg > "$logs/setup.log" 2>&1 && timeout $(( $(left) - 200 )) ninja -C build-fl > "$logs/build.log" 2>&1
rc=$?; note "build: rc $rc, $(( $(date +%s) - t0 )) s"
[ $rc -eq 0 ] || { tail -n 30 "$logs/build.log" >> "$sum"; exit 1; }
vrc=1
if [ -n "$vpid" ]; then wait "$vpid"; vrc=$?; note "variant build: rc $vrc"; fi
rows="--only decode --batch 1 --ctx 1k --dim 64,128 --heads 32/8,64/8 --kv bf16,fp8 --reps 200 --no-ceilings"
for rep in $(seq "${FA_FL_REPS:-3}"); do
    # shellcheck disable=SC2086
    build-fl/bench/bench_gpu $rows --csv "$top/floor_tree_$rep.csv" > "$logs/floor_tree_$rep.txt" 2>&1
    # shellcheck disable=SC2086
    [ $vrc -ne 0 ] || "$vt/build-v/bench/bench_gpu" $rows --csv "$top/floor_var_$rep.csv" > "$logs/floor_var_$rep.txt" 2>&1
done
python3 - "$top" <<'PY' | tee -a "$sum"
import csv, glob, os, statistics, sys
t = {}
for p in sorted(glob.glob(os.path.join(sys.argv[1], "floor_*.csv"))):
    tree = os.path.basename(p).split("_")[1]
    for r in csv.DictReader(open(p)):
        if r.get("time_us"):
            t.setdefault(r["name"], {}).setdefault(tree, []).append(float(r["time_us"]))
print("launch-bound rows, median us (runs): tree / variant")
for n, d in t.items():
    a = statistics.median(d.get("tree", [float("nan")]))
    b = statistics.median(d["var"]) if "var" in d else float("nan")
    print("%-56s %8.3f (%d) %8.3f (%d)  %.3f" % (n, a, len(d.get("tree", [])), b, len(d.get("var", [])), a / b))
PY
t0=$(date +%s)
timeout 180 build-fl/bench/bench_gpu --only decode --csv "$top/grid.csv" > "$top/grid.txt" 2>&1
note "grid: rc $?, $(( $(date +%s) - t0 )) s"
python3 tools/grid_tables.py "$top/grid.csv" > "$top/grid_tables.md" 2>&1
python3 - "$top/grid.csv" <<'PY' | tee -a "$sum"
import csv, statistics, sys
k = {}
for r in csv.DictReader(open(sys.argv[1])):
    if r["category"] == "decode" and r["time_us"]:
        k.setdefault((r["hq"], r["hkv"], r["d"], r["batch"], r["ctx"]), {})[r["kv"]] = float(r["time_us"])
pairs = {s: v["fp8"] / v["bf16"] for s, v in k.items() if "fp8" in v and "bf16" in v}
bad = sorted((v, s) for s, v in pairs.items() if v >= 1.0)
print("fp8 / bf16 time: %d pairs, median %.3f, max %.3f; fp8 not faster on %d" % (
    len(pairs), statistics.median(pairs.values()), max(pairs.values()), len(bad)))
for v, s in bad:
    print("  %s/%s d=%s b=%s ctx=%s: %.3f (%.2f / %.2f us)" % (s + (v, k[s]["fp8"], k[s]["bf16"])))
PY
progs=${FA_FL_PROGRAMS:-test_gpu_attention test_gpu_checks}
[ "$(left)" -gt 60 ] || { note "tests: skipped (time)"; exit 0; }
t0=$(date +%s)
OUT=$logs/tests FA_GPU_BUILD_DIR=build-fl FA_GPU_SANITIZE=0 FA_GPU_SECOND_FAMILY=0 FA_GPU_PROGRAMS="$progs" \
    FA_GPU_TIMEOUT=$(( $(left) - 20 )) timeout $(( $(left) - 10 )) bash tests/gpu/run_gpu_tests.sh > "$logs/tests.out" 2>&1
note "tests: rc $?, $(( $(date +%s) - t0 )) s: $(tail -n 1 "$logs/tests.out")"
grep -E "^test_gpu|FAIL|^not ok" "$logs/tests.out" | head -40 >> "$sum"
