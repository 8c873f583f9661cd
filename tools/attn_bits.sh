#!/usr/bin/env bash
# tools/attn_bits.sh - are the CUDA attention op's bits those of a base commit? One GPU-machine
# call: build the base tree and this tree (-Dgpu_arch=sm_90a -Dhead_dims=64,128,256
# -Dtests=false, all cores, both at once), run tools/attn_bits from both, diff the lines
# (prints "BITS IDENTICAL: N cases" or the differing cases), then bench_gpu --quick --only
# decode,prefill from new, base, new, base (the two runs of a tree give the noise).
#
#   tools/attn_bits.sh prepare [COMMIT]   here, before the device call: the base tree into
#                                         .ab/base (git archive COMMIT, default: merge-base of
#                                         HEAD and main), .ab/ listed in .git/info/exclude, so
#                                         that the device call carries it (carry: [".ab/base"])
#   tools/attn_bits.sh [run]              on the GPU machine: everything else, logs to $OUT
#
# Exit status: 0 when the bits are identical, 1 otherwise (or a build failed).
set -u
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
base=$root/.ab/base
mode=${1:-run}

if [ "$mode" = prepare ]; then
    rev=${2:-$(git merge-base HEAD main)}
    rm -rf "$base" && mkdir -p "$base" || exit 1
    git archive "$rev" | tar -x -C "$base" || exit 1
    echo "$rev" > "$base/.ab_rev"
    echo "$(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!.ab' || echo ' + uncommitted changes')" > "$base/.ab_new_rev"
    excl="$(git rev-parse --git-common-dir)/info/exclude"
    mkdir -p "$(dirname "$excl")"
    grep -qx '/.ab/' "$excl" 2>/dev/null || echo '/.ab/' >> "$excl"
    echo "base $(git log --oneline -1 "$rev") -> $base ($(du -sh "$base" | cut -f1))"
    git status --short --ignored .ab | head -3
    exit 0
fi

out=${OUT:-$root/.ab/out}
mkdir -p "$out"
[ -d "$base/backends" ] || { echo "no base tree in $base: run tools/attn_bits.sh prepare first"; exit 1; }
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
    [ -x "$d/nvcc" ] && { PATH="$d:$PATH"; break; }
done
cuda=$(dirname "$(dirname "$(command -v nvcc)")")
jobs=$(nproc 2>/dev/null || echo 8)
echo "base $(cat "$base/.ab_rev" 2>/dev/null), new $(cat "$base/.ab_new_rev" 2>/dev/null || echo 'working tree'), $jobs cores" | tee "$out/summary.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$out/gpu.txt" 2>&1

# ---- builds: both trees at once, each with every core (the link steps do not overlap much)
build_one() {   # tree builddir name
    local tree=$1 dir=$2 name=$3
    (cd "$tree" && rm -rf "$dir" &&
     meson setup "$dir" -Dcuda=enabled -Dnccl=disabled -Dtests=false -Dgpu_arch=sm_90a \
         -Dhead_dims=64,128,256 > "$out/setup_$name.txt" 2>&1 &&
     ninja -C "$dir" -j "$jobs" bench/bench_gpu > "$out/build_$name.txt" 2>&1 &&
     test -s "$dir/backends/cuda/libflashattn_cuda.a" &&
     cc -std=c99 -O2 -I. -Ibackends/cuda -c "$root/tools/attn_bits.c" -o "$dir/attn_bits.o" \
         > "$out/attn_bits_$name.txt" 2>&1 &&
     cc -o "$dir/attn_bits" "$dir/attn_bits.o" "$dir/backends/cuda/libflashattn_cuda.a" \
         "$dir/libflashattn.a" -L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64" -lcudart -lstdc++ -lm \
         -lpthread -ldl -lrt >> "$out/attn_bits_$name.txt" 2>&1)
}
s=$(date +%s)
build_one "$root" build-new new & pn=$!
build_one "$base" build-base base & pb=$!
wait $pn; rn=$?; wait $pb; rb=$?
echo "builds: new rc $rn, base rc $rb, $(( $(date +%s) - s )) s" | tee -a "$out/summary.txt"
if [ $rn -ne 0 ] || [ $rb -ne 0 ]; then
    tail -20 "$out"/setup_*.txt "$out"/build_*.txt "$out"/attn_bits_*.txt
    exit 1
fi

# ---- bits
timeout 120 "$root/build-new/attn_bits" > "$out/bits_new.txt" 2> "$out/bits_new.err"; bn=$?
timeout 120 "$base/build-base/attn_bits" > "$out/bits_base.txt" 2> "$out/bits_base.err"; bb=$?
echo "attn_bits new rc $bn: $(tail -1 "$out/bits_new.err"); base rc $bb: $(tail -1 "$out/bits_base.err")" | tee -a "$out/summary.txt"
n=$(wc -l < "$out/bits_new.txt")
ok=1
# rc 1: some case FAILED (its line says why, and is compared like the others); 2: no backend
if [ $bn -ge 2 ] || [ $bb -ge 2 ] || [ "$n" -eq 0 ] || [ ! -s "$out/bits_base.txt" ]; then
    ok=0
    echo "BITS NOT COMPARED: attn_bits failed (bits_*.err, bits_*.txt)" | tee -a "$out/summary.txt"
elif cmp -s "$out/bits_base.txt" "$out/bits_new.txt"; then
    echo "BITS IDENTICAL: $n cases" | tee -a "$out/summary.txt"
else
    ok=0
    echo "BITS DIFFER (base < > new):" | tee -a "$out/summary.txt"
    diff "$out/bits_base.txt" "$out/bits_new.txt" | grep '^[<>]' | head -60 | tee -a "$out/summary.txt"
fi

# ---- speed: new, base, new, base
for r in new1 base1 new2 base2; do
    exe=$root/build-new/bench/bench_gpu
    [ "${r:0:4}" = base ] && exe=$base/build-base/bench/bench_gpu
    timeout 150 "$exe" --quick --only decode,prefill --csv "$out/bench_$r.csv" > "$out/bench_$r.txt" 2>&1 ||
        echo "bench $r rc=$?"
done
python3 - "$out" <<'EOF' | tee -a "$out/summary.txt"
import csv, os, sys
out = sys.argv[1]
runs = {}
for r in ("new1", "base1", "new2", "base2"):
    p = os.path.join(out, "bench_%s.csv" % r)
    if not os.path.exists(p):
        continue
    with open(p) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        continue
    tcol, ncol = "time_us", "name"
    if tcol not in rows[0] or ncol not in rows[0]:
        print("bench csv %s: no time_us / name column (%s)" % (r, ",".join(rows[0])))
        continue
    runs[r] = {row[ncol]: float(row[tcol]) for row in rows if row.get(tcol, "") not in ("", None)}
if len(runs) < 4:
    print("bench: %d of 4 runs have a table (see bench_*.txt)" % len(runs))
    sys.exit(0)
print("%-60s %9s %9s %9s %9s %7s %7s" % ("row (us)", "new1", "base1", "new2", "base2", "new/base", "noise"))
for name in runs["new1"]:
    v = [runs[r].get(name) for r in ("new1", "base1", "new2", "base2")]
    if None in v:
        continue
    nb = (v[0] + v[2]) / (v[1] + v[3])
    noise = max(abs(v[0] - v[2]) / max(v[0], v[2]), abs(v[1] - v[3]) / max(v[1], v[3]))
    print("%-60s %9.2f %9.2f %9.2f %9.2f %7.3f %6.1f%%" % (name[:60], v[0], v[1], v[2], v[3], nb, 100 * noise))
EOF
exit $((1 - ok))
