#!/usr/bin/env bash
# tests/gpu/run_gpu_tests.sh - the one script run on the GPU machine.
#
# Configures and builds the CUDA backend and the GPU suite (meson + ninja + nvcc; no Criterion:
# -Dtests=false), runs every GPU test program (tests/gpu/test_gpu_*), then every program under
# compute-sanitizer memcheck, racecheck, initcheck and synccheck (each program's quick set by
# default, see below), and prints a table and, last, `N passed, M failed` summed over all of
# it. Exit status 0 exactly when M == 0.
#
# Counting: a test program contributes the N and M of its own last `N passed, M failed` line
# (a program that exits non-zero with M == 0, or prints no such line, adds 1 failure); each
# sanitizer run counts as one check (passed: exit 0 and "ERROR SUMMARY: 0 errors").
#
# Logs (setup, build, one per program and sanitizer run, summary) go to $OUT when it is set,
# else to <build dir>/gpu-logs.
#
# Environment (all optional)
#   FA_GPU_BUILD_DIR   build directory (default build-cuda-gpu, in the repository root)
#   FA_GPU_ARCH        value of -Dgpu_arch (default sm_90a: the H200; the build default is
#                      sm_80,sm_90a)
#   FA_GPU_JOBS        ninja -j (default: the number of cores)
#   FA_GPU_TIMEOUT     seconds per test program (default 300)
#   FA_GPU_SANITIZE    0 skips the compute-sanitizer runs (default 1)
#   FA_GPU_PLAIN       0 skips the plain runs of the programs (only the sanitizer runs)
#   FA_GPU_SANITIZE_SET      quick (default: FA_GPU_TEST_QUICK=1) or full (every case)
#   FA_GPU_SANITIZE_TOOLS    tools to run (default "memcheck racecheck initcheck synccheck")
#   FA_GPU_SANITIZE_TIMEOUT  seconds per sanitizer run (default 300)
#   FA_GPU_SANITIZE_SHARDS   split each harness program's cases over N sanitizer processes per
#                            tool (--shard K/N; default 1); programs without the gt_ harness
#                            (test_gpu_forward, test_gpu_graph) run whole
#   FA_GPU_SHARDS      run each harness program's plain pass as N processes side by side, each
#                      on every N-th case (--shard K/N; default 4 with 8+ cores, else 1): the
#                      cases' CPU reference is what takes the time, and one GPU serves them all;
#                      the counts are summed, the logs are <program>.log.K
#   FA_GPU_SECOND_FAMILY     0 skips the second plain pass of the attention programs with
#                            FA_GPU_FAMILY=mma_sync (default 1: both kernel families tested)
#   FA_GPU_PROGRAMS          only these programs (space-separated names; default all)
#   FA_GPU_SANITIZE_PROGRAMS only these programs under the sanitizers (default: all of the run)
#   FA_GPU_TEST_SEED   random seed passed on to the programs
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root" || exit 1

build=${FA_GPU_BUILD_DIR:-build-cuda-gpu}
arch=${FA_GPU_ARCH:-sm_90a}
jobs=${FA_GPU_JOBS:-$(nproc 2>/dev/null || echo 4)}
prog_timeout=${FA_GPU_TIMEOUT:-300}
sanitize=${FA_GPU_SANITIZE:-1}
san_timeout=${FA_GPU_SANITIZE_TIMEOUT:-300}
logs=${OUT:-$build/gpu-logs}
mkdir -p "$logs"

total_pass=0
total_fail=0
rows=()

row() {   # name passed failed note
    rows+=("$(printf '%-44s %7s %7s  %s' "$1" "$2" "$3" "$4")")
    total_pass=$((total_pass + $2))
    total_fail=$((total_fail + $3))
}

finish() {
    {
        echo
        echo "== GPU tests ($(date -u '+%Y-%m-%d %H:%M:%S UTC'), logs in $logs) =="
        printf '%-44s %7s %7s  %s\n' "what" "passed" "failed" "note"
        for r in "${rows[@]}"; do echo "$r"; done
        echo "$total_pass passed, $total_fail failed"
    } | tee "$logs/summary.txt"
    [ "$total_fail" -eq 0 ]
    exit $?
}

# ---- toolchain -------------------------------------------------------------------------------
if ! command -v nvcc >/dev/null 2>&1; then
    for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
        if [ -x "$d/nvcc" ]; then PATH="$d:$PATH"; break; fi
    done
fi
export PATH
sanitizer=$(command -v compute-sanitizer 2>/dev/null)
if [ -z "$sanitizer" ]; then
    for f in "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")/compute-sanitizer" \
             /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
        if [ -x "$f" ]; then sanitizer=$f; break; fi
    done
fi
meson_cmd=(meson)
if ! command -v meson >/dev/null 2>&1; then
    if python3 -c 'import mesonbuild' >/dev/null 2>&1; then
        meson_cmd=(python3 -m mesonbuild.mesonmain)
    fi
fi
{
    echo "## nvcc";    nvcc --version 2>&1
    echo "## meson";   "${meson_cmd[@]}" --version 2>&1
    echo "## ninja";   ninja --version 2>&1
    echo "## compute-sanitizer ($sanitizer)"; ${sanitizer:-false} --version 2>&1 | head -3
    echo "## nvidia-smi"; nvidia-smi 2>&1 | head -20
} > "$logs/env.log" 2>&1
if ! command -v nvcc >/dev/null 2>&1; then
    echo "nvcc not found (PATH=$PATH)"
    row "toolchain" 0 1 "nvcc not found"
    finish
fi

# ---- configure and build ---------------------------------------------------------------------
setup_args=(-Dcuda=enabled -Dtests=false -Dgpu_arch="$arch" --buildtype=release)
if [ ! -f backends/nccl/meson.build ]; then
    setup_args+=(-Dnccl=disabled)
fi
if [ -f "$build/build.ninja" ]; then
    "${meson_cmd[@]}" setup --reconfigure "$build" "${setup_args[@]}" > "$logs/setup.log" 2>&1
else
    "${meson_cmd[@]}" setup "$build" "${setup_args[@]}" > "$logs/setup.log" 2>&1
fi
if [ $? -ne 0 ]; then
    tail -30 "$logs/setup.log"
    row "meson setup" 0 1 "see setup.log"
    finish
fi

# the programs tests/gpu/meson.build registered (test_gpu_ops, and test_gpu_attention /
# test_gpu_forward when their sources exist)
programs=()
targets=()
while read -r t; do
    if [ -n "${FA_GPU_PROGRAMS:-}" ] && [[ " $FA_GPU_PROGRAMS " != *" ${t#tests/gpu/} "* ]]; then
        continue
    fi
    programs+=("${t#tests/gpu/}")
    targets+=("$t")
done < <(ninja -C "$build" -t targets all 2>/dev/null |
         sed -nE 's#^(tests/gpu/test_gpu_[A-Za-z0-9_]+): .*#\1#p' | sort -u)
if [ ${#targets[@]} -eq 0 ]; then
    row "gpu test programs" 0 1 "none registered (see setup.log)"
    finish
fi
start=$(date +%s)
ninja -C "$build" -j "$jobs" "${targets[@]}" > "$logs/build.log" 2>&1
build_rc=$?
build_s=$(( $(date +%s) - start ))
if [ $build_rc -ne 0 ]; then
    grep -E 'error|FAILED' "$logs/build.log" | head -30
    row "build (${build_s}s)" 0 1 "see build.log"
    finish
fi
row "build (${build_s}s, -j$jobs, $arch)" 0 0 "ok"

# ---- the test programs -----------------------------------------------------------------------
plain_shards=${FA_GPU_SHARDS:-$([ "$(nproc 2>/dev/null || echo 1)" -ge 8 ] && echo 4 || echo 1)}
count_log() {   # log rc -> "passed failed note" of one process
    local log=$1 rc=$2 line p f note=""
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)
    if [ -z "$line" ]; then
        p=0; f=1; note="no summary line, exit $rc"
        [ "$rc" -eq 124 ] && note="timed out after ${prog_timeout}s"
    else
        p=${line%% passed*}
        f=${line#*, }; f=${f%% failed*}
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; note="exit $rc"; fi
    fi
    echo "$p $f $note"
}
run_program() {   # label log command... (a harness program in $plain_shards processes)
    local label=$1 log=$2
    shift 2
    local n=1 k p=0 f=0 note="" logs_=() pids=() rcs=()
    [ "$plain_shards" -gt 1 ] && grep -q 'gt_init' "tests/gpu/$(basename "$1").c" 2>/dev/null && n=$plain_shards
    if [ "$n" -eq 1 ]; then
        timeout "$prog_timeout" "$@" > "$log" 2>&1
        rcs=($?)
        logs_=("$log")
    else
        for ((k = 0; k < n; ++k)); do
            FA_GPU_TEST_SHARD="$k/$n" timeout "$prog_timeout" "$@" > "$log.$k" 2>&1 &
            pids+=($!)
            logs_+=("$log.$k")
        done
        for k in "${pids[@]}"; do wait "$k"; rcs+=($?); done
    fi
    for ((k = 0; k < n; ++k)); do
        local c
        read -r -a c <<< "$(count_log "${logs_[$k]}" "${rcs[$k]}")"
        p=$((p + c[0]))
        f=$((f + c[1]))
        if [ ${#c[@]} -gt 2 ]; then
            local what="${c[*]:2}"
            [ "$n" -gt 1 ] && what="shard $k/$n: $what"
            note="${note:+$note; }$what"
        fi
    done
    [ "$n" -gt 1 ] && note="${note:+$note; }$n shards"
    if [ "$f" -ne 0 ]; then
        echo "---- $label: failures (from ${logs_[*]})"
        cat "${logs_[@]}" | grep -E '^not ok|FAIL:' | head -20
    fi
    row "$label" "$p" "$f" "$note"
}

if [ "${FA_GPU_PLAIN:-1}" != 0 ]; then
    for p in "${programs[@]}"; do
        run_program "$p" "$logs/$p.log" "$build/tests/gpu/$p"
    done
    # the programs whose attention calls depend on the kernel family, again with the mma.sync
    # family only (FA_GPU_FAMILY=mma_sync, tests/gpu/gpu_family.h): on an sm_90 device the
    # first pass ran head 128's prefill in the wgmma family, this one in mma.sync
    if [ "${FA_GPU_SECOND_FAMILY:-1}" != 0 ]; then
        for p in "${programs[@]}"; do
            case " test_gpu_attention test_gpu_forward test_gpu_graph test_gpu_checks test_gpu_fp8q " in
                *" $p "*) FA_GPU_FAMILY=mma_sync run_program "$p (mma_sync)" "$logs/$p.mma_sync.log" "$build/tests/gpu/$p" ;;
            esac
        done
    fi
fi

# ---- compute-sanitizer: every program under memcheck, racecheck, initcheck and synccheck ------
# FA_GPU_SANITIZE_SET=quick (default) runs each program's quick set (FA_GPU_TEST_QUICK=1: the
# heavy cases, e.g. the 2.2 G-element caches, skip themselves; test_gpu_forward has no quick
# mode and runs whole); =full runs every case. All (tool, program) runs go side by side (they
# are CPU-bound; the GPU is shared). A run passes when the tool exits 0 with its summary
# at 0 and the program itself reports 0 failures; a timeout is a failure.
run_sanitizer() {   # tool program log [shard]  (background job; writes $log.rc)
    local tool=$1 p=$2 log=$3 shard=${4:-} extra=()
    [ -n "$shard" ] && export FA_GPU_TEST_SHARD=$shard
    export FA_GPU_TEST_SANITIZER=1   # deliberately failing CUDA calls are left out
    case $tool in
        racecheck) extra=(--racecheck-report all) ;;
    esac
    if [ "$san_set" = quick ]; then
        FA_GPU_TEST_QUICK=1 timeout "$san_timeout" "$sanitizer" --tool "$tool" "${extra[@]}" \
            --error-exitcode 97 --print-limit 30 "$build/tests/gpu/$p" > "$log" 2>&1
    else
        timeout "$san_timeout" "$sanitizer" --tool "$tool" "${extra[@]}" \
            --error-exitcode 97 --print-limit 30 "$build/tests/gpu/$p" > "$log" 2>&1
    fi
    echo $? > "$log.rc"
}

sanitizer_row() {   # tool program log [shard]
    local tool=$1 p=$2 log=$3 rc line f=0
    local what="$p${4:+ shard $4}"
    rc=$(cat "$log.rc" 2>/dev/null || echo 99)
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)
    [ -n "$line" ] && { f=${line#*, }; f=${f%% failed*}; }
    if [ "$rc" -eq 0 ] && [ "$f" -eq 0 ] &&
       grep -qE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards' "$log"; then
        row "$tool $what ($san_set${line:+: $line})" 1 0 ""
    else
        local note="exit $rc"
        [ "$rc" -eq 124 ] && note="timed out after ${san_timeout}s"
        [ "$rc" -eq 97 ] && note="sanitizer errors"
        [ "$f" -ne 0 ] && note="$note, $f test failures"
        echo "---- $tool $what: $note (from $log)"
        grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Race|Error|not ok' "$log" | head -20
        row "$tool $what ($san_set)" 0 1 "$note"
    fi
}

san_set=${FA_GPU_SANITIZE_SET:-quick}
san_tools=${FA_GPU_SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}
san_shards=${FA_GPU_SANITIZE_SHARDS:-1}
shards_of() {   # program -> the shard specs of its sanitizer runs ("" = whole)
    if [ "$san_shards" -gt 1 ] && grep -q 'gt_init' "tests/gpu/$1.c" 2>/dev/null; then
        local k=0
        while [ $k -lt "$san_shards" ]; do echo "$k/$san_shards"; k=$((k + 1)); done
    else
        echo ""
    fi
}
san_wanted() { [ -z "${FA_GPU_SANITIZE_PROGRAMS:-}" ] || [[ " $FA_GPU_SANITIZE_PROGRAMS " == *" $1 "* ]]; }
if [ "$sanitize" != "0" ]; then
    if [ -z "$sanitizer" ]; then
        row "compute-sanitizer" 0 1 "not found"
    else
        # every (tool, program) pair at once: they are CPU-bound and the machine has cores
        for p in "${programs[@]}"; do
            [ -x "$build/tests/gpu/$p" ] || continue
            san_wanted "$p" || continue
            for tool in $san_tools; do
                while read -r sh; do
                    run_sanitizer "$tool" "$p" "$logs/$tool-$p${sh:+-${sh%/*}}.log" $sh &
                done < <(shards_of "$p")
            done
        done
        wait
        for p in "${programs[@]}"; do
            [ -x "$build/tests/gpu/$p" ] || continue
            san_wanted "$p" || continue
            for tool in $san_tools; do
                while read -r sh; do
                    sanitizer_row "$tool" "$p" "$logs/$tool-$p${sh:+-${sh%/*}}.log" $sh
                done < <(shards_of "$p")
            done
        done
    fi
fi

finish
