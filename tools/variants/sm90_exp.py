# tools/gpu_variants.sh spec: the softmax's exponent loop (sm90_tile.cuh, softmax_tile). The tree
# has one loop for the FFMA and the difference forms (fma(x, 1, -m) in the latter);
#   dup      the two loops of before (the difference form's own, x - m)
#   noexact  the difference form compiled out (the FFMA form on every tile; WRONG at logits of
#            2^22+ in log2 units: a measurement of what the fallback's test and scaling cost)
T = "backends/cuda/attention/sm90/sm90_tile.cuh"
VARIANTS = {
    "dup": [(T, """    const float ea = fused ? sl2 : 1.f;
#pragma unroll
    for (int j = 0; j < N / 4; ++j) {
        sacc[4 * j + 0] = ex2_approx(__fmaf_rn(sacc[4 * j + 0], ea, -ps0));
        sacc[4 * j + 1] = ex2_approx(__fmaf_rn(sacc[4 * j + 1], ea, -ps0));
        sacc[4 * j + 2] = ex2_approx(__fmaf_rn(sacc[4 * j + 2], ea, -ps1));
        sacc[4 * j + 3] = ex2_approx(__fmaf_rn(sacc[4 * j + 3], ea, -ps1));
    }
""", """    if (fused) {
#pragma unroll
        for (int j = 0; j < N / 4; ++j) {
            sacc[4 * j + 0] = ex2_approx(__fmaf_rn(sacc[4 * j + 0], sl2, -ps0));
            sacc[4 * j + 1] = ex2_approx(__fmaf_rn(sacc[4 * j + 1], sl2, -ps0));
            sacc[4 * j + 2] = ex2_approx(__fmaf_rn(sacc[4 * j + 2], sl2, -ps1));
            sacc[4 * j + 3] = ex2_approx(__fmaf_rn(sacc[4 * j + 3], sl2, -ps1));
        }
    } else {
#pragma unroll
        for (int j = 0; j < N / 4; ++j) {
            sacc[4 * j + 0] = ex2_approx(sacc[4 * j + 0] - ps0);
            sacc[4 * j + 1] = ex2_approx(sacc[4 * j + 1] - ps0);
            sacc[4 * j + 2] = ex2_approx(sacc[4 * j + 2] - ps1);
            sacc[4 * j + 3] = ex2_approx(sacc[4 * j + 3] - ps1);
        }
    }
""")],
    "noexact": [(T, "fused = sl2 > 0.f && fabsf(u0) < 4194304.f && fabsf(u1) < 4194304.f;",
                 "fused = true; (void)u0; (void)u1;")],
}
