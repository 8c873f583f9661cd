#!/bin/sh
# Builds flashattn and runs the demo (the main job) on the default backend: CUDA when the
# CUDA toolkit was found at build time and a GPU is present, else the CPU reference backend.
set -e
cd "$(dirname "$0")/.."
# the CUDA toolkit, where it is installed but not on the PATH
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then PATH=/usr/local/cuda/bin:$PATH; export PATH; fi
sh scripts/deps.sh
if [ ! -f build/build.ninja ]; then
  meson setup build -Dtests=false > build.setup.log 2>&1 || { tail -n 30 build.setup.log; exit 1; }
fi
echo "building the demo..."
ninja -C build bench/demo > build/build-demo.log 2>&1 || { grep -E -A5 "error|FAILED" build/build-demo.log | head -60; exit 1; }
exec ./build/bench/demo
