# tools/gpu_variants.sh spec: the wgmma family's softmax (sm90_tile.cuh), each variant against the
# tree (the exponent as one FFMA against a rounded-up row maximum, the O rescale skipped when no
# row of a warp moved its maximum): "noskip" rescales O on every tile; "exact" also takes the
# difference form fl(s sl2) - m on every row (the form before the FFMA); "noslack" moves a 16-bit
# kernel's row maximum with every tile whose maximum is higher (the tree keeps it until one
# exceeds it by more than 2^8); "persist" walks work items in a persistent grid (below). Measured
# (H100, 2026-12-06 03:54, with the first, heads-innermost item order): slack 0.95-0.97 of the
# time at 1 x 16384 and 4 x 4096.
T = "backends/cuda/attention/sm90/sm90_tile.cuh"
S = "backends/cuda/attention/sm90/sm90_attention.cu"
NOSKIP = (S, "            rescale_o(o, a0, a1, moved);\n", "            rescale_o(o, a0, a1);\n")
VARIANTS = {
    "noskip": [NOSKIP],
    "exact": [NOSKIP, (T, "    constexpr bool kFused = !Softcap && !Alibi; // the FFMA form is possible\n",
                       "    constexpr bool kFused = false;\n")],
    "noslack": [(T, "            mx0 = (POff == 0 && u0 <= mrow0 + kMaxSlack) ? mrow0 : u0;\n"
                    "            mx1 = (POff == 0 && u1 <= mrow1 + kMaxSlack) ? mrow1 : u1;\n",
                 "            mx0 = u0;\n            mx1 = u1;\n")],
}
# the persistent grid (one CTA an SM walking work items, plain kernels at heads 64 / 128) against
# the tree's one CTA an item
S_PERSIST = "constexpr bool sm90_persistent(bool general, int d) {\n    return (void)general, (void)d, false;\n}"
VARIANTS["persist"] = [(S, S_PERSIST, S_PERSIST.replace("return (void)general, (void)d, false;",
                                                        "return !general && d <= 128;"))]
