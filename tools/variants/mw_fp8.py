# tools/gpu_variants.sh spec: the multi-warp decode tile's register bound and ring depth.
T = "backends/cuda/attention/attention_tiles.h"
MINB = "constexpr int mw_min_blocks(int D, bool fp8, int nf) {"
STAGES = "constexpr int mw_stages(int D, bool fp8) { return fp8 && D == 128 ? 4 : 3; }"
VARIANTS = {
    # E4M3 at __launch_bounds__ (128, 2) again (136 registers at head 128)
    "minb2": [(T, MINB, MINB + "\n    return 2;")],
    # E4M3 head 128 with 3 stages (as 16-bit)
    "fp8ns3": [(T, STAGES, "constexpr int mw_stages(int D, bool fp8) { return 3; }")],
    # 16-bit head 128 with 4 stages (64 KiB a CTA, 3 CTAs an SM still)
    "bf16ns4": [(T, STAGES, "constexpr int mw_stages(int D, bool fp8) { return D == 128 ? 4 : 3; }")],
}
