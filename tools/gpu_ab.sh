#!/usr/bin/env bash
# tools/gpu_ab.sh - one GPU-machine call that measures what the always-on index checks and the
# NaN fix-up cost, and shows that the NaN-at-a-mask-edge cases fail without the fix-up.
#
# "A" is the tree as it is; "B" is a copy with the checks taken out by sed (the block-id range
# check of the attention loader, the slot range check of the cache write, the epilogue's NaN
# scan and fix-up): the kernels as they were before issue 10 / the NaN fix. Both build
# bench_gpu (and B test_gpu_attention) for -Dhead_dims=64,128,256; the decode grid rows at those
# dims run A, B, A, B so that the spread of the two A runs gives the noise. Then B's
# test_gpu_attention runs the "nan at a mask edge" cases (expected to fail) and A's (pass).
# FA_AB_TAKE_OUT (default block,nan,slot) picks what B takes out: e.g. FA_AB_TAKE_OUT=block
# measures the block-id check alone (then B's NaN cases pass too).
#
#   tools/gpu_ab.sh ["bench args"]     default: --only decode,cache --dim 64,128,256 --kv bf16
#
# Logs go to $OUT (ab_A1.txt, ab_B1.txt, ..., nan_A.txt, nan_B.txt); a table of the decode rows
# last.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/fa-ab}; mkdir -p "$out"
args=${1:---only decode,cache --dim 64,128,256 --kv bf16}
dims=64,128,256
jobs=$(nproc 2>/dev/null || echo 8)
root=$(pwd)
btree=/tmp/fa-ab-tree
rm -rf "$btree"; mkdir -p "$btree"
tar cf - --exclude='./build*' --exclude=./.git --exclude=./.old . | tar xf - -C "$btree"
k="$btree/backends/cuda/attention/attention_kernel.cuh"
c="$btree/backends/cuda/cache_kernels.cu"
python3 - "$k" "$c" "${FA_AB_TAKE_OUT:-block,nan,slot}" <<'EOF' || exit 1
import sys
k, c, take = sys.argv[1], sys.argv[2], sys.argv[3].split(',')
s = open(k).read()
t = open(c).read()
pats = [  # (file, pattern, replacement, what)
    ('k', '        const bool in = static_cast<uint64_t>(id) < p.id_limit;\n        bad |= static_cast<uint32_t>(!in & (id >= 0));',
     '        const bool in = id >= 0;', 'block-id check', 'block'),
    ('k', '    const bool edge = info->edge != 0;', '    const bool edge = false;', 'NaN fix-up', 'nan'),
    ('c', '    if (slot >= p.num_slots) {', '    if (false) {', 'slot check', 'slot'),
]
for f, pat, rep, what, key in pats:
    if key not in take:
        print('B tree: %s kept' % what)
        continue
    src = s if f == 'k' else t
    n = src.count(pat)
    if n == 0:
        sys.exit('gpu_ab.sh: the %s is no longer in the source as %r (update the pattern)' % (what, pat))
    src = src.replace(pat, rep)
    if f == 'k':
        s = src
    else:
        t = src
    print('B tree: %s taken out (%d place%s)' % (what, n, '' if n == 1 else 's'))
open(k, 'w').write(s)
open(c, 'w').write(t)
EOF
build_one() {   # tree dir targets...
    local tree=$1 dir=$2; shift 2
    (cd "$tree" && meson setup "$dir" -Dcuda=enabled -Dtests=false -Dgpu_arch=sm_90a -Dhead_dims=$dims \
        --buildtype=release > "$out/setup_$(basename "$dir").txt" 2>&1 &&
     ninja -C "$dir" -j "$jobs" "$@" > "$out/build_$(basename "$dir").txt" 2>&1)
}
s=$(date +%s)
build_one "$root" build-abA bench/bench_gpu tests/gpu/test_gpu_attention & pa=$!
build_one "$btree" build-abB bench/bench_gpu tests/gpu/test_gpu_attention & pb=$!
wait $pa; ra=$?; wait $pb; rb=$?
echo "builds: A rc $ra, B rc $rb, $(( $(date +%s) - s )) s"
[ $ra -eq 0 ] && [ $rb -eq 0 ] || { tail -20 "$out"/build_build-ab*.txt; exit 1; }
for r in A1 B1 A2 B2; do
    tree=$root; [ "${r:0:1}" = B ] && tree=$btree
    # shellcheck disable=SC2086
    timeout 200 "$tree/build-ab${r:0:1}/bench/bench_gpu" $args --csv "$out/ab_$r.csv" > "$out/ab_$r.txt" 2>&1 || echo "bench $r rc=$?"
done
"$btree/build-abB/tests/gpu/test_gpu_attention" "nan at a mask edge" > "$out/nan_B.txt" 2>&1; echo "B (no fix-up) nan cases: rc $? $(tail -1 "$out/nan_B.txt")"
"$root/build-abA/tests/gpu/test_gpu_attention" "nan at a mask edge" > "$out/nan_A.txt" 2>&1; echo "A (fix-up)    nan cases: rc $? $(tail -1 "$out/nan_A.txt")"
python3 - "$out" <<'EOF'
import csv, os, sys
out = sys.argv[1]
runs = {}
for r in ("A1", "B1", "A2", "B2"):
    p = os.path.join(out, "ab_%s.csv" % r)
    if not os.path.exists(p):
        continue
    with open(p) as f:
        rows = list(csv.reader(f))
    if not rows:
        continue
    hdr = rows[0]
    try:
        ni, ti = hdr.index("name"), hdr.index("time_us")
    except ValueError:
        print("csv header:", hdr); continue
    runs[r] = {row[ni]: row[ti] for row in rows[1:] if len(row) > ti}
names = [n for n in runs.get("A1", {})]
print("%-58s %9s %9s %9s %9s  B/A" % ("row (time_us)", "A1", "B1", "A2", "B2"))
for n in names:
    v = [runs.get(r, {}).get(n, "") for r in ("A1", "B1", "A2", "B2")]
    try:
        a = (float(v[0]) + float(v[2])) / 2; b = (float(v[1]) + float(v[3])) / 2
        ratio = "%.3f" % (b / a)
    except ValueError:
        ratio = "-"
    print("%-58s %9s %9s %9s %9s  %s" % (n[:58], v[0], v[1], v[2], v[3], ratio))
EOF
