#!/usr/bin/env bash
# The Python binding on a GPU machine: installs ./python with pip (offline, --no-index, into a
# temporary --target folder, so the python3 that has torch is left as it was), then runs pytest
# on python/tests (test_gpu.py: the CUDA backend against torch's scaled_dot_product_attention,
# plus the CPU tests) with FLASHATTN_LIB_DIR=<build-dir>/packaging. Needs a meson build with the
# CUDA backend (libflashattn_cuda.so in <build-dir>/packaging) and python3 with torch, numpy and
# pytest. Bounded to 60 s. Prints "N passed, M failed" last (skipped cases are counted apart).
# Usage: bash python/tests/run_gpu.sh <build-dir>     (PYTHON=... picks another interpreter)
set -u
build=${1:?usage: run_gpu.sh <meson build dir with the CUDA backend>}
here=$(cd "$(dirname "$0")" && pwd)
pydir=$(dirname "$here")
libdir=$(cd "$build" 2>/dev/null && pwd)/packaging
py=${PYTHON:-python3}
fail() { echo "run_gpu.sh: $*"; echo "0 passed, 1 failed"; exit 1; }
[ -e "$libdir/libflashattn.so" ] || fail "no $libdir/libflashattn.so (build with meson first)"
[ -e "$libdir/libflashattn_cuda.so" ] || fail "no $libdir/libflashattn_cuda.so (the CUDA backend was not built)"
"$py" -c 'import torch, numpy, pytest' 2>/dev/null || fail "$py lacks torch, numpy or pytest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONDONTWRITEBYTECODE=1 FLASHATTN_LIB_DIR="$libdir"
install_ok=0
if "$py" -m pip install -q --no-index --no-deps --no-cache-dir --target "$tmp/site" "$pydir" >"$tmp/pip.log" 2>&1; then
  install_ok=1
  export PYTHONPATH="$tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  echo "pip install --no-index ./python: ok ($tmp/site)"
else
  cat "$tmp/pip.log"
  echo "pip install --no-index ./python: FAILED; testing the source tree instead"
  export PYTHONPATH="$pydir${PYTHONPATH:+:$PYTHONPATH}"
fi
export FLASHATTN_TAP_FILE="$tmp/tap" FLASHATTN_SOURCE_ROOT=$(dirname "$pydir")
( cd "$tmp" && timeout -k 5 55 "$py" -m pytest -p no:cacheprovider -q -rs "$here" ) ; rc=$?
[ "$rc" -ne 124 ] || echo "run_gpu.sh: pytest stopped after 55 s"
p=0; f=0; s=0
if [ -f "$tmp/tap" ]; then
  s=$(grep -c '^ok - .* # SKIP' "$tmp/tap")
  p=$(( $(grep -c '^ok - ' "$tmp/tap") - s ))
  f=$(grep -c '^not ok - ' "$tmp/tap")
  grep '^not ok - ' "$tmp/tap"
fi
[ "$install_ok" -eq 1 ] && p=$((p + 1)) || f=$((f + 1))
if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
echo "skipped: $s"
echo "$p passed, $f failed"
[ "$f" -eq 0 ]
