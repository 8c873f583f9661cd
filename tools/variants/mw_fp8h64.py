# tools/gpu_variants.sh spec: the multi-warp decode tile for E4M3 at head 64: "nodeep" never
# launches the 6-stage instance (the tree launches it on calls with more than two CTAs an SM and
# splits of kMwDeepKeys keys or more), "deepall" on every call of more than two CTAs an SM.
T = "backends/cuda/attention/attention_tiles.h"
DEEP = "constexpr bool mw_deep(int D, bool fp8) { return fp8 && D == 64; }"
KEYS = "constexpr int kMwDeepKeys = 8192;"
VARIANTS = {
    "nodeep": [(T, KEYS, "constexpr int kMwDeepKeys = 1 << 30;")],
    "deepall": [(T, KEYS, "constexpr int kMwDeepKeys = 0;")],
}
