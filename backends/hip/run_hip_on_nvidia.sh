#!/usr/bin/env bash
# backends/hip/run_hip_on_nvidia.sh - the HIP backend's sources on an NVIDIA GPU, whole GPU suite.
#
# Builds the HIP backend (backends/cuda/*.cu through vendor.cuh, the portable attention of
# attention/attention_portable.cu) as HIP on its NVIDIA platform: nvcc with
# -D__HIP_PLATFORM_NVIDIA__ and Debian's HIP 5.2 headers (patched for the nvcc at hand by
# prepare_hip_nvidia_headers.py), FA_PORTABLE_GROUP=64 (AMD's wave-64 group logic on 32-lane
# warps). Links every GPU test program (tests/gpu/test_gpu_{ops,attention,forward,checks,graph}.c,
# unchanged; test_gpu_checks with FA_GPU_TEST_ATTENTION_PORTABLE=1) against that build instead of
# the CUDA one, plus tests/gpu/test_gpu_portable.cu as HIP (test_gpu_portable) and as plain CUDA
# (test_gpu_portable_cuda: the toolkit's bf16 / fp8 in the kernel), and runs them all, full
# case sets, against the CPU reference: the programs split into shards (--shard K/N,
# FA_GPU_TEST_SHARD) that run side by side, one per core, so the whole call fits one device call.
#
#   bash backends/hip/run_hip_on_nvidia.sh run      # GPU machine: build (parallel), run, summary
#   bash backends/hip/run_hip_on_nvidia.sh build    # build only (a dry run where there is no GPU)
#   bash backends/hip/run_hip_on_nvidia.sh headers  # copy /usr/include/hip (Debian's
#                                                   # libamdhip64-dev) into hip-debian-headers/
#
# The GPU machine has no HIP package: the build takes the headers from /usr/include/hip when it
# is there, else from hip-debian-headers/hip (ignored through .git/info/exclude; the device call
# must carry it), and patches a copy in build-hip-nvidia/hip-headers for that machine's nvcc.
#
# Output: build-hip-nvidia/ (ignored by git: /build*/): hip-headers/, obj/, bin/, logs/. With
# $OUT set, exactly one file comes back: $OUT/hip/hip_logs.tgz (build logs, one log per program
# shard, summary.txt). Stdout: a compact summary (one row per program, the failing cases, any
# shard stopped by the deadline with the last case it reported); last line `N passed, M failed`
# summed over everything (a build failure, or a shard that dies, times out or prints no summary,
# adds 1 failure). Exit status 0 exactly when M == 0.
#
# Environment: FA_HIPNV_ARCH (default sm_90a), FA_HIPNV_DEADLINE_S (default 195: seconds from
# the start, build included, by which every program is stopped), FA_HIPNV_SHARDS (default
# "test_gpu_attention=5 test_gpu_ops=3 test_gpu_checks=1 test_gpu_forward=1 test_gpu_graph=1
# test_gpu_portable=3 test_gpu_portable_cuda=2": program=shards, also selects the programs;
# test_gpu_forward and test_gpu_graph have no shards), FA_HIPNV_QUICK=1 (the quick sets instead
# of the full ones), FA_HIPNV_NO_BUILD=1 (run the last build's programs), FA_GPU_TEST_SEED
# (passed on).
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root" || exit 1
mode=${1:-run}
B=build-hip-nvidia
arch=${FA_HIPNV_ARCH:-sm_90a}
deadline=${FA_HIPNV_DEADLINE_S:-195}
quick=${FA_HIPNV_QUICK:-0}
shard_plan=${FA_HIPNV_SHARDS:-test_gpu_attention=5 test_gpu_ops=3 test_gpu_checks=1 test_gpu_forward=1 test_gpu_graph=1 test_gpu_portable=3 test_gpu_portable_cuda=2}
logs=$B/logs
t_start=$SECONDS
progs_c="test_gpu_ops test_gpu_attention test_gpu_forward test_gpu_checks test_gpu_graph"

if ! command -v nvcc >/dev/null 2>&1; then
    for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
        if [ -x "$d/nvcc" ]; then PATH="$d:$PATH"; break; fi
    done
fi
export PATH

say() { echo "hip-on-nvidia: $*"; }

# The logs as one tarball in $OUT/hip (the device call brings back only a few files).
pack_logs() {
    [ -n "${OUT:-}" ] || return 0
    mkdir -p "$OUT/hip" && tar czf "$OUT/hip/hip_logs.tgz" -C "$B" logs 2>/dev/null ||
        say "could not write $OUT/hip/hip_logs.tgz"
}

# A failure before any program ran: one failure, logs packed, the count line last.
fail_early() {
    say "$*"
    echo "$* " >> "$logs/summary.txt"
    pack_logs
    echo "0 passed, 1 failed"
    exit 1
}

headers() {
    [ -f /usr/include/hip/hip_runtime.h ] || { say "no /usr/include/hip: apt-get install libamdhip64-dev"; return 1; }
    rm -rf hip-debian-headers/hip && mkdir -p hip-debian-headers && cp -r /usr/include/hip hip-debian-headers/ || return 1
    { dpkg -s libamdhip64-dev 2>/dev/null | grep -E '^(Package|Version):'
      echo "copied from /usr/include/hip by backends/hip/run_hip_on_nvidia.sh headers"; } > hip-debian-headers/SOURCE.txt
    say "hip-debian-headers/: $(du -sh hip-debian-headers | cut -f1) ($(grep Version hip-debian-headers/SOURCE.txt))"
}

# ---- build -----------------------------------------------------------------------------------
jobs_pid=()
jobs_name=()
bg() {   # name log command...: a background build job
    local name=$1 log=$2
    shift 2
    "$@" > "$log" 2>&1 &
    jobs_pid+=($!)
    jobs_name+=("$name")
}
wait_jobs() {   # 0 when every job of the batch succeeded; prints the failing ones' logs
    local i bad=0
    for i in "${!jobs_pid[@]}"; do
        if ! wait "${jobs_pid[$i]}"; then
            bad=1
            say "build step failed: ${jobs_name[$i]} (log $logs/build_${jobs_name[$i]}.log):"
            tail -n 25 "$logs/build_${jobs_name[$i]}.log"
        fi
    done
    jobs_pid=()
    jobs_name=()
    return $bad
}

build() {
    local t0=$SECONDS
    mkdir -p "$B/obj" "$B/bin" "$logs" || return 1
    rm -f "$B"/obj/*.o "$B"/obj/*.a "$B"/bin/* "$logs"/build_*.log
    command -v nvcc >/dev/null 2>&1 || { say "nvcc not found (PATH=$PATH)"; return 1; }
    command -v gcc >/dev/null 2>&1 || { say "gcc not found"; return 1; }
    command -v python3 >/dev/null 2>&1 || { say "python3 not found"; return 1; }
    local nvv
    nvv=$(nvcc --version | tail -n 1)
    # the HIP headers, patched for this nvcc (redone when the nvcc differs from the last patch)
    local src=${FA_HIPNV_HIP_SRC:-}
    if [ -z "$src" ]; then
        if [ -f /usr/include/hip/hip_runtime.h ]; then src=/usr/include/hip; else src=$root/hip-debian-headers/hip; fi
    fi
    [ -f "$src/hip_runtime.h" ] || {
        say "no HIP headers: neither /usr/include/hip nor hip-debian-headers/hip (carry hip-debian-headers; make it with '$0 headers')"
        return 1
    }
    if [ ! -f "$B/hip-headers/include/hip/hip_runtime.h" ] || [ "$(cat "$B/hip-headers/NVCC.txt" 2>/dev/null)" != "$nvv" ]; then
        python3 "$here/prepare_hip_nvidia_headers.py" "$B/hip-headers" --src "$src" > "$logs/build_headers.log" 2>&1 || {
            say "patching the HIP headers ($src) for $nvv failed:"
            tail -n 25 "$logs/build_headers.log"
            return 1
        }
        echo "$nvv" > "$B/hip-headers/NVCC.txt"
    fi
    local cuda_root
    cuda_root=$(dirname "$(dirname "$(command -v nvcc)")")
    local inc=(-I. -Ibackends/cuda -Ibackends/cuda/attention -Ibackends/common -Ibackends/cpu -Itests/gpu)
    local hip=(-D__HIP_PLATFORM_NVIDIA__ -isystem "$B/hip-headers/include" -DFA_PORTABLE_GROUP=64
               -DFA_CUDA_HAVE_ATTENTION=1)
    local gen="-gencode=arch=compute_${arch#sm_},code=$arch"
    local nv=(-std=c++17 -O2 "$gen" -Xcompiler -Wall,-Wextra)
    local cflags=(-std=c99 -O2 -Wall -Wextra -D_GNU_SOURCE -DFA_GPU_TEST_ATTENTION_PORTABLE=1 "${inc[@]}" -I"$B"
                  -isystem "$cuda_root/include")
    printf '#define FA_HAVE_CUDA 1\n#define FA_HAVE_NCCL 0\n' > "$B/fa_build_config.h"
    local f n p
    # everything compiles side by side: the longest job (test_gpu_portable.cu) sets the time
    bg test_gpu_portable "$logs/build_test_gpu_portable.log" \
        nvcc "${nv[@]}" "${hip[@]}" "${inc[@]}" -c tests/gpu/test_gpu_portable.cu -o "$B/obj/test_gpu_portable.o"
    bg test_gpu_portable_cuda "$logs/build_test_gpu_portable_cuda.log" \
        nvcc "${nv[@]}" "${inc[@]}" -c tests/gpu/test_gpu_portable.cu -o "$B/obj/test_gpu_portable_cuda.o"
    for f in attention/attention_portable fa_cuda cache_kernels merge_kernels; do
        n=$(basename "$f")
        bg "hip_$n" "$logs/build_hip_$n.log" \
            nvcc "${nv[@]}" "${hip[@]}" "${inc[@]}" -c "backends/cuda/$f.cu" -o "$B/obj/hip_$n.o"
    done
    bg flashattn "$logs/build_flashattn.log" gcc "${cflags[@]}" -c flashattn.c -o "$B/obj/flashattn.o"
    bg fa_cpu "$logs/build_fa_cpu.log" gcc "${cflags[@]}" -c backends/cpu/fa_cpu.c -o "$B/obj/fa_cpu.o"
    bg fa_fake_comm "$logs/build_fa_fake_comm.log" gcc "${cflags[@]}" -c backends/cpu/fa_fake_comm.c -o "$B/obj/fa_fake_comm.o"
    for p in $progs_c; do
        [ -f "tests/gpu/$p.c" ] || { say "tests/gpu/$p.c is missing"; return 1; }
        bg "$p" "$logs/build_$p.log" gcc "${cflags[@]}" -c "tests/gpu/$p.c" -o "$B/obj/$p.o"
    done
    wait_jobs || return 1
    ar rcs "$B/obj/libflashattn_hipnv.a" "$B"/obj/hip_*.o > "$logs/build_ar.log" 2>&1 || { cat "$logs/build_ar.log"; return 1; }
    local libs=("$B/obj/libflashattn_hipnv.a" "$B/obj/fa_cpu.o" "$B/obj/fa_fake_comm.o" "$B/obj/flashattn.o"
                -L"$cuda_root/lib64" -L"$cuda_root/targets/x86_64-linux/lib" -lcudart_static -lstdc++ -lm -ldl -lrt -lpthread)
    for p in $progs_c; do
        bg "link_$p" "$logs/build_link_$p.log" gcc "$B/obj/$p.o" "${libs[@]}" -o "$B/bin/$p"
    done
    for p in test_gpu_portable test_gpu_portable_cuda; do
        bg "link_$p" "$logs/build_link_$p.log" \
            nvcc "$gen" "$B/obj/$p.o" "$B/obj/fa_cpu.o" "$B/obj/flashattn.o" -o "$B/bin/$p" -lm
    done
    wait_jobs || return 1
    local warn
    warn=$(cat "$logs"/build_*.log | grep -ci "warning")
    say "built in $((SECONDS - t0)) s ($nvv, $arch, headers from $src; $warn warning lines in the build logs): $(ls "$B/bin" | tr '\n' ' ')"
    [ "$warn" = 0 ] || grep -hi "warning" "$logs"/build_*.log | head -n 10
}

# ---- run -------------------------------------------------------------------------------------
run() {
    local pass=0 fail=0 p k n spec
    if ! nvidia-smi -L > "$logs/gpu.txt" 2>&1; then
        cat "$logs/gpu.txt"
        fail_early "no NVIDIA GPU here (nvidia-smi -L failed)"
    fi
    head -n 2 "$logs/gpu.txt"
    local left=$((deadline - (SECONDS - t_start) - 5))
    [ "$left" -ge 30 ] || left=30
    say "running $(echo "$shard_plan" | wc -w) programs, full sets$([ "$quick" != 0 ] && echo ' (no: quick sets)'), every shard stopped after $left s"
    declare -A pid started label ppass pfail pshards ptime pnote
    local order=() porder=()
    for spec in $shard_plan; do
        p=${spec%%=*}
        n=${spec#*=}
        case $p in test_gpu_forward | test_gpu_graph) n=1 ;; esac   # no shards in these
        if [ ! -x "$B/bin/$p" ]; then   # a row with one failure
            porder+=("$p"); ppass[$p]=0; pfail[$p]=1; pshards[$p]=0; ptime[$p]=0; pnote[$p]=" [not built: $B/bin/$p]"
            continue
        fi
        for ((k = 0; k < n; ++k)); do
            local key="$p.$k"
            order+=("$key")
            label[$key]="$p$([ "$n" -gt 1 ] && echo " shard $k/$n")"
            started[$key]=$SECONDS
            if [ "$n" -gt 1 ]; then
                FA_GPU_TEST_QUICK=$quick FA_GPU_TEST_SHARD=$k/$n timeout "$left" "$B/bin/$p" > "$logs/$key.log" 2>&1 &
            else
                FA_GPU_TEST_QUICK=$quick timeout "$left" "$B/bin/$p" > "$logs/$key.log" 2>&1 &
            fi
            pid[$key]=$!
        done
    done
    local key rc line np nf el
    for key in "${order[@]}"; do
        wait "${pid[$key]}"
        rc=$?
        el=$((SECONDS - ${started[$key]}))
        p=${key%.*}
        [ -n "${pshards[$p]:-}" ] || { porder+=("$p"); ppass[$p]=0; pfail[$p]=0; pshards[$p]=0; ptime[$p]=0; pnote[$p]=""; }
        line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$logs/$key.log" | tail -n 1)
        if [ -n "$line" ]; then np=${line%% passed*}; nf=${line#*passed, }; nf=${nf%% failed}; else np=0; nf=0; fi
        if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
            # stopped by the deadline: its counts so far, plus one failure; say where it was
            np=$(grep -cE '^ok ' "$logs/$key.log")
            nf=$(($(grep -cE '^not ok ' "$logs/$key.log") + 1))
            pnote[$p]+=" [${label[$key]}: stopped after ${el} s; last: $(grep -E '^(not )?ok ' "$logs/$key.log" | tail -n 1 | cut -c1-90)]"
        elif [ -z "$line" ]; then
            nf=$((nf + 1))
            pnote[$p]+=" [${label[$key]}: exit $rc, no summary line: $(tail -n 1 "$logs/$key.log" | cut -c1-90)]"
        elif [ "$rc" != 0 ] && [ "$nf" = 0 ]; then
            nf=1
            pnote[$p]+=" [${label[$key]}: exit $rc]"
        elif [ "$np" = 0 ] && [ "$nf" = 0 ]; then   # e.g. "1..0 # SKIP no CUDA device"
            nf=1
            pnote[$p]+=" [${label[$key]}: ran no case: $(grep -m1 -E '^1\.\.' "$logs/$key.log" | cut -c1-60)]"
        fi
        ppass[$p]=$((ppass[$p] + np))
        pfail[$p]=$((pfail[$p] + nf))
        pshards[$p]=$((pshards[$p] + 1))
        [ "$el" -le "${ptime[$p]}" ] || ptime[$p]=$el
    done
    {
        echo "== HIP source path on NVIDIA ($(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), FA_PORTABLE_GROUP=64, $([ "$quick" != 0 ] && echo quick || echo full) sets, $((SECONDS - t_start)) s in all)"
        printf '%-24s %6s %6s %6s %6s  %s\n' program passed failed shards slowest note
        for p in "${porder[@]}"; do
            printf '%-24s %6s %6s %6s %5ss %s\n' "$p" "${ppass[$p]}" "${pfail[$p]}" "${pshards[$p]}" "${ptime[$p]}" "${pnote[$p]}"
            pass=$((pass + ppass[$p]))
            fail=$((fail + pfail[$p]))
        done
    } > "$logs/summary.txt"
    # the failing cases, a few per program, with their first FAIL detail
    for p in "${porder[@]}"; do
        [ "${pfail[$p]}" = 0 ] && continue
        echo "--- $p: failures"
        cat "$logs/$p".*.log 2>/dev/null | grep -E '^not ok |FAIL' | head -n 12 | cut -c1-200
    done
    cat "$logs/summary.txt"
    echo "$pass passed, $fail failed" >> "$logs/summary.txt"
    pack_logs
    echo "$pass passed, $fail failed"
    [ "$fail" = 0 ]
}

case "$mode" in
headers) headers ;;
build)
    mkdir -p "$logs"
    build
    ;;
run)
    rm -rf "$logs" && mkdir -p "$logs"
    if [ "${FA_HIPNV_NO_BUILD:-0}" = 1 ] && [ -x "$B/bin/test_gpu_portable" ]; then
        say "FA_HIPNV_NO_BUILD=1: running the programs of the last build"
    else
        build || fail_early "build failed (logs: $logs/build_*.log)"
    fi
    run
    ;;
*)
    echo "usage: $0 run|build|headers"
    exit 2
    ;;
esac
