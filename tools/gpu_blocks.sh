#!/usr/bin/env bash
# tools/gpu_blocks.sh BUILD_DIR - bench_gpu's quick decode and prefill rows (head 128, bf16 and
# fp8 caches) at block size 1 and at the default 16, from one build (meson, CUDA enabled; the
# script builds bench/bench_gpu in it), then a table of the rows side by side: time at block 1,
# time at block 16, their ratio; then both again with the blocks handed out in order
# (--blocks-in-order), which separates page locality from the kernel. Logs and CSVs to $OUT.
set -u
b=${1:-build-gpu}
out=${OUT:-/tmp/fa-blocks}
mkdir -p "$out"
ninja -C "$b" bench/bench_gpu > "$out/build.txt" 2>&1 || { tail -n 20 "$out/build.txt"; echo "0 passed, 1 failed"; exit 1; }
args="--only decode,prefill --dim 128 --kv bf16,fp8 --heads 32/8 --batch 1,64 --ctx 8192,32768 --quick"
"$b/bench/bench_gpu" $args --csv "$out/bs16.csv" > "$out/bs16.txt" 2>&1; r1=$?
"$b/bench/bench_gpu" $args --no-ceilings --block 1 --csv "$out/bs1.csv" > "$out/bs1.txt" 2>&1; r2=$?
# the same with the blocks in order: what the random permutation (page locality) costs
"$b/bench/bench_gpu" $args --no-ceilings --blocks-in-order --csv "$out/bs16o.csv" > "$out/bs16o.txt" 2>&1; r3=$?
"$b/bench/bench_gpu" $args --no-ceilings --block 1 --blocks-in-order --csv "$out/bs1o.csv" > "$out/bs1o.txt" 2>&1; r4=$?
python3 - "$out" <<'PY'
import csv, os, sys
def load(f):
    d = {}
    for r in csv.DictReader(open(f)):
        if r["name"].startswith(("decode", "prefill")) and r["time_us"]:
            n = r["name"].replace(" bs=1", "").replace(" inorder", "")
            d[n] = float(r["time_us"])
    return d
o = sys.argv[1]
runs = [load(os.path.join(o, f + ".csv")) for f in ("bs16", "bs1", "bs16o", "bs1o")]
print("%-48s %10s %10s %6s   %10s %10s %6s" % ("row (time_us)", "bs16", "bs1", "1/16", "bs16 ord", "bs1 ord", "1/16"))
for n in runs[0]:
    v = [r.get(n) for r in runs]
    f = lambda x: "%10.2f" % x if x else "%10s" % "-"
    q = lambda a, b: "%6.3f" % (b / a) if a and b else "%6s" % "-"
    print("%-48s %s %s %s   %s %s %s" % (n[:48], f(v[0]), f(v[1]), q(v[0], v[1]), f(v[2]), f(v[3]), q(v[2], v[3])))
PY
fails=$(cat "$out"/bs*.txt | grep -cE "^(decode|prefill).* FAIL")
bad=$(( (r1 != 0) + (r2 != 0) + (r3 != 0) + (r4 != 0) ))
echo "$(( 4 - bad )) passed, $(( bad + fails )) failed"
