#!/usr/bin/env bash
# tools/gpu_fp8q.sh - one GPU-machine call for the wgmma family's fp8-query path: the QGMMA probe
# (tools/qgmma_probe.cu: the fragments and the producer's V transpose, heads 64 / 128 / 256), then tools/gpu_ncu.sh's
# tests job (test_gpu_fp8q whole, and the wgmma-family decode groups) and san job
# (compute-sanitizer memcheck, racecheck, synccheck on test_gpu_fp8q's quick set, as time
# allows), then bench_gpu's quick prefill rows (bf16 and fp8 query, head 128). If the probe
# fails, the V transpose is switched to its 32-bit form (tools/variants/sm90_fp8.py, "words")
# before the build, and the summary says so. Env: FA_FP8Q_BUDGET (s for gpu_ncu.sh, default 420).
# $OUT/summary.txt, $OUT/qp.txt, $OUT/pre.txt / pre.csv, logs in $OUT/ncu_logs.tgz.
set -u
cd "$(dirname "$0")/.."
top=${OUT:-/tmp/fa-fp8q}; mkdir -p "$top"
{ nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a tools/qgmma_probe.cu -o /tmp/qp &&
    timeout 30 /tmp/qp; } 2>&1 | grep -v C7519 > "$top/qp.txt"
probe=$(tail -n 1 "$top/qp.txt")
# (the 32-bit transpose is head 128's only: switched to when head 128's transpose check fails)
if [ "$probe" != "9 passed, 0 failed" ] && ! grep -q "^ok - O = P V (RS, P in place, keys transposed" "$top/qp.txt"; then
    python3 - <<'PY'
import runpy
for path, old, new in runpy.run_path("tools/variants/sm90_fp8.py")["VARIANTS"]["words"]:
    s = open(path).read()
    assert s.count(old) == 1
    open(path, "w").write(s.replace(old, new))
PY
    probe="$probe: V transpose switched to the 32-bit form"
fi
FA_NCU_BUDGET=${FA_FP8Q_BUDGET:-420} FA_NCU_TESTS="test_gpu_fp8q:" FA_NCU_SAN_TESTS="test_gpu_fp8q:" \
    FA_NCU_SANITIZERS="memcheck racecheck synccheck" bash tools/gpu_ncu.sh tests san > /dev/null 2>&1
sed -i "1i qgmma_probe: $probe" "$top/summary.txt"
timeout 45 build-ncuA/bench/bench_gpu --quick --only prefill --no-ceilings --csv "$top/pre.csv" > "$top/pre.txt" 2>&1
echo "bench_gpu --quick --only prefill: rc $?" >> "$top/summary.txt"
grep -E "^prefill" "$top/pre.txt" | cut -c1-150 >> "$top/summary.txt"
