#!/usr/bin/env bash
# backends/hip/emu/run_emu.sh - the portable attention kernel on the CPU, no GPU needed:
# tests/gpu/test_gpu_portable.cu (32- and 64-lane groups vs the CPU reference) compiled by g++
# against the emulation in vendor.cuh, with FA_WARP_SIZE 32 (NVIDIA: the 64-lane groups are two
# warps meeting in shared memory) and 64 (CDNA: one wavefront a group; 32-lane groups are half
# wavefronts). Prints both programs' output; last line `N passed, M failed` over both.
#   bash backends/hip/emu/run_emu.sh [quick]      (quick: a third of the attention cases)
# FA_EMU_WARP_SIZES (default "32 64"): the emulated warp sizes to build and run; FA_PORTABLE_CASE
# (the program's own filter): only the cases whose name contains it (CI: one case at 64).
set -u -o pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=$root/build-hip-emu
rm -rf "$work" && mkdir -p "$work"
cp "$here/vendor.cuh" "$here/emu_globals.cpp" "$work/"
cp "$root/backends/cuda/attention/attention_portable.cuh" "$root/backends/cuda/fa_cuda_internal.cuh" \
   "$root/backends/cuda/vendor_soft.cuh" "$root/tests/gpu/test_gpu_portable.cu" "$work/"
python3 "$here/prep.py" "$work/attention_portable.cuh" "$work/test_gpu_portable.cu" || exit 1
inc=(-I"$work" -I"$root" -I"$root/backends/common" -I"$root/backends/cpu")
gcc -std=c99 -O2 -D_GNU_SOURCE -I"$root" -c "$root/flashattn.c" -o "$work/flashattn.o" || exit 1
gcc -std=c99 -O2 -D_GNU_SOURCE -I"$root" -I"$root/backends/common" -c "$root/backends/cpu/fa_cpu.c" -o "$work/fa_cpu.o" || exit 1
pass=0; fail=0
for ws in ${FA_EMU_WARP_SIZES:-32 64}; do
    g++ -std=c++20 -O2 -D__HIPCC__ -DFA_WARP_SIZE=$ws "${inc[@]}" -x c++ "$work/test_gpu_portable.cu" -x none \
        "$work/emu_globals.cpp" "$work/fa_cpu.o" "$work/flashattn.o" -lpthread -lm -o "$work/emu$ws" || exit 1
    echo "== FA_WARP_SIZE=$ws (emulated on the CPU)"
    FA_GPU_TEST_QUICK=$([ "${1:-}" = quick ] && echo 1 || echo 0) "$work/emu$ws" | tee "$work/emu$ws.log"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$work/emu$ws.log" | tail -n 1)
    [ -n "$line" ] || line="0 passed, 1 failed"
    pass=$((pass + ${line%% passed*})); f=${line#*passed, }; fail=$((fail + ${f%% failed}))
done
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
