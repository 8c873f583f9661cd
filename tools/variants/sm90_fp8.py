# tools/gpu_variants.sh spec: the wgmma family's fp8-query kernels (QGMMA) with a 3-stage ring,
# without the producer's V transpose (timing only: the results are wrong), and without the
# consumer warpgroups' ping-pong turns (every kernel of the family).
S = "backends/cuda/attention/sm90/sm90_attention.cu"
T = "backends/cuda/attention/sm90/sm90_tile.cuh"
VARIANTS = {
    "s3": [(S, "constexpr int kFp8Stages = 2;", "constexpr int kFp8Stages = 3;")],
    "notr": [(S, "            transpose_v_fp8(sV + s * L::kTileBytes, ring.vt + s * L::kTileBytes, lane, Lk - (tb + j) * BN);\n", "")],
    "nopp": [(T, "    if (cw == 1 && any_tile) named_bar_arrive(1, 256);", "    (void)cw; (void)any_tile;"),
             (T, "__device__ __forceinline__ void turn_begin(int cw) { named_bar_sync(1 + cw, 256); }",
              "__device__ __forceinline__ void turn_begin(int cw) { (void)cw; }"),
             (T, "    if (!(last && cw == 1)) named_bar_arrive(2 - cw, 256);", "    (void)last; (void)cw;")],
}
