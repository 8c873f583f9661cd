#!/bin/sh
# Builds the demo (bench/demo.c, flashattn's main job) and runs it, saying what it does phase by
# phase with the time each phase should take.
#   - With a usable GPU (nvidia-smi lists one) and nvcc: the CUDA backend, only the head size
#     and GPU architecture the demo needs (build-demo-cuda/), checked against the CPU reference
#     backend.
#   - Otherwise: the CPU backend alone (build-demo/: -Dcuda=disabled -Dnccl=disabled
#     -Dtests=disabled, only the demo target), checked against an independent naive attention
#     written in the demo itself.
# Extra arguments go to `meson setup` (first configuration of the build folder only).
set -e
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
t_start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t_start ))s"; }

# the CUDA toolkit, where it is installed but not on the PATH
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then PATH=/usr/local/cuda/bin:$PATH; export PATH; fi

echo "== 1/4 checking the build tools (meson, ninja, a C compiler; installed with apt-get if missing)..."
sh scripts/deps.sh

echo "== 2/4 looking for a GPU..."
gpu=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
  why="nvidia-smi not found"
elif ! smi_out=$(nvidia-smi -L 2>&1); then
  why="nvidia-smi -L failed: $(printf '%s\n' "$smi_out" | head -n 1)"
elif ! printf '%s\n' "$smi_out" | grep -q '^GPU '; then
  why="nvidia-smi -L lists no GPU"
elif ! command -v nvcc >/dev/null 2>&1; then
  why="$(printf '%s\n' "$smi_out" | head -n 1) is there, but nvcc (the CUDA toolkit) was not found on the PATH or in /usr/local/cuda/bin"
else
  gpu=$(printf '%s\n' "$smi_out" | head -n 1)
fi

if [ -n "$gpu" ]; then
  echo "   found $gpu; nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  # only what the demo runs: head size 64, the architecture of GPU 0
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' ')
  case "$cap" in
    8.*) arch=sm_80 ;;
    9.0) arch=sm_90a ;;
    [0-9]*.[0-9]*) arch=sm_$(echo "$cap" | tr -d .) ;;   # e.g. 10.0 -> sm_100, 12.0 -> sm_120
    *) arch="" ;;
  esac
  dir=build-demo-cuda
  setup_args="-Dcuda=enabled -Dnccl=disabled -Dtests=disabled -Dhead_dims=64"
  [ -z "$arch" ] || setup_args="$setup_args -Dgpu_arch=$arch"
  what="the CUDA backend (head size 64, ${arch:-the default architectures}), the CPU reference and the demo"
  expect="about 15 seconds on 16 cores, about 1 minute on 2; later runs reuse $dir"
else
  echo "   no usable GPU: $why; the demo runs on the CPU backend"
  dir=build-demo
  setup_args="-Dcuda=disabled -Dnccl=disabled -Dtests=disabled"
  what="the CPU backend and the demo"
  expect="about 10 seconds on 2 cores"
fi

if [ ! -f "$dir/build.ninja" ]; then
  echo "== 3/4 configuring $dir: meson setup $dir $setup_args${*:+ $*} (about 5 seconds)..."
  # shellcheck disable=SC2086
  meson setup "$dir" $setup_args "$@" > "$dir.setup.log" 2>&1 || {
    tail -n 30 "$dir.setup.log"; echo "meson setup failed (log: $dir.setup.log)"; exit 1; }
else
  echo "== 3/4 $dir is configured already (rm -rf $dir to start over)"
fi

echo "== 4/4 building $what: ninja -C $dir bench/demo ($expect, $jobs cores here)..."
# ninja's progress lines go to the terminal, the whole output to $dir/build-demo.log
rcfile="$dir/.ninja-rc"
{ ninja -C "$dir" bench/demo 2>&1; echo $? > "$rcfile"; } | tee "$dir/build-demo.log" | grep -E '^\[[0-9]+/[0-9]+\]' | cut -c1-110
if [ "$(cat "$rcfile")" != 0 ]; then
  grep -E -A5 "error|FAILED" "$dir/build-demo.log" | head -60
  echo "the build failed (log: $dir/build-demo.log)"; exit 1
fi
rm -f "$rcfile"
echo "   built in $(elapsed) so far"

if [ -n "$gpu" ]; then
  echo "== running the demo on the GPU, checked against the CPU reference backend (about 10 seconds)..."
else
  echo "== running the demo on the CPU backend, checked against a naive attention (about 5 seconds on 2 cores)..."
fi
rc=0
./"$dir"/bench/demo || rc=$?
echo "== done in $(elapsed) (demo exit status $rc)"
exit $rc
