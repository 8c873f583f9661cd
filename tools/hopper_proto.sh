#!/usr/bin/env bash
# tools/hopper_proto.sh - one GPU-machine call for the standalone sm_90a prefill prototype
# (backends/cuda/attention/sm90/, tools/hopper_proto.cu): build it with nvcc directly (no meson),
# run the correctness cases and the timed sizes, then count the HGMMA (wgmma) and UTMALDG (TMA
# load) instructions in the kernels' SASS. Prints the summary; everything goes to "$OUT/hopper"
# as two files: logs.tar.gz (build.txt, run.txt, sass_counts.txt, sass.txt, machine.txt) and
# summary.txt. About 30 s on an H200 (build ~10 s). Every step has a time limit, and together
# they end by ~75 s after the start (tools/gpu_session.sh gives the job 80 s), so the summary and
# the tarball are always written.
#
#   bash tools/hopper_proto.sh
set -u
t0=$(date +%s)
left() { echo $((75 - ($(date +%s) - t0))); } # seconds left of the script's budget
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-/tmp/fa-out}/hopper
mkdir -p "$out"
work=$(mktemp -d /tmp/hopper_proto.XXXXXX)
nvcc=${NVCC:-nvcc}
command -v "$nvcc" >/dev/null 2>&1 || nvcc=/usr/local/cuda/bin/nvcc
cuobjdump=$(dirname "$(command -v "$nvcc")")/cuobjdump
command -v cuobjdump >/dev/null 2>&1 && cuobjdump=cuobjdump

{
    git rev-parse --short HEAD 2>/dev/null
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv 2>&1
    "$nvcc" --version | tail -n 2
} > "$work/machine.txt"

echo "== build"
timeout 45 "$nvcc" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xptxas -v \
    tools/hopper_proto.cu -o "$work/hopper_proto" > "$work/build.txt" 2>&1
brc=$?
# the ptxas report of the two prototype kernels (registers at entry; spills must be 0)
grep -A 3 "Compiling entry function '_ZN7fa_sm90" "$work/build.txt" | grep -E "entry|spill|registers"
grep -iE "warning|error" "$work/build.txt" | head -n 20
echo "build rc=$brc"

rrc=99
if [ $brc -eq 0 ]; then
    echo "== run"
    lim=$(($(left) - 10))
    [ $lim -lt 5 ] && lim=5
    timeout "$lim" "$work/hopper_proto" > "$work/run.txt" 2>&1
    rrc=$?
    if [ $rrc -eq 124 ] || [ $rrc -eq 137 ]; then # killed: still end with the count line
        np=$(grep -c '^PASS' "$work/run.txt")
        nf=$(grep -c '^FAIL' "$work/run.txt")
        { echo "FATAL: hopper_proto killed after ${lim} s"; echo "$np passed, $((nf + 1)) failed"; } >> "$work/run.txt"
    fi
    cat "$work/run.txt"
    echo "run rc=$rrc (limit ${lim} s)"

    echo "== SASS"
    if command -v "$cuobjdump" >/dev/null 2>&1; then
        lim=$(($(left) - 2))
        [ $lim -lt 2 ] && lim=2
        timeout "$lim" "$cuobjdump" --dump-sass "$work/hopper_proto" > "$work/sass.txt" 2>&1
        # per function: HGMMA, UTMALDG, SYNCS (mbarrier), USETMAXREG counts
        awk '/Function :/ { if (f != "") printf "%s HGMMA=%d UTMALDG=%d SYNCS=%d USETMAXREG=%d\n", f, h, t, s, r;
                            f = $3; h = t = s = r = 0 }
             /HGMMA/ { h++ } /UTMALDG/ { t++ } /SYNCS/ { s++ } /USETMAXREG/ { r++ }
             END { if (f != "") printf "%s HGMMA=%d UTMALDG=%d SYNCS=%d USETMAXREG=%d\n", f, h, t, s, r }' \
            "$work/sass.txt" | grep fa_sm90 > "$work/sass_counts.txt"
        cat "$work/sass_counts.txt"
        echo "HGMMA total: $(grep -c HGMMA "$work/sass.txt"), UTMALDG total: $(grep -c UTMALDG "$work/sass.txt")"
    else
        echo "no cuobjdump found" | tee "$work/sass_counts.txt"
    fi
fi

{
    cat "$work/machine.txt"
    echo "build rc=$brc run rc=$rrc"
    grep -A 3 "Compiling entry function '_ZN7fa_sm90" "$work/build.txt" | grep -E "entry|spill|registers"
    [ -f "$work/run.txt" ] && grep -E "^(device|kernel|PASS|FAIL|INFO|TIME|FATAL)|first bad|passed, " "$work/run.txt"
    [ -f "$work/sass_counts.txt" ] && cat "$work/sass_counts.txt"
} > "$out/summary.txt" 2>&1
rm -f "$work/hopper_proto"
tar -C "$work" -czf "$out/logs.tar.gz" . 2>/dev/null
rm -rf "$work"
[ $brc -eq 0 ] && [ $rrc -eq 0 ]
