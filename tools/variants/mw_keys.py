# tools/gpu_variants.sh spec: E4M3 head 128 in 32-key tiles (half the tiles a key range, the same
# bytes a tile as 16-bit's 16), and the split combine without programmatic dependent launch.
T = "backends/cuda/attention/attention_tiles.h"
M = "backends/cuda/attention/decode_mw.cu"
A = "backends/cuda/attention/attention.cu"
RING = "    return kMwWarps * (deep ? kMwDeepStages : mw_stages(D, fp8)) * 2 * mw_keys(D) * D * (fp8 ? 1 : 2);"
KT = "    static constexpr int KT = mw_keys(D);"
VARIANTS = {
    "fp8kt32": [(T, RING, RING.replace("mw_keys(D)", "(fp8 && D == 128 ? 32 : mw_keys(D))")),
                (M, KT, KT.replace("mw_keys(D)", "FP8 && D == 128 ? 32 : mw_keys(D)"))],
    "nopdl": [(A, "const bool pdl = L->info != nullptr && L->info->cc_major >= 9;", "const bool pdl = false;")],
}
