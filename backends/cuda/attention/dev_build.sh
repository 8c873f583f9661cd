#!/usr/bin/env bash
# backends/cuda/attention/dev_build.sh - build and run the attention family's GPU test without
# meson (nvcc and cc directly): the attention files, the CUDA backend glue and kernels of
# backends/cuda, the CPU reference backend, tests/gpu/test_gpu_attention.c.
#
#   dev_build.sh build [DIR]   compile into DIR (default build-attn), -Xptxas -v log in DIR
#   dev_build.sh run [DIR]     run the test, the benchmark (--bench), a SASS check of the
#                              attention kernels (HMMA in the loop, no local memory) and
#                              compute-sanitizer memcheck on the quick subset; logs to $OUT
#                              (or DIR); the summary lines are printed last
# Environment: FA_ARCH (default sm_90a), FA_JOBS (default: cores), FA_SANITIZE=0 to skip it.
set -u -o pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
mode=${1:-build}
dir=${2:-$root/build-attn}
arch=${FA_ARCH:-sm_90a}
jobs=${FA_JOBS:-$(nproc 2>/dev/null || echo 2)}
num=${arch#sm_}
gencode="-gencode=arch=compute_${num},code=sm_${num}"
cd "$root" || exit 1
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
    [ -x "$d/nvcc" ] && { PATH="$d:$PATH"; break; }
done

if [ "$mode" = build ]; then
    mkdir -p "$dir/obj"
    nvcc_flags="-std=c++17 -O3 -lineinfo $gencode -I$root -I$root/backends/cuda -I$root/backends/common -Xptxas -v"
    srcs=$(ls backends/cuda/attention/instances/*.cu backends/cuda/attention/attention.cu \
              backends/cuda/fa_cuda.cu backends/cuda/cache_kernels.cu backends/cuda/merge_kernels.cu)
    start=$(date +%s)
    echo "$srcs" | xargs -P "$jobs" -I{} sh -c \
        'o='"$dir"'/obj/$(basename {} .cu).o; nvcc '"$nvcc_flags"' -c {} -o $o > $o.log 2>&1 || { echo "FAILED {}"; cat $o.log | grep -m5 error; }'
    cat "$dir"/obj/*.o.log > "$dir/ptxas.log"
    echo "nvcc ($arch, -j$jobs): $(( $(date +%s) - start )) s"
    cc_flags="-std=c99 -O2 -D_GNU_SOURCE -I$root -I$root/backends/cpu -I$root/backends/cuda -I$root/backends/common -I$root/tests/gpu"
    cc $cc_flags -c backends/cpu/fa_cpu.c -o "$dir/obj/fa_cpu.o" &&
    cc $cc_flags -c flashattn.c -o "$dir/obj/flashattn.o" &&
    cc $cc_flags -Wall -Wextra -c tests/gpu/test_gpu_attention.c -o "$dir/obj/test_gpu_attention.o" || exit 1
    nvcc $gencode -o "$dir/test_gpu_attention" "$dir"/obj/*.o -lm || exit 1
    grep -E "spill|Used" "$dir/ptxas.log" | sort | uniq -c | sort -rn | head -5
    echo "built $dir/test_gpu_attention"
    exit 0
fi

# ---- run
logs=${OUT:-$dir}
mkdir -p "$logs"
exe=$dir/test_gpu_attention
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$logs/gpu.txt" 2>&1
timeout 240 "$exe" > "$logs/test.log" 2>&1
echo "test exit $?"
grep -E "^FAIL|FAIL:" "$logs/test.log" | head -30
timeout 90 "$exe" --bench > "$logs/bench.log" 2>&1
echo "bench exit $?"
if command -v cuobjdump >/dev/null 2>&1; then
    cuobjdump --dump-sass "$exe" > "$logs/sass.txt" 2>&1
    # per attention kernel: HMMA, LDSM, LDGSTS (cp.async) and local-memory instructions
    awk '/Function :/ { if (name != "") print name, h, s, g, l; name = $3; h = s = g = l = 0 }
         /HMMA/ { h++ } /LDSM/ { s++ } /LDGSTS/ { g++ } /[^A-Z](LDL|STL)[ .]/ { l++ }
         END { if (name != "") print name, h, s, g, l }' "$logs/sass.txt" |
        grep attention_kernel | sed 's/_ZN7fa_attn16attention_kernelINS_3Cfg//' |
        awk '{ printf "sass %-60s HMMA %4d LDSM %4d LDGSTS %4d LDL/STL %d\n", substr($1, 1, 60), $2, $3, $4, $5 }' \
        > "$logs/sass_summary.txt"
    gzip -f "$logs/sass.txt"
fi
if [ "${FA_SANITIZE:-1}" != 0 ] && command -v compute-sanitizer >/dev/null 2>&1; then
    FA_GPU_TEST_QUICK=1 timeout 75 compute-sanitizer --tool memcheck --print-limit 20 "$exe" \
        > "$logs/memcheck.log" 2>&1
    echo "memcheck exit $?: $(grep -m1 'ERROR SUMMARY' "$logs/memcheck.log")"
fi
cat "$logs/gpu.txt"
head -40 "$logs/sass_summary.txt" 2>/dev/null
grep -E "^# perf" "$logs/bench.log"
for kind in 16bit fp8; do
    if [ $kind = fp8 ]; then sel='kv e(4m3|5m2)'; else sel='kv (bf16|f16) '; fi
    grep -E "^ok .*$sel.*max abs err" "$logs/test.log" | sed -E 's/.*max abs err ([0-9.e-]+).*/\1/' |
        sort -g | tail -1 | sed "s/^/largest max abs err ($kind K\/V): /"
done
tail -1 "$logs/test.log"
