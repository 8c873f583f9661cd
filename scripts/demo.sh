#!/bin/sh
# Builds flashattn and runs the demo (the main job) on the default backend: CUDA when the
# CUDA toolkit was found at build time and a GPU is present, else the CPU reference backend.
set -e
cd "$(dirname "$0")/.."
sh scripts/deps.sh
[ -d build ] || meson setup build -Dtests=false >/dev/null
ninja -C build bench/demo >/dev/null
exec ./build/bench/demo
