#!/usr/bin/env bash
# tools/gpu_variants.sh - one GPU-machine call: the tree against variants of it, on the same
# bench_gpu rows, in one machine session (so that the copy ceiling and the clocks are shared).
#
# A variant is a list of exact text replacements (file, old, new) in a copy of the tree, from a
# spec file: tools/variants/NAME.py defines VARIANTS = {"name": [(path, old, new), ...], ...}; a
# pattern that is not in its file exactly once stops the run. Every tree (the tree itself as
# "tree", then each variant) builds bench_gpu for sm_90a at -Dhead_dims=64,128,256 in parallel;
# then each bench argument set runs on every tree in turn, twice (tree, v1, ..., tree, v1, ...),
# and the table gives each row's median time per tree and its ratio to the tree's.
#
#   tools/gpu_variants.sh SPEC.py "bench args" ["bench args" ...]
#   (FA_VAR_ONLY="a b": only those variants of the spec; FA_VAR_HEADS=128: build only those
#   head sizes, default 64,128,256 — bench args must then keep to them)
#
# $OUT/variants.txt (the table), every log in $OUT/variant_logs.tgz.
set -u
cd "$(dirname "$0")/.."
spec=$1; shift
top=${OUT:-/tmp/fa-var}; out=$top/logs; mkdir -p "$out"
finish() { cp "$out/variants.txt" "$top/variants.txt" 2>/dev/null; tar czf "$top/variant_logs.tgz" -C "$out" . 2>/dev/null && rm -rf "$out"; }
trap finish EXIT
root=$(pwd)
names=$(python3 - "$spec" <<'PY'
import os, sys, runpy
only = os.environ.get("FA_VAR_ONLY", "").split()
print(" ".join(k for k in runpy.run_path(sys.argv[1])["VARIANTS"] if not only or k in only))
PY
) || exit 1
echo "== tools/gpu_variants.sh $spec at $(date -u '+%Y-%m-%d %H:%M:%S UTC'): tree $names" | tee "$out/variants.txt"
for v in $names; do
    t=/tmp/fa-var-$v; rm -rf "$t"; mkdir -p "$t"
    tar cf - --exclude='./build*' --exclude=./.git . | tar xf - -C "$t"
    python3 tools/apply_variant.py "$spec" "$v" "$t" | tee -a "$out/variants.txt" || exit 1
done
build() { # tree name
    (cd "$1" && { [ -f build-var/build.ninja ] || meson setup build-var -Dcuda=enabled -Dtests=false -Dnccl=disabled -Dgpu_arch=sm_90a \
        -Dhead_dims=${FA_VAR_HEADS:-64,128,256} --buildtype=release > "$out/setup_$2.txt" 2>&1; } &&
        timeout 400 ninja -C build-var bench/bench_gpu > "$out/build_$2.txt" 2>&1)
}
s=$(date +%s); pids=()
build "$root" tree & pids+=($!)
for v in $names; do build /tmp/fa-var-$v $v & pids+=($!); done
rc=0; for p in "${pids[@]}"; do wait $p || rc=1; done
echo "builds: rc $rc, $(( $(date +%s) - s )) s" | tee -a "$out/variants.txt"
[ $rc -eq 0 ] || { tail -n 20 "$out"/setup_*.txt "$out"/build_*.txt | grep -E "error|FAILED|ERROR" | head; exit 1; }
bin() { [ "$1" = tree ] && echo "$root/build-var/bench/bench_gpu" || echo "/tmp/fa-var-$1/build-var/bench/bench_gpu"; }
i=0
for args in "$@"; do
    i=$((i + 1))
    for rep in 1 2; do
        for v in tree $names; do
            # shellcheck disable=SC2086
            timeout 120 "$(bin $v)" $args --csv "$out/r${i}_${v}_$rep.csv" > "$out/r${i}_${v}_$rep.txt" 2>&1
            echo "args $i ($args) $v rep $rep: rc $?" >> "$out/variants.txt"
        done
    done
done
python3 - "$out" "$#" tree $names <<'PY' | tee -a "$out/variants.txt"
import csv, os, statistics, sys
out, nargs, trees = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
for i in range(1, nargs + 1):
    t = {}
    for v in trees:
        for rep in (1, 2):
            p = os.path.join(out, "r%d_%s_%d.csv" % (i, v, rep))
            if not os.path.exists(p):
                continue
            for r in csv.DictReader(open(p)):
                if r.get("time_us"):
                    t.setdefault(r["name"], {}).setdefault(v, []).append(float(r["time_us"]))
    print("\nargs %d: median of 2 runs, us (ratio to tree)" % i)
    print("%-58s" % "row" + "".join("%16s" % v for v in trees))
    for n, d in t.items():
        if "tree" not in d:
            continue
        base = statistics.median(d["tree"])
        cells = []
        for v in trees:
            if v in d:
                m = statistics.median(d[v])
                cells.append("%9.2f" % m + ("%7s" % "" if v == "tree" else " (%4.2f)" % (m / base)))
            else:
                cells.append("%16s" % "-")
        print("%-58s" % n[:58] + "".join(cells))
PY
