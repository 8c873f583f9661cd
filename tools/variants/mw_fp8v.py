# tools/gpu_variants.sh spec: the multi-warp decode tile's E4M3 P V step. "vlds" loads the tile's
# V words from shared memory right after S = K Q^T, before the softmax (the tree loads them after
# it, so that on a launch-bound call, one tile a warp, the loads sit on the dependent chain:
# 1 x 1k head 64 fp8 runs 0.05-0.14 us behind bf16). The same arithmetic, the same bits.
M = "backends/cuda/attention/decode_mw.cu"
ANCHOR = "        // logits in log2 units: scale (or softcap), ALiBi, keys past the split -inf\n"
EARLY = """        // V's raw words of the tile (E4M3, one n8 fragment of query heads: with two the head-64
        // kernels spill), loaded before the softmax
        constexpr int NWDV = D / 32;
        constexpr bool kEarlyV = FP8 && NF == 1;
        uint32_t xv[kEarlyV ? KM : 1][4][kEarlyV ? NWDV : 1];
        if constexpr (kEarlyV) {
#pragma unroll
            for (int km = 0; km < KM; ++km)
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const int row = km * 16 + 2 * q + (k & 1) + 8 * (k >> 1);
                    const uint32_t ad = sv + row * C::ROWB;
                    const int sw = mw_vswz<D>(row);
                    if constexpr (NWDV == 2) {
                        lds64(reinterpret_cast<uint32_t(&)[2]>(xv[km][k]), ad + (((r >> 1) ^ sw) << 4) + (r & 1) * 8);
                    } else {
#pragma unroll
                        for (int c = 0; c < NWDV / 4; ++c)
                            lds128(*reinterpret_cast<uint32_t(*)[4]>(&xv[km][k][4 * c]),
                                   ad + (((r * (NWDV / 4) + c) ^ sw) << 4));
                    }
                }
        }
"""
LATE = """                constexpr int NWD = D / 32; // words per lane and row
                uint32_t x[4][NWD];
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const int row = km * 16 + 2 * q + (k & 1) + 8 * (k >> 1);
                    const uint32_t ad = sv + row * C::ROWB;
                    const int sw = mw_vswz<D>(row);
                    if constexpr (NWD == 2) {
                        lds64(reinterpret_cast<uint32_t(&)[2]>(x[k]),
                              ad + (((r >> 1) ^ sw) << 4) + (r & 1) * 8);
                    } else {
#pragma unroll
                        for (int c = 0; c < NWD / 4; ++c)
                            lds128(*reinterpret_cast<uint32_t(*)[4]>(&x[k][4 * c]),
                                   ad + (((r * (NWD / 4) + c) ^ sw) << 4));
                    }
                }
"""
LATE_NEW = LATE.replace("""                uint32_t x[4][NWD];
#pragma unroll
                for (int k = 0; k < 4; ++k) {""", """                uint32_t x[4][NWD];
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    if constexpr (kEarlyV) {
#pragma unroll
                        for (int i = 0; i < NWD; ++i) x[k][i] = xv[km][k][i];
                        continue;
                    }""")
assert LATE_NEW != LATE
VARIANTS = {
    "vlds": [(M, ANCHOR, EARLY + ANCHOR), (M, LATE, LATE_NEW)],
}
