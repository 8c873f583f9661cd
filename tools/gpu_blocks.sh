#!/usr/bin/env bash
# tools/gpu_blocks.sh BUILD_DIR - bench_gpu's quick decode and prefill rows (head 128, bf16 and
# fp8 caches) at block size 1 and at the default 16, from one build (meson, CUDA enabled; the
# script builds bench/bench_gpu in it), then a table of the rows side by side: time at block 1,
# time at block 16, their ratio. Logs and CSVs to $OUT.
set -u
b=${1:-build-gpu}
out=${OUT:-/tmp/fa-blocks}
mkdir -p "$out"
ninja -C "$b" bench/bench_gpu > "$out/build.txt" 2>&1 || { tail -n 20 "$out/build.txt"; echo "0 passed, 1 failed"; exit 1; }
args="--only decode,prefill --dim 128 --kv bf16,fp8 --heads 32/8 --batch 1,64 --ctx 8192,32768 --quick"
"$b/bench/bench_gpu" $args --csv "$out/bs16.csv" > "$out/bs16.txt" 2>&1; r1=$?
"$b/bench/bench_gpu" $args --no-ceilings --block 1 --csv "$out/bs1.csv" > "$out/bs1.txt" 2>&1; r2=$?
python3 - "$out/bs16.csv" "$out/bs1.csv" <<'PY'
import csv, sys
def load(f):
    d = {}
    for r in csv.DictReader(open(f)):
        if r["category"] in ("decode", "prefill") and r["time_us"]:
            d[r["name"].replace(" bs=1", "")] = (float(r["time_us"]), r["check"])
    return d
a, b = load(sys.argv[1]), load(sys.argv[2])
print("%-56s %12s %12s %7s  %s" % ("row", "bs16_us", "bs1_us", "1/16", "checks"))
for n in a:
    if n in b:
        print("%-56s %12.2f %12.2f %7.3f  %s/%s" % (n, a[n][0], b[n][0], b[n][0] / a[n][0], a[n][1], b[n][1]))
PY
fails=$(cat "$out"/bs16.txt "$out"/bs1.txt | grep -c FAIL)
[ $r1 -eq 0 ] && [ $r2 -eq 0 ] && [ "$fails" -eq 0 ] && echo "2 passed, 0 failed" || echo "$(( (r1 == 0) + (r2 == 0) )) passed, $(( (r1 != 0) + (r2 != 0) + fails )) failed"
