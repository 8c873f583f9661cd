# tools/gpu_variants.sh spec: the wgmma family's fp8-query kernels (QGMMA), each variant one
# change: P scaled at the packing instead of in the exponent (pmul), the producer's V transpose
# fully unrolled (trfull), P V reading the untransposed V stage with no wait for the transpose
# (novt: timing only, the results are wrong), no proxy fence after the transpose (nofence:
# timing only). (A 3-stage ring and no ping-pong turns measured the same as the tree: docs/perf.md.)
S = "backends/cuda/attention/sm90/sm90_attention.cu"
T = "backends/cuda/attention/sm90/sm90_tile.cuh"
TR = "            transpose_v_fp8(sV + s * L::kTileBytes, ring.vt + s * L::kTileBytes, lane, Lk - (tb + j) * BN);\n"
VARIANTS = {
    "pmul": [(S, "constexpr bool kFp8ExpOffset = true;", "constexpr bool kFp8ExpOffset = false;")],
    "trfull": [(T, "#pragma unroll 2\n    for (int it = 0; it < 8; ++it) {", "#pragma unroll\n    for (int it = 0; it < 8; ++it) {")],
    "novt": [(S, "const uint32_t bar_pf = FP8 ? ring.tf : bar_vf,", "const uint32_t bar_pf = bar_vf,"),
             (S, "const uint32_t sPV = FP8 ? ring.vt : sV;", "const uint32_t sPV = sV;"),
             (S, TR, "")],
    "nofence": [(S, TR + "            fence_proxy_async_smem();\n", TR)],
}
