#!/usr/bin/env bash
# tools/gpu_profile.sh - profile the decode attention kernel on the GPU machine: builds one
# head-128 build per variant (extra nvcc defines), then for each: bench_gpu decode rows, an ncu
# report of one decode launch (speed of light, warp stalls, occupancy, memory) and the SASS
# instruction mix of the decode kernel. Logs to $OUT.
#   tools/gpu_profile.sh "NAME:-DFOO=1 -DBAR=2" ...      (a variant "base:" = no defines)
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/fa-prof}; mkdir -p "$out"
[ $# -eq 0 ] && set -- "base:"
stalls=""
for s in long_scoreboard short_scoreboard barrier wait math_pipe_throttle mio_throttle lg_throttle \
         not_selected selected no_instruction dispatch_stall branch_resolving tex_throttle; do
  stalls="$stalls${stalls:+,}smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio"
done
stalls="$stalls,smsp__inst_executed.sum,sm__cycles_elapsed.avg,dram__bytes_read.sum.per_second"
for v in "$@"; do
  name=${v%%:*}; defs=${v#*:}
  args=""; for d in $defs; do args="$args${args:+,}'$d'"; done
  ( meson setup "build-prof-$name" -Dtests=false -Dhead_dims=128 -Dgpu_arch=sm_90a -Dnccl=disabled \
      -Dbuildtype=release "-Dcuda_args=[$args]" > "$out/setup_$name.txt" 2>&1 &&
    ninja -C "build-prof-$name" bench/bench_gpu > "$out/build_$name.txt" 2>&1 || echo "build $name failed" ) &
done
wait
for v in "$@"; do
  name=${v%%:*}; b=build-prof-$name/bench/bench_gpu
  [ -x "$b" ] || { tail -n 20 "$out/build_$name.txt"; continue; }
  echo "=== $name"
  $b --only decode --batch 1,64,256 --ctx 1k,8k,32k --heads 32/8 --dim 128 --kv bf16,fp8 --no-check --no-ceilings 2>&1 |
    grep -E "^decode" | awk '{print $2, $3, $7, $8, $9}' | sed 's/^/  /'
  ncu --target-processes all -k regex:attention_kernel --launch-skip 3 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
      --section MemoryWorkloadAnalysis --metrics "$stalls" \
      "$b" --only decode --batch 64 --ctx 8k --heads 32/8 --dim 128 --kv bf16 --no-check --no-ceilings --no-graph \
      > "$out/ncu_$name.txt" 2>&1
  grep -E "DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Block Limit Shared|Registers Per|Warp Cycles Per Issued|Issued Warp|Stall|stall|L1/TEX Hit|L2 Hit|Mem Pipes|Elapsed Cycles|smsp__|dram__bytes|sm__cycles" "$out/ncu_$name.txt" | head -60
  obj=$(ls build-prof-$name/backends/cuda/libflashattn_cuda.a.p/*attn_d128_bf16_same* 2>/dev/null | head -1)
  [ -n "$obj" ] && cuobjdump --dump-sass "$obj" > "$out/sass_$name.txt" 2>&1
done
