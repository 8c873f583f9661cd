#!/usr/bin/env bash
# run_nccl_tests.sh - builds the NCCL comm (backends/nccl), its DCP test (tests/gpu/test_nccl_dcp)
# and the DCP benchmark (bench/bench_dcp), then runs them on a GPU machine.
#
# Usage: tests/gpu/run_nccl_tests.sh [--bench] [--no-build] [--build-only]
#   --bench       also run bench_dcp (8 x 128k decode, 2 GPUs vs 1) after the tests
#   --no-build    run what the build folder already holds
#   --build-only  configure and build, run nothing
# Environment: BUILD_DIR (build-nccl), GPU_ARCH (sm_90a), HEAD_DIMS (128: the test and the
#   benchmark use head size 128 only), MESON (meson, or python3 -m mesonbuild.mesonmain).
#
# Runs: test_nccl_dcp --world 1 (one GPU); with 2 GPUs also test_nccl_dcp (one process, a
# thread per rank) and test_nccl_dcp --procs (a process per rank). Each program prints one
# line per case and `N passed, M failed`; this script prints the sum of those as its last line
# (a program that crashed, hung or printed no summary counts as one failure) and exits non-zero
# when anything failed.
set -u
export NCCL_NVLS_ENABLE=0                  # NVLink multicast must stay off on these hosts
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export NVSHMEM_DISABLE_NVLS=1

cd "$(dirname "$0")/../.." || exit 2
BUILD=${BUILD_DIR:-build-nccl}
RUN_BENCH=0
DO_BUILD=1
DO_RUN=1
for a in "$@"; do
  case "$a" in
    --bench) RUN_BENCH=1 ;;
    --no-build) DO_BUILD=0 ;;
    --build-only) DO_RUN=0 ;;
    *) echo "usage: $0 [--bench] [--no-build] [--build-only]" >&2; exit 2 ;;
  esac
done

if [ -n "${MESON:-}" ]; then
  read -r -a MESON_CMD <<< "$MESON"
elif command -v meson > /dev/null 2>&1; then
  MESON_CMD=(meson)
else
  MESON_CMD=(python3 -m mesonbuild.mesonmain)
fi

if [ "$DO_BUILD" = 1 ]; then
  args=(-Dtests=false -Dcuda=enabled -Dnccl=enabled "-Dgpu_arch=${GPU_ARCH:-sm_90a}"
        "-Dhead_dims=${HEAD_DIMS:-128}" -Dbuildtype=release)
  if [ -f "$BUILD/build.ninja" ]; then
    "${MESON_CMD[@]}" setup --reconfigure "$BUILD" "${args[@]}" || { echo "0 passed, 1 failed"; exit 1; }
  else
    "${MESON_CMD[@]}" setup "$BUILD" "${args[@]}" || { echo "0 passed, 1 failed"; exit 1; }
  fi
  # only the NCCL comm, the test and the benchmark (and what they link): other GPU programs
  # being edited elsewhere cannot break this run
  "${MESON_CMD[@]}" compile -C "$BUILD" test_nccl_dcp bench_dcp ||
    { echo "build failed"; echo "0 passed, 1 failed"; exit 1; }
fi
[ "$DO_RUN" = 1 ] || exit 0

find_exe() {   # the executable wherever the meson files put it
  find "$BUILD" -type f -name "$1" -perm -u+x 2> /dev/null | head -n 1
}
TEST=$(find_exe test_nccl_dcp)
BENCH=$(find_exe bench_dcp)
if [ -z "$TEST" ]; then
  echo "test_nccl_dcp was not built in $BUILD (was NCCL found? see 'NCCL:' in the meson output)"
  echo "0 passed, 1 failed"
  exit 1
fi

NGPU=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU' || true)
echo "GPUs: ${NGPU:-0}; NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
PASSED=0
FAILED=0

run() {   # run NAME CMD...: print its output, add its summary to the totals
  local name=$1 log rc line p f
  shift
  log=$(mktemp)
  echo "=== $name: $*"
  timeout -k 15 600 "$@" > "$log" 2>&1
  rc=$?
  cat "$log"
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  rm -f "$log"
  if [ -n "$line" ]; then
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    PASSED=$((PASSED + p))
    FAILED=$((FAILED + f))
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
      echo "FAIL $name: exit status $rc with no failed case"
      FAILED=$((FAILED + 1))
    fi
  else
    echo "FAIL $name: no summary line (exit status $rc$([ "$rc" = 124 ] && echo ', timed out'))"
    FAILED=$((FAILED + 1))
  fi
}

run "world size 1 (one GPU)" "$TEST" --world 1
if [ "${NGPU:-0}" -ge 2 ]; then
  run "world size 2, one process, a thread per rank" "$TEST" --world 2
  run "world size 2, a process per rank" "$TEST" --world 2 --procs
else
  echo "skip: the world-size-2 runs need 2 GPUs (found ${NGPU:-0})"
fi

if [ "$RUN_BENCH" = 1 ]; then
  if [ -n "$BENCH" ]; then
    echo "=== bench_dcp"
    timeout -k 15 600 "$BENCH" || echo "bench_dcp failed (exit status $?)"
  else
    echo "bench_dcp was not built"
  fi
fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ] && [ "$PASSED" -gt 0 ]
