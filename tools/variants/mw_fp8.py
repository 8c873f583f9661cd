# tools/gpu_variants.sh spec: the multi-warp decode tile's register bound and ring depth.
T = "backends/cuda/attention/attention_tiles.h"
MINB = "constexpr int mw_min_blocks(int D, bool fp8, int nf) {"
STAGES = "constexpr int mw_stages(int, bool) { return 3; }"
VARIANTS = {
    # every instance at __launch_bounds__ (128, 2) (E4M3 at heads 64 / 128 take 4 in the tree)
    "minb2": [(T, MINB, MINB + "\n    return 2;")],
    # E4M3 head 128 with 4 stages (measured 0.78-1.00x slower, 2026-12-03: the tree has 3)
    "fp8ns4": [(T, STAGES, "constexpr int mw_stages(int D, bool fp8) { return fp8 && D == 128 ? 4 : 3; }")],
    # 16-bit head 128 with 4 stages (measured 1.02-1.19x slower)
    "bf16ns4": [(T, STAGES, "constexpr int mw_stages(int D, bool fp8) { return !fp8 && D == 128 ? 4 : 3; }")],
}
