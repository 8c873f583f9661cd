#!/bin/sh
# Builds flashattn with its tests and runs them all: the Criterion unit suite (CPU), the
# compile tests, and the GPU suite when a GPU is present. Ends with "N passed, M failed",
# counting individual test cases. Extra arguments go to `meson setup` (e.g. -Db_sanitize=...).
# BUILD_DIR selects the build directory (default build-test).
set -e
cd "$(dirname "$0")/.."
# the CUDA toolkit, where it is installed but not on the PATH
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then PATH=/usr/local/cuda/bin:$PATH; export PATH; fi
sh scripts/deps.sh tests
dir="${BUILD_DIR:-build-test}"
# FA_WERROR=1 (CI): every warning is an error, the host side of the .cu files included
if [ "${FA_WERROR:-0}" = 1 ]; then set -- -Dwerror=true "-Dcuda_args=['-Xcompiler=-Werror']" "$@"; fi
if [ ! -f "$dir/build.ninja" ]; then
  echo "configuring $dir (meson setup $*)..."
  meson setup "$dir" "$@" > "$dir.setup.log" 2>&1 || { tail -n 30 "$dir.setup.log"; echo "0 passed, 1 failed"; exit 1; }
fi
echo "building in $dir ($(nproc) cores)..."
ninja -C "$dir" > "$dir/build.log" 2>&1 || { grep -E -A5 "error|FAILED" "$dir/build.log" | head -60; echo "0 passed, 1 failed"; exit 1; }
grep -E "warning" "$dir/build.log" | head -20 || true
suites="--suite unit"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && [ -d "$dir/tests/gpu" ]; then
  suites="$suites --suite gpu"
fi
rc=0
meson test -C "$dir" $suites --print-errorlogs --num-processes 2 >"$dir/test-output.txt" 2>&1 || rc=$?
tail -n 25 "$dir/test-output.txt"
python3 scripts/count_cases.py "$dir/meson-logs/testlog.json"
exit $rc
