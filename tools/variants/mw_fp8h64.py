# tools/gpu_variants.sh spec: the multi-warp decode tile for E4M3 at head 64 with a deeper ring
# (6 stages) at 4 CTAs an SM, and with 6 stages at 2 CTAs an SM (the register bound lifted, the
# shared memory padded to 100 KiB so that no third CTA fits).
T = "backends/cuda/attention/attention_tiles.h"
STAGES = "constexpr int mw_stages(int, bool) { return 3; }"
DEEP = "constexpr int mw_stages(int D, bool fp8) { return fp8 && D == 64 ? 6 : 3; }"
MINB = "    return fp8 && (D == 64 || (D == 128 && nf == 1)) ? 4 : 2;"
M = "backends/cuda/attention/decode_mw.cu"
CSMEM = "    static constexpr int SMEM = NW * WARPB > COMB ? NW *WARPB : COMB;"
SMEM = "constexpr int mw_smem_bytes(int D, bool fp8) {\n    return mw_ring"
VARIANTS = {
    "h64s6": [(T, STAGES, DEEP)],
    "h64occ2": [(T, STAGES, DEEP), (T, MINB, "    return fp8 && D == 128 && nf == 1 ? 4 : 2;"),
                (T, SMEM, SMEM.replace("return mw_ring", "return fp8 && D == 64 ? 100 * 1024 : mw_ring")),
                (M, CSMEM, CSMEM.replace("= NW", "= FP8 && D == 64 ? 100 * 1024 : NW"))],
}
