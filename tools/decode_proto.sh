#!/usr/bin/env bash
# tools/decode_proto.sh - one GPU-machine call for the standalone multi-warp decode prototype
# (backends/cuda/attention/decode_mw/, tools/decode_proto.cu): build it with nvcc directly (no
# meson), run the correctness cases (fp32 reference, batch invariance) and the timed sizes
# (fraction of a device-to-device copy). Prints a compact summary; everything goes to
# "$OUT/decode" as two files: logs.tar.gz (build.txt, run.txt, ptxas.txt, machine.txt) and
# summary.txt. Every step has a time limit, and together they end by ~85 s after the start
# (tools/gpu_session.sh gives the job 95 s), so the summary and the tarball are always written.
#
#   bash tools/decode_proto.sh
set -u
t0=$(date +%s)
left() { echo $((85 - ($(date +%s) - t0))); } # seconds left of the script's budget
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-/tmp/fa-out}/decode
mkdir -p "$out"
work=$(mktemp -d /tmp/decode_proto.XXXXXX)
nvcc=${NVCC:-nvcc}
command -v "$nvcc" >/dev/null 2>&1 || nvcc=/usr/local/cuda/bin/nvcc

{
    git rev-parse --short HEAD 2>/dev/null
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv 2>&1
    "$nvcc" --version | tail -n 2
} > "$work/machine.txt"

echo "== build"
timeout 50 "$nvcc" -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xptxas -v \
    tools/decode_proto.cu -o "$work/decode_proto" > "$work/build.txt" 2>&1
brc=$?
# the ptxas report of the prototype kernels: one line each (registers; stack and spills must be 0)
awk '/Compiling entry function .*fa_dmw/ { match($0, /function \x27[^\x27]*\x27/); f = substr($0, RSTART + 10, RLENGTH - 11) }
     f != "" && /stack frame/ { st = $1 " stack, " $5 " spill st, " $9 " spill ld" }
     f != "" && /Used [0-9]+ registers/ { match($0, /Used [0-9]+ registers/); printf "%s: %s, %s\n", f, substr($0, RSTART, RLENGTH), st; f = "" }' \
    "$work/build.txt" > "$work/ptxas.txt"
cat "$work/ptxas.txt"
grep -iE "warning|error" "$work/build.txt" | head -n 20
echo "build rc=$brc"

rrc=99
if [ $brc -eq 0 ]; then
    echo "== run"
    lim=$(($(left) - 3))
    [ $lim -lt 5 ] && lim=5
    timeout -k 2 "$lim" "$work/decode_proto" > "$work/run.txt" 2>&1
    rrc=$?
    if [ $rrc -eq 124 ] || [ $rrc -eq 137 ]; then # killed: still end with the count line
        np=$(grep -c '^PASS' "$work/run.txt")
        nf=$(grep -c '^FAIL' "$work/run.txt")
        { echo "FATAL: decode_proto killed after ${lim} s"; echo "$np passed, $((nf + 1)) failed"; } >> "$work/run.txt"
    fi
    # compact: the failures, the probes and the timed rows, then the count line
    grep -E "^(device|INFO|FAIL|FATAL|TIME)|first bad" "$work/run.txt"
    echo "PASS lines: $(grep -c '^PASS' "$work/run.txt") (all in run.txt)"
    grep -E '^[0-9]+ passed, [0-9]+ failed$' "$work/run.txt" | tail -n 1
    echo "run rc=$rrc (limit ${lim} s)"
else
    echo "0 passed, 1 failed"
fi

{
    cat "$work/machine.txt"
    echo "build rc=$brc run rc=$rrc"
    cat "$work/ptxas.txt"
    [ -f "$work/run.txt" ] && grep -E "^(device|PASS|FAIL|INFO|TIME|FATAL)|first bad|passed, " "$work/run.txt"
} > "$out/summary.txt" 2>&1
rm -f "$work/decode_proto"
tar -C "$work" -czf "$out/logs.tar.gz" . 2>/dev/null
rm -rf "$work"
[ $brc -eq 0 ] && [ $rrc -eq 0 ]
