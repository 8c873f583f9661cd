#!/usr/bin/env bash
# tools/gpu_decode.sh - one GPU-machine call for the multi-warp decode tile (decode_mw.cu).
#
# "A" is the tree as it is; "B" is a copy with the tile switched off by sed (the packed decode
# tile and its planner constants, as before the tile). Both are built for sm_90a at
# -Dhead_dims=64,128,256 in parallel. Jobs, in order (each bounded in time):
#   tests   A: test_gpu_attention, test_gpu_checks, test_gpu_forward, test_gpu_graph
#   san     A: compute-sanitizer memcheck and racecheck on test_gpu_attention "multi-warp decode"
#   bench   bench_gpu --only decode (BENCH_ARGS, default the 32/8 grid at heads 64/128/256, bf16
#           and fp8) for A, B, A, B while the time allows; then a table of time and B/A
#   splits  A: bench_gpu --only splits (SPLITS_ARGS): the planner against the best fixed split
#   blocks  A: the decode grid (BENCH_ARGS) at block 16 and at block 1, then time and 1/16 per row
#
#   tools/gpu_decode.sh [JOB...]     default: tests san bench
#
# Logs under $OUT (dec_*.txt / .csv, summary.txt; everything in $OUT/decode_logs.tgz).
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/fa-decode}; mkdir -p "$out"
jobs=("$@"); [ ${#jobs[@]} -eq 0 ] && jobs=(tests san bench)
want() { [[ " ${jobs[*]} " == *" $1 "* ]]; }
sum() { echo "$*" | tee -a "$out/summary.txt"; }
bench_args=${BENCH_ARGS:---only decode --dim 64,128,256 --kv bf16,fp8 --heads 32/8}
splits_args=${SPLITS_ARGS:---only splits}
deadline=$(( $(date +%s) + ${FA_DECODE_BUDGET:-560} ))
left() { echo $(( deadline - $(date +%s) )); }
root=$(pwd)
btree=/tmp/fa-decode-B
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > "$out/machine.txt" 2>&1
sum "== tools/gpu_decode.sh ${jobs[*]} at $(date -u '+%Y-%m-%d %H:%M:%S UTC'), tree $(git rev-parse --short HEAD 2>/dev/null || echo ?)$(git diff --quiet 2>/dev/null || echo +dirty)"

rm -rf "$btree"; mkdir -p "$btree"
tar cf - --exclude='./build*' --exclude=./.git . | tar xf - -C "$btree"
python3 - "$btree/backends/cuda/attention/attention.cu" <<'EOF' || exit 1
import sys
p = sys.argv[1]
s = open(p).read()
for pat, rep in [("    if (dec_ok && a->min_seqlen_q <= 1 && mw_accepts(", "    if (false && mw_accepts("),
                 ("        if (mw_ctas > 0) {", "        if (false) {")]:
    if s.count(pat) != 1:
        sys.exit("gpu_decode.sh: %r is no longer in attention.cu once (update the pattern)" % pat)
    s = s.replace(pat, rep)
open(p, "w").write(s)
print("B tree: the multi-warp decode tile switched off")
EOF
build_one() { # tree dir
    (cd "$1" && meson setup "$2" -Dcuda=enabled -Dtests=false -Dgpu_arch=sm_90a -Dhead_dims=64,128,256 \
        --buildtype=release > "$out/setup_$3.txt" 2>&1 && timeout 300 ninja -C "$2" > "$out/build_$3.txt" 2>&1)
}
s=$(date +%s)
build_one "$root" build-decA A & pa=$!
build_one "$btree" build-decB B & pb=$!
wait $pa; ra=$?; wait $pb; rb=$?
sum "builds: A rc $ra, B rc $rb, $(( $(date +%s) - s )) s"
grep -h "decode_mw_kernel" -A2 "$out/build_A.txt" 2>/dev/null | grep -E "Used|spill" | head -4
[ $ra -eq 0 ] && [ $rb -eq 0 ] || { grep -hE "error|FAILED" "$out"/build_*.txt | head -20; exit 1; }
A=$root/build-decA; B=$btree/build-decB

if want tests; then
    for t in test_gpu_attention test_gpu_checks test_gpu_forward test_gpu_graph; do
        s=$(date +%s)
        timeout 200 "$A/tests/gpu/$t" > "$out/dec_$t.txt" 2>&1
        sum "$t: rc $?, $(( $(date +%s) - s )) s, $(tail -n 1 "$out/dec_$t.txt")"
        grep -E "^not ok" -A3 "$out/dec_$t.txt" | head -24
    done
fi
if want san; then
    for tool in memcheck racecheck; do
        s=$(date +%s)
        timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 "$A/tests/gpu/test_gpu_attention" --quick \
            "multi-warp decode" > "$out/dec_san_$tool.txt" 2>&1
        sum "$tool (multi-warp decode): rc $?, $(( $(date +%s) - s )) s, $(grep -E 'ERROR SUMMARY|passed, ' "$out/dec_san_$tool.txt" | tr '\n' ' ')"
    done
fi
if want bench; then
    for r in A1 B1 A2 B2; do
        [ "$(left)" -gt 60 ] || { sum "bench $r: skipped (time)"; continue; }
        bin=$A; [ "${r:0:1}" = B ] && bin=$B
        s=$(date +%s)
        # shellcheck disable=SC2086
        timeout $(( $(left) - 20 )) "$bin/bench/bench_gpu" $bench_args --csv "$out/dec_$r.csv" > "$out/dec_$r.txt" 2>&1
        sum "bench $r: rc $?, $(( $(date +%s) - s )) s"
    done
    python3 - "$out" <<'EOF' | tee -a "$out/summary.txt"
import csv, os, sys
out = sys.argv[1]
runs = {}
for r in ("A1", "B1", "A2", "B2"):
    p = os.path.join(out, "dec_%s.csv" % r)
    if os.path.exists(p):
        with open(p) as f:
            rows = list(csv.reader(f))
        if rows:
            h = rows[0]
            ni, ti, ci, ki = h.index("name"), h.index("time_us"), h.index("frac_copy"), h.index("check")
            runs[r] = {x[ni]: (x[ti], x[ci], x[ki]) for x in rows[1:] if len(x) > ki}
print("%-50s %8s %8s %8s %8s %6s %6s  B/A" % ("row (us)", "A1", "B1", "A2", "B2", "copyA", "check"))
for n in runs.get("A1", {}):
    v = [runs.get(r, {}).get(n, ("", "", ""))[0] for r in ("A1", "B1", "A2", "B2")]
    a = [float(x) for x in (v[0], v[2]) if x]
    b = [float(x) for x in (v[1], v[3]) if x]
    ratio = "%.3f" % ((sum(b) / len(b)) / (sum(a) / len(a))) if a and b else "-"
    print("%-50s %8s %8s %8s %8s %6s %6s  %s" % (n[:50], v[0], v[1], v[2], v[3], runs["A1"][n][1][:6],
                                                runs["A1"][n][2], ratio))
EOF
fi
if want splits; then
    s=$(date +%s)
    # shellcheck disable=SC2086
    timeout $(( $(left) > 30 ? $(left) - 10 : 20 )) "$A/bench/bench_gpu" $splits_args --csv "$out/dec_splits.csv" > "$out/dec_splits.txt" 2>&1
    sum "splits: rc $?, $(( $(date +%s) - s )) s"
    grep -E "planner" "$out/dec_splits.txt" | head -40 | tee -a "$out/summary.txt"
fi
if want blocks; then
    for bs in 16 1; do
        s=$(date +%s)
        # shellcheck disable=SC2086
        timeout $(( $(left) > 30 ? $(left) - 10 : 20 )) "$A/bench/bench_gpu" $bench_args --block $bs \
            --csv "$out/dec_bs$bs.csv" > "$out/dec_bs$bs.txt" 2>&1
        sum "blocks $bs: rc $?, $(( $(date +%s) - s )) s"
    done
    python3 - "$out" <<'EOF' | tee -a "$out/summary.txt"
import csv, os, re, sys
out = sys.argv[1]
def rows(bs):
    p = os.path.join(out, "dec_bs%d.csv" % bs)
    if not os.path.exists(p):
        return {}
    with open(p) as f:
        return {re.sub(r" bs=\d+", "", r["name"]): r for r in csv.DictReader(f) if r["category"] == "decode"}
r16, r1 = rows(16), rows(1)
worst = 0.0
print("%-44s %9s %9s %6s %6s" % ("row (us)", "block 16", "block 1", "1/16", "check"))
for n, a in r16.items():
    b = r1.get(n)
    if not b or not a["time_us"] or not b["time_us"]:
        continue
    q = float(b["time_us"]) / float(a["time_us"])
    worst = max(worst, q)
    print("%-44s %9s %9s %6.3f %6s" % (n[:44], a["time_us"], b["time_us"], q, b["check"]))
print("block 1 / block 16: worst %.3f" % worst)
EOF
fi
tar czf "$out/decode_logs.tgz" -C "$out" --exclude=decode_logs.tgz . 2>/dev/null
