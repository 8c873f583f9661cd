#!/usr/bin/env bash
# backends/hip/run_hip_on_nvidia.sh - the HIP source path on an NVIDIA GPU.
#
# Builds the HIP backend's sources (backends/cuda/*.cu through vendor.cuh, with the portable
# attention of attention/attention_portable.cu) as HIP on its NVIDIA platform: nvcc with
# -D__HIP_PLATFORM_NVIDIA__ and Debian's HIP 5.2 headers (patched for this nvcc by
# prepare_hip_nvidia_headers.py), FA_PORTABLE_GROUP=64 (AMD's wave-64 group logic on 32-lane
# warps), then links the GPU suite (tests/gpu/test_gpu_*.c, unchanged) against that build
# instead of the CUDA one, plus tests/gpu/test_gpu_portable.cu (32- and 64-lane groups), and
# runs them against the CPU reference.
#
#   bash backends/hip/run_hip_on_nvidia.sh build   # here (needs nvcc, gcc, libamdhip64-dev)
#   bash backends/hip/run_hip_on_nvidia.sh run     # on the GPU machine: run what was built;
#                                                  # rebuild there first if a binary will not start
#   bash backends/hip/run_hip_on_nvidia.sh all     # build, then run
#   bash backends/hip/run_hip_on_nvidia.sh stage DIR   # copy HEAD's tree + the build into DIR
#
# The device tool copies the session's own checkout, not a git worktree: from a worktree, stage
# into an ignored folder of that checkout (e.g. /work/main/build-hip-nvidia-run, ignored by
# /build*/), carry that folder, and run `cd build-hip-nvidia-run && bash
# backends/hip/run_hip_on_nvidia.sh run` there (what the 2026-12-01 H200 run did).
#
# Output: build-hip-nvidia/ (ignored by git: /build*/): hip-headers/, obj/, bin/. Logs go to
# $OUT when set (the device tool brings them back), else build-hip-nvidia/logs. Last line:
# `N passed, M failed` summed over the programs (a program that dies or prints no summary
# counts as one failure). Environment: FA_HIPNV_ARCH (default sm_90a), FA_HIPNV_QUICK (default
# 1: the programs' quick sets; test_gpu_portable* run their full sets unless
# FA_HIPNV_PORTABLE_QUICK=1), FA_HIPNV_TIMEOUT (seconds per program, default 150),
# FA_HIPNV_PROGRAMS (names, default all). test_gpu_portable_cuda is the same test built as plain
# CUDA (no HIP headers: the toolkit's bf16 / fp8 inside the kernel).
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root" || exit 1
mode=${1:-all}
B=build-hip-nvidia
arch=${FA_HIPNV_ARCH:-sm_90a}
quick=${FA_HIPNV_QUICK:-1}
tmo=${FA_HIPNV_TIMEOUT:-150}
logs=${OUT:-$B/logs}
mkdir -p "$logs" "$B/obj" "$B/bin"
if ! command -v nvcc >/dev/null 2>&1; then
    for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
        if [ -x "$d/nvcc" ]; then PATH="$d:$PATH"; break; fi
    done
fi

progs_c="test_gpu_ops test_gpu_attention test_gpu_forward test_gpu_checks"

build() {
    local t0=$SECONDS
    if [ ! -f "$B/hip-headers/include/hip/hip_runtime.h" ]; then
        python3 "$here/prepare_hip_nvidia_headers.py" "$B/hip-headers" || return 1
    fi
    local cuda_root
    cuda_root=$(dirname "$(dirname "$(command -v nvcc)")")
    local inc=(-I. -Ibackends/cuda -Ibackends/cuda/attention -Ibackends/common -Ibackends/cpu -Itests/gpu)
    local hip=(-D__HIP_PLATFORM_NVIDIA__ -isystem "$B/hip-headers/include" -DFA_PORTABLE_GROUP=64
               -DFA_CUDA_HAVE_ATTENTION=1)
    local nv=(-std=c++17 -O2 "-gencode=arch=compute_${arch#sm_},code=$arch" -Xcompiler -Wall,-Wextra)
    local pids=() f
    for f in fa_cuda cache_kernels merge_kernels attention/attention_portable; do
        nvcc "${nv[@]}" "${hip[@]}" "${inc[@]}" -c "backends/cuda/$f.cu" -o "$B/obj/hip_$(basename $f).o" \
            > "$B/obj/hip_$(basename $f).log" 2>&1 &
        pids+=($!)
    done
    nvcc "${nv[@]}" "${hip[@]}" "${inc[@]}" -c tests/gpu/test_gpu_portable.cu -o "$B/obj/test_gpu_portable.o" \
        > "$B/obj/test_gpu_portable.log" 2>&1 &
    pids+=($!)
    # the same test as plain CUDA (the toolkit's bf16 / fp8 in the kernel, no HIP headers)
    nvcc "${nv[@]}" "${inc[@]}" -c tests/gpu/test_gpu_portable.cu -o "$B/obj/test_gpu_portable_cuda.o" \
        > "$B/obj/test_gpu_portable_cuda.log" 2>&1 &
    pids+=($!)
    local cflags=(-std=c99 -O2 -D_GNU_SOURCE "${inc[@]}" -I"$B" -isystem "$cuda_root/include")
    printf '#define FA_HAVE_CUDA 1\n#define FA_HAVE_NCCL 0\n' > "$B/fa_build_config.h"
    gcc "${cflags[@]}" -c flashattn.c -o "$B/obj/flashattn.o" || return 1
    gcc "${cflags[@]}" -c backends/cpu/fa_cpu.c -o "$B/obj/fa_cpu.o" || return 1
    gcc "${cflags[@]}" -c backends/cpu/fa_fake_comm.c -o "$B/obj/fa_fake_comm.o" || return 1
    local ok=0 p
    for p in "${pids[@]}"; do wait "$p" || ok=1; done
    cat "$B"/obj/*.log
    [ "$ok" = 0 ] || { echo "nvcc failed"; return 1; }
    ar rcs "$B/obj/libflashattn_hipnv.a" "$B"/obj/hip_*.o
    local libs=("$B/obj/libflashattn_hipnv.a" "$B/obj/fa_cpu.o" "$B/obj/fa_fake_comm.o" "$B/obj/flashattn.o"
                -L"$cuda_root/lib64" -L"$cuda_root/targets/x86_64-linux/lib" -lcudart_static -lstdc++ -lm -ldl -lrt -lpthread)
    for p in $progs_c; do
        [ -f "tests/gpu/$p.c" ] || continue
        gcc "${cflags[@]}" "tests/gpu/$p.c" "${libs[@]}" -o "$B/bin/$p" || return 1
    done
    nvcc "-gencode=arch=compute_${arch#sm_},code=$arch" "$B/obj/test_gpu_portable.o" "$B/obj/fa_cpu.o" "$B/obj/flashattn.o" \
        -o "$B/bin/test_gpu_portable" -lm || return 1
    nvcc "-gencode=arch=compute_${arch#sm_},code=$arch" "$B/obj/test_gpu_portable_cuda.o" "$B/obj/fa_cpu.o" \
        "$B/obj/flashattn.o" -o "$B/bin/test_gpu_portable_cuda" -lm || return 1
    echo "built in $((SECONDS - t0)) s: $(ls "$B/bin" | tr '\n' ' ')"
}

run() {
    local pass=0 fail=0 rows=() p
    nvidia-smi -L 2>&1 | head -2
    if [ ! -x "$B/bin/test_gpu_portable" ]; then
        echo "no binaries: building here"; build || { echo "0 passed, 1 failed"; return 1; }
    fi
    # binaries built elsewhere that cannot load here (a missing library): rebuild once
    if ldd "$B/bin/test_gpu_portable" 2>&1 | grep -q "not found"; then
        echo "binaries do not load here: rebuilding"; rm -f "$B"/obj/*.o; build || { echo "0 passed, 1 failed"; return 1; }
    fi
    local list=${FA_HIPNV_PROGRAMS:-test_gpu_portable test_gpu_portable_cuda $progs_c}
    # the programs side by side on the one GPU (each is small in its quick set): wall time is
    # the slowest one's, which is what device time is charged for
    declare -A pid t_start
    for p in $list; do
        [ -x "$B/bin/$p" ] || continue
        t_start[$p]=$SECONDS
        local q=$quick
        case $p in test_gpu_portable*) q=${FA_HIPNV_PORTABLE_QUICK:-0} ;; esac   # small: full set
        FA_GPU_TEST_QUICK=$q timeout "$tmo" "$B/bin/$p" > "$logs/$p.log" 2>&1 &
        pid[$p]=$!
    done
    for p in $list; do
        [ -n "${pid[$p]:-}" ] || continue
        wait "${pid[$p]}"
        local rc=$? line np nf
        line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$logs/$p.log" | tail -n 1)
        if [ -n "$line" ]; then np=${line%% passed*}; nf=${line#*passed, }; nf=${nf%% failed}; else np=0; nf=0; fi
        [ "$rc" = 0 ] || [ "$nf" != 0 ] || nf=1
        pass=$((pass + np)); fail=$((fail + nf))
        rows+=("$(printf '%-22s %6s %6s  rc %-3s %4ss' "$p" "$np" "$nf" "$rc" "$((SECONDS - ${t_start[$p]}))")")
        echo "--- $p (rc $rc): failures"
        grep -E '^not ok|^# .*(FAIL|fail|error)' "$logs/$p.log" | head -n 15
    done
    echo "== HIP source path on NVIDIA ($(date -u '+%Y-%m-%d %H:%M:%S UTC'), FA_PORTABLE_GROUP=64, quick=$quick)"
    printf '%s\n' "${rows[@]}" | tee "$logs/summary.txt"
    echo "$pass passed, $fail failed" | tee -a "$logs/summary.txt"
    [ "$fail" = 0 ]
}

stage() {
    local dest=${1:?stage needs a folder}
    rm -rf "$dest" && mkdir -p "$dest/$B" || return 1
    git archive HEAD | tar x -C "$dest" || return 1
    cp -r "$B/bin" "$B/hip-headers" "$dest/$B/" || return 1
    du -sh "$dest"
}

case "$mode" in
build) build ;;
stage) stage "${2:-}" ;;
run) run ;;
all) build && run ;;
*) echo "usage: $0 build|run|all|stage DIR"; exit 2 ;;
esac
