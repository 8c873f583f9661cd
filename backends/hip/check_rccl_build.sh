#!/bin/sh
# backends/hip/check_rccl_build.sh - compile backends/nccl/fa_nccl.c (the DCP comm) for ROCm:
# HIP runtime through backends/hip/include/cuda_runtime_api.h, NCCL's API from RCCL through
# backends/hip/include/nccl.h. With RCCL installed (rccl/rccl.h found) it is the real build.
# Debian 12 packages no RCCL, so without it the script stands NVIDIA's nccl.h (same API; RCCL
# tracks it) in for rccl/rccl.h, its CUDA includes pointed at the HIP mapping: that compiles
# every line of fa_nccl.c against the HIP runtime headers and the NCCL/RCCL API. Nothing is
# linked (no librccl). Exit status 0 when the file compiles without a warning.
set -eu
cd "$(dirname "$0")/../.."
flags="-std=c99 -Wall -Wextra -Werror -D_GNU_SOURCE -I. -Ibackends/nccl -Ibackends/hip/include"
if echo '#include <rccl/rccl.h>' | cc -E -x c - -I/opt/rocm/include >/dev/null 2>&1; then
    cc $flags -I/opt/rocm/include -c backends/nccl/fa_nccl.c -o /dev/null
    echo "fa_nccl.c: compiled against RCCL (rccl/rccl.h)"
    exit 0
fi
nccl_h=""
for d in ${NCCL_HOME:+$NCCL_HOME/include} /usr/local/cuda/include /usr/include; do
    if [ -f "$d/nccl.h" ]; then nccl_h="$d/nccl.h"; break; fi
done
[ -n "$nccl_h" ] || { echo "no RCCL and no nccl.h to stand in for it: nothing compiled"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/rccl"
cp "$nccl_h" "$tmp/rccl/rccl.h"
echo '#include "cuda_runtime_api.h"' > "$tmp/cuda_runtime.h"
: > "$tmp/cuda_fp16.h"
: > "$tmp/cuda_bf16.h"
cc $flags -I"$tmp" -c backends/nccl/fa_nccl.c -o /dev/null
echo "fa_nccl.c: compiled against the HIP runtime headers with $nccl_h standing in for RCCL's rccl/rccl.h (no RCCL here; not linked)"
