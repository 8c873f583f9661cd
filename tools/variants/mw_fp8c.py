# tools/gpu_variants.sh spec: where the E4M3 decode tile's extra time goes on a launch-bound call
# (1 x 1k head 64, one 32-key tile a warp: fp8 runs 0.05-0.14 us behind bf16 there).
#   vcvt   kMwEarlyV on: V's byte permutes and conversions before the softmax (same bits)
#   nocvt  measurement only, wrong results: the E4M3 -> f16 conversion replaced by two masks
#   noqs   measurement only: a bf16 query converted to f16 without its per-head power-of-two scale
#   shift  the conversion by byte permutes, masks and shifts (the value times 2^-8, undone in the
#          logit constant and the output scale; NaN codes become 480: measurement only)
T = "backends/cuda/attention/attention_tiles.h"
M = "backends/cuda/attention/decode_mw.cu"
CVT = """    const __half2_raw a =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xffffu), __NV_E4M3);
    const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> 16), __NV_E4M3);
    lo = static_cast<uint32_t>(a.x) | (static_cast<uint32_t>(a.y) << 16);
    hi = static_cast<uint32_t>(b.x) | (static_cast<uint32_t>(b.y) << 16);
"""
SHIFT = """    const uint32_t x = prmt(w, 0u, 0x1404u), y = prmt(w, 0u, 0x3424u); // codes 0, 1 / 2, 3 in high bytes
    lo = (x & 0x80008000u) | ((x & 0x7f007f00u) >> 1);
    hi = (y & 0x80008000u) | ((y & 0x7f007f00u) >> 1);
"""
VARIANTS = {
    "vcvt": [(T, "constexpr bool kMwEarlyV = false;", "constexpr bool kMwEarlyV = true;")],
    "nocvt": [(M, CVT, "    lo = w & 0x00ff00ffu;\n    hi = (w >> 8) & 0x00ff00ffu;\n")],
    "shift": [(M, CVT, SHIFT),
              (M, "    const float scale_nat = p.softmax_scale * kdesc;\n",
               "    const float scale_nat = p.softmax_scale * kdesc * (FP8 ? 256.f : 1.f);\n"),
              (M, "        const float inv = Ls > 0.f ? vdesc / Ls : 0.f;\n",
               "        const float inv = Ls > 0.f ? (FP8 ? vdesc * 256.f : vdesc) / Ls : 0.f;\n")],
    "noqs": [(M, "                qsc[f] = q_f16_scale(amax);\n", "                qsc[f] = 1.f;\n                (void)amax;\n")],
}
